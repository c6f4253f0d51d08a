package app_test

// Benchmarks for the project's performance bar:
//
//	creates, quota changes, requests and approvals into one department
//	(auth + validation + audit, one transaction each) at >= 3x the rate of
//	creating CRD objects in a kube-apiserver on the same machine, with p99
//	< 25 ms at 16 concurrent clients and < 100 ms at 64; reads >= 5x CRD
//	gets. List pages cost the same at 100 or 100,000 rows. A raw pgx insert
//	of the same row is printed beside them as the ceiling (no bar).
//
// Run them with
//
//	go test -run '^$' -bench . -benchtime=3s ./internal/app/
//
// Everything is real and on this machine: the gpuplane server runs
// in-process (apptest: random ports, its own PostgreSQL database, the
// in-process OIDC issuer), REST calls go over HTTP with keep-alive through
// the grpc-gateway to the gRPC port, and the CRD side is a real
// kube-apiserver + etcd (envtest) talked to with client-go's dynamic client.
// The load generator shares the CPUs with the servers, on both sides.
//
// Every measured loop is 16 client goroutines (benchClients) pulling
// operation numbers from one counter until b.N are done, each operation
// timed on its own. Reported: ns/op (wall time / b.N, i.e. 1/throughput),
// ops/s, and p50_ms / p99_ms of the per-request latencies at 16 clients.
// Writes into one department also report, from the counters behind the
// server's group-commit metrics, members/batch (changes per group-commit transaction) and trips/member
// (round trips to PostgreSQL per change: a batch runs its members one after
// the other under the department lock, so each trip is serial time).
//
// Sub-benchmarks whose names are not in the bar are diagnostics that split
// the REST cost. Changes of one department share transactions (group
// commit, store.DB.InGroupTx), so their cost depends on how many arrive at
// once, and must not depend on the department's size: REST creates b.N
// teams into one new department; REST_dept100 starts a new department every
// 100 creates; REST_16depts gives each client its own department (no
// sharing); REST_dept10k creates into a department that already has 10,000
// teams. gRPC skips the gateway and its JSON. RawPgxTx replays CreateTeam's
// statements and round trips with raw pgx, without any server code.
//
// The machine's load (other builds, tests) moves every number; compare
// ratios from the same run, and run more than once (-count).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// benchClients is the concurrency the bar is stated at.
const benchClients = 16

// ---------------------------------------------------------------------------
// Measurement harness

// opsPerSec remembers the last (largest b.N) throughput of each benchmark,
// by full name, so parents can log the ratios of the bar.
var opsPerSec sync.Map // string -> float64

// p99Millis is the same for the 99th percentile latency.
var p99Millis sync.Map // string -> float64

// cpuPerOp is the same for cpu_ms/op.
var cpuPerOp sync.Map // string -> float64

// runClients runs b.N operations on benchClients goroutines and reports
// ops/s, p50_ms and p99_ms, and with a meter cpu_ms/op: the CPU time the
// client and the system under test spent per operation, which moves much
// less with the machine's load than throughput does; go_cpu_ms/op is the
// part spent in this process (client, plus the gpuplane server and gateway
// when they are under test). op gets the client
// number (0..15) and the operation number, unique within this run:
// 0..b.N-1 for the measured ones, then the warm-up's (benchOps).
func runClients(b *testing.B, meter *cpuMeter, op func(ctx context.Context, client, i int) error) {
	b.Helper()
	runNClients(b, benchClients, meter, op)
}

// profileWindow writes a Go CPU profile of the measured window alone (not
// the fixture's set-up) to $GPUPLANE_BENCH_CPUPROFILE_DIR/<benchmark>.pprof
// when that is set; -test.cpuprofile would mix in the set-up, and only one
// CPU profile runs at a time, so do not pass both. It returns the stop.
func profileWindow(b *testing.B) (stop func()) {
	dir := os.Getenv("GPUPLANE_BENCH_CPUPROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(b.Name())
	out, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		b.Fatalf("cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		out.Close()
		b.Fatalf("cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := out.Close(); err != nil {
			b.Errorf("cpu profile: %v", err)
		}
	}
}

// warmupPerClient is how many operations each client runs before the
// measured ones (operation numbers b.N and up; see benchOps).
const warmupPerClient = 16

// warmupOps is how many warm-up operations clients run in all.
func warmupOps(clients int) int { return clients * warmupPerClient }

// benchOps is how many operation numbers a run at clients uses (b.N
// measured, then the warm-up's): what an op that takes its input by
// number (a pending request to approve) must have ready.
func benchOps(b *testing.B, clients int) int { return b.N + warmupOps(clients) }

// drive runs operations from..to-1 on clients goroutines and returns each
// client's latencies, or nil when one failed (reported with b.Errorf).
func drive(ctx context.Context, b *testing.B, clients, from, to int, op func(ctx context.Context, client, i int) error) [][]time.Duration {
	per := make([][]time.Duration, clients)
	var next atomic.Int64
	next.Store(int64(from))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, (to-from)/clients+1)
			for !failed.Load() {
				i := next.Add(1) - 1
				if i >= int64(to) {
					break
				}
				t0 := time.Now()
				err := op(ctx, c, int(i))
				lat = append(lat, time.Since(t0))
				if err != nil {
					// Error, not Fatal: this is not the benchmark's goroutine.
					b.Errorf("client %d, op %d: %v", c, i, err)
					failed.Store(true)
				}
			}
			per[c] = lat
		}()
	}
	wg.Wait()
	if failed.Load() {
		return nil
	}
	return per
}

