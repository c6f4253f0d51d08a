import { createApiRef } from '@backstage/core-plugin-api';
import type { GpuplaneApi, ListOptions } from './GpuplaneApi';
import type { GpuplaneRequest, VirtualCluster } from './types';

/** Receives the current state of what is watched, and failures. */
export interface Observer<T> {
  next(value: T): void;
  error(error: unknown): void;
}

/** Stops a watch. */
export type Unsubscribe = () => void;

/**
 * Live status of virtual clusters and requests. Today it polls; gpuplane's
 * Watch stream (issue 13) will be a second implementation of this interface,
 * and the components will not change.
 */
export interface StatusSource {
  watchVirtualClusters(teamId: string, observer: Observer<VirtualCluster[]>): Unsubscribe;
  /** The first page of requests matching options.filter. */
  watchRequests(options: ListOptions, observer: Observer<GpuplaneRequest[]>): Unsubscribe;
}

export const gpuplaneStatusApiRef = createApiRef<StatusSource>({
  id: 'plugin.gpuplane.status',
});

/**
 * Polls the API every intervalMs (after the previous answer, so slow
 * answers never overlap), and not while the browser tab is hidden.
 */
export class PollingStatusSource implements StatusSource {
  constructor(
    private readonly api: GpuplaneApi,
    private readonly intervalMs = 3000,
  ) {}

  watchVirtualClusters(teamId: string, observer: Observer<VirtualCluster[]>): Unsubscribe {
    return this.poll(() => this.api.listVirtualClusters(teamId), observer);
  }

  watchRequests(options: ListOptions, observer: Observer<GpuplaneRequest[]>): Unsubscribe {
    return this.poll(async () => (await this.api.listRequests(options)).items, observer);
  }

  private poll<T>(load: () => Promise<T>, observer: Observer<T>): Unsubscribe {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      if (stopped) return;
      if (typeof document === 'undefined' || !document.hidden) {
        try {
          const value = await load();
          if (!stopped) observer.next(value);
        } catch (e) {
          if (!stopped) observer.error(e);
        }
      }
      if (!stopped) timer = setTimeout(tick, this.intervalMs);
    };
    tick();
    return () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    };
  }
}
