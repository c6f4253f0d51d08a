import type { GpuplaneRequest } from '../api/types';
import { formatQuota } from './quantities';

/** One line saying what a request asks for. */
export function describeRequest(r: GpuplaneRequest): string {
  if (r.createVirtualCluster) {
    const c = r.createVirtualCluster;
    return `new virtual cluster ${c.virtualClusterId ?? ''}: ${formatQuota(c.spec?.quota)}`;
  }
  if (r.changeVirtualClusterQuota) {
    const c = r.changeVirtualClusterQuota;
    return `resize ${c.virtualCluster ?? ''} to ${formatQuota(c.quota)}`;
  }
  if (r.changeTeamQuota) {
    return `team quota ${formatQuota(r.changeTeamQuota.quota)}`;
  }
  if (r.deleteVirtualCluster) {
    return `delete ${r.deleteVirtualCluster.virtualCluster ?? ''}`;
  }
  if (r.changeVirtualClusterVersion) {
    const c = r.changeVirtualClusterVersion;
    return `upgrade ${c.virtualCluster ?? ''} to vCluster ${c.chartVersion ?? ''}, Kubernetes ${c.kubernetesVersion ?? ''}`;
  }
  if (r.sleepVirtualCluster) {
    return `put ${r.sleepVirtualCluster.virtualCluster ?? ''} to sleep`;
  }
  if (r.wakeVirtualCluster) {
    return `wake ${r.wakeVirtualCluster.virtualCluster ?? ''}`;
  }
  return r.kind ?? 'request';
}

/** "alice@example.com" for "user-alice"-style subjects is not knowable; show what we have. */
export const formatTime = (t?: string) => (t ? new Date(t).toLocaleString() : '');