// runNClients is runClients with another number of clients.
func runNClients(b *testing.B, clients int, meter *cpuMeter, op func(ctx context.Context, client, i int) error) {
	b.Helper()
	ctx := context.Background()
	// Warm up, unmeasured: the first moments of a burst (connections
	// opening, the Go heap and the database's caches growing, the first
	// batches forming) are not the steady state the bars are about.
	warm := warmupOps(clients)
	if drive(ctx, b, clients, b.N, b.N+warm, op) == nil {
		return
	}
	var self0, ext0 time.Duration
	if meter != nil {
		self0, ext0 = meter.read()
	}
	stopProfile := profileWindow(b)
	b.ResetTimer()
	start := time.Now()
	per := drive(ctx, b, clients, 0, b.N, op)
	elapsed := time.Since(start)
	b.StopTimer()
	stopProfile()
	if per == nil {
		return
	}
	if meter != nil {
		self1, ext1 := meter.read()
		perOp := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
		cpu := perOp(self1 - self0 + ext1 - ext0)
		b.ReportMetric(cpu, "cpu_ms/op")
		b.ReportMetric(perOp(self1-self0), "go_cpu_ms/op")
		if !b.Failed() {
			cpuPerOp.Store(b.Name(), cpu)
		}
	}
	all := slices.Concat(per...)
	slices.Sort(all)
	rate := float64(len(all)) / elapsed.Seconds()
	b.ReportMetric(rate, "ops/s")
	b.ReportMetric(millis(percentile(all, 0.50)), "p50_ms")
	p99 := millis(percentile(all, 0.99))
	b.ReportMetric(p99, "p99_ms")
	if !b.Failed() {
		opsPerSec.Store(b.Name(), rate)
		p99Millis.Store(b.Name(), p99)
	}
}

// percentile is the nearest-rank percentile of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// meanOf records the mean of two runs of the same sub-benchmark (ops/s
// and CPU per op) under a name of its own, prints both runs, and returns
// that name: the denominator of ratios whose numerators ran in between.
// The machine's speed drifts over a run (here by up to a third within
// minutes), so one run of the other side at one end of the benchmark
// would favour whichever side ran in the faster minutes.
func meanOf(b *testing.B, what, first, second string) string {
	name := "mean of " + first + " and " + second
	v1, ok1 := opsPerSec.Load(b.Name() + "/" + first)
	v2, ok2 := opsPerSec.Load(b.Name() + "/" + second)
	if !ok1 || !ok2 {
		return second
	}
	v := (v1.(float64) + v2.(float64)) / 2
	opsPerSec.Store(b.Name()+"/"+name, v)
	c1, ok1 := cpuPerOp.Load(b.Name() + "/" + first)
	c2, ok2 := cpuPerOp.Load(b.Name() + "/" + second)
	if ok1 && ok2 {
		cpuPerOp.Store(b.Name()+"/"+name, (c1.(float64)+c2.(float64))/2)
	}
	fmt.Printf("%s: %s: %.0f ops/s first, %.0f ops/s last; ratios use their mean, %.0f\n", b.Name(), what, v1, v2, v)
	return name
}

// logRatio logs num/den against the bar once both benchmarks ran.
func logRatio(b *testing.B, what, num, den string, bar float64) {
	nv, ok1 := opsPerSec.Load(b.Name() + "/" + num)
	dv, ok2 := opsPerSec.Load(b.Name() + "/" + den)
	if !ok1 || !ok2 {
		return
	}
	r := nv.(float64) / dv.(float64)
	// Printed, not logged: benchmark parents' logs only show with -v.
	if bar <= 0 {
		fmt.Printf("%s: %s: %s %.0f ops/s / %s %.0f ops/s = %.2f\n", b.Name(), what, num, nv, den, dv, r)
	} else {
		verdict := "meets"
		if r < bar {
			verdict = "MISSES"
		}
		fmt.Printf("%s: %s: %s %.0f ops/s / %s %.0f ops/s = %.2f (bar >= %.2f: %s)\n", b.Name(), what, num, nv, den, dv, r, bar, verdict)
	}
	nc, ok1 := cpuPerOp.Load(b.Name() + "/" + num)
	dc, ok2 := cpuPerOp.Load(b.Name() + "/" + den)
	if ok1 && ok2 {
		fmt.Printf("%s: %s: CPU per op %s %.3f ms, %s %.3f ms: %s costs %.2fx the CPU of %s\n",
			b.Name(), what, num, nc, den, dc, num, nc.(float64)/dc.(float64), den)
	}
}

// cpuMeter measures the CPU time of this process (client, and the gpuplane
// server when it is the system under test) plus other processes of the
// system under test with all their descendants: the PostgreSQL postmaster
// and its backends, or etcd and kube-apiserver. Linux only; elsewhere
// newCPUMeter returns nil and cpu_ms/op is not reported.
type cpuMeter struct {
	roots []int
}

func newCPUMeter(roots ...int) *cpuMeter {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return nil
	}
	return &cpuMeter{roots: roots}
}

type procStat struct {
	comm  string
	ppid  int
	ticks int64 // utime + stime + cutime + cstime
}

