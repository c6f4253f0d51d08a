package app_test

import (
	"fmt"
	"sync"
	"testing"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// groupCounters reads the group-commit counters off the private metrics
// port: batches, members and round trips.
func groupCounters(t *testing.T, e *apptest.Env) (batches, members, trips float64) {
	t.Helper()
	mfs := apptest.ParseMetrics(t, apptest.Scrape(t, e.MetricsBase+"/metrics"))
	get := func(name string) float64 {
		v, ok := apptest.MetricValue(mfs[name], nil)
		if !ok {
			t.Fatalf("/metrics has no counter %s", name)
		}
		return v
	}
	return get("gpuplane_store_group_batches_total"), get("gpuplane_store_group_members_total"),
		get("gpuplane_store_group_round_trips_total")
}

// TestGroupCommitMetricsCountTheAPIsChanges: every change into a
// department is one member of a group-commit batch, and the metrics say
// how many batches carried them and how many round trips they took.
func TestGroupCommitMetricsCountTheAPIsChanges(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	b0, m0, r0 := groupCounters(t, e)

	apiCreateTeam(t, e, "alice", "group-metrics-one", "departments/research", pb.IsolationTier_SHARED, apiQuota("0", 0, 0))
	b1, m1, r1 := groupCounters(t, e)
	if b1-b0 != 1 || m1-m0 != 1 {
		t.Fatalf("one team create: %v batches, %v members, want 1 and 1", b1-b0, m1-m0)
	}
	if r1-r0 < 1 {
		t.Fatalf("one team create took %v round trips", r1-r0)
	}

	// Concurrent creates into one department: each is counted once, and
	// batches never outnumber them.
	const n = 8
	ctx := e.As(t, "alice")
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("group-metrics-%d", i)
			_, err := e.Teams.CreateTeam(ctx, &pb.CreateTeamRequest{TeamId: id, Team: &pb.Team{
				Department: "departments/research", DisplayName: id, IsolationTier: pb.IsolationTier_SHARED, Quota: apiQuota("0", 0, 0)}})
			errc <- err
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	b2, m2, r2 := groupCounters(t, e)
	if m2-m1 != n {
		t.Errorf("%d concurrent creates counted as %v members", n, m2-m1)
	}
	if b2-b1 < 1 || b2-b1 > n {
		t.Errorf("%d concurrent creates ran in %v batches, want 1 to %d", n, b2-b1, n)
	}
	if r2-r1 < b2-b1 {
		t.Errorf("%v batches took only %v round trips", b2-b1, r2-r1)
	}
}
