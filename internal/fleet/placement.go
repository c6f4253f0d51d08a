package fleet

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// LevelHostCluster is the level of the fit check for one node pool of one
// host cluster: a virtual cluster's quota is carved from the pool's nodes
// on the host cluster it runs on (capacity x overcommit), minus what the
// other virtual clusters placed in that pool there hold.
const LevelHostCluster quota.Level = "host_cluster"

// ReasonNoHostCluster says no host cluster can take the virtual cluster (its
// tier, the labels or the cluster it asks for), whatever the capacity.
const ReasonNoHostCluster = "NO_HOST_CLUSTER"

// Need is what a virtual cluster asks of a host cluster.
type Need struct {
	// VirtualCluster is its id; its own quota is not counted as used (a
	// resize or a re-check).
	VirtualCluster string
	// Tier and Pool are its team's isolation tier and node pool.
	Tier, Pool string
	Quota      quota.Resources
	Placement  virtualcluster.Placement
}

// Decision is where a virtual cluster goes.
type Decision struct {
	// HostCluster is the chosen host cluster ("" when none has room).
	HostCluster string
	// Node is the chosen cluster's node pool as a fit level; nil when
	// capacity is not known per cluster (static capacity).
	Node *quota.Node
	// Shortfalls, when no candidate has room, are every candidate's.
	Shortfalls []quota.Shortfall
	// Candidates are the host clusters that could take it but for room.
	Candidates []string
}

// Fits reports whether a host cluster was chosen.
func (d Decision) Fits() bool { return d.HostCluster != "" }

// HostPoolName names a node pool of a host cluster in fit answers.
func HostPoolName(hostCluster, pool string) string {
	return "hostClusters/" + hostCluster + "/nodePools/" + pool
}

// Place chooses the host cluster of a new virtual cluster. The rule:
//
//  1. Candidates are the host clusters that take the team's isolation tier,
//     are not cordoned, carry every label the request asks for and, when
//     the request names one, are that one. With observed capacity, a host
//     cluster must also have been observed and be reachable now.
//  2. Each candidate's node pool of the team (the shared pool, or the
//     team's own) must fit the quota: capacity x overcommit minus what the
//     virtual clusters placed in that pool there hold.
//  3. Of those that fit, the one with the most GPUs left free in that pool
//     afterwards wins (spreading load), then the most CPU, then the most
//     memory, then the lowest id. Without observed capacity the lowest id
//     wins.
//
// No candidate at all is FAILED_PRECONDITION / NO_HOST_CLUSTER saying why
// each host cluster was ruled out; candidates without room give a Decision
// with every candidate's shortfalls. The candidates' pools are locked for
// the rest of the transaction, so the answer holds until commit.
func (s *Service) Place(ctx context.Context, tx *store.Tx, n Need) (Decision, error) {
	return s.PlaceAmong(ctx, tx, nil, n)
}

// PlaceAmong is Place with the host clusters already read (QueueAll);
// nil reads them.
func (s *Service) PlaceAmong(ctx context.Context, tx *store.Tx, all []HostCluster, n Need) (Decision, error) {
	if all == nil {
		var err error
		if all, err = All(ctx, tx); err != nil {
			return Decision{}, err
		}
	}
	var candidates []HostCluster
	var ruledOut []string
	for _, h := range all {
		if why := s.ruleOut(h, n); why != "" {
			ruledOut = append(ruledOut, h.Name()+": "+why)
			continue
		}
		candidates = append(candidates, h)
	}
	if len(candidates) == 0 {
		return Decision{}, noHostCluster(n, all, ruledOut)
	}
	type scored struct {
		h    HostCluster
		node *quota.Node
		free quota.Resources
	}
	var fits []scored
	var d Decision
	for _, h := range candidates { // by id: locks are taken in one order
		d.Candidates = append(d.Candidates, h.Name())
		node, known, err := s.hostNode(ctx, tx, h, n.Pool, n.VirtualCluster)
		if err != nil {
			return Decision{}, err
		}
		if !known {
			fits = append(fits, scored{h: h})
			continue
		}
		if short := quota.CheckFit([]quota.Node{node}, n.Quota); len(short) > 0 {
			d.Shortfalls = append(d.Shortfalls, short...)
			continue
		}
		fits = append(fits, scored{h: h, node: &node, free: node.Capacity.Sub(node.Used).Sub(n.Quota)})
	}
	if len(fits) == 0 {
		return d, nil
	}
	best := slices.MinFunc(fits, func(a, b scored) int {
		return cmp.Or(
			cmp.Compare(b.free.GPU, a.free.GPU), cmp.Compare(b.free.CPUMillis, a.free.CPUMillis),
			cmp.Compare(b.free.MemoryBytes, a.free.MemoryBytes), cmp.Compare(a.h.ID, b.h.ID))
	})
	d.HostCluster, d.Node, d.Shortfalls = best.h.ID, best.node, nil
	return d, nil
}

