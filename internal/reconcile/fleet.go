package reconcile

// Many host clusters: which client reaches a virtual cluster's host
// cluster, what happens while one is down, how work is shared between
// them, and the observer that records each one's health and capacity.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	vcs "github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Hosts reaches the host clusters that are not the one gpuplane runs in
// (Worker.Host): those with a kubeconfig Secret.
type Hosts interface {
	Host(ctx context.Context, t hostcluster.Target) (Host, error)
}

// Registry reaches host clusters through a hostcluster.Registry (one
// client per cluster, rebuilt when its kubeconfig Secret changes).
func Registry(r *hostcluster.Registry) Hosts { return registryHosts{r} }

type registryHosts struct{ r *hostcluster.Registry }

func (h registryHosts) Host(ctx context.Context, t hostcluster.Target) (Host, error) {
	c, err := h.r.Client(ctx, t)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Prober is a Host that can be observed as a whole (*hostcluster.Client).
type Prober interface {
	Probe(ctx context.Context) (hostcluster.Probe, error)
}

// CondHostCluster says the host cluster the virtual cluster runs on answers.
// While it does not, the virtual cluster is DEGRADED with the reason, and
// nothing about it changes there.
const CondHostCluster = "HostClusterReachable"

// host is the raw Host of a host cluster (not instrumented).
func (w *Worker) rawHost(ctx context.Context, h fleet.HostCluster) (Host, error) {
	if h.Connection.InCluster {
		if w.inCluster == nil {
			return nil, fmt.Errorf("host cluster %s is the one gpuplane runs in, but this worker has no such cluster configured (--kubeconfig or in-cluster config)", h.Name())
		}
		return w.inCluster, nil
	}
	if w.cfg.Hosts == nil {
		return nil, fmt.Errorf("host cluster %s is reached through a kubeconfig Secret, but this worker reads no Secrets", h.Name())
	}
	return w.cfg.Hosts.Host(ctx, hostcluster.Target{ID: h.ID, SecretName: h.Connection.Secret, SecretKey: h.Connection.Key})
}

// hostFor is the instrumented Host of the virtual cluster's host cluster.
func (w *Worker) hostFor(ctx context.Context, h fleet.HostCluster) (Host, error) {
	if h.Connection.InCluster && w.inCluster != nil {
		return w.Host, nil
	}
	raw, err := w.rawHost(ctx, h)
	if err != nil {
		return nil, err
	}
	return instrumentHost(raw, w.tel), nil
}

// knownDown reports a host cluster the observer last saw unreachable.
func knownDown(h fleet.HostCluster) bool { return h.Observed() && !h.Status.Reachable }

// hostDown records that a virtual cluster's host cluster is down: the
// virtual cluster becomes DEGRADED (a virtual cluster being deleted stays
// DELETING, a sleeping one SLEEPING) with a neutral reason
// (hostDownMessage; why is logged, and recorded on the HostCluster by the
// observer), and is looked at again after HostDownRetry without counting
// an attempt. The observer queues it at once when its host cluster
// answers again.
func (w *Worker) hostDown(ctx context.Context, c claim, d desiredState, cause error) error {
	why := d.cluster.Status.Message
	if cause != nil && (!knownDown(d.cluster) || why == "") {
		why = cause.Error()
	}
	msg := hostDownMessage(d.cluster)
	markHostDown(ctx)
	err := w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		cur, err := vcs.Get(ctx, tx, d.vc.ID, true)
		if err != nil {
			return err
		}
		phase := cur.Phase
		if cur.Phase.CanMoveTo(vcs.PhaseDegraded) && cur.Phase.NeedsResync() {
			phase = vcs.PhaseDegraded
		}
		conds := withCondition(cur.Conditions, setCondition(cur.Conditions, CondHostCluster, false, "Unreachable", msg, cur.ObservedGeneration))
		after, err := vcs.WriteStatus(ctx, tx, cur.ID, vcs.Status{Phase: phase, Conditions: conds, ObservedGeneration: cur.ObservedGeneration,
			Message: msg, Allocated: cur.Allocated, Endpoint: cur.Endpoint})
		if err != nil {
			return err
		}
		if phase != cur.Phase {
			return w.record(ctx, tx, d, "VirtualClusterPhase"+phase.Word(), cur.Name(), cur.Snapshot(), after.Snapshot())
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.Log.Info("host cluster down: virtual cluster degraded", "virtual_cluster", d.vc.ID, "host_cluster", d.cluster.ID, "reason", why)
	return w.later(ctx, c, w.cfg.HostDownRetry, nil)
}

// withCondition replaces (or adds) one condition in a list.
func withCondition(cs []vcs.Condition, c vcs.Condition) []vcs.Condition {
	out := make([]vcs.Condition, 0, len(cs)+1)
	replaced := false
	for _, p := range cs {
		if p.Type == c.Type {
			out, replaced = append(out, c), true
			continue
		}
		out = append(out, p)
	}
	if !replaced {
		out = append(out, c)
	}
	return out
}

// slots counts in-flight reconciles per host cluster, so that one slow or
// unreachable host cluster holds at most perCluster of a worker's slots.
type slots struct {
	mu       sync.Mutex
	inFlight map[string]int
	// fleetSize is how many host clusters there were at the last look.
	fleetSize int
}

func (s *slots) take(cluster string) {
	s.mu.Lock()
	s.inFlight[cluster]++
	s.mu.Unlock()
}

func (s *slots) give(cluster string) {
	s.mu.Lock()
	if s.inFlight[cluster]--; s.inFlight[cluster] <= 0 {
		delete(s.inFlight, cluster)
	}
	s.mu.Unlock()
}

// perCluster is the most reconciles one host cluster may have at once:
// HostClusterConcurrency when set; otherwise all of them with a single
// host cluster, and half (at least one) with more, so a host cluster that
// hangs can never take every slot.
func (w *Worker) perCluster() int {
	if w.cfg.HostClusterConcurrency > 0 {
		return w.cfg.HostClusterConcurrency
	}
	w.slots.mu.Lock()
	n := w.slots.fleetSize
	w.slots.mu.Unlock()
	if n <= 1 {
		return w.cfg.Concurrency
	}
	return max(1, w.cfg.Concurrency/2)
}

// busy is the host clusters with reconciles in flight and the slots they
// have left.
func (w *Worker) busy(per int) map[string]int {
	w.slots.mu.Lock()
	defer w.slots.mu.Unlock()
	out := make(map[string]int, len(w.slots.inFlight))
	for c, n := range w.slots.inFlight {
		out[c] = per - n
	}
	return out
}

// ObserveHostClusters probes every host cluster once (several at a time,
// each within ProbeTimeout) and records what it saw: reachability,
// Kubernetes and KAI versions, capacity per node pool. Reachability
// changes are audited and re-queue the host cluster's virtual clusters
// (fleet.RecordObservation). It returns the first failure to record.
func (w *Worker) ObserveHostClusters(ctx context.Context) error {
	all, err := fleet.All(ctx, w.DB)
	if err != nil {
		return err
	}
	w.slots.mu.Lock()
	w.slots.fleetSize = len(all)
	w.slots.mu.Unlock()
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, h := range all {
		wg.Add(1)
		sem <- struct{}{}
		go func(h fleet.HostCluster) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := w.observe(ctx, h); err != nil && ctx.Err() == nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(h)
	}
	wg.Wait()
	return first
}

func (w *Worker) observe(ctx context.Context, h fleet.HostCluster) error {
	pctx, cancel := context.WithTimeout(ctx, w.cfg.ProbeTimeout)
	defer cancel()
	o := fleet.Observation{At: w.cfg.Now()}
	var probe hostcluster.Probe
	host, err := w.rawHost(pctx, h)
	if err == nil {
		p, ok := host.(Prober)
		if !ok {
			return nil // a Host that cannot be observed (tests)
		}
		probe, err = p.Probe(pctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o.Problem = oneLine(truncate(err.Error(), 1000))
	} else {
		o.Reachable = true
		o.KubernetesVersion, o.KAIVersion, o.KAIQueueAPI = probe.KubernetesVersion, probe.KAIVersion, probe.KAIQueueAPI
		for _, p := range probe.Pools {
			o.Pools = append(o.Pools, fleet.PoolStatus{Name: p.Name, Nodes: len(p.Nodes),
				Capacity: quota.Resources{GPU: quota.GPU(p.Capacity.GPUCenti), CPUMillis: p.Capacity.CPUMillis, MemoryBytes: p.Capacity.MemoryBytes}})
		}
	}
	var res fleet.ObservationResult
	err = w.DB.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		var err error
		res, err = fleet.RecordObservation(ctx, tx, h.ID, o)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("record observation of host cluster %s: %w", h.ID, err)
	case res.BecameUnreachable:
		w.Log.Warn("host cluster unreachable", "host_cluster", h.ID, "reason", o.Problem, "virtual_clusters_requeued", res.Requeued)
	case res.BecameReachable:
		w.Log.Info("host cluster reachable", "host_cluster", h.ID, "kubernetes", o.KubernetesVersion, "kai", o.KAIVersion,
			"virtual_clusters_requeued", res.Requeued)
	}
	return nil
}

func (w *Worker) observeLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.ObserveInterval)
	defer t.Stop()
	for {
		if err := w.ObserveHostClusters(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("observing host clusters failed", "error", err)
		}
		if _, err := w.AutoSleepIdle(ctx); err != nil && ctx.Err() == nil {
			w.Log.Warn("auto-sleep failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enqueueSiblingsOnHost re-applies the department's virtual clusters on a
// host cluster after one of them left it: their parent queues there shrink.
func enqueueSiblingsOnHost(ctx context.Context, tx *store.Tx, d desiredState) error {
	return workqueue.EnqueueDepartmentOnHost(ctx, tx, d.team.Department, d.vc.HostCluster)
}

// describeHost names the host cluster in a condition message.
func describeHost(h fleet.HostCluster) string {
	parts := []string{h.Name()}
	if v := h.Status.KubernetesVersion; v != "" {
		parts = append(parts, "Kubernetes "+v)
	}
	return strings.Join(parts, ", ")
}
