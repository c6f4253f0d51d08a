package reconcile_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/reconcile"
)

// outageDialer carries a worker's connections to the API server; Down
// closes them and makes new ones fail as a stopped API server's do
// (connection refused, from a real socket: a port nobody listens on), Up
// ends the outage.
type outageDialer struct {
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
	d      net.Dialer
	closed string // 127.0.0.1:<port nobody listens on>
}

func newOutageDialer(t *testing.T) *outageDialer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return &outageDialer{closed: addr}
}

func (o *outageDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	o.mu.Lock()
	if o.down {
		addr = o.closed
	}
	o.mu.Unlock()
	c, err := o.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.conns = append(o.conns, c)
	return c, nil
}

func (o *outageDialer) Down() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = true
	for _, c := range o.conns {
		_ = c.Close()
	}
	o.conns = nil
}

func (o *outageDialer) Up() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
}

// hostOutageSeconds is how long the API server stays unreachable.
const hostOutageSeconds = 30

// TestHostOutageDuringProvisioning is the kube-apiserver half of the fault
// proof: the worker loses the API server (connection refused) for 30 s while
// it provisions three virtual clusters. They become DEGRADED saying the
// host cluster is unreachable (and nothing more: team members read it),
// are retried without using up attempts and never FAILED
// (the outage would have used up MaxAttempts many times over); the API
// keeps answering; once the API server is back all three converge to
// READY with exactly one of every host object and no orphans.
func TestHostOutageDuringProvisioning(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.simulate(t)
	ids := []string{"outage-1", "outage-2", "outage-3"}
	for _, id := range ids {
		h.createVC(t, "team-a", id, vcSpec("0", 100, gi))
	}
	od := newOutageDialer(t)
	cfg := workerConfig("outage")
	cfg.MaxAttempts, cfg.BackoffBase, cfg.BackoffMax = 4, 100*time.Millisecond, time.Second
	h.start(t, h.worker(h.newHost(od.DialContext), cfg))

	// The outage starts while the first reconciles run.
	time.Sleep(300 * time.Millisecond)
	od.Down()
	cut := time.Now()
	// The API server's address is what the worker's errors name; the
	// virtual clusters' status (team members read it) must not.
	apiServer := strings.TrimSuffix(strings.TrimPrefix(h.rc.Host, "https://"), "/")
	for _, id := range ids {
		v := h.waitVC(t, id, 20*time.Second, "DEGRADED (host unreachable) or already READY", func(v *pb.VirtualCluster) bool {
			p := v.GetStatus().GetPhase()
			c := condition(v, reconcile.CondHostCluster)
			return p == pb.VirtualClusterStatus_READY ||
				(p == pb.VirtualClusterStatus_DEGRADED && c != nil && c.GetStatus() == pb.Condition_FALSE &&
					strings.Contains(v.GetStatus().GetMessage(), "host cluster hostClusters/default is unreachable"))
		})
		t.Logf("%s during the outage: %s", id, describe(v))
		assertNoHostDetail(t, v, apiServer, od.closed)
	}
	// The API keeps serving while the worker cannot reach the host.
	for time.Since(cut) < hostOutageSeconds*time.Second {
		for _, id := range ids {
			if p := h.vc(t, id).GetStatus().GetPhase(); p == pb.VirtualClusterStatus_FAILED {
				t.Fatalf("%s FAILED during a host outage", id)
			}
		}
		time.Sleep(time.Second)
	}
	var retries int
	if err := h.pool.QueryRow(h.ctx, `SELECT COALESCE(SUM(attempts), 0) FROM reconcile_work`).Scan(&retries); err != nil {
		t.Fatal(err)
	}
	od.Up()
	back := time.Now()
	for _, id := range ids {
		h.waitVC(t, id, 45*time.Second, "READY after the outage", readyAt)
	}
	converged := time.Since(back)
	for _, id := range ids {
		h.assertPresent(t, id, "team-a")
		v := h.vc(t, id)
		if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterFailed")); n != 0 {
			t.Errorf("%s: %d VirtualClusterFailed events", id, n)
		}
		if n := len(h.auditEvents(t, v.GetName(), "VirtualClusterPhaseDegraded")); n > 1 {
			t.Errorf("%s: %d VirtualClusterPhaseDegraded events for one outage, want at most 1", id, n)
		}
		h.assertNoHostDetailInAudit(t, v.GetName(), apiServer, od.closed)
	}
	h.assertNoOrphans(t)
	t.Logf("host unreachable for %s (attempts still counted at its end: %d); all %d READY %s after it came back",
		back.Sub(cut).Round(time.Millisecond), retries, len(ids), converged.Round(time.Millisecond))
}

// assertNoHostDetail fails if a virtual cluster's status message or
// conditions name any of secrets (a kubeconfig Secret, an API server's
// address): team members read them; only platform admins may see how a
// host cluster is reached.
func assertNoHostDetail(t *testing.T, v *pb.VirtualCluster, secrets ...string) {
	t.Helper()
	texts := []string{v.GetStatus().GetMessage()}
	for _, c := range v.GetStatus().GetConditions() {
		texts = append(texts, c.GetReason(), c.GetMessage())
	}
	for _, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("%s: status names %q (host cluster detail for platform admins only): %q", v.GetName(), s, text)
			}
		}
	}
}

// assertNoHostDetailInAudit is assertNoHostDetail for the snapshots in a
// virtual cluster's DEGRADED audit events, which its team can read too.
func (h *harness) assertNoHostDetailInAudit(t *testing.T, name string, secrets ...string) {
	t.Helper()
	for _, e := range h.auditEvents(t, name, "VirtualClusterPhaseDegraded") {
		text := protojson.Format(e)
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("%s: audit event %s names %q (host cluster detail for platform admins only): %s", name, e.GetName(), s, text)
			}
		}
	}
}
