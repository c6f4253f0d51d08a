import { aRequest } from '../__testUtils__/fakes';
import { describeRequest } from './requestText';

describe('describeRequest', () => {
  it('says what each kind of request asks for', () => {
    expect(describeRequest(aRequest({ kind: 'DELETE_VIRTUAL_CLUSTER', deleteVirtualCluster: { virtualCluster: 'teams/a/virtualClusters/x' } }))).toBe(
      'delete teams/a/virtualClusters/x',
    );
    expect(
      describeRequest(
        aRequest({
          kind: 'CHANGE_VIRTUAL_CLUSTER_VERSION',
          changeVirtualClusterVersion: { virtualCluster: 'teams/a/virtualClusters/x', chartVersion: '0.36.1', kubernetesVersion: 'v1.30.2' },
        }),
      ),
    ).toBe('upgrade teams/a/virtualClusters/x to vCluster 0.36.1, Kubernetes v1.30.2');
    expect(describeRequest(aRequest({ kind: 'SLEEP_VIRTUAL_CLUSTER', sleepVirtualCluster: { virtualCluster: 'teams/a/virtualClusters/x' } }))).toBe(
      'put teams/a/virtualClusters/x to sleep',
    );
    expect(describeRequest(aRequest({ kind: 'WAKE_VIRTUAL_CLUSTER', wakeVirtualCluster: { virtualCluster: 'teams/a/virtualClusters/x' } }))).toBe(
      'wake teams/a/virtualClusters/x',
    );
    expect(describeRequest(aRequest({ kind: 'CHANGE_TEAM_QUOTA' }))).toBe('CHANGE_TEAM_QUOTA');
  });
});
