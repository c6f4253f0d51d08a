import { Fragment, useEffect, useState } from 'react';
import Box from '@material-ui/core/Box';
import Button from '@material-ui/core/Button';
import Table from '@material-ui/core/Table';
import TableBody from '@material-ui/core/TableBody';
import TableCell from '@material-ui/core/TableCell';
import TableHead from '@material-ui/core/TableHead';
import TableRow from '@material-ui/core/TableRow';
import Typography from '@material-ui/core/Typography';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import { teamName, type AuditEvent } from '../api/types';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { formatTime } from './requestText';

/** A team's audit events, newest first, page by page. */
export function AuditTrail(props: { teamId: string }) {
  const api = useApi(gpuplaneApiRef);
  const [events, setEvents] = useState<AuditEvent[]>([]);
  const [next, setNext] = useState<string>();
  const [error, setError] = useState<unknown>();
  const [loading, setLoading] = useState(true);
  const [open, setOpen] = useState<string>();
  const filter = `team = "${teamName(props.teamId)}"`;

  const load = async (pageToken?: string) => {
    setLoading(true);
    setError(undefined);
    try {
      const page = await api.listAuditEvents({ filter, pageSize: 25, pageToken });
      setEvents(prev => (pageToken ? [...prev, ...page.items] : page.items));
      setNext(page.nextPageToken);
    } catch (e) {
      setError(e);
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => {
    load();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [api, filter]);

  return (
    <Box>
      <Box display="flex" alignItems="center" mb={1} style={{ gap: 8 }}>
        <Typography variant="body2" color="textSecondary">
          Every change to {teamName(props.teamId)}, written in the same transaction as the change.
        </Typography>
        <Button size="small" onClick={() => load()} disabled={loading}>
          Refresh
        </Button>
      </Box>
      {error !== undefined && <GpuplaneErrorPanel error={error} title="Cannot load the audit trail" />}
      {events.length > 0 && (
        <Table size="small" aria-label="audit trail">
          <TableHead>
            <TableRow>
              <TableCell>Time</TableCell>
              <TableCell>Actor</TableCell>
              <TableCell>Action</TableCell>
              <TableCell>Resource</TableCell>
              <TableCell />
            </TableRow>
          </TableHead>
          <TableBody>
            {events.map(ev => (
              <Fragment key={ev.name}>
                <TableRow data-testid="audit-event">
                  <TableCell>{formatTime(ev.time)}</TableCell>
                  <TableCell>{ev.actor}</TableCell>
                  <TableCell>{ev.action}</TableCell>
                  <TableCell>{ev.resource}</TableCell>
                  <TableCell>
                    <Button size="small" onClick={() => setOpen(open === ev.name ? undefined : ev.name)}>
                      {open === ev.name ? 'Hide' : 'Details'}
                    </Button>
                  </TableCell>
                </TableRow>
                {open === ev.name && (
                  <TableRow>
                    <TableCell colSpan={5}>
                      <Typography variant="caption">
                        call {ev.correlationId}
                        {ev.requestId ? ` · idempotency key ${ev.requestId}` : ''}
                      </Typography>
                      <pre style={{ whiteSpace: 'pre-wrap', margin: 0 }}>
                        {JSON.stringify({ before: ev.before, after: ev.after }, null, 2)}
                      </pre>
                    </TableCell>
                  </TableRow>
                )}
              </Fragment>
            ))}
          </TableBody>
        </Table>
      )}
      {!loading && events.length === 0 && error === undefined && <Typography>No audit events.</Typography>}
      {loading && <Typography>Loading…</Typography>}
      {next && !loading && (
        <Button onClick={() => load(next)} variant="outlined" size="small" style={{ marginTop: 8 }}>
          Older events
        </Button>
      )}
    </Box>
  );
}
