// Package reconcile is the worker: it claims virtual clusters from the work
// queue (internal/workqueue), converges the host cluster on their desired
// state through internal/hostcluster, and writes status back through the
// domain repositories (virtualcluster, request). It never imports the API
// layer.
package reconcile

import (
	"context"
	"fmt"

	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// desiredState is everything about one virtual cluster the host needs.
type desiredState struct {
	vc   virtualcluster.VirtualCluster
	team tenancy.Team
	host hostcluster.VirtualCluster
	// cluster is the host cluster the virtual cluster runs on.
	cluster fleet.HostCluster
}

func quantities(r quota.Resources) hostcluster.Quantities {
	return hostcluster.Quantities{GPUCenti: int64(r.GPU), CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
}

// load reads the virtual cluster with its team, department and members.
func load(ctx context.Context, q store.Querier, id string) (desiredState, error) {
	var d desiredState
	vc, err := virtualcluster.Get(ctx, q, id, false)
	if err != nil {
		return d, err
	}
	team, err := tenancy.GetTeam(ctx, q, vc.Team, false)
	if err != nil {
		return d, err
	}
	if vc.HostCluster == "" && !vc.Phase.NeedsResync() && vc.Phase != virtualcluster.PhaseDeleting {
		// Never placed (PENDING_APPROVAL, REJECTED): nothing to converge.
		return desiredState{vc: vc, team: team}, nil
	}
	if vc.HostCluster == "" {
		return d, fmt.Errorf("virtual cluster %s is %s but placed on no host cluster", vc.ID, vc.Phase)
	}
	cluster, err := fleet.Get(ctx, q, vc.HostCluster, false)
	if err != nil {
		return d, err
	}
	// The parent queues on a host cluster cover what lives there: the
	// quotas of the team's (and the department's) virtual clusters on it.
	teamOnHost, deptOnHost, err := virtualcluster.ParentQuotasOnHost(ctx, q, vc.HostCluster, team.Department, team.ID)
	if err != nil {
		return d, err
	}
	members, err := tenancy.MembersOfTeam(ctx, q, team.ID)
	if err != nil {
		return d, err
	}
	spec := vc.Spec
	leaf := hostcluster.QueueSpec{Quota: quantities(spec.Quota), OverQuotaWeight: float64(spec.OverQuotaWeight), Priority: spec.Priority}
	if spec.Limit != nil {
		l := quantities(*spec.Limit)
		leaf.Limit = &l
	}
	h := hostcluster.VirtualCluster{
		Name: vc.ID, Team: team.ID, Department: team.Department, Tier: string(team.Tier), Pool: team.Pool,
		AllowFractionalGPUs: spec.AllowFractionalGPUs,
		Leaf:                leaf,
		TeamQueue:           hostcluster.QueueSpec{Quota: quantities(teamOnHost), OverQuotaWeight: 1, Priority: 100},
		DepartmentQueue:     hostcluster.QueueSpec{Quota: quantities(deptOnHost), OverQuotaWeight: 1, Priority: 100},
		KubernetesVersion:   spec.KubernetesVersion,
		ChartVersion:        spec.ChartVersion,
		Generation:          vc.Generation,
		Sleep:               spec.Sleep,
	}
	for _, m := range members {
		h.Members = append(h.Members, hostcluster.Member{Kind: string(m.Kind), Name: m.Principal, Role: string(m.Role)})
	}
	return desiredState{vc: vc, team: team, host: h, cluster: cluster}, nil
}
