import { useState } from 'react';
import Box from '@material-ui/core/Box';
import Button from '@material-ui/core/Button';
import Chip from '@material-ui/core/Chip';
import Paper from '@material-ui/core/Paper';
import Table from '@material-ui/core/Table';
import TableBody from '@material-ui/core/TableBody';
import TableCell from '@material-ui/core/TableCell';
import TableHead from '@material-ui/core/TableHead';
import TableRow from '@material-ui/core/TableRow';
import Tooltip from '@material-ui/core/Tooltip';
import Typography from '@material-ui/core/Typography';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneStatusApiRef } from '../api/StatusSource';
import { finishedPhases, idOf, type Phase, type Team, type VirtualCluster } from '../api/types';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { KubeconfigDialog } from './KubeconfigDialog';
import { QuotaBar } from './QuotaBar';
import { StatusChip } from './StatusChip';
import { useWatch } from './hooks';
import {
  addAmounts,
  amounts,
  formatCpu,
  formatGpu,
  formatMemory,
  formatQuota,
  zeroAmounts,
} from './quantities';

const phaseColors: Record<string, string> = {
  READY: '#2e7d32',
  PROVISIONING: '#1565c0',
  PENDING_APPROVAL: '#6d6d6d',
  DEGRADED: '#ef6c00',
  DELETING: '#6d6d6d',
  FAILED: '#c62828',
  REJECTED: '#c62828',
  SLEEPING: '#6d6d6d',
};

export function PhaseChip(props: { phase?: Phase }) {
  return <StatusChip value={props.phase ?? 'PHASE_UNSPECIFIED'} colors={phaseColors} testId="phase" />;
}

const conditionMarks: Record<string, string> = { TRUE: '✓', FALSE: '✗' };
const conditionColors: Record<string, string> = { TRUE: '#2e7d32', FALSE: '#c62828' };

function Conditions(props: { vc: VirtualCluster }) {
  const conditions = props.vc.status?.conditions ?? [];
  if (conditions.length === 0) return <Typography variant="caption">none yet</Typography>;
  return (
    <Box display="flex" flexWrap="wrap" style={{ gap: 4 }}>
      {conditions.map(c => {
        const mark = conditionMarks[c.status ?? ''] ?? '…';
        return (
          <Tooltip key={c.type} title={[c.reason, c.message].filter(Boolean).join(': ') || c.type || ''}>
            <Chip
              size="small"
              variant="outlined"
              label={`${c.type} ${mark}`}
              data-testid={`condition-${c.type}`}
              style={{ borderColor: conditionColors[c.status ?? ''] }}
            />
          </Tooltip>
        );
      })}
    </Box>
  );
}

/** Team quota against what its live virtual clusters hold and use. */
function TeamSummary(props: { team?: Team; clusters: VirtualCluster[] }) {
  const live = props.clusters.filter(vc => !finishedPhases.includes(vc.status?.phase as Phase));
  const quota = amounts(props.team?.quota);
  const assigned = live.map(vc => amounts(vc.spec?.quota)).reduce(addAmounts, zeroAmounts);
  const allocated = live.map(vc => amounts(vc.status?.allocated)).reduce(addAmounts, zeroAmounts);
  return (
    <Paper variant="outlined" style={{ padding: 16, marginBottom: 16 }} data-testid="team-summary">
      <Typography variant="h6">
        {props.team?.displayName || idOf(props.team?.name)} · {props.team?.isolationTier ?? ''}
      </Typography>
      <Typography variant="body2" gutterBottom>
        Team quota {formatQuota(props.team?.quota)}; {live.length} live virtual cluster(s).
      </Typography>
      <Box display="flex" flexWrap="wrap" style={{ gap: 24 }}>
        <Box>
          <QuotaBar label="GPU" used={assigned.gpu} total={quota.gpu} format={formatGpu} usedLabel="assigned" />
          <QuotaBar label="GPU" used={allocated.gpu} total={quota.gpu} format={formatGpu} />
        </Box>
        <Box>
          <QuotaBar label="CPU" used={assigned.cpu} total={quota.cpu} format={formatCpu} usedLabel="assigned" />
          <QuotaBar label="CPU" used={allocated.cpu} total={quota.cpu} format={formatCpu} />
        </Box>
        <Box>
          <QuotaBar label="Memory" used={assigned.memoryGiB} total={quota.memoryGiB} format={formatMemory} usedLabel="assigned" />
          <QuotaBar label="Memory" used={allocated.memoryGiB} total={quota.memoryGiB} format={formatMemory} />
        </Box>
      </Box>
    </Paper>
  );
}