// ruleOut says why h cannot take the virtual cluster at all ("" when it
// can, room aside).
func (s *Service) ruleOut(h HostCluster, n Need) string {
	if n.Placement.HostCluster != "" && h.ID != n.Placement.HostCluster {
		return "not the one asked for"
	}
	if !h.Takes(n.Tier) {
		return fmt.Sprintf("does not take tier %s (takes %s)", n.Tier, strings.Join(h.Tiers, ", "))
	}
	if missing := h.missingLabels(n.Placement.Labels); len(missing) > 0 {
		return "lacks label " + strings.Join(missing, ", ")
	}
	if h.Cordoned {
		return "cordoned (gets no new virtual clusters)"
	}
	if !s.capacityKnown {
		return ""
	}
	switch {
	case !h.Observed():
		return "not observed yet (no worker has reached it)"
	case !h.Status.Reachable:
		since := ""
		if h.Status.UnreachableSince != nil {
			since = " since " + h.Status.UnreachableSince.UTC().Format(time.RFC3339)
		}
		return "unreachable" + since + ": " + h.Status.Message
	}
	return ""
}

func noHostCluster(n Need, all []HostCluster, ruledOut []string) error {
	if n.Placement.HostCluster != "" && !slices.ContainsFunc(all, func(h HostCluster) bool { return h.ID == n.Placement.HostCluster }) {
		return errs.FailedPrecondition(ReasonNoHostCluster, "host cluster hostClusters/%s does not exist", n.Placement.HostCluster).
			With("host_cluster", "hostClusters/"+n.Placement.HostCluster)
	}
	var why []string
	for _, r := range ruledOut {
		if !strings.HasSuffix(r, ": not the one asked for") {
			why = append(why, r)
		}
	}
	if len(all) == 0 {
		why = append(why, "no host cluster is registered")
	}
	return errs.FailedPrecondition(ReasonNoHostCluster, "no host cluster can take a %s virtual cluster: %s", n.Tier, strings.Join(why, "; ")).
		With("tier", n.Tier)
}

// hostNode is the node pool of one host cluster as a fit level; known is
// false when capacity is not known per cluster. The pool is locked until
// the transaction ends.
func (s *Service) hostNode(ctx context.Context, tx *store.Tx, h HostCluster, pool, excludeVC string) (quota.Node, bool, error) {
	if !s.capacityKnown {
		return quota.Node{}, false, nil
	}
	if err := lockHostPool(ctx, tx, h.ID, pool); err != nil {
		return quota.Node{}, false, err
	}
	capacity, err := quota.ClusterCapacity(h.PoolCapacity(pool), s.overcommit)
	if err != nil {
		return quota.Node{}, false, err
	}
	used, err := virtualcluster.QuotaOnHostPool(ctx, tx, h.ID, pool, excludeVC)
	if err != nil {
		return quota.Node{}, false, err
	}
	return quota.Node{Level: LevelHostCluster, Name: HostPoolName(h.ID, pool), Capacity: capacity, Used: used}, true, nil
}

// HostNode is the node pool of the host cluster a virtual cluster runs on
// as a fit level (for a resize or a wake); ok is false when capacity is
// not known per cluster.
func (s *Service) HostNode(ctx context.Context, tx *store.Tx, hostCluster, pool, excludeVC string) (quota.Node, bool, error) {
	h, err := Get(ctx, tx, hostCluster, false)
	if err != nil {
		return quota.Node{}, false, err
	}
	return s.hostNode(ctx, tx, h, pool, excludeVC)
}

// CheckPlacement validates a request's placement against the registered
// host clusters before it is stored: a named host cluster must exist and
// take the tier, and some host cluster must carry the labels. Room is
// checked at approval. Violations go on field.
func CheckPlacement(ctx context.Context, q store.Querier, v *errs.Violations, field, tier string, p virtualcluster.Placement) error {
	all, err := All(ctx, q)
	if err != nil {
		return err
	}
	return CheckPlacementAmong(all, v, field, tier, p)
}

// CheckPlacementAmong is CheckPlacement with the host clusters already
// read (QueueAll).
func CheckPlacementAmong(all []HostCluster, v *errs.Violations, field, tier string, p virtualcluster.Placement) error {
	if p.HostCluster != "" {
		i := slices.IndexFunc(all, func(h HostCluster) bool { return h.ID == p.HostCluster })
		switch {
		case i < 0:
			v.Add(field+".host_cluster", "host cluster hostClusters/%s does not exist", p.HostCluster)
			return nil
		case !all[i].Takes(tier):
			v.Add(field+".host_cluster", "hostClusters/%s does not take %s virtual clusters (it takes %s)", p.HostCluster, tier, strings.Join(all[i].Tiers, ", "))
			return nil
		}
	}
	if len(p.Labels) == 0 {
		return nil
	}
	var have []string
	for _, h := range all {
		if (p.HostCluster == "" || h.ID == p.HostCluster) && h.Takes(tier) {
			if h.Matches(p.Labels) {
				return nil
			}
			have = append(have, describeCluster(h))
		}
	}
	v.Add(field+".host_cluster_labels", "no host cluster taking %s virtual clusters carries these labels; there are: %s", tier, strings.Join(have, "; "))
	return nil
}

// Assigned is what the virtual clusters placed on a host cluster hold in
// each of its node pools.
func Assigned(ctx context.Context, q store.Querier, h HostCluster) (map[string]quota.Resources, error) {
	out := map[string]quota.Resources{}
	for _, p := range h.Status.Pools {
		used, err := virtualcluster.QuotaOnHostPool(ctx, q, h.ID, p.Name, "")
		if err != nil {
			return nil, err
		}
		out[p.Name] = used
	}
	return out, nil
}
