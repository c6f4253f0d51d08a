import createClient, { type Client, type Middleware } from 'openapi-fetch';
import type { paths } from './generated/schema';
import { GpuplaneError } from './errors';

/** Options of {@link createGpuplaneClient}. */
export interface GpuplaneClientOptions {
  /** Where the REST API is served, e.g. "https://gpuplane.example.com". */
  baseUrl: string;
  /**
   * Returns the bearer token for one call: the caller's own OIDC ID token.
   * Called before every request, so a refreshed token is always used; return
   * undefined to send no Authorization header.
   */
  getToken?: () => string | undefined | Promise<string | undefined>;
  /** fetch to use (tests, Backstage's FetchApi); default: globalThis.fetch. */
  fetch?: (input: Request) => Promise<Response>;
  /** Extra headers for every call. */
  headers?: Record<string, string>;
}

/** The typed fetch client: `client.GET('/v1/teams', {...})`. */
export type GpuplaneFetchClient = Client<paths>;

/**
 * A typed client of the gpuplane REST API. Calls return openapi-fetch's
 * `{data, error, response}`; pass them to {@link unwrap} to get the data or
 * a thrown {@link GpuplaneError}. A call that never reaches the server
 * rejects with a GpuplaneError of reason UNREACHABLE.
 */
export function createGpuplaneClient(options: GpuplaneClientOptions): GpuplaneFetchClient {
  const baseUrl = options.baseUrl.replace(/\/+$/, '');
  if (!/^https?:\/\//.test(baseUrl)) {
    throw new TypeError(`gpuplane baseUrl must be an http(s) URL, got "${options.baseUrl}"`);
  }
  const doFetch = options.fetch ?? ((input: Request) => globalThis.fetch(input));
  const client = createClient<paths>({
    baseUrl,
    headers: options.headers,
    fetch: async (input: Request) => {
      try {
        return await doFetch(input);
      } catch (e) {
        throw GpuplaneError.unreachable(baseUrl, e);
      }
    },
  });
  const auth: Middleware = {
    async onRequest({ request }) {
      const token = await options.getToken?.();
      if (token) {
        request.headers.set('Authorization', `Bearer ${token}`);
      }
      return request;
    },
  };
  client.use(auth);
  return client;
}

type Answer = { data?: unknown; error?: unknown; response: Response };

/**
 * The data of a successful call, or a thrown GpuplaneError carrying the
 * google.rpc.Status (code, message, ErrorInfo reason, field violations).
 */
export async function unwrap<A extends Answer>(call: Promise<A>): Promise<NonNullable<A['data']>> {
  const { data, error, response } = await call;
  if (!response.ok || error !== undefined) {
    throw GpuplaneError.fromResponse(response, error);
  }
  return data as NonNullable<A['data']>;
}
