import { GpuplaneError } from '@gpuplane/client';
import type { GpuplaneApi, ListOptions, Page } from '../api/GpuplaneApi';
import type { Observer, StatusSource } from '../api/StatusSource';
import type {
  AuditEvent,
  Condition,
  CurrentUser,
  FitResult,
  GpuplaneRequest,
  Kubeconfig,
  Shortfall,
  Team,
  VirtualCluster,
  VirtualClusterAsk,
  VirtualClusterSpec,
  VirtualClusterStatus,
} from '../api/types';

// Builders of complete API objects: the document marks the fields a
// response always carries as required, so fixtures give them all and tests
// name only what they are about.
const T0 = '2026-12-01T00:00:00Z';

export function aUser(u: Partial<CurrentUser>): CurrentUser {
  return { subject: '', username: '', email: '', groups: [], platformAdmin: false, adminOfDepartments: [], teamRoles: [], ...u };
}

export function aRequest(r: Partial<GpuplaneRequest>): GpuplaneRequest {
  return {
    name: 'requests/r1',
    kind: 'CREATE_VIRTUAL_CLUSTER',
    state: 'PENDING',
    team: 'teams/team-a',
    department: 'departments/research',
    requester: 'user-bob',
    approvalPolicy: '',
    decider: '',
    decisionReason: '',
    failureMessage: '',
    etag: 'W/"1"',
    createTime: T0,
    updateTime: T0,
    ...r,
  };
}

export function aStatus(s: Partial<VirtualClusterStatus>): VirtualClusterStatus {
  return {
    phase: 'PROVISIONING',
    conditions: [],
    observedGeneration: '0',
    endpoint: '',
    message: '',
    hostCluster: '',
    allocated: { gpu: '0', cpuMillis: '0', memoryBytes: '0' },
    ...s,
  };
}

export function aCondition(c: Partial<Condition> & Pick<Condition, 'type' | 'status'>): Condition {
  return { reason: '', message: '', observedGeneration: '1', ...c };
}

export function aSpec(s: Partial<VirtualClusterSpec> = {}): VirtualClusterSpec {
  return { quota: { gpu: '0', cpuMillis: '0', memoryBytes: '0' }, sleep: false, ...s };
}

export function aVirtualCluster(
  v: Partial<Omit<VirtualCluster, 'status' | 'spec'>> & {
    name: string;
    spec?: Partial<VirtualClusterSpec>;
    status?: Partial<VirtualClusterStatus>;
  },
): VirtualCluster {
  return {
    generation: '1',
    etag: 'W/"1"',
    uid: `uid-${v.name}`,
    createTime: T0,
    updateTime: T0,
    ...v,
    spec: aSpec(v.spec),
    status: aStatus(v.status ?? {}),
  };
}

export function aShortfall(s: Partial<Shortfall>): Shortfall {
  return { level: '', name: '', resource: '', requested: '', free: '', capacity: '', message: '', ...s };
}

export function fits(shortfalls: Array<Partial<Shortfall>> = []): FitResult {
  return { fits: shortfalls.length === 0, hostCluster: '', shortfalls: shortfalls.map(aShortfall) };
}

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

export const bob: CurrentUser = aUser({
  subject: 'user-bob',
  username: 'bob@example.com',
  teamRoles: [{ team: 'teams/team-a', role: 'OWNER', viaMembers: ['teams/team-a/members/bob'] }],
});
export const alice: CurrentUser = aUser({ subject: 'user-alice', username: 'alice@example.com', platformAdmin: true });

export const teamA: Team = {
  name: 'teams/team-a',
  displayName: 'Team A (vision)',
  isolationTier: 'SHARED',
  department: 'departments/research',
  quota: { gpu: '4', cpuMillis: '32000', memoryBytes: String(256 * 1024 ** 3) },
  nodePool: 'shared',
  uid: 'uid-team-a',
  etag: 'W/"1"',
  createTime: T0,
  updateTime: T0,
};

type Calls = { [K in keyof GpuplaneApi]: unknown[][] };

/** An in-memory GpuplaneApi whose answers tests set and whose calls they read. */
export class FakeGpuplaneApi implements GpuplaneApi {
  user: CurrentUser = bob;
  teams: Team[] = [teamA];
  clusters: VirtualCluster[] = [];
  requests: GpuplaneRequest[] = [];
  audit: AuditEvent[] = [];
  fit: (ask: VirtualClusterAsk) => Promise<FitResult> = async () => fits();
  storedFit: FitResult = fits();
  create: (ask: VirtualClusterAsk, requestId: string) => Promise<GpuplaneRequest> = async ask =>
    aRequest({
      name: 'requests/r1',
      state: 'PENDING',
      team: `teams/${ask.team}`,
      createVirtualCluster: {
        virtualClusterId: ask.virtualClusterId,
        virtualCluster: `teams/${ask.team}/virtualClusters/${ask.virtualClusterId}`,
        spec: aSpec({ quota: { gpu: ask.gpu, cpuMillis: String(ask.cpuMillis), memoryBytes: String(ask.memoryBytes) } }),
      },
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
    return {
      kubeconfig: `apiVersion: v1\nkind: Config\n# ${vc}\n`,
      server: `https://${vc}.vc-${vc}.svc`,
      context: vc,
      certificateAuthorityData: '',
      breakGlass: false,
    };
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
    return aRequest({ ...this.requests.find(r => r.name === name), state: 'APPROVED', decisionReason: reason });
  }
  async rejectRequest(name: string, reason: string, etag?: string) {
    this.record('rejectRequest', name, reason, etag);
    if (this.decide) return this.decide(name, false, reason);
    return aRequest({ ...this.requests.find(r => r.name === name), state: 'REJECTED', decisionReason: reason });
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