// procs reads /proc/*/stat.
func procs() map[int]procStat {
	out := map[int]procStat{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(raw[end+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, i := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += v
		}
		out[pid] = procStat{comm: string(raw[open+1 : end]), ppid: ppid, ticks: ticks}
	}
	return out
}

// clockTick is USER_HZ, 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// read returns the CPU time used so far by this process and by the other
// measured processes.
func (m *cpuMeter) read() (self, others time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if len(m.roots) == 0 {
		return self, 0
	}
	all := procs()
	children := map[int][]int{}
	for pid, p := range all {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	todo := slices.Clone(m.roots)
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		others += time.Duration(all[pid].ticks) * clockTick
		todo = append(todo, children[pid]...)
	}
	return self, others
}

// childPIDs are this process's children whose command is one of comms.
func childPIDs(comms ...string) []int {
	var out []int
	self := os.Getpid()
	for pid, p := range procs() {
		if p.ppid == self && slices.Contains(comms, p.comm) {
			out = append(out, pid)
		}
	}
	return out
}

// postmasterPID finds the PostgreSQL server listening on port (started by
// storetest with pg_ctl, so not our child). 0 when not found, e.g. a server
// in a container or on another host: then only this process is measured.
func postmasterPID(port uint16) int {
	want := strconv.Itoa(int(port))
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasSuffix(args[0], "/postgres") && args[0] != "postgres" {
			continue
		}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "-p" && args[i+1] == want {
				return pid
			}
		}
	}
	return 0
}

// seq makes names unique across the repeated runs of one benchmark.
var seq atomic.Int64

// ---------------------------------------------------------------------------
// gpuplane server fixture

type appFixture struct {
	env   *apptest.Env
	dsn   string
	token string // alice's ID token, reused like a real client does
	// bobToken is bob's (a team owner's) token once requestTeam made him one.
	bobToken string
	rpc      context.Context // carries the same token for gRPC calls
	http     *http.Client
	// meter covers this process (client and server) and PostgreSQL.
	meter *cpuMeter
}

// startApp runs the real server for the lifetime of b (a parent benchmark,
// so it is built once, not for every b.N).
func startApp(b *testing.B) *appFixture {
	b.Helper()
	e := apptest.Start(b, apptest.Options{})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 4 * benchClients
	tr.MaxIdleConnsPerHost = 4 * benchClients
	b.Cleanup(tr.CloseIdleConnections)
	f := &appFixture{
		env:   e,
		dsn:   e.App.Pool().Config().ConnString(),
		token: e.Token(b, "alice"),
		http:  &http.Client{Transport: tr, Timeout: time.Minute},
	}
	f.rpc = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+f.token)
	if pm := postmasterPID(e.App.Pool().Config().ConnConfig.Port); pm != 0 {
		f.meter = newCPUMeter(pm)
	} else {
		b.Logf("PostgreSQL server process not found: cpu_ms/op covers this process only")
		f.meter = newCPUMeter()
	}
	// Open the keep-alive connections before anything is timed.
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() { _ = f.do(context.Background(), "GET", "/v1/departments", nil, nil) })
	}
	wg.Wait()
	return f
}

// groupShape runs fn (the timed clients) and reports how group commit
// batched the changes it made: members/batch (changes sharing one
// department lock and WAL flush) and trips/member (round trips to
// PostgreSQL per change, the serial part of its cost while the department
// is locked). It reads the counters behind the server's /metrics directly:
// a scrape would also render a gauge for each of the 10,000+ teams these
// benchmarks create, twice per round.
func (f *appFixture) groupShape(b *testing.B, fn func()) {
	b.Helper()
	before := f.env.App.DB().GroupStats()
	fn()
	d := f.env.App.DB().GroupStats().Since(before)
	if d.Batches > 0 && d.Members > 0 {
		b.ReportMetric(float64(d.Members)/float64(d.Batches), "members/batch")
		b.ReportMetric(float64(d.RoundTrips)/float64(d.Members), "trips/member")
		b.ReportMetric(float64(d.SetFlushes)/float64(d.Batches), "setflushes/batch")
	}
}

// do sends one REST call as alice and decodes a 200 answer into out.
func (f *appFixture) do(ctx context.Context, method, path string, body []byte, out any) error {
	return f.doAs(ctx, f.token, method, path, body, out)
}

