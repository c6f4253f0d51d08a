package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/store"
)

// TestWriteUnderADeletedTeamIsNotFound provokes the race on real
// PostgreSQL, deterministically: a transaction deletes the team and holds
// its locks while a member or a request is created for it (the handler has
// already found the team), then commits. The write's foreign key then finds
// no team: NOT_FOUND with reason PARENT_NOT_FOUND, never INTERNAL, and
// nothing is left behind.
func TestWriteUnderADeletedTeamIsNotFound(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := context.Background()
	pool := e.App.Pool()
	for i, write := range []struct {
		name string
		call func(team string) error
	}{
		{"CreateMember", func(team string) error {
			_, err := e.Members.CreateMember(e.As(t, "alice"), &pb.CreateMemberRequest{Parent: "teams/" + team,
				Member: &pb.Member{Principal: &pb.Member_User{User: "late@example.org"}, Role: pb.TeamRole_VIEWER}})
			return err
		}},
		{"CreateRequest", func(team string) error {
			_, err := e.Requests.CreateRequest(e.As(t, "alice"), &pb.CreateRequestRequest{Request: wfSmallVC(team, "late-vc")})
			return err
		}},
	} {
		t.Run(write.name, func(t *testing.T) {
			team := fmt.Sprintf("doomed-%d", i)
			apiCreateTeam(t, e, "alice", team, "departments/research", pb.IsolationTier_SHARED, apiQuota("1", 1000, apiGiB))
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			// Holds the team's row lock and, through the department totals
			// trigger, the department's.
			if _, err := tx.Exec(ctx, `DELETE FROM teams WHERE id = $1`, team); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- write.call(team) }()
			waitForLockWait(t, pool)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			st := apiWantCode(t, err, codes.NotFound)
			if ei := apiErrorInfo(t, st); ei.GetReason() != store.ReasonParentGone {
				t.Errorf("reason %q, want %s (%q)", ei.GetReason(), store.ReasonParentGone, st.Message())
			}
			var left int
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM members WHERE team_id = $1) +
				(SELECT count(*) FROM requests WHERE team_id = $1) + (SELECT count(*) FROM virtual_clusters WHERE team_id = $1)`,
				team).Scan(&left); err != nil || left != 0 {
				t.Errorf("rows left behind for the deleted team: %d %v", left, err)
			}
		})
	}
}

// waitForLockWait returns once a session of pool's database waits for a
// lock (the API call blocked behind the test's transaction).
func waitForLockWait(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never waited for the delete's locks")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConcurrentTeamDeleteAndWrites races deletes of teams against member
// and request creates for them from 8 clients: every answer is OK,
// NOT_FOUND or FAILED_PRECONDITION (a delete that met a new request),
// never INTERNAL.
func TestConcurrentTeamDeleteAndWrites(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	seen := map[codes.Code]int{}
	var mu sync.Mutex
	record := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		seen[status.Code(err)]++
		if c := status.Code(err); c != codes.OK && c != codes.NotFound && c != codes.FailedPrecondition {
			t.Errorf("%v", err)
		}
	}
	for round := range 20 {
		team := fmt.Sprintf("race-%d", round)
		apiCreateTeam(t, e, "alice", team, "departments/research", pb.IsolationTier_SHARED, apiQuota("0", 100, 0))
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				switch w {
				case 0:
					_, err = e.Teams.DeleteTeam(alice, &pb.DeleteTeamRequest{Name: "teams/" + team})
				case 1, 2, 3:
					_, err = e.Requests.CreateRequest(alice, &pb.CreateRequestRequest{Request: wfSmallVC(team, fmt.Sprintf("r%d-%d", round, w))})
				default:
					_, err = e.Members.CreateMember(alice, &pb.CreateMemberRequest{Parent: "teams/" + team,
						Member: &pb.Member{Principal: &pb.Member_User{User: fmt.Sprintf("u%d@example.org", w)}, Role: pb.TeamRole_VIEWER}})
				}
				record(err)
			}()
		}
		wg.Wait()
	}
	t.Logf("answers: %v", seen)
}
