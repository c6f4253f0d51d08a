package request

import (
	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// approvalPrefetch reads ahead for the approvals of new virtual clusters
// that meet in one batch of their department's changes (store.Prefetch):
// for each, what Decide would read first (its request, team and virtual
// cluster, locked, and what the team holds), and the host clusters once
// for all. Each kind of row is read for the whole batch in one statement,
// in the order of Decide's own locks (department, requests, teams,
// virtual clusters), each team once.
var approvalPrefetch = &store.Prefetch{Read: readApprovals, Done: approved}

// prefetchedApproval is one approval's part of a prefetch.
type prefetchedApproval struct {
	seen Request
	// What readApprovals read: cur and vc are set when found.
	cur          Request
	vc           virtualcluster.VirtualCluster
	foundRequest bool
	foundVC      bool
	team         *teamAhead
	// again: an earlier approval of the batch is about the same request or
	// virtual cluster, so this one must see what that one did.
	again bool
	batch *approvalBatch
	// result is the request as the approval left it (Decide sets it).
	result Request
}

// teamAhead is a team's part of a prefetch, shared by its approvals.
type teamAhead struct {
	team tenancy.Team
	// held is what the team's virtual clusters hold; it leaves none of
	// them out, which is what Decide's read leaving the approval's own
	// out gives while that one holds nothing (usable checks).
	held quota.Resources
	// failed: the team was not found; its approvals read for themselves
	// and meet the error there.
	failed error
}

// approvalBatch is what the prefetched approvals of one batch share.
type approvalBatch struct {
	hosts []fleet.HostCluster
	// taken is what the approvals ahead in the batch made each team hold:
	// the held quota read for a team does not include it.
	taken map[string]quota.Resources
	// stale: an approval ahead changed what taken cannot account for; the
	// ones after it read for themselves.
	stale bool
}

func readApprovals(b *store.Batch, items []any) {
	batch := &approvalBatch{taken: map[string]quota.Resources{}}
	first := items[0].(*prefetchedApproval)
	// All are of one department (the batch's key); its lock comes first,
	// as in Decide.
	var budget quota.Resources
	tenancy.QueueLockDepartment(b, &budget, first.seen.Department)
	byRequest, byVC, teams := map[string]*prefetchedApproval{}, map[string]*prefetchedApproval{}, map[string]*teamAhead{}
	var requestIDs, vcIDs, teamIDs []string
	for _, it := range items {
		p := it.(*prefetchedApproval)
		*p = prefetchedApproval{seen: p.seen, batch: batch}
		vc := *p.seen.VirtualCluster
		if byRequest[p.seen.ID] != nil || byVC[vc] != nil {
			p.again = true
			continue
		}
		byRequest[p.seen.ID], byVC[vc] = p, p
		requestIDs, vcIDs = append(requestIDs, p.seen.ID), append(vcIDs, vc)
		if teams[p.seen.Team] == nil {
			teams[p.seen.Team] = &teamAhead{}
			teamIDs = append(teamIDs, p.seen.Team)
		}
		p.team = teams[p.seen.Team]
	}
	QueueGetLocked(b, requestIDs, func(r Request) {
		if p := byRequest[r.ID]; p != nil {
			p.cur, p.foundRequest = r, true
		}
	})
	for _, id := range teamIDs {
		ta := teams[id]
		b.Guarded(func(err error) {
			if ta.failed == nil {
				ta.failed = err
			}
		}, func(b *store.Batch) {
			tenancy.QueueGetTeam(b, &ta.team, id, true)
			virtualcluster.QueueQuotaOfTeam(b, &ta.held, id, "")
		})
	}
	virtualcluster.QueueGetLocked(b, vcIDs, func(v virtualcluster.VirtualCluster) {
		if p := byVC[v.ID]; p != nil {
			p.vc, p.foundVC = v, true
		}
	})
	fleet.QueueAll(b, &batch.hosts)
}

// usable reports whether the approval may decide on what was read for it:
// everything was found, and its virtual cluster holds no quota (the
// team's held quota was read with it in).
func (p *prefetchedApproval) usable() bool {
	return p.batch != nil && !p.again && !p.batch.stale && p.foundRequest && p.foundVC &&
		p.team != nil && p.team.failed == nil && !p.vc.Phase.HoldsQuota()
}

// rows are the approval's locked rows as Decide would have read them now:
// its team's held quota includes what the approvals ahead of it took.
func (p *prefetchedApproval) rows() *lockedRows {
	return &lockedRows{team: p.team.team, vc: p.vc, held: p.team.held.Add(p.batch.taken[p.seen.Team]), hosts: p.batch.hosts}
}

// approved records, for the approvals after it in the batch, what a
// successful approval (prefetched or not) made its team hold: the quota of
// its virtual cluster, now PROVISIONING on a host cluster, as the
// held_quota trigger counts it. What it cannot account for makes the rest
// of the batch read for itself.
func approved(item any) {
	p := item.(*prefetchedApproval)
	r := p.result
	if r.State != StateApproved || r.locked == nil || r.locked.vc.Spec.Sleep || !virtualcluster.PhaseProvisioning.HoldsQuota() {
		p.batch.stale = true
		return
	}
	p.batch.taken[r.Team] = p.batch.taken[r.Team].Add(r.locked.vc.Spec.Quota)
}

// Creates reads ahead for the request creates that meet in one batch of
// their department's changes (store.Prefetch): what each reads first, the
// department (locked) and the enabled approval policies, is the same for
// all of them and read once. Neither changes within the batch: department
// budgets and policies are changed outside the department's batches.
var Creates = &store.Prefetch{Read: readCreates}

// CreateAhead is one request create's part of a Creates prefetch (pass
// the same one to store.DB.InGroupTxPrefetched and Service.CreateAhead).
type CreateAhead struct {
	dept  string
	batch *createBatch
}

type createBatch struct {
	budget quota.Resources
	pols   []Policy
}

// NewCreateAhead is the CreateAhead of a request of a team of dept.
func NewCreateAhead(dept string) *CreateAhead { return &CreateAhead{dept: dept} }

func readCreates(b *store.Batch, items []any) {
	batch := &createBatch{}
	tenancy.QueueLockDepartment(b, &batch.budget, items[0].(*CreateAhead).dept)
	queueEnabledPolicies(b, &batch.pols)
	for _, it := range items {
		it.(*CreateAhead).batch = batch
	}
}

// ahead returns what was read for the create, when tx says it holds.
func (c *CreateAhead) ahead(tx *store.Tx) (quota.Resources, []Policy, bool) {
	if c == nil || c.batch == nil || !tx.Prefetched() {
		return quota.Resources{}, nil, false
	}
	return c.batch.budget, c.batch.pols, true
}
