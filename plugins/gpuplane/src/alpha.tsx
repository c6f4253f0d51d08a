import {
  ApiBlueprint,
  PageBlueprint,
  configApiRef,
  createFrontendPlugin,
  discoveryApiRef,
  oauthRequestApiRef,
} from '@backstage/frontend-plugin-api';
import { Content } from '@backstage/core-components';
import { EntityContentBlueprint } from '@backstage/plugin-catalog-react/alpha';
import { gpuplaneApiRef, gpuplaneAuthApiRef } from './api/GpuplaneApi';
import { GpuplaneClient } from './api/GpuplaneClient';
import { gpuplaneStatusApiRef, PollingStatusSource } from './api/StatusSource';
import { createDefaultGpuplaneAuth } from './api/defaultAuth';
import { isGpuplaneTeamAvailable } from './annotations';
import { pollIntervalMs } from './plugin';
import { rootFrontendRouteRef } from './routes';

/**
 * The signed-in user's OIDC credentials (api:gpuplane/auth). Override this
 * extension to bind another OpenIdConnectApi; the dev app does.
 */
export const gpuplaneAuthApi = ApiBlueprint.make({
  name: 'auth',
  params: defineParams =>
    defineParams({
      api: gpuplaneAuthApiRef,
      deps: { configApi: configApiRef, discoveryApi: discoveryApiRef, oauthRequestApi: oauthRequestApiRef },
      factory: createDefaultGpuplaneAuth,
    }),
});

const gpuplaneClientApi = ApiBlueprint.make({
  name: 'client',
  params: defineParams =>
    defineParams({
      api: gpuplaneApiRef,
      deps: { configApi: configApiRef, auth: gpuplaneAuthApiRef },
      factory: ({ configApi, auth }) => GpuplaneClient.fromConfig(configApi, auth),
    }),
});

const gpuplaneStatusApi = ApiBlueprint.make({
  name: 'status',
  params: defineParams =>
    defineParams({
      api: gpuplaneStatusApiRef,
      deps: { configApi: configApiRef, api: gpuplaneApiRef },
      factory: ({ configApi, api }) => new PollingStatusSource(api, pollIntervalMs(configApi)),
    }),
});

const gpuplanePage = PageBlueprint.make({
  params: {
    path: '/gpuplane',
    title: 'GPU clusters',
    routeRef: rootFrontendRouteRef,
    loader: () =>
      import('./components/GpuplaneContent').then(m => (
        <Content>
          <m.GpuplaneContent />
        </Content>
      )),
  },
});

const gpuplaneEntityContent = EntityContentBlueprint.make({
  params: {
    path: 'gpuplane',
    title: 'GPU clusters',
    filter: isGpuplaneTeamAvailable,
    loader: () =>
      import('./components/EntityGpuplaneContent').then(m => <m.EntityGpuplaneContent />),
  },
});

/** The gpuplane plugin for Backstage's new frontend system. */
export default createFrontendPlugin({
  pluginId: 'gpuplane',
  info: { packageJson: () => import('../package.json') },
  routes: { root: rootFrontendRouteRef },
  extensions: [gpuplaneAuthApi, gpuplaneClientApi, gpuplaneStatusApi, gpuplanePage, gpuplaneEntityContent],
});
