import {
  createComponentExtension,
  createPlugin,
  createRoutableExtension,
} from '@backstage/core-plugin-api';
import {
  gpuplaneAuthApiFactory,
  gpuplaneClientApiFactory,
  gpuplaneStatusApiFactory,
} from './api/factories';
import { rootRouteRef } from './routes';

/** The plugin for Backstage's classic frontend system. */
export const gpuplanePlugin = createPlugin({
  id: 'gpuplane',
  routes: { root: rootRouteRef },
  apis: [gpuplaneAuthApiFactory, gpuplaneClientApiFactory, gpuplaneStatusApiFactory],
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
