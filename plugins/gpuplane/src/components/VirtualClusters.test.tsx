import { screen, within } from '@testing-library/react';
import userEventLib from '@testing-library/user-event';
import { aCondition, aVirtualCluster, FakeGpuplaneApi, teamA } from '../__testUtils__/fakes';
import { renderWithApi } from '../__testUtils__/render';
import { VirtualClusters } from './VirtualClusters';

const userEvent = userEventLib.setup({ delay: null });
const GI = 1024 ** 3;

describe('VirtualClusters', () => {
  it('shows phase, conditions and quota against allocation, also when an allocation omits zeros', async () => {
    const api = new FakeGpuplaneApi();
    api.clusters = [
      aVirtualCluster({
        name: 'teams/team-a/virtualClusters/ml-dev',
        spec: { quota: { gpu: '2', cpuMillis: '16000', memoryBytes: String(64 * GI) } },
        status: {
          phase: 'READY',
          // The API emits zeros now; an older server omitted them, and the
          // bars must still read 0 rather than break.
          allocated: { gpu: '1.5' },
          conditions: [
            aCondition({ type: 'QueuesReady', status: 'TRUE' }),
            aCondition({ type: 'ControlPlaneReady', status: 'FALSE', reason: 'NotReady', message: '0/1 replicas' }),
          ],
        },
      }),
      aVirtualCluster({
        name: 'teams/team-a/virtualClusters/notebook',
        spec: { quota: { gpu: '0.5', cpuMillis: '4000', memoryBytes: String(16 * GI) } },
        status: { phase: 'PROVISIONING' },
      }),
    ];
    renderWithApi(<VirtualClusters teamId="team-a" team={teamA} />, api);

    const ml = await screen.findByTestId('vc-ml-dev');
    expect(within(ml).getByTestId('phase')).toHaveTextContent('READY');
    expect(within(ml).getByTestId('condition-QueuesReady')).toHaveTextContent('QueuesReady ✓');
    expect(within(ml).getByTestId('condition-ControlPlaneReady')).toHaveTextContent('ControlPlaneReady ✗');
    expect(ml).toHaveTextContent('GPU: 1.5 GPU allocated of 2 GPU');
    expect(ml).toHaveTextContent('CPU: 0 CPU allocated of 16 CPU');
    expect(ml).toHaveTextContent('Memory: 0 GiB allocated of 64 GiB');
    expect(within(ml).getByRole('button', { name: 'Kubeconfig' })).toBeEnabled();

    const nb = screen.getByTestId('vc-notebook');
    expect(within(nb).getByTestId('phase')).toHaveTextContent('PROVISIONING');
    expect(nb).toHaveTextContent('none yet');
    expect(within(nb).getByRole('button', { name: 'Kubeconfig' })).toBeDisabled();

    const summary = screen.getByTestId('team-summary');
    expect(summary).toHaveTextContent('Team quota 4 GPU · 32 CPU · 256 GiB; 2 live virtual cluster(s)');
    expect(summary).toHaveTextContent('GPU: 2.5 GPU assigned of 4 GPU');
    expect(summary).toHaveTextContent('GPU: 1.5 GPU allocated of 4 GPU');
    expect(summary).toHaveTextContent('Memory: 80 GiB assigned of 256 GiB');
  });

  it('opens the kubeconfig dialog with gpuplanectl instructions', async () => {
    const api = new FakeGpuplaneApi();
    api.clusters = [aVirtualCluster({ name: 'teams/team-a/virtualClusters/ml-dev', status: { phase: 'READY' } })];
    renderWithApi(<VirtualClusters teamId="team-a" team={teamA} />, api);
    await userEvent.click(await screen.findByRole('button', { name: 'Kubeconfig' }));
    const dialog = await screen.findByRole('dialog');
    expect(within(dialog).getByTestId('gpuplanectl-instructions')).toHaveTextContent('gpuplanectl kubeconfig ml-dev --merge');
    expect(await within(dialog).findByText('https://ml-dev.vc-ml-dev.svc')).toBeInTheDocument();
    expect(within(dialog).getByRole('button', { name: 'Download ml-dev.kubeconfig' })).toBeEnabled();
    expect(api.calls.getKubeconfig).toEqual([['team-a', 'ml-dev']]);
  });

  it('says when a team has no virtual clusters yet', async () => {
    renderWithApi(<VirtualClusters teamId="team-a" team={teamA} />, new FakeGpuplaneApi());
    expect(await screen.findByTestId('no-clusters')).toBeInTheDocument();
  });
});
