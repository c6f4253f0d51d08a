/**
 * The one place the plugin touches the generated OpenAPI types.
 *
 * When schema names, path parameters or field behaviour (required,
 * read-only) of api/openapi.yaml change, `make generate-ts` rewrites
 * @gpuplane/client's schema and the edits stay in this module and in
 * GpuplaneClient.ts (the request paths), nowhere else.
 */
import type { Schema, SchemaInput } from '@gpuplane/client';

export type Quota = Schema<'Quota'>;
export type Team = Schema<'Team'>;
export type IsolationTier = Schema<'IsolationTier'>;
export type VirtualCluster = Schema<'VirtualCluster'>;
export type VirtualClusterSpec = Schema<'VirtualClusterSpec'>;
export type VirtualClusterStatus = Schema<'VirtualClusterStatus'>;
export type Phase = Schema<'VirtualClusterStatusPhase'>;
export type Condition = Schema<'Condition'>;
/** A team's ask (the API's Request; renamed so it does not shadow fetch's Request). */
export type GpuplaneRequest = Schema<'Request'>;
export type RequestState = Schema<'RequestState'>;
export type RequestKind = Schema<'RequestKind'>;
export type FitResult = Schema<'FitResult'>;
export type Shortfall = Schema<'Shortfall'>;
export type AuditEvent = Schema<'AuditEvent'>;
export type CurrentUser = Schema<'User'>;
export type Kubeconfig = Schema<'VirtualClusterKubeconfig'>;

export const teamName = (teamId: string) => `teams/${teamId}`;

/** What the request form asks for: a new virtual cluster for a team. */
export interface VirtualClusterAsk {
  /** Team id (not the resource name), e.g. "team-a". */
  team: string;
  virtualClusterId: string;
  displayName?: string;
  /** Decimal GPUs, e.g. "1" or "0.5". */
  gpu: string;
  cpuMillis: number;
  memoryBytes: number;
  allowFractionalGpus: boolean;
  justification: string;
}

/** The request body the API takes for a VirtualClusterAsk. */
export function askToRequest(ask: VirtualClusterAsk): SchemaInput<'Request'> {
  return {
    team: teamName(ask.team),
    justification: ask.justification,
    createVirtualCluster: {
      virtualClusterId: ask.virtualClusterId,
      spec: {
        displayName: ask.displayName || undefined,
        allowFractionalGpus: ask.allowFractionalGpus || undefined,
        quota: {
          gpu: ask.gpu,
          cpuMillis: String(ask.cpuMillis),
          memoryBytes: String(ask.memoryBytes),
        },
      },
    },
  };
}

/**
 * Where the API reports a violation of each form field. The REST API names
 * fields by JSON path (request.createVirtualCluster.spec.quota.cpuMillis);
 * paths are compared after normalization (leading "request." dropped,
 * snake_case -> camelCase), so a proto-style path from an older server
 * matches too.
 */
export const askFieldPaths: Record<string, AskField> = {
  'createVirtualCluster.virtualClusterId': 'virtualClusterId',
  'createVirtualCluster.spec.displayName': 'displayName',
  'createVirtualCluster.spec.quota': 'quota',
  'createVirtualCluster.spec.quota.gpu': 'gpu',
  'createVirtualCluster.spec.quota.cpuMillis': 'cpu',
  'createVirtualCluster.spec.quota.memoryBytes': 'memory',
  'createVirtualCluster.spec.allowFractionalGpus': 'allowFractionalGpus',
  justification: 'justification',
  team: 'team',
};

export type AskField =
  | 'virtualClusterId'
  | 'displayName'
  | 'quota'
  | 'gpu'
  | 'cpu'
  | 'memory'
  | 'allowFractionalGpus'
  | 'justification'
  | 'team';

/** "request.create_virtual_cluster.spec.quota.cpu_millis" -> "createVirtualCluster.spec.quota.cpuMillis". */
export function normalizeFieldPath(path: string): string {
  return path
    .replace(/^request\./, '')
    .split('.')
    .map(seg => seg.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()))
    .join('.');
}

/** The last segment of a resource name: "teams/team-a/virtualClusters/ml" -> "ml". */
export function idOf(name: string | undefined): string {
  if (!name) return '';
  const i = name.lastIndexOf('/');
  return i < 0 ? name : name.slice(i + 1);
}

/** Admins decide requests; the inbox is theirs. */
export function isApprover(user: CurrentUser | undefined): boolean {
  return Boolean(user?.platformAdmin || (user?.adminOfDepartments?.length ?? 0) > 0);
}

/** Phases in which a virtual cluster no longer holds quota. */
export const finishedPhases: ReadonlyArray<Phase> = ['DELETED', 'REJECTED', 'FAILED'];
