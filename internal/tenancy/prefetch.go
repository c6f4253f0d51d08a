package tenancy

import (
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// TeamChanges reads ahead for the team creates that take quota and the
// team updates that meet in one batch of their department's changes
// (store.Prefetch): the department (locked) and what its teams are
// assigned once, and for all the changes what each would read first: its
// team (locked; a create's team, if its id is taken, is locked too and
// the create then fails) and what the team's virtual clusters hold (for
// an update), each kind of row in one statement for the whole batch, in
// the changes' order. Pass it with a TeamChange to store.DB.InGroupTxPrefetched
// and the same TeamChange to CreateTeamAhead or UpdateTeamAhead.
var TeamChanges = &store.Prefetch{Read: readTeamChanges, Done: teamChanged}

// TeamChange is one team create's or update's part of a TeamChanges
// prefetch.
type TeamChange struct {
	dept, id string
	create   bool
	// What readTeamChanges read: cur when found.
	cur      Team
	found    bool
	children quota.Resources // what the team's virtual clusters hold
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
	// assigned is what all the department's teams were assigned.
	assigned quota.Resources
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
	queueAssigned(b, &batch.assigned, first.dept)
	byID := map[string]*TeamChange{}
	var ids, updated []string
	for _, it := range items {
		c := it.(*TeamChange)
		*c = TeamChange{dept: c.dept, id: c.id, create: c.create, batch: batch}
		if byID[c.id] != nil {
			c.again = true
			continue
		}
		byID[c.id] = c
		ids = append(ids, c.id)
		if !c.create {
			updated = append(updated, c.id)
		}
	}
	queueGetTeamsLocked(b, ids, func(t Team) {
		if c := byID[t.ID]; c != nil {
			c.cur, c.found = t, true
		}
	})
	if len(updated) > 0 {
		virtualcluster.QueueQuotaOfTeams(b, updated, func(team string, held quota.Resources) {
			if c := byID[team]; c != nil {
				c.children = held
			}
		})
	}
}

// ahead reports whether the change may use what was read for it (tx says
// the prefetch holds) and returns the department's budget and what its
// other teams are assigned now: as read, plus what the changes ahead of
// this one moved.
func (c *TeamChange) ahead(tx *store.Tx) (budget, assigned quota.Resources, ok bool) {
	// An update of a team not found reads for itself (and meets the
	// not-found there).
	if c == nil || !tx.Prefetched() || c.batch == nil || c.again || (!c.create && !c.found) {
		return budget, assigned, false
	}
	// What the other teams are assigned: the team's own quota is taken
	// out when it is one of the department's (as assignedExcept does); a
	// change ahead of the same team makes this one read for itself
	// (again), so none of the moves below is its own.
	assigned = c.batch.assigned
	if c.found && c.cur.Department == c.dept {
		assigned = assigned.Sub(c.cur.Quota)
	}
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
