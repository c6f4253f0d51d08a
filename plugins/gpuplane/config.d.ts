export interface Config {
  gpuplane: {
    /**
     * Where gpuplane's REST API is served, e.g. https://gpuplane.example.com.
     * The browser calls it directly, so gpuplane must list this Backstage
     * app's origin in --cors-allowed-origins.
     * @visibility frontend
     */
    baseUrl: string;
    /**
     * How status stays live: "watch" (default) follows gpuplane's Watch
     * streams and reloads on each change; "poll" refreshes every
     * pollIntervalSeconds (also the fallback for servers without watches).
     * @visibility frontend
     */
    liveStatus?: 'watch' | 'poll';
    /**
     * Seconds between status refreshes of virtual clusters and requests
     * when polling (default 3).
     * @visibility frontend
     */
    pollIntervalSeconds?: number;
    auth?: {
      /**
       * The Backstage auth provider whose ID token is sent to gpuplane
       * (default "oidc"). It must be issued by the identity provider gpuplane
       * trusts (--oidc-issuer-url), for gpuplane's client id.
       * @visibility frontend
       */
      provider?: string;
      /**
       * Scopes asked of that provider (default openid, profile, email,
       * offline_access). Add the one your identity provider needs to put
       * groups into the ID token, if any (e.g. "groups").
       * @visibility frontend
       */
      scopes?: string[];
    };
    /**
     * Only for the plugin's own dev app (plugins/gpuplane/dev): sign in in
     * the browser with authorization code + PKCE against this issuer, without
     * a Backstage backend. Real apps use Backstage's auth backend instead.
     */
    devAuth?: {
      /** @visibility frontend */
      issuerUrl: string;
      /** @visibility frontend */
      clientId: string;
    };
  };
}
