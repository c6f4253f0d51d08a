import { createApiRef, type OpenIdConnectApi } from '@backstage/core-plugin-api';
import type {
  AuditEvent,
  CurrentUser,
  FitResult,
  GpuplaneRequest,
  Kubeconfig,
  Team,
  VirtualCluster,
  VirtualClusterAsk,
} from './types';

/** One page of a list and the token of the next, if any. */
export interface Page<T> {
  items: T[];
  nextPageToken?: string;
}

export interface ListOptions {
  /** An AIP-160 style filter, e.g. `state = PENDING`. */
  filter?: string;
  pageSize?: number;
  pageToken?: string;
}

/**
 * What the plugin does with gpuplane, in its own words. Every call is made
 * with the signed-in user's OIDC token, so gpuplane authorizes each object
 * for that user: the plugin sees exactly what the user may see.
 */
export interface GpuplaneApi {
  getCurrentUser(): Promise<CurrentUser>;
  /** Teams the user can read (every page). */
  listTeams(): Promise<Team[]>;
  getTeam(teamId: string): Promise<Team>;
  /** A team's virtual clusters (every page). */
  listVirtualClusters(teamId: string): Promise<VirtualCluster[]>;
  getKubeconfig(teamId: string, virtualClusterId: string): Promise<Kubeconfig>;
  listRequests(options?: ListOptions): Promise<Page<GpuplaneRequest>>;
  /** Asks for a virtual cluster. `requestId` makes retries idempotent. */
  requestVirtualCluster(ask: VirtualClusterAsk, requestId: string): Promise<GpuplaneRequest>;
  /** Would this ask fit if approved now? Validates it like the real request. */
  checkFit(ask: VirtualClusterAsk): Promise<FitResult>;
  /** Would this stored request fit if approved now? */
  checkStoredFit(requestName: string): Promise<FitResult>;
  approveRequest(requestName: string, reason: string, etag?: string): Promise<GpuplaneRequest>;
  rejectRequest(requestName: string, reason: string, etag?: string): Promise<GpuplaneRequest>;
  listAuditEvents(options?: ListOptions): Promise<Page<AuditEvent>>;
}

/** The gpuplane client the plugin's components use. */
export const gpuplaneApiRef = createApiRef<GpuplaneApi>({ id: 'plugin.gpuplane.api' });

/**
 * The signed-in user's OpenID Connect credentials, as Backstage's OIDC auth
 * provider gives them: the plugin sends `getIdToken()` as the bearer token.
 * The plugin registers a default (an OAuth2 client of the Backstage auth
 * backend's `oidc` provider, see README); apps may override it with their
 * own OIDC auth API. Never a shared service token.
 */
export const gpuplaneAuthApiRef = createApiRef<OpenIdConnectApi>({
  id: 'plugin.gpuplane.auth',
});
