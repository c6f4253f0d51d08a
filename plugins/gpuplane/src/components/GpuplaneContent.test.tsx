import { screen } from '@testing-library/react';
import { EntityProvider } from '@backstage/plugin-catalog-react';
import { alice, apiError, FakeGpuplaneApi } from '../__testUtils__/fakes';
import { renderWithApi } from '../__testUtils__/render';
import { EntityGpuplaneContent } from './EntityGpuplaneContent';
import { GpuplaneContent } from './GpuplaneContent';

describe('GpuplaneContent', () => {
  it('shows a team owner his team without the approval inbox', async () => {
    const api = new FakeGpuplaneApi();
    renderWithApi(<GpuplaneContent />, api);
    expect(await screen.findByTestId('whoami')).toHaveTextContent('bob@example.com');
    expect(screen.getByTestId('whoami')).toHaveTextContent('team-a: OWNER');
    expect(await screen.findByTestId('team-summary')).toHaveTextContent('Team A (vision) · SHARED');
    expect(screen.getByRole('tab', { name: 'Virtual clusters' })).toBeInTheDocument();
    expect(screen.queryByRole('tab', { name: 'Approval inbox' })).not.toBeInTheDocument();
  });

  it('gives admins the inbox, opened from the URL', async () => {
    const api = new FakeGpuplaneApi();
    api.user = alice;
    renderWithApi(<GpuplaneContent />, api, ['/?tab=inbox']);
    expect(await screen.findByRole('tab', { name: 'Approval inbox', selected: true })).toBeInTheDocument();
    expect(await screen.findByTestId('inbox-empty')).toBeInTheDocument();
  });

  it('explains when gpuplane refuses the user’s token', async () => {
    const api = new FakeGpuplaneApi();
    api.userError = apiError(401, 16, 'token expired', 'UNAUTHENTICATED');
    renderWithApi(<GpuplaneContent />, api);
    const error = await screen.findByTestId('gpuplane-error');
    expect(error).toHaveTextContent('Cannot reach gpuplane as you');
    expect(error).toHaveTextContent('token expired');
    expect(error).toHaveTextContent('UNAUTHENTICATED');
  });
});

describe('EntityGpuplaneContent', () => {
  const group = (annotations?: Record<string, string>) => ({
    apiVersion: 'backstage.io/v1alpha1',
    kind: 'Group',
    metadata: { name: 'vision', annotations },
    spec: { type: 'team', children: [] },
  });

  it('shows the team named by gpuplane.io/team, with no team picker', async () => {
    const api = new FakeGpuplaneApi();
    renderWithApi(
      <EntityProvider entity={group({ 'gpuplane.io/team': 'team-a' })}>
        <EntityGpuplaneContent />
      </EntityProvider>,
      api,
    );
    expect(await screen.findByTestId('team-summary')).toHaveTextContent('Team A (vision)');
    expect(api.calls.listTeams).toBeUndefined();
    expect(api.calls.listVirtualClusters).toEqual([['team-a']]);
  });

  it('says how to annotate a group that has no team', async () => {
    renderWithApi(
      <EntityProvider entity={group()}>
        <EntityGpuplaneContent />
      </EntityProvider>,
      new FakeGpuplaneApi(),
    );
    expect(await screen.findByText(/Annotate this group with/)).toHaveTextContent('gpuplane.io/team: <team id>');
  });
});
