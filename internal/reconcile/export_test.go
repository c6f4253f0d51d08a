package reconcile

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpuplane/gpuplane/internal/hostcluster"
)

// SetBeforeStep installs a hook that runs before each step of a reconcile
// (load, observe-before, apply, observe, record-status, delete,
// record-deleted). Set it before the worker starts.
func SetBeforeStep(w *Worker, f func(step string)) { w.beforeStep = f }

// LoadHost is the desired host state of a virtual cluster, as the worker
// loads it.
func LoadHost(ctx context.Context, pool *pgxpool.Pool, id string) (hostcluster.VirtualCluster, error) {
	d, err := load(ctx, pool, id)
	return d.host, err
}