// doAs is do with another caller's token.
func (f *appFixture) doAs(ctx context.Context, token, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, f.env.HTTPBase+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// createDepartment makes a department with a zero budget through the API;
// zero-quota teams always fit in it.
func (f *appFixture) createDepartment(b *testing.B, id string) {
	b.Helper()
	_, err := f.env.Departments.CreateDepartment(f.rpc, &pb.CreateDepartmentRequest{
		DepartmentId: id, Department: &pb.Department{DisplayName: "benchmark " + id},
	})
	if err != nil {
		b.Fatalf("create department %s: %v", id, err)
	}
}

// freshDepartment creates an empty department for one benchmark run.
func (f *appFixture) freshDepartment(b *testing.B) string {
	b.Helper()
	id := fmt.Sprintf("bench-%d", seq.Add(1))
	f.createDepartment(b, id)
	return id
}

// insertTeams bulk-inserts n teams (ids prefix-0000001 ...) straight into
// the database: fixtures for reads, not something being measured.
func (f *appFixture) insertTeams(b *testing.B, dept, prefix string, n int) {
	b.Helper()
	ctx := context.Background()
	pool := f.env.App.Pool()
	if _, err := pool.Exec(ctx, `
		INSERT INTO teams (id, department_id, display_name, isolation_tier)
		SELECT $2 || lpad(g::text, 7, '0'), $1, 'Benchmark team ' || g, 'SHARED'
		  FROM generate_series(1, $3::int) g`, dept, prefix, n); err != nil {
		b.Fatalf("insert %d teams: %v", n, err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE teams`); err != nil {
		b.Fatalf("analyze: %v", err)
	}
}

type teamJSON struct {
	Name string `json:"name"`
}

type teamBody struct {
	Department    string    `json:"department"`
	DisplayName   string    `json:"displayName"`
	IsolationTier string    `json:"isolationTier"`
	Quota         quotaBody `json:"quota"`
}

type quotaBody struct {
	GPU         string `json:"gpu"`
	CPUMillis   int64  `json:"cpuMillis"`
	MemoryBytes int64  `json:"memoryBytes"`
}

// restCreateTeam is one POST /v1/teams of a team without quota, the way a
// client sends it.
func (f *appFixture) restCreateTeam(ctx context.Context, dept, id string) error {
	return f.doCreateTeam(ctx, dept, id, quotaBody{GPU: "0"})
}

// doCreateTeam is POST /v1/teams with a quota.
func (f *appFixture) doCreateTeam(ctx context.Context, dept, id string, q quotaBody) error {
	body, err := json.Marshal(teamBody{Department: "departments/" + dept, DisplayName: "Team " + id, IsolationTier: "SHARED", Quota: q})
	if err != nil {
		return err
	}
	var out teamJSON
	if err := f.do(ctx, "POST", "/v1/teams?team_id="+id, body, &out); err != nil {
		return err
	}
	if out.Name != "teams/"+id {
		return fmt.Errorf("created %q, want teams/%s", out.Name, id)
	}
	return nil
}

// departmentWithBudget creates department id with budget in this
// benchmark's own database (startApp).
func (f *appFixture) departmentWithBudget(b *testing.B, id string, budget *pb.Quota) string {
	b.Helper()
	_, err := f.env.Departments.CreateDepartment(f.rpc, &pb.CreateDepartmentRequest{
		DepartmentId: id, Department: &pb.Department{DisplayName: "benchmark " + id, QuotaBudget: budget},
	})
	if err != nil {
		b.Fatalf("create department %s: %v", id, err)
	}
	return id
}

// requestTeam is a team whose owner is bob, with room for 100,000 tiny
// virtual clusters, in a department alice administers (as platform admin).
func (f *appFixture) requestTeam(b *testing.B) string {
	b.Helper()
	dept := f.departmentWithBudget(b, "bench-requests", &pb.Quota{Gpu: "0", CpuMillis: 100_000})
	const team = "bench-req-team"
	if err := f.doCreateTeam(context.Background(), dept, team, quotaBody{GPU: "0", CPUMillis: 100_000}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.env.Members.CreateMember(f.rpc, &pb.CreateMemberRequest{Parent: "teams/" + team, MemberId: "bob",
		Member: &pb.Member{Principal: &pb.Member_User{User: "bob@example.com"}, Role: pb.TeamRole_OWNER}}); err != nil {
		b.Fatalf("make bob an owner: %v", err)
	}
	f.bobToken = f.env.Token(b, "bob")
	return team
}

// restCreateRequest is bob's POST /v1/requests for a tiny virtual cluster;
// it returns the request's name.
func (f *appFixture) restCreateRequest(ctx context.Context, team, vc string) (string, error) {
	body := fmt.Appendf(nil, `{"team": "teams/%s", "justification": "benchmark",
		"createVirtualCluster": {"virtualClusterId": %q, "spec": {"quota": {"gpu": "0", "cpuMillis": "1"}}}}`, team, vc)
	var out struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	if err := f.doAs(ctx, f.bobToken, "POST", "/v1/requests", body, &out); err != nil {
		return "", err
	}
	if out.State != "PENDING" || !strings.HasPrefix(out.Name, "requests/") {
		return "", fmt.Errorf("created %q in state %s, want a PENDING request", out.Name, out.State)
	}
	return out.Name, nil
}

// pendingRequests creates n pending requests (untimed, 16 at a time).
func (f *appFixture) pendingRequests(b *testing.B, team string, n int) []string {
	b.Helper()
	out := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, benchClients)
	for range benchClients {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				name, err := f.restCreateRequest(context.Background(), team, fmt.Sprintf("vc-%d", seq.Add(1)))
				if err != nil {
					errc <- err
					return
				}
				out[i] = name
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		b.Fatalf("create pending requests: %v", err)
	}
	return out
}

// rawPool is a pgx pool of benchClients connections on the server's
// database, opened and warmed outside the timed region.
func (f *appFixture) rawPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = benchClients
	cfg.MinConns = benchClients
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	conns := make([]*pgxpool.Conn, 0, benchClients)
	for range benchClients {
		c, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return pool
}

// createTeamSQL issues the statements a REST create of a team without
// quota issues (as of this writing), with the same round trips, for the
// RawPgxTx diagnostic: the caller's grants, then one pipeline of BEGIN, the
// team row, its audit row and COMMIT (store.Tx sends deferred writes with
// COMMIT).
func createTeamSQL(ctx context.Context, pool *pgxpool.Pool, dept, id string) error {
	rows, err := pool.Query(ctx, `
		WITH grants (team_id, department_id, role, member_id) AS (
			SELECT m.team_id, t.department_id, m.role, m.id
			  FROM members m JOIN teams t ON t.id = m.team_id
			 WHERE (m.principal_kind = 'user' AND m.principal = $1)
			    OR (m.principal_kind = 'group' AND m.principal = ANY($2))
			UNION ALL
			SELECT '', d.id, '', ''
			  FROM departments d
			 WHERE d.admin_groups && $2)
		SELECT team_id, department_id, role, member_id FROM grants`, "alice@example.com", []string{"platform-admins"})
	if err != nil {
		return err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	after := fmt.Sprintf(`{"name":"teams/%s","department":"departments/%s","display_name":"Team %s","isolation_tier":"SHARED","quota":{"gpu":"0"},"etag":"1-x","create_time":%q,"update_time":%q}`,
		id, dept, id, now.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL read committed read write`)
	b.Queue(`
		INSERT INTO teams (uid, id, department_id, display_name, isolation_tier, node_pool, gpu_centi, cpu_millis, memory_bytes,
		                   auto_sleep_after_seconds, version, create_time, update_time)
		VALUES (gen_random_uuid(), $1, $2, $3, 'SHARED', 'shared', 0, 0, 0, 0, 1, $4, $4)`, id, dept, "Team "+id, now)
	b.Queue(`
		WITH d AS (SELECT uid FROM departments WHERE id = $7), t AS (SELECT uid FROM teams WHERE id = $8)
		INSERT INTO audit_events (id, time, actor, actor_groups, action, resource, request_id, correlation_id,
		                          department_id, team_id, before, after, department_uid, team_uid, resource_uid, event_type)
		VALUES (0 * length(pg_current_xact_id()::text) + nextval('audit_events_id_seq'), clock_timestamp(), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
		        (SELECT uid FROM d), (SELECT uid FROM t), (SELECT uid FROM t), 'gpuplane.team.created')`,
		"alice-subject", []string{"platform-admins"}, "CreateTeam", "teams/"+id, "", "0123456789abcdef01234567",
		dept, id, nil, []byte(after))
	b.Queue(`COMMIT`)
	return pool.SendBatch(ctx, b).Close()
}

// ---------------------------------------------------------------------------
// kube-apiserver fixture

var queueGVR = schema.GroupVersionResource{Group: "scheduling.run.ai", Version: "v2", Resource: "queues"}

type kubeFixture struct {
	dyn dynamic.ResourceInterface
	// meter covers this process (client) and etcd + kube-apiserver.
	meter *cpuMeter
}

// kubeOnce starts envtest (with the KAI Queue CRD fixture, which
// envtestenv.Start always installs) the first time a CRD sub-benchmark
// needs it, and stops it when parent ends. Start errors are returned rather
// than passed to parent.Fatal, which must not be called from a child's
// goroutine.
func kubeOnce(parent *testing.B) func() (*kubeFixture, error) {
	return sync.OnceValues(func() (*kubeFixture, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// envtest logs through controller-runtime, which otherwise complains
		// (with a stack trace) that no logger was set.
		ctrllog.SetLogger(logr.Discard())
		// etcd as in production (envtest's default skips fsync), since the
		// gpuplane side runs PostgreSQL with its durable defaults
		// (storetest, when benchmarking).
		env, err := envtestenv.Start(ctx, envtestenv.Options{DurableEtcd: true})
		if err != nil {
			return nil, err
		}
		parent.Cleanup(func() {
			if err := env.Stop(); err != nil {
				parent.Errorf("stop envtest: %v", err)
			}
		})
		cfg := env.RESTConfig()
		// Measure the API server, not client-go's token bucket.
		cfg.QPS, cfg.Burst = 10000, 10000
		cfg.UserAgent = "gpuplane-bench"
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		k := &kubeFixture{dyn: dyn.Resource(queueGVR), meter: newCPUMeter(childPIDs("etcd", "kube-apiserver")...)}
		// Wait until the Queue resource serves (CRD established and routed).
		deadline := time.Now().Add(time.Minute)
		for {
			_, err := k.dyn.List(ctx, metav1.ListOptions{Limit: 1})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("queues.scheduling.run.ai never served: %w", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Warm the connection and the apiserver's handler chain.
		if err := k.createQueue(ctx, fmt.Sprintf("warm-%d", seq.Add(1))); err != nil {
			return nil, err
		}
		return k, nil
	})
}

// queue is a cluster-scoped KAI Queue shaped like a team's queue: parent,
// display name, and every resource with quota, weight and limit.
func queue(name string) *unstructured.Unstructured {
	res := map[string]any{}
	for _, r := range []string{"gpu", "cpu", "memory"} {
		res[r] = map[string]any{"quota": float64(0), "overQuotaWeight": float64(1), "limit": float64(-1)}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.run.ai/v2",
		"kind":       "Queue",
		"metadata": map[string]any{
			"name":   name,
			"labels": map[string]any{"app.kubernetes.io/managed-by": "gpuplane-bench"},
		},
		"spec": map[string]any{"displayName": "Team " + name, "parentQueue": "bench", "resources": res},
	}}
}

func (k *kubeFixture) createQueue(ctx context.Context, name string) error {
	out, err := k.dyn.Create(ctx, queue(name), metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if out.GetName() != name {
		return fmt.Errorf("created %q, want %q", out.GetName(), name)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Benchmarks

// BenchmarkCreate: one new object per operation, 16 clients.
//
// Each run (each b.N) creates into fresh, empty departments, so results do
// not depend on what earlier runs left behind.
func BenchmarkCreate(b *testing.B) {
	f := startApp(b)
	f.createDepartment(b, "bench-raw")
	f.createDepartment(b, "bench-10k")
	f.insertTeams(b, "bench-10k", "big-", 10_000)
	kube := kubeOnce(b)

	// A Queue custom object in kube-apiserver (authn/authz, admission, schema
	// validation, etcd write) through client-go's dynamic client. Run
	// first and again after gpuplane's runs (CRD); the ratios divide by
	// the mean of the two (meanOf).
	crdCreatesAt := func(clients int) func(b *testing.B) {
		return func(b *testing.B) {
			k, err := kube()
			if err != nil {
				b.Fatalf("envtest: %v", err)
			}
			runNClients(b, clients, k.meter, func(ctx context.Context, _, _ int) error {
				return k.createQueue(ctx, fmt.Sprintf("bench-q%d-%d", clients, seq.Add(1)))
			})
		}
	}
	crdCreates, crdCreates64 := crdCreatesAt(benchClients), crdCreatesAt(64)
	b.Run("CRD_first", crdCreates)
	b.Run("CRD_64clients_first", crdCreates64)

	// POST /v1/teams: token verification, access loading, validation, and
	// one transaction (department lock, hierarchy fit, insert, audit).
	b.Run("REST", func(b *testing.B) {
		dept := f.freshDepartment(b)
		f.groupShape(b, func() {
			runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
				return f.restCreateTeam(ctx, dept, fmt.Sprintf("rest-%d", seq.Add(1)))
			})
		})
	})

	// The same call over gRPC (no gateway, no JSON): diagnostic.
	b.Run("gRPC", func(b *testing.B) {
		dept := "departments/" + f.freshDepartment(b)
		runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
			id := fmt.Sprintf("grpc-%d", seq.Add(1))
			_, err := f.env.Teams.CreateTeam(f.rpc, &pb.CreateTeamRequest{TeamId: id, Team: &pb.Team{
				Department: dept, DisplayName: "Team " + id,
				IsolationTier: pb.IsolationTier_SHARED, Quota: &pb.Quota{Gpu: "0"},
			}})
			return err
		})
	})

	// REST with each client in its own department, so that creates do not
	// queue on one department's row lock: diagnostic.
	b.Run("REST_16depts", func(b *testing.B) {
		depts := make([]string, benchClients)
		for c := range depts {
			depts[c] = f.freshDepartment(b)
		}
		runClients(b, f.meter, func(ctx context.Context, c, _ int) error {
			return f.restCreateTeam(ctx, depts[c], fmt.Sprintf("spread-%d", seq.Add(1)))
		})
	})

	// REST with the same single-department lock contention as REST, but no
	// department ever holds more than 100 teams (a new department every 100
	// creates): diagnostic. REST's department grows to b.N teams, and
	// CreateTeam sums all of them under the lock.
	b.Run("REST_dept100", func(b *testing.B) {
		depts := make([]string, benchOps(b, benchClients)/100+1)
		for i := range depts {
			depts[i] = f.freshDepartment(b)
		}
		runClients(b, f.meter, func(ctx context.Context, _, i int) error {
			return f.restCreateTeam(ctx, depts[i/100], fmt.Sprintf("small-%d", seq.Add(1)))
		})
	})

	// REST into a department that already has 10,000 teams: diagnostic.
	b.Run("REST_dept10k", func(b *testing.B) {
		runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
			return f.restCreateTeam(ctx, "bench-10k", fmt.Sprintf("big-x%d", seq.Add(1)))
		})
	})

	// REST at 64 clients into one department: throughput must hold and
	// p99 stay under 100 ms.
	b.Run("REST_64clients", func(b *testing.B) {
		dept := f.freshDepartment(b)
		f.groupShape(b, func() {
			runNClients(b, 64, f.meter, func(ctx context.Context, _, _ int) error {
				return f.restCreateTeam(ctx, dept, fmt.Sprintf("rest64-%d", seq.Add(1)))
			})
		})
	})

	// Teams that take quota from their department (so the department's
	// budget is checked and its lock taken for every create).
	withQuota := f.departmentWithBudget(b, "bench-quota", &pb.Quota{Gpu: "0", MemoryBytes: 1 << 40})
	b.Run("REST_withQuota", func(b *testing.B) {
		f.groupShape(b, func() {
			runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
				id := fmt.Sprintf("rq-%d", seq.Add(1))
				return f.doCreateTeam(ctx, withQuota, id, quotaBody{GPU: "0", MemoryBytes: 1 << 20})
			})
		})
	})

	// Quota changes: PATCH a team's quota (up by a few bytes of memory
	// each time), 16 teams of one department round robin.
	changes := f.departmentWithBudget(b, "bench-changes", &pb.Quota{Gpu: "0", MemoryBytes: 1 << 40})
	for i := range benchClients {
		if err := f.doCreateTeam(context.Background(), changes, fmt.Sprintf("chg-%02d", i), quotaBody{GPU: "0"}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("QuotaChange", func(b *testing.B) {
		f.groupShape(b, func() {
			runClients(b, f.meter, func(ctx context.Context, c, _ int) error {
				body := fmt.Appendf(nil, `{"quota": {"gpu": "0", "memoryBytes": "%d"}}`, seq.Add(1))
				var out teamJSON
				if err := f.do(ctx, "PATCH", fmt.Sprintf("/v1/teams/chg-%02d?update_mask=quota", c), body, &out); err != nil {
					return err
				}
				if out.Name != fmt.Sprintf("teams/chg-%02d", c) {
					return fmt.Errorf("updated %q", out.Name)
				}
				return nil
			})
		})
	})

	// Requests for a small virtual cluster, created by a team owner (bob)
	// and approved by a department admin (alice), into one department
	// whose team has room for all of them.
	reqTeam := f.requestTeam(b)
	b.Run("CreateRequest", func(b *testing.B) {
		f.groupShape(b, func() {
			runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
				_, err := f.restCreateRequest(ctx, reqTeam, fmt.Sprintf("vc-%d", seq.Add(1)))
				return err
			})
		})
	})
	b.Run("Approve", func(b *testing.B) {
		pending := f.pendingRequests(b, reqTeam, benchOps(b, benchClients))
		f.groupShape(b, func() {
			runClients(b, f.meter, func(ctx context.Context, _, i int) error {
				var out struct {
					State string `json:"state"`
				}
				if err := f.do(ctx, "POST", "/v1/"+pending[i]+":approve", []byte(`{"reason": "benchmark"}`), &out); err != nil {
					return err
				}
				if out.State != "APPROVED" {
					return fmt.Errorf("%s is %s after approval", pending[i], out.State)
				}
				return nil
			})
		})
	})

	b.Run("CRD", crdCreates)

	// The ceiling: one autocommit INSERT of the same team row; no auth, no
	// explicit transaction, no hierarchy check, no audit.
	b.Run("RawPgx", func(b *testing.B) {
		pool := f.rawPool(b)
		runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
			id := fmt.Sprintf("raw-%d", seq.Add(1))
			_, err := pool.Exec(ctx, `
				INSERT INTO teams (id, department_id, display_name, isolation_tier, gpu_centi, cpu_millis, memory_bytes)
				VALUES ($1, $2, $3, $4, $5, $6, $7)`,
				id, "bench-raw", "Team "+id, "SHARED", int64(0), int64(0), int64(0))
			return err
		})
	})

	// CreateTeam's statements replayed with raw pgx (createTeamSQL), one
	// transaction each, into a fresh department like REST: diagnostic. It
	// is what the statements cost before any server code runs.
	b.Run("RawPgxTx", func(b *testing.B) {
		pool := f.rawPool(b)
		dept := f.freshDepartment(b)
		runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
			return createTeamSQL(ctx, pool, dept, fmt.Sprintf("rawtx-%d", seq.Add(1)))
		})
	})

	// CRD creates at 64 clients, for the side-by-side at that load.
	b.Run("CRD_64clients", crdCreates64)

	f.logDurability(b)
	crd := meanOf(b, "CRD create", "CRD_first", "CRD")
	logRatio(b, "create vs CRD", "REST", crd, 3)
	logRatio(b, "create with quota vs CRD", "REST_withQuota", crd, 3)
	logRatio(b, "quota change vs CRD create", "QuotaChange", crd, 3)
	logRatio(b, "request create vs CRD create", "CreateRequest", crd, 3)
	logRatio(b, "approval vs CRD create", "Approve", crd, 3)
	logRatio(b, "create at 64 clients vs CRD at 64", "REST_64clients", meanOf(b, "CRD create at 64 clients", "CRD_64clients_first", "CRD_64clients"), 3)
	logRatio(b, "create at 64 clients vs at 16 (throughput holds)", "REST_64clients", "REST", 0.9)
	// The ceiling, as a diagnostic (no bar): what a bare autocommit insert
	// of the same row costs next to a whole API create.
	logRatio(b, "create vs raw pgx (diagnostic)", "REST", "RawPgx", 0)
	for _, sub := range []string{"REST", "REST_withQuota", "QuotaChange", "CreateRequest", "Approve"} {
		logP99(b, sub+" at 16 clients", sub, 25)
	}
	logP99(b, "REST create at 64 clients", "REST_64clients", 100)
}

