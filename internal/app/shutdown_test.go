package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// TestGracefulShutdown: calls in flight when the server is told to stop
// (its Run context ends, as on SIGTERM) finish successfully, while both
// ports refuse new connections at once. The calls are held in flight by
// row locks the test takes on the departments they need.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true})
	ctx := context.Background()

	lockConn, err := pgx.Connect(ctx, e.App.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(ctx)
	lock, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	// Two departments, one per call: changes of one department share a
	// transaction (group commit), and each call must wait on a lock of its
	// own to be seen waiting.
	apiCreateDepartment(t, e, "alice", "shutdown-b", "Shutdown B", apiQuota("0", 4000, 0))
	if _, err := lock.Exec(ctx, `SELECT 1 FROM departments WHERE id IN ('research', 'shutdown-b') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	// A REST call and a gRPC call, each creating a team in a locked
	// department, so both wait for a lock.
	type result struct {
		status int
		body   string
		err    error
	}
	restDone := make(chan result, 1)
	restBody := `{"department": "departments/research", "isolationTier": "SHARED", "quota": {"cpuMillis": "1000"}}`
	restReq, _ := http.NewRequest("POST", e.HTTPBase+"/v1/teams?teamId=slow-rest", strings.NewReader(restBody))
	restReq.Header.Set("Authorization", "Bearer "+e.Token(t, "alice"))
	restReq.Header.Set("Content-Type", "application/json")
	go func() {
		client := &http.Client{Transport: &http.Transport{}}
		resp, err := client.Do(restReq)
		if err != nil {
			restDone <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		restDone <- result{status: resp.StatusCode, body: string(b)}
	}()
	grpcDone := make(chan error, 1)
	grpcCtx := e.As(t, "alice")
	go func() {
		_, err := e.Teams.CreateTeam(grpcCtx, &pb.CreateTeamRequest{TeamId: "slow-grpc", Team: &pb.Team{
			Department: "departments/shutdown-b", IsolationTier: pb.IsolationTier_SHARED, Quota: &pb.Quota{CpuMillis: 1000}}})
		grpcDone <- err
	}()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("both calls to block on the lock", func() bool {
		// Not on lockConn: inside its transaction pg_stat_activity is a
		// snapshot taken once.
		var n int
		if err := e.App.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})

	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop() }()

	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}
	waitFor("the HTTP port to refuse connections", func() bool { return refused(e.App.HTTPAddr()) })
	waitFor("the gRPC port to refuse connections", func() bool { return refused(e.App.GRPCAddr()) })
	select {
	case r := <-restDone:
		t.Fatalf("REST call finished while its lock is held: %+v", r)
	case err := <-grpcDone:
		t.Fatalf("gRPC call finished while its lock is held: %v", err)
	case err := <-stopped:
		t.Fatalf("server stopped with calls in flight: %v", err)
	default:
	}

	// Release: both calls complete, then the server stops cleanly.
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-restDone:
		if r.err != nil || r.status != http.StatusOK {
			t.Errorf("in-flight REST call: %d %v %s", r.status, r.err, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight REST call did not finish")
	}
	select {
	case err := <-grpcDone:
		if err != nil {
			t.Errorf("in-flight gRPC call: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight gRPC call did not finish")
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("server stopped with: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
	var n int
	if err := lockConn.QueryRow(ctx, `SELECT count(*) FROM teams WHERE id IN ('slow-rest', 'slow-grpc')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("teams created by the in-flight calls: %d, %v", n, err)
	}
	if _, err := http.Get(fmt.Sprintf("%s/healthz", e.HTTPBase)); err == nil {
		t.Errorf("the stopped server still answers HTTP")
	}
}
