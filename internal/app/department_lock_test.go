package app_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// TestTeamWithoutQuotaSkipsTheDepartmentLock: while a change that moves
// quota holds the department's lock (here a transaction holding the same
// row lock LockDepartment takes), a team without quota is created at once,
// and a team with quota waits for the lock and is checked against the
// budget as it is after that change.
func TestTeamWithoutQuotaSkipsTheDepartmentLock(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := context.Background()
	pool := e.App.Pool()

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM departments WHERE id = 'research' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}

	free := make(chan error, 1)
	go func() {
		_, err := e.Teams.CreateTeam(e.As(t, "alice"), &pb.CreateTeamRequest{TeamId: "no-quota", Team: &pb.Team{
			Department: "departments/research", DisplayName: "No quota", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("0", 0, 0)}})
		free <- err
	}()
	select {
	case err := <-free:
		if err != nil {
			t.Fatalf("team without quota: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a team without quota waited for the department lock")
	}

	withQuota := make(chan error, 1)
	go func() {
		_, err := e.Teams.CreateTeam(e.As(t, "alice"), &pb.CreateTeamRequest{TeamId: "with-quota", Team: &pb.Team{
			Department: "departments/research", DisplayName: "With quota", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("1", 0, 0)}})
		withQuota <- err
	}()
	waitForLockWait(t, pool)
	select {
	case err := <-withQuota:
		t.Fatalf("a team with quota did not wait for the department lock (err %v)", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-withQuota; err != nil {
		t.Fatalf("team with quota after the lock was released: %v", err)
	}
}

// TestTeamWithoutQuotaInAMissingDepartment: without the department lock the
// foreign key finds the missing department; the caller still gets
// NOT_FOUND naming it, not a "deleted meanwhile" race, and nothing stored.
func TestTeamWithoutQuotaInAMissingDepartment(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	_, err := e.Teams.CreateTeam(e.As(t, "alice"), &pb.CreateTeamRequest{TeamId: "orphan", Team: &pb.Team{
		Department: "departments/never-was", DisplayName: "Orphan", IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("0", 0, 0)}})
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != "departments/never-was not found" {
		t.Fatalf("got %v %q, want NOT_FOUND naming departments/never-was", st.Code(), st.Message())
	}
	if _, err := e.Teams.GetTeam(e.As(t, "alice"), &pb.GetTeamRequest{Name: "teams/orphan"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the orphan team was stored (get: %v)", err)
	}
}
