import { createGpuplaneClient, unwrap } from './client';
import { ErrorReason, GpuplaneError, isGpuplaneError } from './errors';

type Seen = { method: string; url: string; auth: string | null; body: string };

// A fetch that records what the client sent and answers with `answer`.
function fakeFetch(answer: () => Response) {
  const seen: Seen[] = [];
  const fetch = async (req: Request) => {
    seen.push({
      method: req.method,
      url: req.url,
      auth: req.headers.get('Authorization'),
      body: req.method === 'GET' ? '' : await req.text(),
    });
    return answer();
  };
  return { seen, fetch };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json', ...headers },
  });

describe('createGpuplaneClient', () => {
  it('sends the caller token, asked for on every call, to the base URL', async () => {
    const { seen, fetch } = fakeFetch(() => json(200, { teams: [{ name: 'teams/team-a' }] }));
    let n = 0;
    const client = createGpuplaneClient({
      baseUrl: 'https://gpuplane.example.com/',
      getToken: async () => `token-${++n}`,
      fetch,
    });
    const teams = await unwrap(client.GET('/v1/teams', { params: { query: { pageSize: 10 } } }));
    expect(teams.teams?.[0]?.name).toBe('teams/team-a');
    await unwrap(client.GET('/v1/users/me'));
    expect(seen.map(s => [s.method, s.url, s.auth])).toEqual([
      ['GET', 'https://gpuplane.example.com/v1/teams?pageSize=10', 'Bearer token-1'],
      ['GET', 'https://gpuplane.example.com/v1/users/me', 'Bearer token-2'],
    ]);
  });

  it('fills path parameters and sends JSON bodies', async () => {
    const { seen, fetch } = fakeFetch(() => json(200, { name: 'requests/r1', state: 'APPROVED' }));
    const client = createGpuplaneClient({ baseUrl: 'http://localhost:8080', fetch });
    await unwrap(
      client.POST('/v1/requests/{request}:approve', {
        params: { path: { request: 'r1' } },
        body: { reason: 'ok for Q4' },
      }),
    );
    expect(seen[0].url).toBe('http://localhost:8080/v1/requests/r1:approve');
    expect(seen[0].auth).toBeNull();
    expect(JSON.parse(seen[0].body)).toEqual({ reason: 'ok for Q4' });
  });

  it('refuses a base URL that is not http(s)', () => {
    expect(() => createGpuplaneClient({ baseUrl: 'gpuplane.example.com' })).toThrow(/http\(s\) URL/);
  });

  it('turns a google.rpc.Status into a GpuplaneError with reason and field violations', async () => {
    const status = {
      code: 3,
      message: 'invalid request',
      details: [
        {
          '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
          reason: 'INVALID_FIELD',
          domain: 'gpuplane.dev',
          metadata: { team: 'teams/team-a' },
        },
        {
          '@type': 'type.googleapis.com/google.rpc.BadRequest',
          fieldViolations: [
            {
              field: 'request.create_virtual_cluster.virtual_cluster_id',
              description: 'must be a DNS-1123 label',
            },
          ],
        },
      ],
    };
    const { fetch } = fakeFetch(() => json(400, status, { 'x-request-id': 'req-123' }));
    const client = createGpuplaneClient({ baseUrl: 'http://localhost:8080', fetch });
    const err = await unwrap(client.POST('/v1/requests', {
        body: { team: 'teams/team-a', createVirtualCluster: { virtualClusterId: 'Bad_Id', spec: { quota: { gpu: '1' } } } },
      }),
    ).catch(e => e);
    expect(isGpuplaneError(err)).toBe(true);
    const e = err as GpuplaneError;
    expect(e).toBeInstanceOf(Error);
    expect(e.message).toBe('invalid request');
    expect(e.httpStatus).toBe(400);
    expect(e.code).toBe(3);
    expect(e.codeName).toBe('INVALID_ARGUMENT');
    expect(e.reason).toBe(ErrorReason.InvalidField);
    expect(e.domain).toBe('gpuplane.dev');
    expect(e.metadata).toEqual({ team: 'teams/team-a' });
    expect(e.requestId).toBe('req-123');
    expect(e.fieldViolations).toEqual([
      {
        field: 'request.create_virtual_cluster.virtual_cluster_id',
        description: 'must be a DNS-1123 label',
      },
    ]);
  });

  it('keeps the HTTP status when the error body is not a Status', async () => {
    const { fetch } = fakeFetch(
      () => new Response('<html>bad gateway</html>', { status: 502, statusText: 'Bad Gateway' }),
    );
    const client = createGpuplaneClient({ baseUrl: 'http://localhost:8080', fetch });
    const e: GpuplaneError = await unwrap(client.GET('/v1/teams')).catch(x => x);
    expect(e.httpStatus).toBe(502);
    expect(e.message).toContain('HTTP 502 Bad Gateway');
    expect(e.reason).toBeUndefined();
    expect(e.fieldViolations).toEqual([]);
  });

  it('maps HTTP-only answers to gRPC codes', async () => {
    const { fetch } = fakeFetch(() => new Response('', { status: 404 }));
    const client = createGpuplaneClient({ baseUrl: 'http://localhost:8080', fetch });
    const e: GpuplaneError = await unwrap(client.GET('/v1/teams/{team}', { params: { path: { team: 'x' } } })).catch(
      x => x,
    );
    expect(e.codeName).toBe('NOT_FOUND');
  });

  it('reports an unreachable server with reason UNREACHABLE and a hint about CORS', async () => {
    const client = createGpuplaneClient({
      baseUrl: 'http://localhost:1',
      fetch: async () => {
        throw new TypeError('Failed to fetch');
      },
    });
    const e: GpuplaneError = await unwrap(client.GET('/v1/teams')).catch(x => x);
    expect(isGpuplaneError(e)).toBe(true);
    expect(e.reason).toBe(ErrorReason.Unreachable);
    expect(e.httpStatus).toBe(0);
    expect(e.codeName).toBe('UNAVAILABLE');
    expect(e.message).toContain('http://localhost:1');
    expect(e.message).toContain('cors-allowed-origins');
  });
});
