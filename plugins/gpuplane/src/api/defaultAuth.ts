import { OAuth2 } from '@backstage/core-app-api';
import type {
  ConfigApi,
  DiscoveryApi,
  OAuthRequestApi,
  OpenIdConnectApi,
} from '@backstage/core-plugin-api';

// What gpuplane reads from the ID token: the username claim (email by
// default) and, where the identity provider needs a scope for it, groups.
const defaultScopes = ['openid', 'profile', 'email', 'offline_access'];

/**
 * The default gpuplaneAuthApiRef: an OAuth2 client of the Backstage auth
 * backend's OIDC provider (`auth.providers.oidc` in app-config, or the
 * provider named by `gpuplane.auth.provider`). getIdToken() returns the
 * signed-in user's own ID token from the same identity provider gpuplane
 * trusts. Apps that already have an OIDC auth API can bind it instead.
 */
export function createDefaultGpuplaneAuth(deps: {
  configApi: ConfigApi;
  discoveryApi: DiscoveryApi;
  oauthRequestApi: OAuthRequestApi;
}): OpenIdConnectApi {
  const { configApi, discoveryApi, oauthRequestApi } = deps;
  const provider = configApi.getOptionalString('gpuplane.auth.provider') ?? 'oidc';
  return OAuth2.create({
    configApi,
    discoveryApi,
    oauthRequestApi,
    provider: { id: provider, title: 'gpuplane (OIDC)', icon: () => null },
    environment: configApi.getOptionalString('auth.environment'),
    defaultScopes: configApi.getOptionalStringArray('gpuplane.auth.scopes') ?? defaultScopes,
  });
}
