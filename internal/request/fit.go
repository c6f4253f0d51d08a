package request

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Fit is the "will it fit" answer for one request.
type Fit struct {
	Field      string
	Shortfalls []quota.Shortfall
	Below      []quota.BelowAllocation
	// Children refuses a team quota below what its virtual clusters hold
	// (tenancy.BelowChildrenError), nil when it is not.
	Children error
	// HostCluster is where a new virtual cluster would be placed, or the
	// one the virtual cluster runs on ("" when it is not placed).
	HostCluster string
	// NoHostCluster says why no host cluster can take a new virtual
	// cluster whatever its room (fleet.ReasonNoHostCluster), nil otherwise.
	NoHostCluster error
	// hostCandidates are the host clusters that could take a new virtual
	// cluster but for room.
	hostCandidates []string
}

// Fits reports whether the request can be approved now.
func (o Fit) Fits() bool {
	return len(o.Shortfalls) == 0 && len(o.Below) == 0 && o.Children == nil && o.NoHostCluster == nil
}

// Err is the error an approval fails with: FAILED_PRECONDITION naming the
// level, the resource and how much is free.
func (o Fit) Err() error {
	if o.NoHostCluster != nil {
		return o.NoHostCluster
	}
	if len(o.hostCandidates) > 1 && len(o.Shortfalls) > 0 {
		// A new virtual cluster that fits its team but no host cluster.
		err := quota.FitError(o.Field, o.Shortfalls)
		if e, ok := errs.As(err); ok {
			e.Kind = errs.KindFailedPrecondition
			var each []string
			for _, sf := range o.Shortfalls {
				each = append(each, fmt.Sprintf("%s: %s free, %s requested (%s)", sf.Name, sf.Free, sf.Requested, sf.Resource))
			}
			e.Message = "no host cluster has room: " + strings.Join(each, "; ")
		}
		return err
	}
	if len(o.Shortfalls) > 0 {
		err := quota.FitError(o.Field, o.Shortfalls)
		if e, ok := errs.As(err); ok {
			e.Kind = errs.KindFailedPrecondition
			first := o.Shortfalls[0]
			e.Message = fmt.Sprintf("does not fit in %s %s: %s free, %s requested (%s)",
				first.Level, first.Name, first.Free, first.Requested, first.Resource)
			e.With("free", first.Free).With("requested", first.Requested)
		}
		return err
	}
	if o.Children != nil {
		return o.Children
	}
	return quota.ShrinkError(o.Field, o.Below)
}

// checkFit computes the fit of a payload for team inside q. For approvals
// the caller holds the department lock so the answer stays true until
// commit.
// l, when set, holds what Decide already read (the team's held quota and
// the host clusters).
func (s *Service) checkFit(ctx context.Context, q *store.Tx, team tenancy.Team, p Payload, vcID string, l *lockedRows) (Fit, error) {
	want, _, accept := p.wanted()
	switch p.Kind() {
	case KindCreateVirtualCluster:
		o := Fit{Field: "request.create_virtual_cluster.spec.quota"}
		var node quota.Node
		var hosts []fleet.HostCluster
		if l != nil {
			node, hosts = tenancy.TeamNodeOf(team.ID, team.Quota, l.held), l.hosts
		} else {
			var err error
			if node, err = tenancy.TeamNode(ctx, q, team.ID, team.Quota, vcID); err != nil {
				return o, err
			}
		}
		o.Shortfalls = quota.CheckFit([]quota.Node{node}, want)
		if len(o.Shortfalls) > 0 {
			return o, nil // the team's quota is the first thing to talk about
		}
		d, err := s.fleet.PlaceAmong(ctx, q, hosts, fleet.Need{VirtualCluster: vcID, Tier: string(team.Tier), Pool: team.Pool,
			Quota: want, Placement: p.Create.Spec.Placement})
		if errs.KindOf(err) == errs.KindFailedPrecondition {
			o.NoHostCluster = err
			return o, nil
		}
		if err != nil {
			return o, err
		}
		o.HostCluster, o.Shortfalls, o.hostCandidates = d.HostCluster, d.Shortfalls, d.Candidates
		return o, nil
	case KindChangeVirtualClusterQuota:
		o := Fit{Field: "request.change_virtual_cluster_quota.quota"}
		vc, err := virtualcluster.Get(ctx, q, vcID, false)
		if err != nil {
			return o, err
		}
		node, err := tenancy.TeamNode(ctx, q, team.ID, team.Quota, vcID)
		if err != nil {
			return o, err
		}
		path := []quota.Node{node}
		o.HostCluster = vc.HostCluster
		if vc.HostCluster != "" {
			// Growth must fit the node pool of the host cluster it runs on.
			if hn, ok, err := s.fleet.HostNode(ctx, q, vc.HostCluster, team.Pool, vcID); err != nil {
				return o, err
			} else if ok {
				path = append(path, hn)
			}
		}
		o.Shortfalls = quota.CheckFitChange(path, vc.Spec.Quota, want)
		o.Below = quota.ShrinkCheck(want, vc.Allocated, accept)
		return o, nil
	case KindChangeTeamQuota:
		o := Fit{Field: "request.change_team_quota.quota"}
		budget, err := tenancy.Budget(ctx, q, team.Department, false)
		if err != nil {
			return o, err
		}
		node, err := tenancy.DepartmentNode(ctx, q, team.Department, budget, team.ID)
		if err != nil {
			return o, err
		}
		o.Shortfalls = quota.CheckFitChange([]quota.Node{node}, team.Quota, want)
		// The team's quota is carved from its node pool too.
		pool, ok, err := s.tenancy.PoolNode(ctx, q, team.Pool, team.ID)
		if err != nil {
			return o, err
		}
		if ok {
			o.Shortfalls = append(o.Shortfalls, quota.CheckFitChange([]quota.Node{pool}, team.Quota, want)...)
		}
		children, err := tenancy.ChildrenOfTeam(ctx, q, team.ID)
		if err != nil {
			return o, err
		}
		o.Children = tenancy.BelowChildrenError(o.Field, "team", names.Team(team.ID), want, children)
		allocated, err := virtualcluster.AllocatedToTeam(ctx, q, team.ID)
		if err != nil {
			return o, err
		}
		o.Below = quota.ShrinkCheck(want, allocated, accept)
		return o, nil
	}
	return Fit{}, nil
}

// CheckFit answers "would it fit if approved now?" for a payload of team
// (a stored request's, or one not yet created), in a read-only transaction.
func (s *Service) CheckFit(ctx context.Context, team tenancy.Team, p Payload, vcID string) (Fit, error) {
	var out Fit
	err := s.db.InTx(ctx, store.TxOptions{ReadOnly: true, MaxAttempts: 1}, func(ctx context.Context, tx *store.Tx) error {
		var err error
		out, err = s.checkFit(ctx, tx, team, p, vcID, nil)
		return err
	})
	return out, err
}

// VirtualClusterID is the id of the virtual cluster a request is about
// ("" for a team quota change).
func (r Request) VirtualClusterID() string { return r.vcID() }
