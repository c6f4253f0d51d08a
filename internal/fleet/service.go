package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// Tiers are the isolation tiers a host cluster may take (the teams'
// tiers; tenancy.Tiers names the same values).
var Tiers = []string{"SHARED", "DEDICATED", "SANDBOX"}

// Service applies the fleet's rules. Every change runs in the caller's
// transaction with its audit event.
type Service struct {
	overcommit float64
	// capacityKnown: host clusters' capacity comes from the worker's
	// observations, so placement checks each cluster's node pools. Without
	// it (static capacity from configuration, which knows no clusters)
	// placement only matches tiers and labels.
	capacityKnown bool
}

// NewService builds the service. overcommit scales each node pool's
// capacity as it does the platform's (quota.ClusterCapacity);
// observedCapacity says whether host clusters' capacity is known from the
// worker's observations.
func NewService(overcommit float64, observedCapacity bool) *Service {
	return &Service{overcommit: overcommit, capacityKnown: observedCapacity}
}

// Validate checks what an admin sets on a host cluster; field prefixes
// the violations ("host_cluster").
func Validate(h HostCluster, field string) errs.Violations {
	var v errs.Violations
	if len(h.DisplayName) > 256 {
		v.Add(field+".display_name", "must be at most 256 characters")
	}
	if strings.ContainsRune(h.DisplayName, 0) {
		v.Add(field+".display_name", "must not contain NUL characters")
	}
	if !h.Connection.InCluster {
		if why := checkSecretName(h.Connection.Secret); why != "" {
			v.Add(field+".kubeconfig_secret.name", "%q %s", h.Connection.Secret, why)
		}
		if why := checkSecretKey(h.Connection.Key); why != "" {
			v.Add(field+".kubeconfig_secret.key", "%q %s", h.Connection.Key, why)
		}
	}
	if len(h.Tiers) == 0 {
		v.Add(field+".tiers", "required: the isolation tiers whose virtual clusters it takes (%s)", strings.Join(Tiers, ", "))
	}
	for _, t := range h.Tiers {
		if !slices.Contains(Tiers, t) {
			v.Add(field+".tiers", "%q is not an isolation tier; use %s", t, strings.Join(Tiers, ", "))
		}
	}
	virtualcluster.ValidateLabels(&v, field+".labels", h.Labels)
	return v
}

// checkSecretName: a Kubernetes object name (DNS-1123 subdomain).
func checkSecretName(s string) string {
	if s == "" {
		return "is required: the Secret in gpuplane's namespace holding the host cluster's kubeconfig"
	}
	if len(s) > 253 {
		return "must be at most 253 characters"
	}
	for _, part := range strings.Split(s, ".") {
		if names.CheckID(part) != "" {
			return "must be a Secret name (a DNS-1123 subdomain)"
		}
	}
	return ""
}

// checkSecretKey: a Secret data key.
func checkSecretKey(k string) string {
	if len(k) > 253 {
		return "must be at most 253 characters"
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "must be a Secret key (letters, digits, '-', '_' and '.')"
		}
	}
	return ""
}

func record(ctx context.Context, tx *store.Tx, actor reqctx.Principal, action, resource, requestID string, before, after any) error {
	return audit.Record(ctx, tx, audit.Event{Actor: actor, Action: action, Resource: resource, RequestID: requestID,
		Before: before, After: after})
}

// withDefaults fills the kubeconfig key.
func withDefaults(h HostCluster) HostCluster {
	if h.Connection.InCluster {
		h.Connection.Secret, h.Connection.Key = "", ""
	} else if h.Connection.Key == "" {
		h.Connection.Key = DefaultKubeconfigKey
	}
	return h
}

// Create stores a validated host cluster; the worker observes it next.
func (s *Service) Create(ctx context.Context, tx *store.Tx, actor reqctx.Principal, requestID string, h HostCluster) (HostCluster, error) {
	row, err := insert(ctx, tx, withDefaults(h))
	if err != nil {
		return row, err
	}
	return row, record(ctx, tx, actor, "CreateHostCluster", row.Name(), requestID, nil, row.Snapshot())
}

// listCap bounds the names an error lists.
const listCap = 20

func nameList(list []string, total int) string {
	s := strings.Join(list, ", ")
	if total > len(list) {
		s += fmt.Sprintf(" and %d more", total-len(list))
	}
	return s
}