/** A team's virtual clusters, live: phase, conditions, quota vs allocation. */
export function VirtualClusters(props: { teamId: string; team?: Team }) {
  const status = useApi(gpuplaneStatusApiRef);
  const { value, error } = useWatch<VirtualCluster[]>(
    o => status.watchVirtualClusters(props.teamId, o),
    [status, props.teamId],
  );
  const [kubeconfigFor, setKubeconfigFor] = useState<string>();
  const clusters = value ?? [];
  return (
    <Box>
      {error !== undefined && <GpuplaneErrorPanel error={error} title="Cannot load virtual clusters" />}
      <TeamSummary team={props.team} clusters={clusters} />
      {value === undefined && error === undefined && <Typography>Loading virtual clusters…</Typography>}
      {value !== undefined && clusters.length === 0 && (
        <Typography data-testid="no-clusters">
          No virtual clusters yet. Ask for one on the New request tab.
        </Typography>
      )}
      {clusters.length > 0 && (
        <Table size="small" aria-label="virtual clusters">
          <TableHead>
            <TableRow>
              <TableCell>Virtual cluster</TableCell>
              <TableCell>Phase</TableCell>
              <TableCell>Conditions</TableCell>
              <TableCell>Quota vs allocated</TableCell>
              <TableCell />
            </TableRow>
          </TableHead>
          <TableBody>
            {clusters.map(vc => {
              const id = idOf(vc.name);
              const quota = amounts(vc.spec?.quota);
              const used = amounts(vc.status?.allocated);
              const phase = vc.status?.phase;
              return (
                <TableRow key={vc.name} data-testid={`vc-${id}`}>
                  <TableCell>
                    <Typography variant="subtitle2" style={{ whiteSpace: 'nowrap' }}>
                      {id}
                    </Typography>
                    {vc.spec?.displayName && <Typography variant="caption">{vc.spec.displayName}</Typography>}
                    {vc.status?.message && (
                      <Typography variant="caption" display="block" color="textSecondary">
                        {vc.status.message}
                      </Typography>
                    )}
                  </TableCell>
                  <TableCell>
                    <PhaseChip phase={phase} />
                  </TableCell>
                  <TableCell>
                    <Conditions vc={vc} />
                  </TableCell>
                  <TableCell>
                    <QuotaBar label="GPU" used={used.gpu} total={quota.gpu} format={formatGpu} />
                    <QuotaBar label="CPU" used={used.cpu} total={quota.cpu} format={formatCpu} />
                    <QuotaBar label="Memory" used={used.memoryGiB} total={quota.memoryGiB} format={formatMemory} />
                  </TableCell>
                  <TableCell>
                    <Button
                      size="small"
                      variant="outlined"
                      disabled={phase !== 'READY' && phase !== 'DEGRADED'}
                      style={{ whiteSpace: 'nowrap' }}
                      onClick={() => setKubeconfigFor(id)}
                    >
                      Kubeconfig
                    </Button>
                  </TableCell>
                </TableRow>
              );
            })}
          </TableBody>
        </Table>
      )}
      {kubeconfigFor && (
        <KubeconfigDialog
          teamId={props.teamId}
          virtualClusterId={kubeconfigFor}
          onClose={() => setKubeconfigFor(undefined)}
        />
      )}
    </Box>
  );
}
