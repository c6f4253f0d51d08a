import { FakeGpuplaneApi } from '../__testUtils__/fakes';
import { PollingStatusSource } from './StatusSource';

describe('PollingStatusSource', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('polls after each answer, reports errors and recovers, and stops when unsubscribed', async () => {
    const api = new FakeGpuplaneApi();
    let fail = false;
    let calls = 0;
    const list = api.listVirtualClusters.bind(api);
    api.listVirtualClusters = async (team: string) => {
      calls++;
      if (fail) throw new Error('gpuplane down');
      return list(team);
    };
    const next = jest.fn();
    const error = jest.fn();
    const stop = new PollingStatusSource(api, 1000).watchVirtualClusters('team-a', { next, error });

    await jest.advanceTimersByTimeAsync(0);
    expect(next).toHaveBeenCalledTimes(1);
    fail = true;
    await jest.advanceTimersByTimeAsync(1000);
    expect(error).toHaveBeenCalledWith(new Error('gpuplane down'));
    fail = false;
    await jest.advanceTimersByTimeAsync(1000);
    expect(next).toHaveBeenCalledTimes(2);

    stop();
    await jest.advanceTimersByTimeAsync(5000);
    expect(next).toHaveBeenCalledTimes(2);
    expect(calls).toBe(3);
  });
});
