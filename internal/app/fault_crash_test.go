package app_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/devenv/pgserver"
)

// TestAcknowledgedCreatesSurvivePostgresCrash is the durability proof: an
// answer of OK to a create means the row survives a crash of PostgreSQL.
// PostgreSQL runs with its durable defaults (synchronous_commit and fsync
// on, checked through the server's own pool); 16 clients create teams and
// requests and approve some; right after the N-th acknowledged create (N
// random) the postmaster and all its backends get SIGKILL, with the other
// clients' calls in flight. Meanwhile callers get UNAVAILABLE with a retry
// hint, never another error. PostgreSQL then starts on the same data
// directory (crash recovery replays the WAL), and every acknowledged create
// and approval is there, through the API and in the tables.
//
// The kernel survives a SIGKILL, so what PostgreSQL had written but not yet
// fsynced survives too: this shows that the server answers only after the
// commit's WAL left PostgreSQL's memory (which synchronous_commit=off would
// not wait for), not that the disk keeps it through a power cut.
func TestAcknowledgedCreatesSurvivePostgresCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, e := appOnOwnPostgres(t, pgserver.Options{Durable: true})
	alice, bob := e.As(t, "alice"), e.As(t, "bob")
	pool := e.App.Pool()
	// Through the server's pool, so that a setting the server made on its
	// connections counts too.
	for _, name := range []string{"synchronous_commit", "fsync"} {
		var v string
		if err := pool.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "on" {
			t.Errorf("the server's connections run with %s = %s, want on", name, v)
		}
	}

	const clients = 16
	// Generous per call: all clients write into one department, whose
	// changes share transactions and wait for each other's WAL flush, and on
	// a busy machine a flush can take a while. A call that outlives this is
	// a hang, not slowness.
	const callTimeout = 20 * time.Second
	killAfter := int64(50 + rand.IntN(200))
	var (
		mu          sync.Mutex
		teams       []string     // team ids whose create answered OK
		failedTeams []string     // team ids whose create answered an error
		requests    []string     // request ids whose create answered OK
		approved    []string     // request ids whose approval answered OK
		lastOK      atomic.Int64 // unix nanos of the latest acknowledged create
		acks        atomic.Int64
		killedAt    time.Time
	)
	killed := make(chan error, 1)
	var phase atomic.Value
	phase.Store("before")
	var tally callTally
	note := tally.note
	// acked runs right after an OK create was recorded; the killAfter-th
	// one crashes PostgreSQL from this client's goroutine while the other
	// clients' calls are in flight.
	acked := func() {
		lastOK.Store(time.Now().UnixNano())
		if acks.Add(1) == killAfter {
			mu.Lock()
			killedAt = time.Now()
			mu.Unlock()
			err := pg.Kill()
			phase.Store("crashed")
			killed <- err
		}
	}
	loadStart := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load().(string)
				if c%2 == 0 {
					id := fmt.Sprintf("crash-t%d-%d", c, i)
					cctx, cancel := context.WithTimeout(alice, callTimeout)
					_, err := e.Teams.CreateTeam(cctx, &pb.CreateTeamRequest{TeamId: id,
						Team: &pb.Team{Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED}})
					cancel()
					note(p, err)
					mu.Lock()
					if err == nil {
						teams = append(teams, id)
					} else {
						failedTeams = append(failedTeams, id)
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(20 * time.Millisecond) // a client backing off a little
						continue
					}
					acked()
					continue
				}
				cctx, cancel := context.WithTimeout(bob, callTimeout)
				r, err := e.Requests.CreateRequest(cctx, &pb.CreateRequestRequest{Request: wfSmallVC("team-a", fmt.Sprintf("crash-r%d-%d", c, i))})
				cancel()
				note(p, err)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				id := strings.TrimPrefix(r.GetName(), "requests/")
				mu.Lock()
				requests = append(requests, id)
				mu.Unlock()
				acked()
				if i%4 == 1 {
					actx, cancel := context.WithTimeout(alice, callTimeout)
					_, err := e.Requests.ApproveRequest(actx, &pb.ApproveRequestRequest{Name: r.GetName()})
					cancel()
					note(phase.Load().(string), err)
					if err == nil {
						mu.Lock()
						approved = append(approved, id)
						mu.Unlock()
					}
				}
			}
		})
	}
	stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopClients)

	select {
	case err := <-killed:
		if err != nil {
			t.Fatalf("kill PostgreSQL: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("only %d creates acknowledged in 2 minutes, wanted %d before the crash", acks.Load(), killAfter)
	}
	if conn, err := pgx.Connect(ctx, pg.URL("postgres")); err == nil {
		conn.Close(ctx)
		t.Fatal("PostgreSQL still accepts connections after the kill")
	}
	// Clients keep calling against the dead database for a moment.
	time.Sleep(time.Second)
	if err := pg.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	phase.Store("after")
	log, err := os.ReadFile(filepath.Join(pg.Dir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	// What PostgreSQL logs when it starts after a crash rather than after a
	// shutdown: the acknowledged rows can only come back through the WAL.
	if !strings.Contains(string(log), "automatic recovery in progress") {
		t.Error("PostgreSQL did not run crash recovery after the kill")
	}
	// Ready again: /readyz answers 200 and creates are acknowledged again.
	hc := &http.Client{Timeout: 3 * time.Second}
	var ready, recovered time.Duration
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && (ready == 0 || recovered == 0); time.Sleep(10 * time.Millisecond) {
		if ready == 0 {
			if resp, err := hc.Get(e.HTTPBase + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = time.Since(back)
				}
			}
		}
		if ok := time.Unix(0, lastOK.Load()); recovered == 0 && ok.After(back) {
			recovered = ok.Sub(back)
		}
	}
	if ready == 0 || recovered == 0 {
		t.Fatalf("server not back 20s after PostgreSQL's recovery: /readyz 200 after %s, first create after %s", ready, recovered)
	}
	time.Sleep(time.Second)
	stopClients()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("PostgreSQL killed right after acknowledged create #%d, %s into the load; crash recovery and start took %s; calls by phase and code: %v",
		killAfter, killedAt.Sub(loadStart).Round(time.Millisecond), back.Sub(killedAt).Round(time.Millisecond), tally.counts())
	t.Logf("after the restart: /readyz 200 after %s, first acknowledged create after %s",
		ready.Round(time.Millisecond), recovered.Round(time.Millisecond))
	tally.check(t, "crashed")

	// Every acknowledged create and approval is there: through the API...
	var lostAPI []string
	for _, id := range teams {
		gctx, cancel := context.WithTimeout(alice, callTimeout)
		_, err := e.Teams.GetTeam(gctx, &pb.GetTeamRequest{Name: "teams/" + id})
		cancel()
		if err != nil {
			lostAPI = append(lostAPI, fmt.Sprintf("teams/%s: %v", id, status.Code(err)))
		}
	}
	isApproved := map[string]bool{}
	for _, id := range approved {
		isApproved[id] = true
	}
	for _, id := range requests {
		gctx, cancel := context.WithTimeout(bob, callTimeout)
		r, err := e.Requests.GetRequest(gctx, &pb.GetRequestRequest{Name: "requests/" + id})
		cancel()
		switch {
		case err != nil:
			lostAPI = append(lostAPI, fmt.Sprintf("requests/%s: %v", id, status.Code(err)))
		case isApproved[id] && r.GetState() == pb.Request_PENDING:
			lostAPI = append(lostAPI, fmt.Sprintf("requests/%s: approval lost (PENDING)", id))
		}
	}
	if len(lostAPI) > 0 {
		t.Errorf("%d acknowledged writes missing through the API after the crash, e.g. %v", len(lostAPI), lostAPI[:min(len(lostAPI), 5)])
	}
	// ... and in the tables.
	var foundTeams, foundRequests, foundApproved, unackedTeams int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM teams WHERE id = ANY($1)),
		(SELECT count(*) FROM requests WHERE id = ANY($2)),
		(SELECT count(*) FROM requests WHERE id = ANY($3) AND state <> 'PENDING'),
		(SELECT count(*) FROM teams WHERE id = ANY($4))`,
		teams, requests, approved, failedTeams).Scan(&foundTeams, &foundRequests, &foundApproved, &unackedTeams); err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged writes found after the crash: team creates %d/%d, request creates %d/%d, approvals %d/%d; "+
		"%d of %d team creates that answered an error were committed anyway",
		foundTeams, len(teams), foundRequests, len(requests), foundApproved, len(approved), unackedTeams, len(failedTeams))
	if foundTeams != len(teams) || foundRequests != len(requests) || foundApproved != len(approved) {
		t.Errorf("acknowledged writes lost in the crash: team creates %d of %d found, request creates %d of %d, approvals %d of %d",
			foundTeams, len(teams), foundRequests, len(requests), foundApproved, len(approved))
	}
}
