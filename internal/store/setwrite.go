package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Set writes.
//
// The members of a batch whose reads were made ahead (Prefetch) send no
// statement of their own: all their writes wait for the batch's last
// round trip, the one that ends with COMMIT, and the database runs them
// one after the other while the department is locked: a SAVEPOINT and a
// handful of one-row statements per member, each with its own executor
// start, index updates and trigger calls. A SetWrite is a write that can
// also be made for many rows in one statement (UPDATE ... FROM
// unnest(...), INSERT ... SELECT FROM unnest(...)). When every member in
// that round trip queued the same writes in the same order, it carries
// each of them once for all members, after one savepoint; if that fails
// for any reason, it is undone and the members' own statements are sent
// as queued, so that a failure is still one member's and is recovered as
// it would have been.
//
// The set statements run in the members' order for each write, one write
// after the other, so member B's first write runs before member A's
// second. That is only the same as running the members one after the
// other when their writes touch different rows, or commute: Many must
// hold that for rows of different members of one batch, and the callers
// make sure (a member that would touch what an earlier one did is not
// prefetched).

// SetWrite is a deferred write that a batch can make for many members in
// one statement.
type SetWrite struct {
	// One writes one row; its arguments are $1..$n.
	One string
	// Many writes many: $k is an array of every row's k-th argument of
	// One, in the rows' order, and Many must write exactly what One would
	// for each of them, in that order.
	Many string
	// Key, when set, is the argument (1-based) naming the one row that
	// One updates: rows of a batch that name the same row are not merged,
	// as UPDATE ... FROM would apply only one of them.
	Key int
}

// ExecDeferredSet is ExecDeferred for a write that w can make for the
// batch's members together (see Set writes); args are One's.
func (t *Tx) ExecDeferredSet(w *SetWrite, args ...any) {
	t.queued = append(t.queued, stmt{sql: w.One, args: args, member: t.member, set: w})
}

// ExecDeferredSetMapped is ExecDeferredMapped for a set write: when the
// batch's set statement fails, the members' own statements are sent, so
// mapErr sees the failure of the member's one row, as it would have.
func (t *Tx) ExecDeferredSetMapped(w *SetWrite, mapErr func(error) error, args ...any) {
	t.queued = append(t.queued, stmt{sql: w.One, args: args, member: t.member, set: w, mapErr: mapErr})
}

// mergedSavepoint is what a batch's set writes run after, so that they can
// be undone as a whole.
const mergedSavepoint = "group_merged"

// setRun is one statement of a merged flush: w for rows, in order.
type setRun struct {
	w    *SetWrite
	rows [][]any
}

// mergePlan groups the queue into set statements when it is a whole number
// of members (each from its SAVEPOINT on) that all queued the same set
// writes in the same order, at least two of them; ok is false otherwise.
// A write's mapErr does not matter here: it is only ever applied to the
// member's own statement, after a set statement failed.
func (t *Tx) mergePlan() (runs []setRun, ok bool) {
	if len(t.queued) == 0 || !t.queued[0].savepoint {
		return nil, false
	}
	var shape []*SetWrite
	members, pos := 0, 0
	for _, s := range t.queued {
		if s.savepoint {
			if members > 0 && pos != len(shape) {
				return nil, false
			}
			members, pos = members+1, 0
			continue
		}
		if s.set == nil || s.member < 0 {
			return nil, false
		}
		if members == 1 {
			shape = append(shape, s.set)
		} else if pos >= len(shape) || shape[pos] != s.set {
			return nil, false
		}
		pos++
	}
	if members < 2 || len(shape) == 0 || pos != len(shape) {
		return nil, false
	}
	// Consecutive writes of one kind are one statement whose rows go
	// member by member (a member's two audit events stay next to each
	// other).
	first := make([]int, len(shape)) // run index of each shape position
	for i, w := range shape {
		if i == 0 || shape[i-1] != w {
			runs = append(runs, setRun{w: w})
		}
		first[i] = len(runs) - 1
	}
	pos = 0
	keys := map[*SetWrite]map[any]bool{}
	for _, s := range t.queued {
		if s.savepoint {
			pos = 0
			continue
		}
		if k := s.set.Key; k > 0 {
			seen := keys[s.set]
			if seen == nil {
				seen = map[any]bool{}
				keys[s.set] = seen
			}
			if seen[s.args[k-1]] {
				return nil, false
			}
			seen[s.args[k-1]] = true
		}
		r := &runs[first[pos]]
		r.rows = append(r.rows, s.args)
		pos++
	}
	return runs, true
}

// commitMerged sends the batch's last writes with COMMIT, in one round
// trip (commitQueued): as set statements when mergePlan can, as queued
// otherwise (and when the set statements fail, after undoing them). A
// member's failure leaves the transaction open, as commitQueued says, for
// runGroup to recover. It counts what it did in g.
func (t *Tx) commitMerged(ctx context.Context, g *groups) error {
	runs, ok := t.mergePlan()
	if !ok {
		return t.commitQueued(ctx)
	}
	own := t.queued
	// BEGIN goes first if it is pending; a failing BEGIN or savepoint ends
	// the batch as it would anywhere.
	t.queued = []stmt{{sql: `SAVEPOINT ` + mergedSavepoint, member: memberMerged, savepoint: true}}
	for _, r := range runs {
		t.queued = append(t.queued, stmt{sql: r.w.Many, args: columns(r.rows), member: memberMerged})
	}
	err := t.commitQueued(ctx)
	if err == nil {
		g.setFlushes.Add(1)
		return nil
	}
	if d := (*deferredError)(nil); !errors.As(err, &d) || d.member != memberMerged {
		return err
	}
	// A set statement failed, so COMMIT did not run: undo the set
	// statements and send each member's own.
	g.setFallbacks.Add(1)
	t.failed = nil
	t.roundTrip()
	if _, rerr := t.conn.Exec(ctx, `ROLLBACK TO SAVEPOINT `+mergedSavepoint); rerr != nil {
		return rollbackError{fmt.Errorf("store: undoing set writes: %w", rerr)}
	}
	t.queued = own
	return t.commitQueued(ctx)
}

// TextArrayLiteral is values as an SQL text[] literal, for a set of
// constants the code owns (never input) that the set form of a write
// needs in its text rather than as one more argument of every row.
func TextArrayLiteral(values []string) string {
	return "'{" + strings.Join(values, ",") + "}'::text[]"
}

// columns turns rows of arguments into one array argument per column.
func columns(rows [][]any) []any {
	cols := make([]any, len(rows[0]))
	for k := range cols {
		col := make([]any, len(rows))
		for i, r := range rows {
			col[i] = r[k]
		}
		cols[k] = col
	}
	return cols
}
