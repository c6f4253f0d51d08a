import { screen, within } from '@testing-library/react';
import userEventLib from '@testing-library/user-event';
import { aRequest, aSpec, apiError, FakeGpuplaneApi, fits } from '../__testUtils__/fakes';
import { renderWithApi } from '../__testUtils__/render';
import { ApprovalInbox } from './ApprovalInbox';

const userEvent = userEventLib.setup({ delay: null });
jest.setTimeout(20_000);

const pending = aRequest({
  name: 'requests/r7',
  etag: 'W/"3"',
  state: 'PENDING',
  team: 'teams/team-a',
  department: 'departments/research',
  requester: 'user-bob',
  justification: 'vision model fine-tuning',
  createVirtualCluster: {
    virtualClusterId: 'ml-dev',
    virtualCluster: 'teams/team-a/virtualClusters/ml-dev',
    spec: aSpec({ quota: { gpu: '2', cpuMillis: '16000', memoryBytes: String(64 * 1024 ** 3) } }),
  },
});

describe('ApprovalInbox', () => {
  it('lists pending requests with their fit, and approves with the reason and etag', async () => {
    const api = new FakeGpuplaneApi();
    api.requests = [pending];
    renderWithApi(<ApprovalInbox />, api);

    const card = await screen.findByTestId('pending-r7');
    expect(card).toHaveTextContent('teams/team-a asks for new virtual cluster ml-dev: 2 GPU · 16 CPU · 64 GiB');
    expect(card).toHaveTextContent('“vision model fine-tuning”');
    expect(await within(card).findByTestId('fit-result')).toHaveTextContent('Fits');
    expect(api.calls.listRequests[0][0]).toEqual({ filter: 'state = PENDING', pageSize: 100 });
    expect(api.calls.checkStoredFit[0]).toEqual(['requests/r7']);

    await userEvent.type(within(card).getByRole('textbox'), 'ok for Q4');
    await userEvent.click(within(card).getByRole('button', { name: 'Approve' }));

    expect(await screen.findByTestId('decided-r7')).toHaveTextContent('is APPROVED: ok for Q4');
    expect(api.calls.approveRequest).toEqual([['requests/r7', 'ok for Q4', 'W/"3"']]);
    expect(screen.queryByTestId('pending-r7')).not.toBeInTheDocument();
  });

  it('rejects too', async () => {
    const api = new FakeGpuplaneApi();
    api.requests = [pending];
    renderWithApi(<ApprovalInbox />, api);
    const card = await screen.findByTestId('pending-r7');
    await userEvent.type(within(card).getByRole('textbox'), 'use the shared pool');
    await userEvent.click(within(card).getByRole('button', { name: 'Reject' }));
    expect(await screen.findByTestId('decided-r7')).toHaveTextContent('is REJECTED: use the shared pool');
    expect(api.calls.rejectRequest).toEqual([['requests/r7', 'use the shared pool', 'W/"3"']]);
  });

  it('shows why a decision failed, with its reason, and keeps the request', async () => {
    const api = new FakeGpuplaneApi();
    api.requests = [pending];
    api.storedFit = fits([
      { level: 'department', name: 'departments/research', resource: 'gpu', message: 'does not fit in department departments/research: 1 GPU free, 2 GPU requested (gpu)' },
    ]);
    api.decide = async () => {
      throw apiError(400, 9, 'does not fit in department departments/research: 1 GPU free, 2 GPU requested (gpu)', 'QUOTA_EXCEEDED');
    };
    renderWithApi(<ApprovalInbox />, api);
    const card = await screen.findByTestId('pending-r7');
    expect(await within(card).findByTestId('fit-result')).toHaveTextContent('Does not fit right now');
    await userEvent.click(within(card).getByRole('button', { name: 'Approve' }));
    const error = await within(card).findByTestId('gpuplane-error');
    expect(error).toHaveTextContent('The decision was not recorded');
    expect(error).toHaveTextContent('QUOTA_EXCEEDED');
    expect(error).toHaveTextContent('FAILED_PRECONDITION');
    expect(screen.getByTestId('pending-r7')).toBeInTheDocument();
  });

  it('says when nothing waits', async () => {
    renderWithApi(<ApprovalInbox />, new FakeGpuplaneApi());
    expect(await screen.findByTestId('inbox-empty')).toBeInTheDocument();
  });
});
