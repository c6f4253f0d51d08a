import Typography from '@material-ui/core/Typography';
import { useEntity } from '@backstage/plugin-catalog-react';
import { GPUPLANE_TEAM_ANNOTATION, gpuplaneTeamOf } from '../annotations';
import { GpuplaneContent } from './GpuplaneContent';

/** Entity tab of a Group annotated `gpuplane.io/team: <team id>`. */
export function EntityGpuplaneContent() {
  const { entity } = useEntity();
  const team = gpuplaneTeamOf(entity);
  if (!team) {
    return (
      <Typography>
        Annotate this group with <code>{GPUPLANE_TEAM_ANNOTATION}: &lt;team id&gt;</code> to see its
        gpuplane virtual clusters.
      </Typography>
    );
  }
  return <GpuplaneContent teamId={team} />;
}
