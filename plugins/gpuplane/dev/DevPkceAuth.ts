import type {
  AuthRequestOptions,
  ConfigApi,
  OpenIdConnectApi,
} from '@backstage/core-plugin-api';

// The dev app has no Backstage backend, so it signs the user in itself: the
// OAuth 2.0 authorization code flow with PKCE (RFC 7636) in the browser,
// against gpuplane's dev OIDC issuer (`make run`, client "gpuplane", any
// loopback redirect URI ending in /callback). In a real Backstage app the
// auth backend's OIDC provider does this instead (see README).
//
// The ID token is not verified here: gpuplane verifies issuer, audience,
// expiry and signature of every token it receives.

const PENDING_KEY = 'gpuplane-dev-auth:pending';
const TOKEN_KEY = 'gpuplane-dev-auth:token';
export const CALLBACK_PATH = '/callback';

interface Pending {
  state: string;
  nonce: string;
  verifier: string;
  tokenEndpoint: string;
  clientId: string;
  redirectUri: string;
  returnTo: string;
}

interface StoredToken {
  idToken: string;
  expiresAt: number;
  username?: string;
}

function randomString(bytes = 32): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return base64url(b);
}

function base64url(bytes: Uint8Array): string {
  let s = '';
  bytes.forEach(b => {
    s += String.fromCharCode(b);
  });
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function jwtClaims(jwt: string): Record<string, unknown> {
  const payload = jwt.split('.')[1] ?? '';
  const json = atob(payload.replace(/-/g, '+').replace(/_/g, '/'));
  return JSON.parse(json);
}

function readToken(): StoredToken | undefined {
  try {
    return JSON.parse(sessionStorage.getItem(TOKEN_KEY) ?? 'null') ?? undefined;
  } catch {
    return undefined;
  }
}

let redirecting = false;

export class DevPkceAuth implements OpenIdConnectApi {
  constructor(
    private readonly options: { issuerUrl: string; clientId: string; redirectUri: string },
  ) {}

  static fromConfig(config: ConfigApi): DevPkceAuth {
    return new DevPkceAuth({
      issuerUrl: config.getString('gpuplane.devAuth.issuerUrl').replace(/\/+$/, ''),
      clientId: config.getString('gpuplane.devAuth.clientId'),
      redirectUri: `${window.location.origin}${CALLBACK_PATH}`,
    });
  }

  /** The signed-in user's ID token; starts the sign-in when there is none. */
  async getIdToken(options?: AuthRequestOptions): Promise<string> {
    const token = readToken();
    if (token && token.expiresAt - 30_000 > Date.now()) {
      return token.idToken;
    }
    if (options?.optional) {
      return '';
    }
    return this.signIn();
  }

  /** Who is signed in, from the ID token (for the dev app's banner). */
  static signedInUser(): string | undefined {
    return readToken()?.username;
  }

  static signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    window.location.assign('/');
  }

  // Sends the browser to the issuer's login page; the promise never settles
  // because the page unloads.
  private async signIn(): Promise<never> {
    if (!redirecting) {
      redirecting = true;
      const res = await fetch(`${this.options.issuerUrl}/.well-known/openid-configuration`);
      if (!res.ok) {
        redirecting = false;
        throw new Error(`dev sign-in: issuer discovery answered ${res.status}`);
      }
      const discovery = (await res.json()) as {
        authorization_endpoint: string;
        token_endpoint: string;
      };
      const verifier = randomString();
      const challenge = base64url(
        new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))),
      );
      const pending: Pending = {
        state: randomString(16),
        nonce: randomString(16),
        verifier,
        tokenEndpoint: discovery.token_endpoint,
        clientId: this.options.clientId,
        redirectUri: this.options.redirectUri,
        returnTo: window.location.pathname + window.location.search,
      };
      sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
      const url = new URL(discovery.authorization_endpoint);
      url.search = new URLSearchParams({
        response_type: 'code',
        client_id: pending.clientId,
        redirect_uri: pending.redirectUri,
        scope: 'openid profile email groups',
        state: pending.state,
        nonce: pending.nonce,
        code_challenge: challenge,
        code_challenge_method: 'S256',
      }).toString();
      window.location.assign(url.toString());
    }
    return new Promise<never>(() => {});
  }

  /**
   * On /callback: checks state, redeems the code with the PKCE verifier at
   * the token endpoint (a cross-origin POST the dev issuer allows), keeps the
   * ID token in sessionStorage and returns to the page that needed it.
   */
  static async completeSignIn(): Promise<void> {
    if (window.location.pathname !== CALLBACK_PATH) return;
    const params = new URLSearchParams(window.location.search);
    const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? 'null') as Pending | null;
    sessionStorage.removeItem(PENDING_KEY);
    if (params.get('error')) {
      throw new Error(`sign-in failed: ${params.get('error')} ${params.get('error_description') ?? ''}`);
    }
    if (!pending || params.get('state') !== pending.state) {
      throw new Error('sign-in answer does not match a sign-in started here; reload to start again');
    }
    const res = await fetch(pending.tokenEndpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: params.get('code') ?? '',
        redirect_uri: pending.redirectUri,
        client_id: pending.clientId,
        code_verifier: pending.verifier,
      }),
    });
    const body = (await res.json()) as { id_token?: string; error?: string; error_description?: string };
    if (!res.ok || !body.id_token) {
      throw new Error(`token endpoint: ${body.error ?? res.status} ${body.error_description ?? ''}`);
    }
    const claims = jwtClaims(body.id_token);
    if (claims.nonce !== pending.nonce) {
      throw new Error('ID token nonce does not match the sign-in request');
    }
    const stored: StoredToken = {
      idToken: body.id_token,
      expiresAt: Number(claims.exp) * 1000,
      username: String(claims.preferred_username ?? claims.email ?? claims.sub ?? ''),
    };
    sessionStorage.setItem(TOKEN_KEY, JSON.stringify(stored));
    window.history.replaceState(null, '', pending.returnTo || '/');
  }
}
