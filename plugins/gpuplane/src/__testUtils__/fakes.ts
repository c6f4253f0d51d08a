import { GpuplaneError } from '@gpuplane/client';
import type { GpuplaneApi, ListOptions, Page } from '../api/GpuplaneApi';
import type { Observer, StatusSource } from '../api/StatusSource';
import type {
  AuditEvent,
  CurrentUser,
  FitResult,
  GpuplaneRequest,
  Kubeconfig,
  Team,
  VirtualCluster,
  VirtualClusterAsk,
} from '../api/types';

/** A GpuplaneError as the server would send it. */
export function apiError(
  httpStatus: number,
  code: number,
  message: string,
  reason: string,
  violations: Array<{ field: string; description: string }> = [],
): GpuplaneError {
  const details: Array<Record<string, unknown>> = [
    { '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason, domain: 'gpuplane.dev' },
  ];
  if (violations.length > 0) {
    details.push({ '@type': 'type.googleapis.com/google.rpc.BadRequest', fieldViolations: violations });
  }
  return new GpuplaneError({ httpStatus, status: { code, message, details }, requestId: 'req-1' });
}

export const bob: CurrentUser = {
  subject: 'user-bob',
  username: 'bob@example.com',
  teamRoles: [{ team: 'teams/team-a', role: 'OWNER' }],
};
export const alice: CurrentUser = { subject: 'user-alice', username: 'alice@example.com', platformAdmin: true };

export const teamA: Team = {
  name: 'teams/team-a',
  displayName: 'Team A (vision)',
  isolationTier: 'SHARED',
  department: 'departments/research',
  quota: { gpu: '4', cpuMillis: '32000', memoryBytes: String(256 * 1024 ** 3) },
};

type Calls = { [K in keyof GpuplaneApi]: unknown[][] };

/** An in-memory GpuplaneApi whose answers tests set and whose calls they read. */
export class FakeGpuplaneApi implements GpuplaneApi {
  user: CurrentUser = bob;
  teams: Team[] = [teamA];
  clusters: VirtualCluster[] = [];
  requests: GpuplaneRequest[] = [];
  audit: AuditEvent[] = [];
  fit: (ask: VirtualClusterAsk) => Promise<FitResult> = async () => ({ fits: true });
  storedFit: FitResult = { fits: true };
  create: (ask: VirtualClusterAsk, requestId: string) => Promise<GpuplaneRequest> = async ask => ({
    name: 'requests/r1',
    state: 'PENDING',
    team: `teams/${ask.team}`,
    createVirtualCluster: { virtualClusterId: ask.virtualClusterId },
  });
  decide?: (name: string, approve: boolean, reason: string) => Promise<GpuplaneRequest>;
  userError?: unknown;
  calls = {} as Calls;

  private record<K extends keyof GpuplaneApi>(method: K, ...args: unknown[]) {
    (this.calls[method] ??= []).push(args);
  }

  async getCurrentUser() {
    this.record('getCurrentUser');
    if (this.userError) throw this.userError;
    return this.user;
  }
  async listTeams() {
    this.record('listTeams');
    return this.teams;
  }
  async getTeam(teamId: string) {
    this.record('getTeam', teamId);
    const t = this.teams.find(x => x.name === `teams/${teamId}`);
    if (!t) throw apiError(404, 5, `teams/${teamId} not found`, 'NOT_FOUND');
    return t;
  }
  async listVirtualClusters(teamId: string) {
    this.record('listVirtualClusters', teamId);
    return this.clusters;
  }
  async getKubeconfig(teamId: string, vc: string): Promise<Kubeconfig> {
    this.record('getKubeconfig', teamId, vc);
    return { kubeconfig: `apiVersion: v1\nkind: Config\n# ${vc}\n`, server: `https://${vc}.vc-${vc}.svc`, context: vc };
  }
  async listRequests(options: ListOptions = {}): Promise<Page<GpuplaneRequest>> {
    this.record('listRequests', options);
    return { items: this.requests };
  }
  requestVirtualCluster(ask: VirtualClusterAsk, requestId: string) {
    this.record('requestVirtualCluster', ask, requestId);
    return this.create(ask, requestId);
  }
  checkFit(ask: VirtualClusterAsk) {
    this.record('checkFit', ask);
    return this.fit(ask);
  }
  async checkStoredFit(name: string) {
    this.record('checkStoredFit', name);
    return this.storedFit;
  }
  async approveRequest(name: string, reason: string, etag?: string) {
    this.record('approveRequest', name, reason, etag);
    if (this.decide) return this.decide(name, true, reason);
    return { ...this.requests.find(r => r.name === name), state: 'APPROVED' as const, decisionReason: reason };
  }
  async rejectRequest(name: string, reason: string, etag?: string) {
    this.record('rejectRequest', name, reason, etag);
    if (this.decide) return this.decide(name, false, reason);
    return { ...this.requests.find(r => r.name === name), state: 'REJECTED' as const, decisionReason: reason };
  }
  async listAuditEvents(options: ListOptions = {}): Promise<Page<AuditEvent>> {
    this.record('listAuditEvents', options);
    return { items: this.audit };
  }
}

/** A StatusSource that answers once, from the fake API, on subscribe. */
export class OnceStatusSource implements StatusSource {
  constructor(private readonly api: FakeGpuplaneApi) {}
  watchVirtualClusters(teamId: string, o: Observer<VirtualCluster[]>) {
    this.api.listVirtualClusters(teamId).then(v => o.next(v), e => o.error(e));
    return () => {};
  }
  watchRequests(options: ListOptions, o: Observer<GpuplaneRequest[]>) {
    this.api.listRequests(options).then(p => o.next(p.items), e => o.error(e));
    return () => {};
  }
}
