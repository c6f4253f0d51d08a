import { FakeGpuplaneApi } from '../__testUtils__/fakes';
import type { StatusSource } from './StatusSource';
import { WatchStatusSource, type WatchResponse } from './WatchStatusSource';

/** A scripted stream: push lines, end it. */
class Stream {
  private queue: string[] = [];
  private wake?: () => void;
  private ended = false;
  push(...lines: object[]) {
    this.queue.push(...lines.map(l => JSON.stringify(l)));
    this.wake?.();
  }
  end() {
    this.ended = true;
    this.wake?.();
  }
  async *lines() {
    for (;;) {
      while (this.queue.length) yield this.queue.shift()!;
      if (this.ended) return;
      await new Promise<void>(r => (this.wake = r));
    }
  }
}

const flush = () => new Promise(r => setTimeout(r, 0));

describe('WatchStatusSource', () => {
  it('loads when synced and on each change, resumes a dropped stream from its position, never polls', async () => {
    const api = new FakeGpuplaneApi();
    let loads = 0;
    const list = api.listVirtualClusters.bind(api);
    api.listVirtualClusters = async (team: string) => {
      loads++;
      return list(team);
    };
    const opened: string[] = [];
    const streams: Stream[] = [];
    const open = async (path: string): Promise<WatchResponse> => {
      opened.push(path);
      const s = new Stream();
      streams.push(s);
      return { status: 200, lines: s.lines() };
    };
    const fallback: StatusSource = { watchVirtualClusters: jest.fn(), watchRequests: jest.fn() };
    const next = jest.fn();
    const stop = new WatchStatusSource(api, open, fallback, 1).watchVirtualClusters('team-a', { next, error: jest.fn() });
    await flush();
    streams[0].push({ result: { kind: 'EXISTING' } }, { result: { kind: 'SYNCED', position: '7' } });
    await flush();
    await flush();
    expect(loads).toBe(1);
    expect(next).toHaveBeenCalledTimes(1);
    streams[0].push({ result: { kind: 'CHANGED', position: '9' } });
    await flush();
    await flush();
    expect(loads).toBe(2);
    streams[0].push({ result: { kind: 'HEARTBEAT', position: '12' } });
    await flush();
    expect(loads).toBe(2);
    streams[0].end();
    await new Promise(r => setTimeout(r, 20));
    expect(opened).toEqual(['/v1/teams/team-a/virtualClusters:watch', '/v1/teams/team-a/virtualClusters:watch?resumePosition=12']);
    stop();
    expect(fallback.watchVirtualClusters).not.toHaveBeenCalled();
  });

  it('falls back to polling when the server has no watches', async () => {
    const api = new FakeGpuplaneApi();
    const unsub = jest.fn();
    const fallback: StatusSource = { watchVirtualClusters: jest.fn(() => unsub), watchRequests: jest.fn(() => unsub) };
    const open = async (): Promise<WatchResponse> => ({ status: 404, lines: [] as unknown as AsyncIterable<string> });
    const stop = new WatchStatusSource(api, open, fallback).watchRequests({ filter: 'state = PENDING' }, { next: jest.fn(), error: jest.fn() });
    await flush();
    expect(fallback.watchRequests).toHaveBeenCalledWith({ filter: 'state = PENDING' }, expect.anything());
    stop();
    expect(unsub).toHaveBeenCalled();
  });
});
