import Button from '@material-ui/core/Button';
import Dialog from '@material-ui/core/Dialog';
import DialogActions from '@material-ui/core/DialogActions';
import DialogContent from '@material-ui/core/DialogContent';
import DialogTitle from '@material-ui/core/DialogTitle';
import Typography from '@material-ui/core/Typography';
import { useApi } from '@backstage/core-plugin-api';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { useLoad } from './hooks';

function download(name: string, text: string) {
  const url = URL.createObjectURL(new Blob([text], { type: 'application/yaml' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/**
 * The caller's own kubeconfig for a virtual cluster. It runs
 * `gpuplanectl credential` as kubectl's exec plugin, so the user's OIDC
 * identity reaches the virtual cluster; the dialog says how to set that up.
 */
export function KubeconfigDialog(props: {
  teamId: string;
  virtualClusterId: string;
  onClose: () => void;
}) {
  const { teamId, virtualClusterId: vc, onClose } = props;
  const api = useApi(gpuplaneApiRef);
  const { value, error, loading } = useLoad(() => api.getKubeconfig(teamId, vc), [api, teamId, vc]);
  const file = `${vc}.kubeconfig`;
  return (
    <Dialog open onClose={onClose} maxWidth="md" fullWidth aria-labelledby="kubeconfig-title">
      <DialogTitle id="kubeconfig-title">Kubeconfig for {vc}</DialogTitle>
      <DialogContent>
        {error !== undefined && <GpuplaneErrorPanel error={error} title="Cannot get the kubeconfig" />}
        <Typography variant="body2" paragraph>
          The kubeconfig presents <em>your own</em> OIDC identity to the virtual cluster through
          kubectl&apos;s exec credential plugin <code>gpuplanectl credential</code>: no shared
          certificate. Install and sign in to <code>gpuplanectl</code> once:
        </Typography>
        <pre data-testid="gpuplanectl-instructions" style={{ background: '#f5f5f5', padding: 12, overflowX: 'auto' }}>
          {[
            'go install github.com/gpuplane/gpuplane/cmd/gpuplanectl@latest   # must be on PATH',
            'gpuplanectl login',
            `gpuplanectl kubeconfig ${vc} --merge       # adds the context and switches to it`,
            '# or use the downloaded file:',
            `export KUBECONFIG=$HOME/Downloads/${file}`,
            'kubectl get namespaces',
          ].join('\n')}
        </pre>
        {value?.server && (
          <Typography variant="body2">
            API server <code>{value.server}</code>, context <code>{value.context}</code>
          </Typography>
        )}
      </DialogContent>
      <DialogActions>
        <Button onClick={onClose}>Close</Button>
        <Button
          color="primary"
          variant="contained"
          disabled={loading || !value?.kubeconfig}
          onClick={() => value?.kubeconfig && download(file, value.kubeconfig)}
        >
          Download {file}
        </Button>
      </DialogActions>
    </Dialog>
  );
}
