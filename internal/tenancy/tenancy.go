// Package tenancy holds departments, teams and members and the quota
// hierarchy between them (cluster -> department budget -> team quota ->
// virtual-cluster quota), with the repositories that own the departments,
// teams and members tables. Every change runs inside the caller's
// transaction together with its audit event and reconcile work. It knows
// nothing of gRPC, HTTP or Kubernetes.
package tenancy

import (
	"context"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
)

// CapacitySource says how much the host cluster has. The worker's host
// client reads it from real nodes; without a host cluster a static
// configuration does.
type CapacitySource interface {
	Capacity(ctx context.Context) (quota.Resources, error)
}

// StaticCapacity is a fixed capacity from configuration.
type StaticCapacity quota.Resources

// Capacity implements CapacitySource.
func (s StaticCapacity) Capacity(context.Context) (quota.Resources, error) {
	return quota.Resources(s), nil
}

// PoolCapacitySource is a CapacitySource that also knows the capacity of
// each node pool. Without one (static capacity from configuration) the
// pool level is not checked: nothing says which nodes belong to which pool.
type PoolCapacitySource interface {
	CapacitySource
	PoolCapacity(ctx context.Context) (map[string]quota.Resources, error)
}

// StaticPoolCapacity is a fixed capacity per node pool.
type StaticPoolCapacity map[string]quota.Resources

// Capacity implements CapacitySource: the sum of the pools.
func (s StaticPoolCapacity) Capacity(context.Context) (quota.Resources, error) {
	var total quota.Resources
	for _, r := range s {
		total = total.Add(r)
	}
	return total, nil
}

// PoolCapacity implements PoolCapacitySource.
func (s StaticPoolCapacity) PoolCapacity(context.Context) (map[string]quota.Resources, error) {
	return s, nil
}

// TeamHistory removes what a deleted team leaves behind in tables tenancy
// does not own (finished requests, gone virtual clusters); the audit log
// keeps the history. internal/request implements it.
type TeamHistory interface {
	DeleteTeamHistory(ctx context.Context, tx *store.Tx, team string) error
}

// Service applies the tenancy rules.
type Service struct {
	capacity   CapacitySource
	overcommit float64
	history    TeamHistory
}

// NewService builds the service; overcommit scales capacity for the
// cluster level of the hierarchy (quota.ClusterCapacity).
func NewService(capacity CapacitySource, overcommit float64, history TeamHistory) *Service {
	return &Service{capacity: capacity, overcommit: overcommit, history: history}
}

// record writes an audit event scoped to a department and team.
func record(ctx context.Context, tx *store.Tx, actor reqctx.Principal, action, resource, requestID, dept, team string, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: resource, RequestID: requestID,
		Department: dept, Team: team, Before: before, After: after})
}

// DedicatedGPUError refuses a fractional GPU amount for a DEDICATED team.
func DedicatedGPUError(field string, g quota.GPU) error {
	return errs.InvalidField(field, "DEDICATED teams get whole GPUs only (got %s)", g)
}
