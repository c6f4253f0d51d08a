import { createDevApp } from '@backstage/frontend-dev-utils';
import { ApiBlueprint, PageBlueprint, configApiRef } from '@backstage/frontend-plugin-api';
import type { Entity } from '@backstage/catalog-model';
import { EntityProvider } from '@backstage/plugin-catalog-react';
import gpuplanePlugin from '../src/alpha';
import { gpuplaneAuthApiRef } from '../src/api/GpuplaneApi';
import { DevPkceAuth } from './DevPkceAuth';

// The plugin as an app installs it, with one change: the signed-in user's
// OIDC token comes from a browser PKCE sign-in at the dev issuer instead of
// a Backstage auth backend (there is none here).
const devAuth = ApiBlueprint.make({
  name: 'auth',
  params: defineParams =>
    defineParams({
      api: gpuplaneAuthApiRef,
      deps: { configApi: configApiRef },
      factory: ({ configApi }) => DevPkceAuth.fromConfig(configApi),
    }),
});

// A Group entity as the catalog would hold it, to show the entity tab
// without a catalog backend.
const teamA: Entity = {
  apiVersion: 'backstage.io/v1alpha1',
  kind: 'Group',
  metadata: { name: 'team-a', annotations: { 'gpuplane.io/team': 'team-a' } },
  spec: { type: 'team', children: [] },
};

const entityDemo = PageBlueprint.make({
  name: 'entity-demo',
  params: {
    path: '/entity-demo',
    title: 'Group entity tab (demo)',
    loader: () =>
      import('../src/components/EntityGpuplaneContent').then(m => (
        <EntityProvider entity={teamA}>
          <m.EntityGpuplaneContent />
        </EntityProvider>
      )),
  },
});


function renderFailure(error: unknown) {
  const root = document.getElementById('root');
  if (root) {
    root.textContent = `gpuplane dev app: ${error instanceof Error ? error.message : String(error)}`;
    root.setAttribute('role', 'alert');
  }
}

DevPkceAuth.completeSignIn().then(
  () =>
    createDevApp({
      features: [gpuplanePlugin.withOverrides({ extensions: [devAuth, entityDemo] })],
    }),
  renderFailure,
);
