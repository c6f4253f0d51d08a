import { act, screen, waitFor } from '@testing-library/react';
import userEventLib from '@testing-library/user-event';
import { apiError, FakeGpuplaneApi, fits, teamA } from '../__testUtils__/fakes';
import { renderWithApi } from '../__testUtils__/render';
import { RequestForm } from './RequestForm';

const idField = () => screen.getByLabelText(/Virtual cluster id/);
// No artificial delay between keystrokes: MUI inputs in jsdom are slow enough.
const userEvent = userEventLib.setup({ delay: null });

jest.setTimeout(20_000);

describe('RequestForm', () => {
  it('checks the fit as the user types, once per pause, with the typed amounts in API units', async () => {
    const api = new FakeGpuplaneApi();
    renderWithApi(<RequestForm teamId="team-a" team={teamA} fitDebounceMs={400} />, api);
    expect(screen.getByText('The fit check runs as you type.')).toBeInTheDocument();

    await userEvent.type(idField(), 'ml-dev');
    const cpu = screen.getByLabelText('CPU cores');
    await userEvent.clear(cpu);
    await userEvent.type(cpu, '16');
    const memory = screen.getByLabelText('Memory (GiB)');
    await userEvent.clear(memory);
    await userEvent.type(memory, '64');

    expect(await screen.findByTestId('fit-result')).toHaveTextContent('Fits');
    // 12 keystrokes and clears, typed faster than the debounce: a few
    // checks, not one per key.
    const checks = api.calls.checkFit ?? [];
    expect(checks.length).toBeGreaterThanOrEqual(1);
    expect(checks.length).toBeLessThan(6);
    expect(checks[checks.length - 1][0]).toEqual({
      team: 'team-a',
      virtualClusterId: 'ml-dev',
      displayName: '',
      gpu: '1',
      cpuMillis: 16000,
      memoryBytes: 64 * 1024 ** 3,
      allowFractionalGpus: false,
      justification: '',
    });
  });

  it('shows where an ask does not fit', async () => {
    const api = new FakeGpuplaneApi();
    api.fit = async () =>
      fits([
        { level: 'team', name: 'teams/team-a', resource: 'gpu', requested: '7 GPU', free: '4 GPU', message: 'does not fit in team teams/team-a: 4 GPU free, 7 GPU requested (gpu)' },
      ]);
    renderWithApi(<RequestForm teamId="team-a" team={teamA} fitDebounceMs={10} />, api);
    await userEvent.type(idField(), 'big');
    const fit = await screen.findByTestId('fit-result');
    expect(fit).toHaveTextContent('Does not fit right now');
    expect(fit).toHaveTextContent('4 GPU free, 7 GPU requested');
  });

  it('puts the fit check’s field violations under touched fields only', async () => {
    const api = new FakeGpuplaneApi();
    api.fit = async () => {
      throw apiError(400, 3, 'invalid request', 'INVALID_FIELD', [
        { field: 'request.create_virtual_cluster.virtual_cluster_id', description: 'must be a DNS-1123 label' },
        { field: 'request.justification', description: 'must be at most 4096 characters' },
      ]);
    };
    renderWithApi(<RequestForm teamId="team-a" team={teamA} fitDebounceMs={10} />, api);
    await userEvent.type(idField(), 'Bad_Id');
    expect(await screen.findByText('must be a DNS-1123 label')).toBeInTheDocument();
    expect(idField()).toHaveAttribute('aria-invalid', 'true');
    // justification was not touched: its violation waits for submit.
    expect(screen.queryByText('must be at most 4096 characters')).not.toBeInTheDocument();
    expect(await screen.findByTestId('gpuplane-error')).toHaveTextContent('INVALID_FIELD');
  });

  it('on submit shows every violation on its field, unknown ones in the error panel, with the reason', async () => {
    const api = new FakeGpuplaneApi();
    api.fit = async () => fits();
    api.create = async () => {
      throw apiError(400, 3, 'invalid request', 'INVALID_FIELD', [
        { field: 'request.create_virtual_cluster.spec.quota.gpu', description: 'a fractional GPU quota (0.5) needs allow_fractional_gpus' },
        // The JSON-style path the cleaned-up API will send maps the same way.
        { field: 'createVirtualCluster.spec.quota.cpuMillis', description: 'must be positive' },
        { field: 'request.justification', description: 'too long' },
        { field: 'request.something_new', description: 'a rule the form does not know' },
      ]);
    };
    renderWithApi(<RequestForm teamId="team-a" team={teamA} fitDebounceMs={10} />, api);
    await userEvent.type(idField(), 'ml-dev');
    await userEvent.click(screen.getByRole('button', { name: 'Request virtual cluster' }));

    expect(await screen.findByText('a fractional GPU quota (0.5) needs allow_fractional_gpus')).toBeInTheDocument();
    expect(screen.getByLabelText('GPUs', { exact: true })).toHaveAttribute('aria-invalid', 'true');
    expect(screen.getByLabelText('CPU cores')).toHaveAttribute('aria-invalid', 'true');
    expect(screen.getByLabelText('Justification')).toHaveAttribute('aria-invalid', 'true');
    const panel = screen.getAllByTestId('gpuplane-error').find(e => e.textContent?.includes('The request was not created'));
    expect(panel).toHaveTextContent('INVALID_FIELD');
    expect(panel).toHaveTextContent('request.something_new: a rule the form does not know');
    expect(panel).not.toHaveTextContent('too long');
    expect(panel).toHaveTextContent('request id req-1');
  });

  it('retries with the same idempotency key and takes a new one after success', async () => {
    const api = new FakeGpuplaneApi();
    let first = true;
    const create = api.create;
    api.create = async (ask, requestId) => {
      if (first) {
        first = false;
        throw apiError(503, 14, 'cannot reach gpuplane', 'UNREACHABLE');
      }
      return create(ask, requestId);
    };
    renderWithApi(<RequestForm teamId="team-a" team={teamA} fitDebounceMs={10} />, api);
    await userEvent.type(idField(), 'ml-dev');
    const submit = screen.getByRole('button', { name: 'Request virtual cluster' });
    await userEvent.click(submit);
    expect(await screen.findByText('UNREACHABLE')).toBeInTheDocument();
    await userEvent.click(submit);
    expect(await screen.findByTestId('request-created')).toHaveTextContent('requests/r1');
    expect(screen.getByTestId('request-created')).toHaveTextContent('PENDING');
    await userEvent.type(idField(), 'ml-two');
    await userEvent.click(submit);
    await waitFor(() => expect(api.calls.requestVirtualCluster).toHaveLength(3));
    const keys = api.calls.requestVirtualCluster.map(c => c[1]);
    expect(keys[0]).toBe(keys[1]);
    expect(keys[2]).not.toBe(keys[1]);
    await act(async () => {});
  });

  it('whole GPUs only for a DEDICATED team: no fractional checkbox', async () => {
    const api = new FakeGpuplaneApi();
    renderWithApi(<RequestForm teamId="team-b" team={{ ...teamA, name: 'teams/team-b', isolationTier: 'DEDICATED' }} />, api);
    expect(await screen.findByRole('checkbox')).toBeDisabled();
    expect(screen.getByText('whole GPUs (DEDICATED team)')).toBeInTheDocument();
  });
});