// logP99 prints sub's p99 latency against the bar.
func logP99(b *testing.B, what, sub string, barMillis float64) {
	v, ok := p99Millis.Load(b.Name() + "/" + sub)
	if !ok {
		return
	}
	verdict := "meets"
	if v.(float64) >= barMillis {
		verdict = "MISSES"
	}
	fmt.Printf("%s: %s: p99 %.1f ms (bar < %.0f ms: %s)\n", b.Name(), what, v, barMillis, verdict)
}

// logDurability prints what the compared systems promise about an
// acknowledged write, so that the ratios are read for what they are.
func (f *appFixture) logDurability(b *testing.B) {
	var syncCommit, fsync, minWAL string
	if err := f.env.App.Pool().QueryRow(context.Background(),
		`SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('min_wal_size')`).Scan(&syncCommit, &fsync, &minWAL); err != nil {
		b.Errorf("read PostgreSQL settings: %v", err)
		return
	}
	// min_wal_size: the WAL segments storetest preallocates, as a running
	// server has them from recycling (storetest.preallocateWAL).
	fmt.Printf("%s: durability: PostgreSQL synchronous_commit=%s fsync=%s (min_wal_size=%s, segments preallocated); etcd --unsafe-no-fsync=false\n",
		b.Name(), syncCommit, fsync, minWAL)
}

