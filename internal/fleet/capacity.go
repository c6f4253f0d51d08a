package fleet

import (
	"context"

	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
)

// ObservedCapacity is the platform's capacity as the worker last observed
// it on every host cluster: per node pool, the sum over the host clusters
// (a team's quota is carved from its pool across the fleet), and in total
// (department budgets are carved from the whole fleet). A host cluster
// that is down keeps counting with what was last seen; one never observed
// counts nothing. It implements tenancy.PoolCapacitySource.
type ObservedCapacity struct {
	DB store.Querier
}

// PoolCapacity sums each node pool over the host clusters.
func (c ObservedCapacity) PoolCapacity(ctx context.Context) (map[string]quota.Resources, error) {
	all, err := All(ctx, c.DB)
	if err != nil {
		return nil, err
	}
	out := map[string]quota.Resources{}
	for _, h := range all {
		for _, p := range h.Status.Pools {
			out[p.Name] = out[p.Name].Add(p.Capacity)
		}
	}
	return out, nil
}

// Capacity is the sum over every pool of every host cluster.
func (c ObservedCapacity) Capacity(ctx context.Context) (quota.Resources, error) {
	pools, err := c.PoolCapacity(ctx)
	if err != nil {
		return quota.Resources{}, err
	}
	var total quota.Resources
	for _, r := range pools {
		total = total.Add(r)
	}
	return total, nil
}
