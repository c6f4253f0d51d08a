package app_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/devenv/pgserver"
	"github.com/gpuplane/gpuplane/internal/store"
)

// TestDatabaseRestartUnderLoad is the database half of the fault proof: 16
// clients create requests, approve some and read them back while
// PostgreSQL is stopped (fast shutdown, as an operator's restart) and
// started again on its own cluster. Every acknowledged write is in the
// database afterwards; during the outage callers get UNAVAILABLE with a
// retry hint (RetryInfo), never INTERNAL or UNKNOWN; /readyz answers 503
// while the database is away and 200 again, and calls succeed again,
// within 5 s of its return. The numbers are logged (go test -v).
func TestDatabaseRestartUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg, e := appOnOwnPostgres(t, pgserver.Options{})
	bob, alice := e.As(t, "bob"), e.As(t, "alice")

	const clients = 16
	var (
		mu       sync.Mutex
		acked    []string     // requests whose create answered OK
		approved []string     // requests whose approval answered OK
		lastOK   atomic.Int64 // unix nanos of the latest successful call
	)
	var tally callTally
	note := func(phase string, err error) {
		tally.note(phase, err)
		if err == nil {
			lastOK.Store(time.Now().UnixNano())
		}
	}
	var phase atomic.Value
	phase.Store("before")
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
				cctx, cancel := context.WithTimeout(bob, 5*time.Second)
				r, err := e.Requests.CreateRequest(cctx, &pb.CreateRequestRequest{Request: wfSmallVC("team-a", fmt.Sprintf("pg-%d-%d", c, i))})
				cancel()
				note(p, err)
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a client backing off a little
					continue
				}
				mu.Lock()
				acked = append(acked, r.GetName())
				mu.Unlock()
				if i%4 == 0 {
					actx, cancel := context.WithTimeout(alice, 5*time.Second)
					_, err := e.Requests.ApproveRequest(actx, &pb.ApproveRequestRequest{Name: r.GetName()})
					cancel()
					note(phase.Load().(string), err)
					if err == nil {
						mu.Lock()
						approved = append(approved, r.GetName())
						mu.Unlock()
					}
				}
				gctx, cancel := context.WithTimeout(bob, 5*time.Second)
				_, err = e.Requests.GetRequest(gctx, &pb.GetRequestRequest{Name: r.GetName()})
				cancel()
				note(phase.Load().(string), err)
			}
		})
	}
	// /readyz, polled throughout.
	type probe struct {
		at     time.Time
		status int
	}
	var probes []probe
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		hc := &http.Client{Timeout: 3 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			code := 0
			if resp, err := hc.Get(e.HTTPBase + "/readyz"); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			probes = append(probes, probe{time.Now(), code})
			mu.Unlock()
		}
	}()

	time.Sleep(3 * time.Second)
	phase.Store("outage")
	haltStart := time.Now()
	if err := pg.Halt(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	time.Sleep(4 * time.Second)
	if err := pg.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	phase.Store("after")
	// Recovery: the first successful call after the database is back.
	var recovered time.Duration
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok := time.Unix(0, lastOK.Load()); ok.After(back) {
			recovered = ok.Sub(back)
			break
		}
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	<-probeDone

	mu.Lock()
	defer mu.Unlock()
	t.Logf("PostgreSQL fast shutdown took %s; down %s; calls by phase and code: %v", down.Sub(haltStart).Round(time.Millisecond),
		back.Sub(down).Round(time.Millisecond), tally.counts())
	t.Logf("acknowledged: %d creates, %d approvals; first success %s after PostgreSQL accepted connections again",
		len(acked), len(approved), recovered.Round(time.Millisecond))
	tally.check(t, "outage")
	if recovered == 0 || recovered > 5*time.Second {
		t.Errorf("calls succeeded again %s after the database returned, want within 5s", recovered)
	}

	// /readyz: 503 while the database was away, 200 again within 5 s.
	var sawDown bool
	var readyAgain time.Duration
	for _, p := range probes {
		if p.at.After(down) && p.at.Before(back) && p.status == http.StatusServiceUnavailable {
			sawDown = true
		}
		if p.at.After(back) && p.status == http.StatusOK && readyAgain == 0 {
			readyAgain = p.at.Sub(back)
		}
	}
	if !sawDown {
		t.Error("/readyz never answered 503 while the database was down")
	}
	if readyAgain == 0 || readyAgain > 5*time.Second {
		t.Errorf("/readyz answered 200 again %s after the database returned, want within 5s", readyAgain)
	}
	t.Logf("/readyz: 503 during the outage %v; 200 again %s after the database returned", sawDown, readyAgain.Round(time.Millisecond))

	// Every acknowledged write is there.
	var found, foundApproved int
	ids := make([]string, len(acked))
	for i, n := range acked {
		ids[i] = n[len("requests/"):]
	}
	apr := make([]string, len(approved))
	for i, n := range approved {
		apr[i] = n[len("requests/"):]
	}
	pool := e.App.Pool()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE id = ANY($1)`, ids).Scan(&found); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE id = ANY($1) AND state <> 'PENDING'`, apr).Scan(&foundApproved); err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged writes found afterwards: creates %d/%d, approvals %d/%d", found, len(acked), foundApproved, len(approved))
	if found != len(acked) || foundApproved != len(approved) {
		sort.Strings(ids)
		t.Errorf("acknowledged writes lost: creates %d of %d found, approvals %d of %d", found, len(acked), foundApproved, len(approved))
	}
}

