package reconcile

import (
	"context"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/store"
)

// SetBeforeStep installs a hook that runs before each step of a reconcile
// (load, observe-before, apply, observe, record-status, delete,
// record-deleted). Set it before the worker starts.
func SetBeforeStep(w *Worker, f func(step string)) { w.beforeStep = f }

// LoadHost is the desired host state of a virtual cluster, as the worker
// loads it.
func LoadHost(ctx context.Context, q store.Querier, id string) (hostcluster.VirtualCluster, error) {
	d, err := load(ctx, q, id)
	return d.host, err
}
