import { coreExtensionData } from '@backstage/frontend-plugin-api';
import { createExtensionTester } from '@backstage/frontend-test-utils';
import gpuplanePlugin from './alpha';
import { isGpuplaneTeamAvailable } from './annotations';

describe('new frontend system plugin', () => {
  it('provides the page, the entity content and the three APIs', () => {
    const ids = ['api:gpuplane/auth', 'api:gpuplane/client', 'api:gpuplane/status', 'page:gpuplane', 'entity-content:gpuplane'];
    for (const id of ids) {
      expect(gpuplanePlugin.getExtension(id as any)).toBeDefined();
    }
  });

  it('shows the entity tab only for Groups annotated with a team', () => {
    const entity = (kind: string, annotations?: Record<string, string>) => ({
      apiVersion: 'backstage.io/v1alpha1',
      kind,
      metadata: { name: 'x', annotations },
    });
    expect(isGpuplaneTeamAvailable(entity('Group', { 'gpuplane.io/team': 'team-a' }))).toBe(true);
    expect(isGpuplaneTeamAvailable(entity('Group'))).toBe(false);
    expect(isGpuplaneTeamAvailable(entity('Group', { 'gpuplane.io/team': ' ' }))).toBe(false);
    expect(isGpuplaneTeamAvailable(entity('Component', { 'gpuplane.io/team': 'team-a' }))).toBe(false);
  });

  it('mounts the page at /gpuplane', () => {
    const tester = createExtensionTester(gpuplanePlugin.getExtension('page:gpuplane'));
    expect(tester.get(coreExtensionData.routePath)).toBe('/gpuplane');
  });
});
