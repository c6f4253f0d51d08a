import { useState } from 'react';
import Box from '@material-ui/core/Box';
import Button from '@material-ui/core/Button';
import Paper from '@material-ui/core/Paper';
import TextField from '@material-ui/core/TextField';
import Typography from '@material-ui/core/Typography';
import Alert from '@material-ui/lab/Alert';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import { gpuplaneStatusApiRef } from '../api/StatusSource';
import { idOf, type GpuplaneRequest } from '../api/types';
import { FitPanel } from './FitPanel';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { useLoad, useWatch } from './hooks';
import { describeRequest, formatTime } from './requestText';

function PendingRequest(props: { request: GpuplaneRequest; onDecided: (r: GpuplaneRequest) => void }) {
  const { request } = props;
  const api = useApi(gpuplaneApiRef);
  const fit = useLoad(() => api.checkStoredFit(request.name ?? ''), [api, request.name, request.etag]);
  const [reason, setReason] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const id = idOf(request.name);

  const decide = async (approve: boolean) => {
    setBusy(true);
    setError(undefined);
    try {
      const name = request.name ?? '';
      const decided = approve
        ? await api.approveRequest(name, reason, request.etag)
        : await api.rejectRequest(name, reason, request.etag);
      props.onDecided(decided);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  return (
    <Paper variant="outlined" style={{ padding: 16, marginBottom: 12 }} data-testid={`pending-${id}`}>
      <Typography variant="subtitle1">
        <strong>{request.team}</strong> asks for {describeRequest(request)}
      </Typography>
      <Typography variant="body2" color="textSecondary">
        {request.name} · by {request.requester} · {formatTime(request.createTime)} · {request.department}
      </Typography>
      {request.justification && (
        <Typography variant="body2" style={{ marginTop: 8 }}>
          “{request.justification}”
        </Typography>
      )}
      <Box my={1}>
        {fit.loading && <Typography variant="body2">Checking whether it fits…</Typography>}
        {fit.value && <FitPanel fit={fit.value} />}
        {fit.error !== undefined && <GpuplaneErrorPanel error={fit.error} title="Fit check failed" />}
      </Box>
      <Box display="flex" alignItems="center" style={{ gap: 8 }}>
        <TextField
          label="Reason"
          size="small"
          variant="outlined"
          value={reason}
          onChange={e => setReason(e.target.value)}
          inputProps={{ 'aria-label': `reason for ${id}` }}
          style={{ flex: 1 }}
        />
        <Button color="primary" variant="contained" disabled={busy} onClick={() => decide(true)}>
          Approve
        </Button>
        <Button color="secondary" variant="outlined" disabled={busy} onClick={() => decide(false)}>
          Reject
        </Button>
      </Box>
      {error !== undefined && (
        <Box mt={1}>
          <GpuplaneErrorPanel error={error} title="The decision was not recorded" />
        </Box>
      )}
    </Paper>
  );
}

/** Pending requests the signed-in admin may decide, live. */
export function ApprovalInbox() {
  const status = useApi(gpuplaneStatusApiRef);
  const [decided, setDecided] = useState<GpuplaneRequest[]>([]);
  const { value, error } = useWatch<GpuplaneRequest[]>(
    o => status.watchRequests({ filter: 'state = PENDING', pageSize: 100 }, o),
    [status],
  );
  const decidedNames = new Set(decided.map(r => r.name));
  const pending = (value ?? []).filter(r => !decidedNames.has(r.name));
  return (
    <Box>
      {decided.map(r => (
        <Alert key={r.name} severity={r.state === 'REJECTED' ? 'info' : 'success'} data-testid={`decided-${idOf(r.name)}`} style={{ marginBottom: 8 }}>
          {r.name} ({describeRequest(r)}) is {r.state}
          {r.decisionReason ? `: ${r.decisionReason}` : ''}
        </Alert>
      ))}
      {error !== undefined && <GpuplaneErrorPanel error={error} title="Cannot load the inbox" />}
      {value === undefined && error === undefined && <Typography>Loading the inbox…</Typography>}
      {value !== undefined && pending.length === 0 && (
        <Typography data-testid="inbox-empty">Nothing waits for a decision.</Typography>
      )}
      {pending.map(r => (
        <PendingRequest key={r.name} request={r} onDecided={d => setDecided(list => [d, ...list])} />
      ))}
    </Box>
  );
}
