/**
 * Backstage plugin for gpuplane: a team's virtual clusters, requests with a
 * live fit check, the approval inbox, request history, the audit trail and
 * kubeconfigs, all called with the signed-in user's own OIDC token.
 *
 * This entry point is the classic frontend system; `@gpuplane/backstage-plugin/alpha`
 * exports the plugin for the new frontend system.
 *
 * @packageDocumentation
 */
export { gpuplanePlugin, GpuplanePage, EntityGpuplaneContent } from './plugin';
export { rootRouteRef } from './routes';
export { gpuplaneApiRef, gpuplaneAuthApiRef } from './api/GpuplaneApi';
export type { GpuplaneApi, ListOptions, Page } from './api/GpuplaneApi';
export { GpuplaneClient } from './api/GpuplaneClient';
export { gpuplaneStatusApiRef, PollingStatusSource } from './api/StatusSource';
export { WatchStatusSource, fetchWatch } from './api/WatchStatusSource';
export type { OpenWatch, WatchResponse } from './api/WatchStatusSource';
export type { StatusSource, Observer, Unsubscribe } from './api/StatusSource';
export { createDefaultGpuplaneAuth } from './api/defaultAuth';
export { GPUPLANE_TEAM_ANNOTATION, gpuplaneTeamOf, isGpuplaneTeamAvailable } from './annotations';
export * from './api/types';