// Update locks the host cluster, checks etag, lets change edit a copy and
// stores it. A tier it stops taking must not be in use by a virtual
// cluster it hosts. Its virtual clusters are re-applied (through a new
// connection, when that changed).
func (s *Service) Update(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string, change func(next *HostCluster)) (HostCluster, error) {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return cur, err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return cur, err
	}
	next := cur
	next.Tiers = slices.Clone(cur.Tiers)
	next.Labels = maps.Clone(cur.Labels)
	change(&next)
	next = withDefaults(next)
	if err := Validate(next, "host_cluster").Err(); err != nil {
		return cur, err
	}
	for _, tier := range cur.Tiers {
		if next.Takes(tier) {
			continue
		}
		inUse, err := virtualcluster.OnHostClusterInTier(ctx, tx, id, tier, listCap+1)
		if err != nil {
			return cur, err
		}
		if len(inUse) > 0 {
			e := errs.FailedPrecondition(errs.ReasonHasChildren, "%s still hosts %s virtual clusters (%s); it must keep taking tier %s until they are deleted",
				cur.Name(), tier, nameList(inUse[:min(len(inUse), listCap)], len(inUse)), tier)
			e.Violations = []errs.FieldViolation{{Field: "host_cluster.tiers", Description: "must keep " + tier + " while virtual clusters of that tier run here"}}
			return cur, e.With("virtual_clusters", strings.Join(inUse[:min(len(inUse), listCap)], ","))
		}
	}
	row, err := update(ctx, tx, next)
	if err != nil {
		return row, err
	}
	if next.Connection != cur.Connection {
		if _, err := workqueue.EnqueueHostCluster(ctx, tx, id); err != nil {
			return row, err
		}
	}
	return row, record(ctx, tx, actor, "UpdateHostCluster", row.Name(), "", cur.Snapshot(), row.Snapshot())
}

// Delete deletes a host cluster that hosts no virtual cluster (and that
// no pending request asks for by name); otherwise it is refused with
// FAILED_PRECONDITION naming them.
func (s *Service) Delete(ctx context.Context, tx *store.Tx, actor reqctx.Principal, id, etag string) error {
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return err
	}
	if err := store.CheckEtag(cur.Name(), etag, cur.Etag()); err != nil {
		return err
	}
	hosted, total, err := virtualcluster.OnHostCluster(ctx, tx, id, listCap)
	if err != nil {
		return err
	}
	if total > 0 {
		return errs.FailedPrecondition(errs.ReasonHasChildren,
			"%s still hosts %d virtual cluster(s): %s; delete them first (or cordon the host cluster so it gets no new ones)",
			cur.Name(), total, nameList(hosted, total)).
			With("virtual_clusters", strings.Join(hosted, ",")).With("count", strconv.Itoa(total))
	}
	if err := virtualcluster.ForgetHostCluster(ctx, tx, id); err != nil {
		return err
	}
	if err := remove(ctx, tx, id); err != nil {
		return err
	}
	return record(ctx, tx, actor, "DeleteHostCluster", cur.Name(), "", cur.Snapshot(), nil)
}

// Observation is what the worker saw of a host cluster.
type Observation struct {
	Reachable bool
	// Problem says why it is not reachable or not usable ("" when fine).
	Problem           string
	KubernetesVersion string
	KAIVersion        string
	// KAIQueueAPI: KAI Scheduler's Queue API (scheduling.run.ai/v2) is
	// served; without it no virtual cluster can get its queues.
	KAIQueueAPI bool
	Pools       []PoolStatus
	// At is when it was observed (the worker's clock).
	At time.Time
}

// Conditions of a host cluster.
const (
	CondReachable   = "Reachable"
	CondKAI         = "KAIInstalled"
	CondCapacity    = "CapacityObserved"
	reasonConnected = "Connected"
)

// ObservationResult says what an observation changed.
type ObservationResult struct {
	HostCluster HostCluster
	// BecameReachable / BecameUnreachable: the reachability flipped (a
	// first observation that finds it reachable counts as flipping).
	BecameReachable, BecameUnreachable bool
	// PoolsChanged: its node pools or their capacity changed.
	PoolsChanged bool
	// Requeued is how many virtual clusters were queued to reflect it.
	Requeued int64
}

