import Box from '@material-ui/core/Box';
import Chip from '@material-ui/core/Chip';
import MenuItem from '@material-ui/core/MenuItem';
import Tab from '@material-ui/core/Tab';
import Tabs from '@material-ui/core/Tabs';
import TextField from '@material-ui/core/TextField';
import Typography from '@material-ui/core/Typography';
import { useApi } from '@backstage/core-plugin-api';
import { useSearchParams } from 'react-router-dom';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import { idOf, isApprover, type CurrentUser } from '../api/types';
import { ApprovalInbox } from './ApprovalInbox';
import { AuditTrail } from './AuditTrail';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { RequestForm } from './RequestForm';
import { RequestHistory } from './RequestHistory';
import { VirtualClusters } from './VirtualClusters';
import { useCurrentUser, useLoad } from './hooks';

const tabs = ['clusters', 'request', 'inbox', 'history', 'audit'] as const;
type TabId = (typeof tabs)[number];
const tabLabels: Record<TabId, string> = {
  clusters: 'Virtual clusters',
  request: 'New request',
  inbox: 'Approval inbox',
  history: 'Request history',
  audit: 'Audit trail',
};

function WhoAmI(props: { user?: CurrentUser }) {
  const u = props.user;
  if (!u) return null;
  return (
    <Box display="flex" alignItems="center" style={{ gap: 8 }} data-testid="whoami">
      <Typography variant="body2">
        Signed in to gpuplane as <strong>{u.username || u.subject}</strong>
      </Typography>
      {u.platformAdmin && <Chip size="small" label="platform admin" />}
      {(u.adminOfDepartments ?? []).map(d => (
        <Chip key={d} size="small" label={`admin of ${d}`} />
      ))}
      {(u.teamRoles ?? []).map(r => (
        <Chip key={r.team} size="small" variant="outlined" label={`${idOf(r.team)}: ${r.role}`} />
      ))}
    </Box>
  );
}

/**
 * The plugin's content: a team's virtual clusters, the request form, the
 * approval inbox (admins), request history and audit trail. With `teamId`
 * the team is fixed (the entity tab); otherwise the user picks one of the
 * teams gpuplane lets them read. Tab and team live in the URL (?tab=, ?team=).
 */
export function GpuplaneContent(props: { teamId?: string }) {
  const api = useApi(gpuplaneApiRef);
  const [params, setParams] = useSearchParams();
  const user = useCurrentUser();
  const teams = useLoad(() => (props.teamId ? Promise.resolve([]) : api.listTeams()), [api, props.teamId]);
  const teamIds = props.teamId ? [props.teamId] : (teams.value ?? []).map(t => idOf(t.name));
  const teamId = props.teamId ?? (params.get('team') || teamIds[0]);
  const team = useLoad(() => (teamId ? api.getTeam(teamId) : Promise.resolve(undefined)), [api, teamId]);

  const approver = isApprover(user.value);
  const visible = tabs.filter(t => t !== 'inbox' || approver);
  const requested = params.get('tab') as TabId | null;
  const tab: TabId = requested && visible.includes(requested) ? requested : 'clusters';
  const update = (key: string, value: string) => {
    const next = new URLSearchParams(params);
    next.set(key, value);
    setParams(next, { replace: true });
  };

  if (user.error !== undefined) {
    return <GpuplaneErrorPanel error={user.error} title="Cannot reach gpuplane as you" />;
  }
  return (
    <Box>
      <Box display="flex" alignItems="center" justifyContent="space-between" flexWrap="wrap" mb={1} style={{ gap: 16 }}>
        <WhoAmI user={user.value} />
        {!props.teamId && teamIds.length > 0 && (
          <TextField
            select
            size="small"
            variant="outlined"
            label="Team"
            value={teamId ?? ''}
            onChange={e => update('team', e.target.value)}
            style={{ minWidth: 200 }}
            SelectProps={{ SelectDisplayProps: { 'data-testid': 'team-select' } as object }}
          >
            {teamIds.map(id => (
              <MenuItem key={id} value={id}>
                {id}
              </MenuItem>
            ))}
          </TextField>
        )}
      </Box>
      {teams.error !== undefined && <GpuplaneErrorPanel error={teams.error} title="Cannot list teams" />}
      {team.error !== undefined && <GpuplaneErrorPanel error={team.error} title={`Cannot read team ${teamId}`} />}
      <Tabs value={tab} onChange={(_, v) => update('tab', v)} indicatorColor="primary" textColor="primary">
        {visible.map(t => (
          <Tab key={t} value={t} label={tabLabels[t]} />
        ))}
      </Tabs>
      <Box mt={2}>
        {tab === 'inbox' && <ApprovalInbox />}
        {tab !== 'inbox' && !teamId && !teams.loading && (
          <Typography>gpuplane shows you no team: ask a team owner to add you.</Typography>
        )}
        {tab === 'clusters' && teamId && <VirtualClusters teamId={teamId} team={team.value} />}
        {tab === 'request' && teamId && (
          <RequestForm key={teamId} teamId={teamId} team={team.value} />
        )}
        {tab === 'history' && teamId && <RequestHistory teamId={teamId} />}
        {tab === 'audit' && teamId && <AuditTrail teamId={teamId} />}
      </Box>
    </Box>
  );
}