// BenchmarkGet: read one object by name, 16 clients, round-robin over a
// fixed set of objects.
func BenchmarkGet(b *testing.B) {
	const teams, queues = 1000, 256
	f := startApp(b)
	f.createDepartment(b, "bench")
	f.insertTeams(b, "bench", "get-", teams)
	kube := kubeOnce(b)
	// Created once, not for every b.N.
	createQueues := sync.OnceValue(func() error {
		k, err := kube()
		if err != nil {
			return err
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		errc := make(chan error, queues)
		for c := range benchClients {
			wg.Go(func() {
				for i := c; i < queues; i += benchClients {
					if err := k.createQueue(ctx, fmt.Sprintf("get-q-%04d", i)); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		return <-errc
	})

	// First and again last, as in BenchmarkCreate.
	crdGets := func(b *testing.B) {
		k, err := kube()
		if err != nil {
			b.Fatalf("envtest: %v", err)
		}
		if err := createQueues(); err != nil {
			b.Fatalf("create queues: %v", err)
		}
		runClients(b, k.meter, func(ctx context.Context, _, i int) error {
			name := fmt.Sprintf("get-q-%04d", i%queues)
			q, err := k.dyn.Get(ctx, name, metav1.GetOptions{})
			if err == nil && q.GetName() != name {
				err = fmt.Errorf("got %q, want %s", q.GetName(), name)
			}
			return err
		})
	}
	b.Run("CRD_first", crdGets)

	b.Run("REST", func(b *testing.B) {
		runClients(b, f.meter, func(ctx context.Context, _, i int) error {
			id := fmt.Sprintf("get-%07d", i%teams+1)
			var out teamJSON
			if err := f.do(ctx, "GET", "/v1/teams/"+id, nil, &out); err != nil {
				return err
			}
			if out.Name != "teams/"+id {
				return fmt.Errorf("got %q, want teams/%s", out.Name, id)
			}
			return nil
		})
	})

	b.Run("gRPC", func(b *testing.B) {
		runClients(b, f.meter, func(ctx context.Context, _, i int) error {
			name := fmt.Sprintf("teams/get-%07d", i%teams+1)
			t, err := f.env.Teams.GetTeam(f.rpc, &pb.GetTeamRequest{Name: name})
			if err == nil && t.GetName() != name {
				err = fmt.Errorf("got %q, want %s", t.GetName(), name)
			}
			return err
		})
	})

	b.Run("CRD", crdGets)

	logRatio(b, "get vs CRD", "REST", meanOf(b, "CRD get", "CRD_first", "CRD"), 5)
}

type listJSON struct {
	Teams         []teamJSON `json:"teams"`
	NextPageToken string     `json:"nextPageToken"`
}

// pageTokenAfter walks the list with the client API (page_size may change
// between pages, AIP-158) and returns the token of the page starting after
// the first `after` teams; "" for after == 0.
func (f *appFixture) pageTokenAfter(b *testing.B, after int) string {
	b.Helper()
	token := ""
	for after > 0 {
		size := min(after, 500)
		var page listJSON
		if err := f.do(context.Background(), "GET", fmt.Sprintf("/v1/teams?page_size=%d&page_token=%s", size, url.QueryEscape(token)), nil, &page); err != nil {
			b.Fatalf("walk: %v", err)
		}
		if len(page.Teams) != size || page.NextPageToken == "" {
			b.Fatalf("walk: got %d teams (want %d) and token %q", len(page.Teams), size, page.NextPageToken)
		}
		token, after = page.NextPageToken, after-size
	}
	return token
}

// BenchmarkListPage: one page of 50 teams from the first, the middle and
// the last position of a 100-row and a 100,000-row table. Keyset paging
// should make all of them cost the same.
func BenchmarkListPage(b *testing.B) {
	const pageSize = 50
	for _, rows := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			f := startApp(b) // own database: the table holds exactly `rows` teams
			f.createDepartment(b, "bench")
			f.insertTeams(b, "bench", "t-", rows)
			for _, pos := range []struct {
				name  string
				after int
			}{{"first", 0}, {"middle", rows/2 - pageSize/2}, {"last", rows - pageSize}} {
				path := fmt.Sprintf("/v1/teams?page_size=%d", pageSize)
				if tok := f.pageTokenAfter(b, pos.after); tok != "" {
					path += "&page_token=" + url.QueryEscape(tok)
				}
				wantFirst := fmt.Sprintf("teams/t-%07d", pos.after+1)
				b.Run(pos.name, func(b *testing.B) {
					runClients(b, f.meter, func(ctx context.Context, _, _ int) error {
						var page listJSON
						if err := f.do(ctx, "GET", path, nil, &page); err != nil {
							return err
						}
						if len(page.Teams) != pageSize || page.Teams[0].Name != wantFirst {
							return fmt.Errorf("page has %d teams starting at %v, want %d from %s",
								len(page.Teams), firstName(page.Teams), pageSize, wantFirst)
						}
						return nil
					})
				})
			}
		})
	}
	for _, pos := range []string{"first", "middle", "last"} {
		small, ok1 := opsPerSec.Load(b.Name() + "/rows=100/" + pos)
		large, ok2 := opsPerSec.Load(b.Name() + "/rows=100000/" + pos)
		if ok1 && ok2 {
			fmt.Printf("%s: %s page: rows=100 %.0f ops/s, rows=100000 %.0f ops/s: a page of the 100k table costs %.2fx\n",
				b.Name(), pos, small, large, small.(float64)/large.(float64))
		}
	}
}

func firstName(ts []teamJSON) string {
	if len(ts) == 0 {
		return "(none)"
	}
	return ts[0].Name
}
