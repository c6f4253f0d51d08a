import { GpuplaneClient } from './GpuplaneClient';
import { normalizeFieldPath, askFieldPaths } from './types';

function recorder(answers: Array<unknown>) {
  const seen: Array<{ method: string; url: string; auth: string | null; body?: unknown }> = [];
  const fetch = async (req: Request) => {
    const text = req.method === 'GET' ? '' : await req.text();
    seen.push({ method: req.method, url: req.url, auth: req.headers.get('Authorization'), body: text ? JSON.parse(text) : undefined });
    return new Response(JSON.stringify(answers.shift() ?? {}), { status: 200, headers: { 'Content-Type': 'application/json' } });
  };
  return { seen, fetch };
}

describe('GpuplaneClient', () => {
  it('calls gpuplane with the signed-in user’s ID token, fetched per call', async () => {
    const { seen, fetch } = recorder([{ username: 'bob@example.com' }, { username: 'bob@example.com' }]);
    let n = 0;
    const client = new GpuplaneClient({ baseUrl: 'http://gpuplane.test', auth: { getIdToken: async () => `id-token-${++n}` }, fetch });
    await client.getCurrentUser();
    await client.getCurrentUser();
    expect(seen.map(s => s.auth)).toEqual(['Bearer id-token-1', 'Bearer id-token-2']);
  });

  it('sends bare ids in paths and the API’s request shapes', async () => {
    const { seen, fetch } = recorder([]);
    const client = new GpuplaneClient({ baseUrl: 'http://gpuplane.test', auth: { getIdToken: async () => 't' }, fetch });
    await client.approveRequest('requests/r7', 'ok', 'W/"3"');
    await client.checkStoredFit('requests/r7');
    await client.getKubeconfig('team-a', 'ml-dev');
    await client.requestVirtualCluster(
      { team: 'team-a', virtualClusterId: 'ml-dev', gpu: '0.5', cpuMillis: 4000, memoryBytes: 1024, allowFractionalGpus: true, justification: 'j' },
      'key-1',
    );
    expect(seen.map(s => `${s.method} ${s.url}`)).toEqual([
      'POST http://gpuplane.test/v1/requests/r7:approve',
      'POST http://gpuplane.test/v1/requests/r7:checkFit',
      'GET http://gpuplane.test/v1/teams/team-a/virtualClusters/ml-dev:kubeconfig',
      'POST http://gpuplane.test/v1/requests?requestId=key-1',
    ]);
    expect(seen[0].body).toEqual({ reason: 'ok', etag: 'W/"3"' });
    expect(seen[3].body).toEqual({
      team: 'teams/team-a',
      justification: 'j',
      createVirtualCluster: {
        virtualClusterId: 'ml-dev',
        spec: { allowFractionalGpus: true, quota: { gpu: '0.5', cpuMillis: '4000', memoryBytes: '1024' } },
      },
    });
  });

  it('follows page tokens when listing teams', async () => {
    const { seen, fetch } = recorder([
      { teams: [{ name: 'teams/a' }], nextPageToken: 'p2' },
      { teams: [{ name: 'teams/b' }] },
    ]);
    const client = new GpuplaneClient({ baseUrl: 'http://gpuplane.test', auth: { getIdToken: async () => 't' }, fetch });
    expect((await client.listTeams()).map(t => t.name)).toEqual(['teams/a', 'teams/b']);
    expect(seen[1].url).toContain('pageToken=p2');
  });
});

describe('field paths', () => {
  it('maps proto-style and JSON-style violation paths to the same form field', () => {
    for (const path of [
      'request.create_virtual_cluster.spec.quota.memory_bytes',
      'createVirtualCluster.spec.quota.memoryBytes',
      'request.createVirtualCluster.spec.quota.memoryBytes',
    ]) {
      expect(askFieldPaths[normalizeFieldPath(path)]).toBe('memory');
    }
    expect(askFieldPaths[normalizeFieldPath('request.create_virtual_cluster.virtual_cluster_id')]).toBe('virtualClusterId');
  });
});
