import type { GpuplaneApi, ListOptions } from './GpuplaneApi';
import type { Observer, StatusSource, Unsubscribe } from './StatusSource';
import type { GpuplaneRequest, VirtualCluster } from './types';

/** One open watch: its HTTP status and, when 200, its body line by line. */
export interface WatchResponse {
  status: number;
  lines: AsyncIterable<string>;
}

/** Opens a REST watch (a `...:watch` path with its query) as the signed-in user. */
export type OpenWatch = (pathAndQuery: string, signal: AbortSignal) => Promise<WatchResponse>;

/**
 * Live status from gpuplane's Watch streams (REST: newline-delimited JSON).
 * The list is loaded when the watch has synced and again whenever it reports
 * a change (reloads coalesce), so components get the same arrays as from
 * polling, without polling. A dropped stream resumes from its last position;
 * a position the server no longer keeps (410) starts over. Servers without
 * watches (404/501) get the fallback (PollingStatusSource).
 */
export class WatchStatusSource implements StatusSource {
  constructor(
    private readonly api: GpuplaneApi,
    private readonly open: OpenWatch,
    private readonly fallback: StatusSource,
    private readonly maxRetryDelayMs = 30_000,
  ) {}

  watchVirtualClusters(teamId: string, observer: Observer<VirtualCluster[]>): Unsubscribe {
    return this.follow(
      `/v1/teams/${encodeURIComponent(teamId)}/virtualClusters:watch`,
      () => this.api.listVirtualClusters(teamId),
      observer,
      () => this.fallback.watchVirtualClusters(teamId, observer),
    );
  }

  watchRequests(options: ListOptions, observer: Observer<GpuplaneRequest[]>): Unsubscribe {
    // Watch filters are team/department/state; any change to a readable
    // request reloads the page the options select.
    return this.follow(
      '/v1/requests:watch',
      async () => (await this.api.listRequests(options)).items,
      observer,
      () => this.fallback.watchRequests(options, observer),
    );
  }

  private follow<T>(path: string, load: () => Promise<T>, observer: Observer<T>, fallback: () => Unsubscribe): Unsubscribe {
    const abort = new AbortController();
    let stopped = false;
    let stopFallback: Unsubscribe | undefined;
    let loading = false;
    let again = false;
    const reload = async () => {
      if (loading) {
        again = true;
        return;
      }
      loading = true;
      try {
        do {
          again = false;
          try {
            const value = await load();
            if (!stopped) observer.next(value);
          } catch (e) {
            if (!stopped) observer.error(e);
          }
        } while (again && !stopped);
      } finally {
        loading = false;
      }
    };

    const run = async () => {
      let position: string | undefined;
      let failures = 0;
      while (!stopped) {
        try {
          const query = position ? `?resumePosition=${encodeURIComponent(position)}` : '';
          const res = await this.open(path + (path.includes('?') ? query.replace('?', '&') : query), abort.signal);
          if (res.status === 404 || res.status === 501) {
            if (!stopped) stopFallback = fallback();
            return;
          }
          if (res.status === 410) {
            position = undefined; // too old: start over from the current state
            continue;
          }
          if (res.status !== 200) throw new Error(`gpuplane watch: HTTP ${res.status}`);
          let first = true;
          for await (const line of res.lines) {
            if (stopped) return;
            if (!line.trim()) continue;
            const msg = JSON.parse(line) as { result?: WatchEvent; error?: { message?: string; code?: number } };
            if (msg.error) throw new Error(`gpuplane watch: ${msg.error.message ?? 'stream failed'}`);
            const ev = msg.result ?? {};
            failures = 0;
            if (ev.position && ev.position !== '0') position = ev.position;
            const kind = ev.kind ?? '';
            if (kind === 'SYNCED' || kind === 'CHANGED' || (first && position && kind !== 'EXISTING')) {
              void reload();
            }
            if (kind !== 'EXISTING') first = false;
          }
          // The stream ended (server restart): resume.
        } catch (e) {
          if (stopped) return;
          failures++;
          if (failures > 1) observer.error(e);
        }
        if (stopped) return;
        const delay = Math.min(this.maxRetryDelayMs, 250 * 2 ** Math.min(failures, 10));
        await new Promise(resolve => setTimeout(resolve, delay));
      }
    };
    void run();
    return () => {
      stopped = true;
      abort.abort();
      stopFallback?.();
    };
  }
}

interface WatchEvent {
  kind?: string;
  /** int64 positions are JSON strings. */
  position?: string;
}

/** Splits a fetch body into lines. */
export async function* bodyLines(body: ReadableStream<Uint8Array> | null): AsyncIterable<string> {
  if (!body) return;
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        yield buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
      }
    }
    if (buffered) yield buffered;
  } finally {
    reader.releaseLock();
  }
}

/** An OpenWatch over fetch, sending the user's ID token. */
export function fetchWatch(baseUrl: string, getToken: () => Promise<string>, fetchFn: typeof fetch = fetch): OpenWatch {
  return async (pathAndQuery, signal) => {
    const res = await fetchFn(baseUrl.replace(/\/$/, '') + pathAndQuery, {
      headers: { Authorization: `Bearer ${await getToken()}`, Accept: 'application/json' },
      signal,
    });
    return { status: res.status, lines: bodyLines(res.status === 200 ? res.body : null) };
  };
}