// appOnOwnPostgres starts a PostgreSQL server for this test alone (opts),
// migrates a database on it and starts the app against it, for tests that
// stop or crash the database.
func appOnOwnPostgres(t *testing.T, opts pgserver.Options) (*pgserver.Server, *apptest.Env) {
	t.Helper()
	ctx := context.Background()
	pg, err := pgserver.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	if err := pg.CreateDatabase(ctx, "gpuplane", ""); err != nil {
		t.Fatal(err)
	}
	dsn := pg.URL("gpuplane")
	if err := store.MigrateUp(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	return pg, apptest.Start(t, apptest.Options{Seed: true, Config: func(c *app.Config) { c.DatabaseURL = dsn }})
}

// callTally counts the answers of a database fault test by phase and code,
// and the UNAVAILABLE answers that carry no retry hint.
type callTally struct {
	mu          sync.Mutex
	byPhase     map[string]map[codes.Code]int
	noRetryHint int
}

func (c *callTally) note(phase string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	code := status.Code(err)
	if c.byPhase == nil {
		c.byPhase = map[string]map[codes.Code]int{}
	}
	if c.byPhase[phase] == nil {
		c.byPhase[phase] = map[codes.Code]int{}
	}
	c.byPhase[phase][code]++
	if code != codes.Unavailable {
		return
	}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			return
		}
	}
	c.noRetryHint++
}

// counts are the answers so far by phase and code (for logs).
func (c *callTally) counts() map[string]map[codes.Code]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPhase
}

// check fails t for any answer but OK and UNAVAILABLE, for an UNAVAILABLE
// without a retry hint, and when no call saw UNAVAILABLE in downPhase.
func (c *callTally) check(t *testing.T, downPhase string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, byCode := range c.byPhase {
		for code, n := range byCode {
			if code != codes.OK && code != codes.Unavailable {
				t.Errorf("%s: %d calls answered %v (want OK or UNAVAILABLE only)", p, n, code)
			}
		}
	}
	if c.byPhase[downPhase][codes.Unavailable] == 0 {
		t.Errorf("no call saw UNAVAILABLE in phase %q: %v", downPhase, c.byPhase[downPhase])
	}
	if c.noRetryHint > 0 {
		t.Errorf("%d UNAVAILABLE answers carried no RetryInfo", c.noRetryHint)
	}
}
