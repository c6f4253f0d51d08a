import { ApiBlueprint, PageBlueprint, createFrontendPlugin } from '@backstage/frontend-plugin-api';
import { Content } from '@backstage/core-components';
import { EntityContentBlueprint } from '@backstage/plugin-catalog-react/alpha';
import {
  gpuplaneAuthApiFactory,
  gpuplaneClientApiFactory,
  gpuplaneStatusApiFactory,
} from './api/factories';
import { isGpuplaneTeamAvailable } from './annotations';
import { rootFrontendRouteRef } from './routes';

/**
 * The signed-in user's OIDC credentials (api:gpuplane/auth). Override this
 * extension to bind another OpenIdConnectApi; the dev app does.
 */
export const gpuplaneAuthApi = ApiBlueprint.make({
  name: 'auth',
  params: defineParams => defineParams(gpuplaneAuthApiFactory),
});

const gpuplaneClientApi = ApiBlueprint.make({
  name: 'client',
  params: defineParams => defineParams(gpuplaneClientApiFactory),
});

const gpuplaneStatusApi = ApiBlueprint.make({
  name: 'status',
  params: defineParams => defineParams(gpuplaneStatusApiFactory),
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
