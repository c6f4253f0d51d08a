package fleet

// The host_clusters table: every statement on it is in this file.

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

const columns = `id, display_name, in_cluster, kubeconfig_secret, kubeconfig_secret_key, tiers, labels, cordoned,
	version, create_time, update_time, reachable, kubernetes_version, kai_version, node_pools, conditions,
	status_message, observe_time, unreachable_since`

// poolRow is a node pool in the node_pools column.
type poolRow struct {
	Name        string `json:"name"`
	Nodes       int    `json:"nodes"`
	GPUCenti    int64  `json:"gpuCenti"`
	CPUMillis   int64  `json:"cpuMillis"`
	MemoryBytes int64  `json:"memoryBytes"`
}

func encodePools(pools []PoolStatus) ([]byte, error) {
	rows := make([]poolRow, 0, len(pools))
	for _, p := range pools {
		rows = append(rows, poolRow{Name: p.Name, Nodes: p.Nodes, GPUCenti: int64(p.Capacity.GPU),
			CPUMillis: p.Capacity.CPUMillis, MemoryBytes: p.Capacity.MemoryBytes})
	}
	return json.Marshal(rows)
}

func decodePools(raw []byte) ([]PoolStatus, error) {
	var rows []poolRow
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, err
	}
	out := make([]PoolStatus, 0, len(rows))
	for _, r := range rows {
		out = append(out, PoolStatus{Name: r.Name, Nodes: r.Nodes,
			Capacity: quota.Resources{GPU: quota.GPU(r.GPUCenti), CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}})
	}
	return out, nil
}

func scan(row pgx.Row) (HostCluster, error) {
	var h HostCluster
	var pools, conds []byte
	st := &h.Status
	err := row.Scan(&h.ID, &h.DisplayName, &h.Connection.InCluster, &h.Connection.Secret, &h.Connection.Key, &h.Tiers,
		&h.Labels, &h.Cordoned, &h.Version, &h.Created, &h.Updated, &st.Reachable, &st.KubernetesVersion, &st.KAIVersion,
		&pools, &conds, &st.Message, &st.ObserveTime, &st.UnreachableSince)
	if err != nil {
		return h, err
	}
	if len(h.Labels) == 0 {
		h.Labels = nil
	}
	if st.Pools, err = decodePools(pools); err != nil {
		return h, err
	}
	st.Conditions, err = virtualcluster.DecodeConditions(conds)
	return h, err
}

// Get reads a host cluster; lock takes a row lock (in a Tx).
func Get(ctx context.Context, q store.Querier, id string, lock bool) (HostCluster, error) {
	return store.GetOne(ctx, q, `SELECT `+columns+` FROM host_clusters WHERE id = $1`, lock, scan, errs.NotFound("hostClusters/"+id), id)
}

// All reads every host cluster, by id. Fleets are small (tens), and
// placement and the worker's observer look at all of them.
func All(ctx context.Context, q store.Querier) ([]HostCluster, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM host_clusters ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (HostCluster, error) { return scan(r) })
}

// QueueAll is All, queued in b (for Tx.Send).
func QueueAll(b *store.Batch, dst *[]HostCluster) {
	store.QueueMany(b, dst, scan, `SELECT `+columns+` FROM host_clusters ORDER BY id`)
}

// ListOptions select one page of host clusters by id.
type ListOptions struct {
	PageSize int32
	After    string
}

// List returns a page of host clusters by id, and whether more follow.
func List(ctx context.Context, q store.Querier, o ListOptions) ([]HostCluster, bool, error) {
	lq, err := store.NewList(o.PageSize, "", nil)
	if err != nil {
		return nil, false, err
	}
	lq.Where("id > " + lq.Arg(o.After))
	return store.FetchPage(ctx, q, lq, `SELECT `+columns+` FROM host_clusters`, "id", scan)
}

func labelsColumn(l map[string]string) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

func tiersColumn(t []string) []string {
	out := slices.Clone(t)
	slices.Sort(out)
	return slices.Compact(append([]string{}, out...))
}

func insert(ctx context.Context, tx *store.Tx, h HostCluster) (HostCluster, error) {
	row, err := scan(tx.QueryRow(ctx, `
		INSERT INTO host_clusters (id, display_name, in_cluster, kubeconfig_secret, kubeconfig_secret_key, tiers, labels, cordoned)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING `+columns,
		h.ID, h.DisplayName, h.Connection.InCluster, h.Connection.Secret, h.Connection.Key, tiersColumn(h.Tiers),
		labelsColumn(h.Labels), h.Cordoned))
	switch {
	case err == nil:
	case store.ConstraintName(err) == "host_clusters_one_in_cluster":
		return row, errs.FailedPrecondition(errs.ReasonAlreadyExists,
			"another host cluster is already reached in-cluster; only one can be the cluster gpuplane runs in (reach this one through a kubeconfig Secret)")
	case errs.KindOf(store.Classify(err)) == errs.KindAlreadyExists:
		return row, errs.AlreadyExists(h.Name())
	}
	return row, err
}

func update(ctx context.Context, tx *store.Tx, h HostCluster) (HostCluster, error) {
	row, err := scan(tx.QueryRow(ctx, `
		UPDATE host_clusters SET display_name = $2, in_cluster = $3, kubeconfig_secret = $4, kubeconfig_secret_key = $5,
		       tiers = $6, labels = $7, cordoned = $8, version = version + 1, update_time = now()
		 WHERE id = $1 RETURNING `+columns,
		h.ID, h.DisplayName, h.Connection.InCluster, h.Connection.Secret, h.Connection.Key, tiersColumn(h.Tiers),
		labelsColumn(h.Labels), h.Cordoned))
	if store.ConstraintName(err) == "host_clusters_one_in_cluster" {
		return row, errs.FailedPrecondition(errs.ReasonAlreadyExists,
			"another host cluster is already reached in-cluster; only one can be the cluster gpuplane runs in")
	}
	return row, err
}

func remove(ctx context.Context, tx *store.Tx, id string) error {
	_, err := tx.Exec(ctx, `DELETE FROM host_clusters WHERE id = $1`, id)
	return err
}

// writeStatus stores an observation without moving version or
// update_time, so etags stay valid while the status changes.
func writeStatus(ctx context.Context, tx *store.Tx, id string, st Status) (HostCluster, error) {
	pools, err := encodePools(st.Pools)
	if err != nil {
		return HostCluster{}, err
	}
	conds, err := virtualcluster.EncodeConditions(st.Conditions)
	if err != nil {
		return HostCluster{}, err
	}
	return scan(tx.QueryRow(ctx, `
		UPDATE host_clusters SET reachable = $2, kubernetes_version = $3, kai_version = $4, node_pools = $5,
		       conditions = $6, status_message = $7, observe_time = $8, unreachable_since = $9
		 WHERE id = $1 RETURNING `+columns,
		id, st.Reachable, st.KubernetesVersion, st.KAIVersion, pools, conds, st.Message, st.ObserveTime, st.UnreachableSince))
}

const hostPoolLockPrefix = "gpuplane-host-pool:"

// lockHostPool serialises placements into one node pool of one host
// cluster until commit, so two approvals cannot both take its last GPUs.
func lockHostPool(ctx context.Context, tx *store.Tx, hostCluster, pool string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, hostPoolLockPrefix+hostCluster+"/"+pool)
	return err
}

// observedAt is the database's clock, which observations are stamped with
// unless the caller's clock says otherwise.
func observedAt(ctx context.Context, q store.Querier) (time.Time, error) {
	var t time.Time
	err := q.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}
