import {
  configApiRef,
  createApiFactory,
  createComponentExtension,
  createPlugin,
  createRoutableExtension,
  discoveryApiRef,
  oauthRequestApiRef,
} from '@backstage/core-plugin-api';
import { gpuplaneApiRef, gpuplaneAuthApiRef } from './api/GpuplaneApi';
import { GpuplaneClient } from './api/GpuplaneClient';
import { gpuplaneStatusApiRef, PollingStatusSource } from './api/StatusSource';
import { createDefaultGpuplaneAuth } from './api/defaultAuth';
import { rootRouteRef } from './routes';

/** Poll interval of live status, from `gpuplane.pollIntervalSeconds` (default 3). */
export function pollIntervalMs(config: { getOptionalNumber(key: string): number | undefined }) {
  return Math.max(1, config.getOptionalNumber('gpuplane.pollIntervalSeconds') ?? 3) * 1000;
}

/** The plugin for Backstage's classic frontend system. */
export const gpuplanePlugin = createPlugin({
  id: 'gpuplane',
  routes: { root: rootRouteRef },
  apis: [
    createApiFactory({
      api: gpuplaneAuthApiRef,
      deps: { configApi: configApiRef, discoveryApi: discoveryApiRef, oauthRequestApi: oauthRequestApiRef },
      factory: createDefaultGpuplaneAuth,
    }),
    createApiFactory({
      api: gpuplaneApiRef,
      deps: { configApi: configApiRef, auth: gpuplaneAuthApiRef },
      factory: ({ configApi, auth }) => GpuplaneClient.fromConfig(configApi, auth),
    }),
    createApiFactory({
      api: gpuplaneStatusApiRef,
      deps: { configApi: configApiRef, api: gpuplaneApiRef },
      factory: ({ configApi, api }) => new PollingStatusSource(api, pollIntervalMs(configApi)),
    }),
  ],
});

/** The gpuplane page (classic): `<Route path="/gpuplane" element={<GpuplanePage />} />`. */
export const GpuplanePage = gpuplanePlugin.provide(
  createRoutableExtension({
    name: 'GpuplanePage',
    component: () => import('./components/GpuplanePage').then(m => m.GpuplanePage),
    mountPoint: rootRouteRef,
  }),
);

/** Entity tab content for Group entities annotated `gpuplane.io/team` (classic). */
export const EntityGpuplaneContent = gpuplanePlugin.provide(
  createComponentExtension({
    name: 'EntityGpuplaneContent',
    component: {
      lazy: () => import('./components/EntityGpuplaneContent').then(m => m.EntityGpuplaneContent),
    },
  }),
);
