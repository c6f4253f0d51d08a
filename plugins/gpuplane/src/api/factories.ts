import {
  configApiRef,
  createApiFactory,
  discoveryApiRef,
  oauthRequestApiRef,
} from '@backstage/core-plugin-api';
import { gpuplaneApiRef, gpuplaneAuthApiRef } from './GpuplaneApi';
import { GpuplaneClient } from './GpuplaneClient';
import { gpuplaneStatusApiRef, PollingStatusSource } from './StatusSource';
import { fetchWatch, WatchStatusSource } from './WatchStatusSource';
import { createDefaultGpuplaneAuth } from './defaultAuth';

// The plugin's APIs, shared by the classic plugin (plugin.ts) and the new
// frontend system's API extensions (alpha.tsx).

/** Poll interval of live status, from `gpuplane.pollIntervalSeconds` (default 3). */
export function pollIntervalMs(config: { getOptionalNumber(key: string): number | undefined }) {
  return Math.max(1, config.getOptionalNumber('gpuplane.pollIntervalSeconds') ?? 3) * 1000;
}

/** The signed-in user's OIDC credentials: by default Backstage's `oidc` auth provider. */
export const gpuplaneAuthApiFactory = createApiFactory({
  api: gpuplaneAuthApiRef,
  deps: { configApi: configApiRef, discoveryApi: discoveryApiRef, oauthRequestApi: oauthRequestApiRef },
  factory: createDefaultGpuplaneAuth,
});

/** The gpuplane client, calling `gpuplane.baseUrl` with the user's ID token. */
export const gpuplaneClientApiFactory = createApiFactory({
  api: gpuplaneApiRef,
  deps: { configApi: configApiRef, auth: gpuplaneAuthApiRef },
  factory: ({ configApi, auth }) => GpuplaneClient.fromConfig(configApi, auth),
});

/**
 * Live status from gpuplane's Watch streams; polling when
 * `gpuplane.liveStatus` is `poll` or the server serves no watches.
 */
export const gpuplaneStatusApiFactory = createApiFactory({
  api: gpuplaneStatusApiRef,
  deps: { configApi: configApiRef, api: gpuplaneApiRef, auth: gpuplaneAuthApiRef },
  factory: ({ configApi, api, auth }) => {
    const polling = new PollingStatusSource(api, pollIntervalMs(configApi));
    if (configApi.getOptionalString('gpuplane.liveStatus') === 'poll') return polling;
    const open = fetchWatch(configApi.getString('gpuplane.baseUrl'), () => auth.getIdToken());
    return new WatchStatusSource(api, open, polling);
  },
});
