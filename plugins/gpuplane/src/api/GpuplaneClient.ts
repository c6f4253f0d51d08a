import type { ConfigApi, OpenIdConnectApi } from '@backstage/core-plugin-api';
import { createGpuplaneClient, unwrap, type GpuplaneFetchClient } from '@gpuplane/client';
import type { GpuplaneApi, ListOptions, Page } from './GpuplaneApi';
import { askToRequest, idOf, type VirtualClusterAsk } from './types';

// The request paths and parameter names below follow api/openapi.yaml; like
// types.ts, this file changes when that document does.

const MAX_PAGES = 20;
const PAGE_SIZE = 200;

/** GpuplaneApi over the REST API, authenticated as the signed-in user. */
export class GpuplaneClient implements GpuplaneApi {
  private readonly http: GpuplaneFetchClient;

  constructor(options: {
    baseUrl: string;
    auth: OpenIdConnectApi;
    fetch?: (input: Request) => Promise<Response>;
  }) {
    this.http = createGpuplaneClient({
      baseUrl: options.baseUrl,
      getToken: () => options.auth.getIdToken(),
      fetch: options.fetch,
    });
  }

  /** Reads `gpuplane.baseUrl` from app-config. */
  static fromConfig(config: ConfigApi, auth: OpenIdConnectApi): GpuplaneClient {
    return new GpuplaneClient({ baseUrl: config.getString('gpuplane.baseUrl'), auth });
  }

  getCurrentUser() {
    return unwrap(this.http.GET('/v1/users/me'));
  }

  async listTeams() {
    return this.all(async pageToken => {
      const r = await unwrap(
        this.http.GET('/v1/teams', { params: { query: { pageSize: PAGE_SIZE, pageToken } } }),
      );
      return { items: r.teams ?? [], nextPageToken: r.nextPageToken };
    });
  }

  getTeam(teamId: string) {
    return unwrap(this.http.GET('/v1/teams/{team}', { params: { path: { team: teamId } } }));
  }

  async listVirtualClusters(teamId: string) {
    return this.all(async pageToken => {
      const r = await unwrap(
        this.http.GET('/v1/teams/{team}/virtualClusters', {
          params: { path: { team: teamId }, query: { pageSize: PAGE_SIZE, pageToken } },
        }),
      );
      return { items: r.virtualClusters ?? [], nextPageToken: r.nextPageToken };
    });
  }

  getKubeconfig(teamId: string, virtualClusterId: string) {
    return unwrap(
      this.http.GET('/v1/teams/{team}/virtualClusters/{virtualCluster}:kubeconfig', {
        params: { path: { team: teamId, virtualCluster: virtualClusterId } },
      }),
    );
  }

  async listRequests(options: ListOptions = {}) {
    const r = await unwrap(this.http.GET('/v1/requests', { params: { query: options } }));
    return { items: r.requests ?? [], nextPageToken: r.nextPageToken || undefined };
  }

  requestVirtualCluster(ask: VirtualClusterAsk, requestId: string) {
    return unwrap(
      this.http.POST('/v1/requests', {
        params: { query: { requestId } },
        body: askToRequest(ask),
      }),
    );
  }

  checkFit(ask: VirtualClusterAsk) {
    return unwrap(this.http.POST('/v1/requests:checkFit', { body: { request: askToRequest(ask) } }));
  }

  checkStoredFit(requestName: string) {
    return unwrap(
      this.http.POST('/v1/requests/{request}:checkFit', {
        params: { path: { request: idOf(requestName) } },
        body: {},
      }),
    );
  }

  approveRequest(requestName: string, reason: string, etag?: string) {
    return unwrap(
      this.http.POST('/v1/requests/{request}:approve', {
        params: { path: { request: idOf(requestName) } },
        body: { reason, etag },
      }),
    );
  }

  rejectRequest(requestName: string, reason: string, etag?: string) {
    return unwrap(
      this.http.POST('/v1/requests/{request}:reject', {
        params: { path: { request: idOf(requestName) } },
        body: { reason, etag },
      }),
    );
  }

  async listAuditEvents(options: ListOptions = {}) {
    const r = await unwrap(this.http.GET('/v1/auditEvents', { params: { query: options } }));
    return { items: r.auditEvents ?? [], nextPageToken: r.nextPageToken || undefined };
  }

  // Follows page tokens; bounded so a server bug cannot loop forever.
  private async all<T>(page: (token?: string) => Promise<Page<T>>): Promise<T[]> {
    const out: T[] = [];
    let token: string | undefined;
    for (let i = 0; i < MAX_PAGES; i++) {
      const p = await page(token);
      out.push(...p.items);
      if (!p.nextPageToken) return out;
      token = p.nextPageToken;
    }
    return out;
  }
}
