// Package reconcile is the worker: it claims virtual clusters from the work
// queue, converges the host cluster on their desired state through
// internal/hostcluster, and writes status back to PostgreSQL.
package reconcile

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/approval"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// desiredState is everything about one virtual cluster the host needs.
type desiredState struct {
	vc   approval.VirtualClusterRow
	team tenancy.TeamRow
	host hostcluster.VirtualCluster
}

func quantities(r quota.Resources) hostcluster.Quantities {
	return hostcluster.Quantities{GPUCenti: int64(r.GPU), CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
}

// load reads the virtual cluster with its team, department and members.
func load(ctx context.Context, pool *pgxpool.Pool, id string) (desiredState, error) {
	var d desiredState
	vc, err := approval.GetVirtualClusterRow(ctx, pool, id, false)
	if err != nil {
		return d, err
	}
	team, err := tenancy.GetTeam(ctx, pool, vc.Team, false)
	if err != nil {
		return d, err
	}
	var budget quota.Resources
	if err := pool.QueryRow(ctx, `SELECT gpu_centi, cpu_millis, memory_bytes FROM departments WHERE id = $1`, team.Department).
		Scan(&budget.GPU, &budget.CPUMillis, &budget.MemoryBytes); err != nil {
		return d, err
	}
	members, err := tenancy.ListTeamMembers(ctx, pool, team.ID)
	if err != nil {
		return d, err
	}
	leaf := hostcluster.QueueSpec{Quota: quantities(vc.Quota), OverQuotaWeight: float64(vc.OverQuotaWeight), Priority: vc.Priority}
	if vc.Limit != nil {
		l := quantities(*vc.Limit)
		leaf.Limit = &l
	}
	h := hostcluster.VirtualCluster{
		Name: vc.ID, Team: team.ID, Department: team.Department, Tier: team.Tier, Pool: team.Pool,
		AllowFractionalGPUs: vc.AllowFractionalGPUs,
		Leaf:                leaf,
		TeamQueue:           hostcluster.QueueSpec{Quota: quantities(team.Quota), OverQuotaWeight: 1, Priority: 100},
		DepartmentQueue:     hostcluster.QueueSpec{Quota: quantities(budget), OverQuotaWeight: 1, Priority: 100},
		KubernetesVersion:   vc.KubernetesVersion,
		ChartVersion:        vc.ChartVersion,
		Generation:          vc.Generation,
	}
	for _, m := range members {
		h.Members = append(h.Members, hostcluster.Member{Kind: m.Kind, Name: m.Principal, Role: m.Role})
	}
	return desiredState{vc: vc, team: team, host: h}, nil
}
