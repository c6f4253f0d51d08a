import Box from '@material-ui/core/Box';
import Table from '@material-ui/core/Table';
import TableBody from '@material-ui/core/TableBody';
import TableCell from '@material-ui/core/TableCell';
import TableHead from '@material-ui/core/TableHead';
import TableRow from '@material-ui/core/TableRow';
import Typography from '@material-ui/core/Typography';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneStatusApiRef } from '../api/StatusSource';
import { idOf, teamName, type GpuplaneRequest, type RequestState } from '../api/types';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { useWatch } from './hooks';
import { describeRequest, formatTime } from './requestText';
import { StatusChip } from './StatusChip';

const stateColors: Record<string, string> = {
  PENDING: '#6d6d6d',
  APPROVED: '#1565c0',
  APPLIED: '#2e7d32',
  REJECTED: '#c62828',
  FAILED: '#c62828',
  CANCELLED: '#9e9e9e',
};

export function RequestStateChip(props: { state?: RequestState }) {
  return <StatusChip value={props.state ?? 'STATE_UNSPECIFIED'} colors={stateColors} testId="request-state" />;
}

/** A team's requests, newest first, live. */
export function RequestHistory(props: { teamId: string }) {
  const status = useApi(gpuplaneStatusApiRef);
  const { value, error } = useWatch<GpuplaneRequest[]>(
    o => status.watchRequests({ filter: `team = "${teamName(props.teamId)}"`, pageSize: 50 }, o),
    [status, props.teamId],
  );
  return (
    <Box>
      {error !== undefined && <GpuplaneErrorPanel error={error} title="Cannot load requests" />}
      {value === undefined && error === undefined && <Typography>Loading requests…</Typography>}
      {value !== undefined && value.length === 0 && <Typography>No requests yet.</Typography>}
      {value !== undefined && value.length > 0 && (
        <Table size="small" aria-label="request history">
          <TableHead>
            <TableRow>
              <TableCell>Asked</TableCell>
              <TableCell>What</TableCell>
              <TableCell>State</TableCell>
              <TableCell>By</TableCell>
              <TableCell>Decision</TableCell>
            </TableRow>
          </TableHead>
          <TableBody>
            {value.map(r => (
              <TableRow key={r.name} data-testid={`request-${idOf(r.name)}`}>
                <TableCell>{formatTime(r.createTime)}</TableCell>
                <TableCell>
                  {describeRequest(r)}
                  <Typography variant="caption" display="block" color="textSecondary">
                    {r.name}
                  </Typography>
                </TableCell>
                <TableCell>
                  <RequestStateChip state={r.state} />
                </TableCell>
                <TableCell>{r.requester}</TableCell>
                <TableCell>
                  {[r.decider, r.decisionReason, r.failureMessage].filter(Boolean).join(' · ')}
                </TableCell>
              </TableRow>
            ))}
          </TableBody>
        </Table>
      )}
    </Box>
  );
}
