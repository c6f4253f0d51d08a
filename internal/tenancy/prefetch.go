package tenancy

import (
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// TeamChanges reads ahead for the team creates that take quota and the
// team updates that meet in one batch of their department's changes
// (store.Prefetch): the department (locked) once, and for each change in
// turn what it would read first: the team (locked, for an update), what
// the department's other teams are assigned, and what the team's virtual
// clusters hold. Pass it with a TeamChange to store.DB.InGroupTxPrefetched
// and the same TeamChange to CreateTeamAhead or UpdateTeamAhead.
var TeamChanges = &store.Prefetch{Read: readTeamChanges, Done: teamChanged}

// TeamChange is one team create's or update's part of a TeamChanges
// prefetch.
type TeamChange struct {
	dept, id string
	create   bool
	// What readTeamChanges read.
	cur      Team
	assigned quota.Resources // what the department's other teams are assigned
	children quota.Resources // what the team's virtual clusters hold
	failed   error
	// again: an earlier change of the batch is about the same team.
	again bool
	batch *teamBatch
	// from and to are the team's quota before and after the change, as
	// the change left it (Done adds the difference).
	from, to quota.Resources
}

// teamBatch is what the prefetched changes of one batch share.
type teamBatch struct {
	budget quota.Resources
	// moved is how much each team's quota changed in the changes ahead:
	// what was read as assigned does not include it.
	moved map[string]quota.Resources
}

// NewTeamCreate is the TeamChange of creating t (which takes quota: a
// team without quota takes no department lock and needs no prefetch).
func NewTeamCreate(t Team) *TeamChange {
	return &TeamChange{dept: t.Department, id: t.ID, create: true}
}

// NewTeamUpdate is the TeamChange of updating team id of dept.
func NewTeamUpdate(dept, id string) *TeamChange { return &TeamChange{dept: dept, id: id} }

func readTeamChanges(b *store.Batch, items []any) {
	batch := &teamBatch{moved: map[string]quota.Resources{}}
	first := items[0].(*TeamChange)
	// One department (the batch's key); its lock first, as each change
	// takes it.
	QueueLockDepartment(b, &batch.budget, first.dept)
	seen := map[string]bool{}
	for _, it := range items {
		c := it.(*TeamChange)
		*c = TeamChange{dept: c.dept, id: c.id, create: c.create, batch: batch}
		if seen[c.id] {
			c.again = true
			continue
		}
		seen[c.id] = true
		b.Guarded(func(err error) {
			if c.failed == nil {
				c.failed = err
			}
		}, func(b *store.Batch) {
			if !c.create {
				QueueGetTeam(b, &c.cur, c.id, true)
			}
			queueAssignedExcept(b, &c.assigned, c.dept, c.id)
			if !c.create {
				virtualcluster.QueueQuotaOfTeam(b, &c.children, c.id, "")
			}
		})
	}
}

// ahead reports whether the change may use what was read for it (tx says
// the prefetch holds) and returns the department's budget and what its
// other teams are assigned now: as read, plus what the changes ahead of
// this one moved.
func (c *TeamChange) ahead(tx *store.Tx) (budget, assigned quota.Resources, ok bool) {
	if c == nil || !tx.Prefetched() || c.batch == nil || c.again || c.failed != nil {
		return budget, assigned, false
	}
	// Its own team is not among them: a change ahead of the same team
	// makes this one read for itself (again).
	assigned = c.assigned
	for _, moved := range c.batch.moved {
		assigned = assigned.Add(moved)
	}
	return c.batch.budget, assigned, true
}

// changed records what the change set its team's quota from and to (Done
// adds the difference once the whole change succeeded); from == to is
// nothing, and is where every run of a change starts.
func (c *TeamChange) changed(from, to quota.Resources) {
	if c != nil {
		c.from, c.to = from, to
	}
}

func teamChanged(item any) {
	c := item.(*TeamChange)
	c.batch.moved[c.id] = c.batch.moved[c.id].Add(c.to.Sub(c.from))
}
