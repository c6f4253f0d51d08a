import { createRouteRef } from '@backstage/core-plugin-api';
import { createRouteRef as createFrontendRouteRef } from '@backstage/frontend-plugin-api';

/** The plugin page, classic frontend system. */
export const rootRouteRef = createRouteRef({ id: 'gpuplane' });

/** The plugin page, new frontend system. */
export const rootFrontendRouteRef = createFrontendRouteRef();