// RecordObservation stores what the worker saw (without moving the etag).
// When reachability flips it records an audit event and queues every
// virtual cluster on the host cluster, so their status says so (DEGRADED,
// with the reason) or they converge again; a change of node pools queues
// them too (placement and sandbox slices follow the nodes).
func RecordObservation(ctx context.Context, tx *store.Tx, id string, o Observation) (ObservationResult, error) {
	var res ObservationResult
	cur, err := Get(ctx, tx, id, true)
	if err != nil {
		return res, err
	}
	at := o.At
	if at.IsZero() {
		if at, err = observedAt(ctx, tx); err != nil {
			return res, err
		}
	}
	st := cur.Status
	st.ObserveTime = &at
	st.Reachable = o.Reachable
	st.Message = o.Problem
	if o.Reachable {
		st.UnreachableSince = nil
		st.KubernetesVersion, st.KAIVersion, st.Pools = o.KubernetesVersion, o.KAIVersion, o.Pools
	} else if st.UnreachableSince == nil {
		st.UnreachableSince = &at
	}
	st.Conditions = hostConditions(cur.Status.Conditions, o, at)
	if o.Reachable && !o.KAIQueueAPI && st.Message == "" {
		st.Message = "KAI Scheduler's Queue API (scheduling.run.ai/v2) is not served: install KAI Scheduler before placing virtual clusters here"
	}
	row, err := writeStatus(ctx, tx, id, st)
	if err != nil {
		return res, err
	}
	res.HostCluster = row
	wasObserved := cur.Observed()
	res.BecameReachable = o.Reachable && (!cur.Status.Reachable || !wasObserved)
	res.BecameUnreachable = !o.Reachable && (cur.Status.Reachable || !wasObserved)
	res.PoolsChanged = o.Reachable && !samePools(cur.Status.Pools, o.Pools)
	actor := reqctx.System("worker")
	switch {
	case res.BecameReachable:
		if err := record(ctx, tx, actor, "HostClusterReachable", row.Name(), "", cur.Snapshot(), row.Snapshot()); err != nil {
			return res, err
		}
	case res.BecameUnreachable:
		if err := record(ctx, tx, actor, "HostClusterUnreachable", row.Name(), "", cur.Snapshot(), row.Snapshot()); err != nil {
			return res, err
		}
	}
	// The first look at a host cluster changes nothing its virtual
	// clusters were converged against; only a change after it does.
	if wasObserved && (res.BecameReachable || res.BecameUnreachable || res.PoolsChanged) {
		if res.Requeued, err = workqueue.EnqueueHostCluster(ctx, tx, id); err != nil {
			return res, err
		}
	}
	return res, nil
}

func samePools(a, b []PoolStatus) bool {
	return slices.EqualFunc(a, b, func(x, y PoolStatus) bool { return x == y })
}

// hostConditions turns an observation into conditions, keeping each
// condition's transition time while its status holds.
func hostConditions(prev []virtualcluster.Condition, o Observation, at time.Time) []virtualcluster.Condition {
	set := func(typ string, ok bool, reason, msg string) virtualcluster.Condition {
		st := virtualcluster.ConditionFalse
		if ok {
			st = virtualcluster.ConditionTrue
		}
		c := virtualcluster.Condition{Type: typ, Status: st, Reason: reason, Message: msg, LastTransitionTime: at}
		for _, p := range prev {
			if p.Type == typ && p.Status == st {
				c.LastTransitionTime = p.LastTransitionTime
			}
		}
		return c
	}
	if !o.Reachable {
		// What was observed before stays (versions, capacity); only
		// reachability is known now.
		out := []virtualcluster.Condition{set(CondReachable, false, "Unreachable", o.Problem)}
		for _, p := range prev {
			if p.Type != CondReachable {
				out = append(out, p)
			}
		}
		return out
	}
	kaiReason, kaiMsg := "QueueAPIServed", o.KAIVersion
	if !o.KAIQueueAPI {
		kaiReason, kaiMsg = "QueueAPIMissing", "scheduling.run.ai/v2 Queue is not served"
	}
	nodes := 0
	for _, p := range o.Pools {
		nodes += p.Nodes
	}
	capReason := "Observed"
	if nodes == 0 {
		capReason = "NoNodes"
	}
	return []virtualcluster.Condition{
		set(CondReachable, true, reasonConnected, "Kubernetes "+o.KubernetesVersion),
		set(CondKAI, o.KAIQueueAPI, kaiReason, kaiMsg),
		set(CondCapacity, nodes > 0, capReason, fmt.Sprintf("%d node(s) in %d pool(s)", nodes, len(o.Pools))),
	}
}
