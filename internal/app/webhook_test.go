package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/pkg/client"
)

// receiver is a real HTTP webhook receiver that verifies every delivery
// with the subscription's secret.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	status int // answer; 0: 204
	got    []delivered
	bad    int // deliveries failing verification
	arrive chan struct{}
}

type delivered struct {
	id   string
	ev   client.WebhookEvent
	pos  int64
	sigs int // signatures in webhook-signature
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, arrive: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.status != 0 {
			w.WriteHeader(r.status)
			return
		}
		if err := client.VerifyWebhook(req.Header, body, time.Now(), 0, r.secret); err != nil || req.Header.Get("Content-Type") != "application/cloudevents+json; charset=utf-8" {
			r.bad++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var ev client.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			r.bad++
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pos, _ := strconv.ParseInt(ev.Position, 10, 64)
		r.got = append(r.got, delivered{id: req.Header.Get(client.WebhookIDHeader), ev: ev, pos: pos,
			sigs: len(strings.Fields(req.Header.Get(client.WebhookSignatureHeader)))})
		select {
		case r.arrive <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) set(secret string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if secret != "" {
		r.secret = secret
	}
	r.status = status
}

// waitFor waits until n deliveries arrived.
func (r *receiver) waitFor(n int) []delivered {
	r.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		got := append([]delivered(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.arrive:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			r.t.Fatalf("receiver: %d deliveries, want %d", len(got), n)
		}
	}
}

func webhookEnv(t *testing.T, disableAfter int) *apptest.Env {
	return watchWorld(t, func(c *app.Config) {
		c.WebhookHTTPHosts, c.WebhookAllowedCIDRs = "127.0.0.1", "127.0.0.0/8"
		c.WebhookBackoffBase, c.WebhookBackoffMax = 50*time.Millisecond, 300*time.Millisecond
		c.WebhookDisableAfter = disableAfter
	})
}

func createHook(t *testing.T, e *apptest.Env, user, id string, w *pb.WebhookSubscription) (*pb.WebhookSubscription, error) {
	t.Helper()
	return pb.NewWebhookServiceClient(e.Conn).CreateWebhookSubscription(e.As(t, user),
		&pb.CreateWebhookSubscriptionRequest{WebhookSubscriptionId: id, WebhookSubscription: w})
}

// TestWebhookDelivery: bob subscribes his team to request events; his
// request and its approval arrive as signed CloudEvents, in order, listed
// in the delivery log; a manual redelivery sends the same event id again.
func TestWebhookDelivery(t *testing.T) {
	e := webhookEnv(t, 15)
	rcv := newReceiver(t)
	sub, err := createHook(t, e, "bob", "bob-hooks", &pb.WebhookSubscription{Team: teamA, Url: rcv.srv.URL + "/hook", EventTypes: []string{"request.*"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.GetSecret()) < 20 || sub.GetSecret()[:6] != "whsec_" {
		t.Fatalf("secret %q", sub.GetSecret())
	}
	rcv.set(sub.GetSecret(), 0)
	r := wfCreate(t, e, "bob", wfSmallVC("team-a", "hooked"))
	wfCreate(t, e, "dan", wfSmallVC("team-b", "not-bobs")) // another team: not delivered
	wfApprove(t, e, "alice", r.GetName())
	rcv.waitFor(2)
	time.Sleep(300 * time.Millisecond) // nothing more may come
	got := rcv.waitFor(2)
	if len(got) != 2 || got[0].ev.Type != "dev.gpuplane.request.created" || got[1].ev.Type != "dev.gpuplane.request.approved" ||
		got[0].ev.Subject != r.GetName() || got[1].ev.Subject != r.GetName() || got[0].pos >= got[1].pos ||
		got[0].ev.SpecVersion != "1.0" || got[1].ev.Data.Actor != wfSubject("alice") || got[0].id != got[0].ev.ID {
		t.Fatalf("deliveries: %+v", got)
	}
	var obj struct{ State string }
	if err := json.Unmarshal(got[1].ev.Data.Object, &obj); err != nil || obj.State != "APPROVED" {
		t.Errorf("approved event's object: %s", got[1].ev.Data.Object)
	}

	hooks := pb.NewWebhookServiceClient(e.Conn)
	var log *pb.ListWebhookDeliveriesResponse
	for range 100 { // the log is written right after the receiver answered
		log = apiCall(hooks.ListWebhookDeliveries(e.As(t, "bob"), &pb.ListWebhookDeliveriesRequest{Parent: sub.GetName()})).must(t)
		if n := len(log.GetWebhookDeliveries()); n == 2 && log.GetWebhookDeliveries()[0].GetState() == pb.WebhookDelivery_SUCCEEDED &&
			log.GetWebhookDeliveries()[1].GetState() == pb.WebhookDelivery_SUCCEEDED {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, d := range log.GetWebhookDeliveries() {
		if d.GetState() != pb.WebhookDelivery_SUCCEEDED || d.GetLastStatusCode() != 204 || d.GetAttempts() != 1 {
			t.Errorf("delivery log: %v", d)
		}
	}
	// Others cannot read the log.
	_, err = hooks.ListWebhookDeliveries(e.As(t, "erin"), &pb.ListWebhookDeliveriesRequest{Parent: sub.GetName()})
	apiWantCode(t, err, codes.NotFound)

	first := log.GetWebhookDeliveries()[len(log.GetWebhookDeliveries())-1]
	if _, err := hooks.RedeliverWebhookDelivery(e.As(t, "bob"), &pb.RedeliverWebhookDeliveryRequest{Name: first.GetName()}); err != nil {
		t.Fatal(err)
	}
	again := rcv.waitFor(3)
	if again[2].id != first.GetEventId() || again[2].ev.Type != "dev.gpuplane.request.created" {
		t.Errorf("redelivery: %+v, want event %s", again[2], first.GetEventId())
	}
	if again[2].sigs != 1 {
		t.Errorf("%d signatures outside a rotation", again[2].sigs)
	}

	// Rotation: the new secret signs at once, the old one along with it
	// until it expires; a receiver holding either accepts the delivery.
	oldSecret := sub.GetSecret()
	rotated := apiCall(hooks.RotateWebhookSecret(e.As(t, "bob"), &pb.RotateWebhookSecretRequest{Name: sub.GetName()})).must(t)
	if rotated.GetSecret() == oldSecret || !strings.HasPrefix(rotated.GetSecret(), "whsec_") || rotated.GetPreviousSecretExpireTime() == nil {
		t.Fatalf("rotated: %v", rotated)
	}
	r2 := wfCreate(t, e, "bob", wfSmallVC("team-a", "hooked-2"))
	withOld := rcv.waitFor(4)[3]
	rcv.set(rotated.GetSecret(), 0)
	wfApprove(t, e, "alice", r2.GetName())
	withNew := rcv.waitFor(5)[4]
	if withOld.ev.Subject != r2.GetName() || withNew.ev.Subject != r2.GetName() || withOld.sigs != 2 || withNew.sigs != 2 {
		t.Errorf("deliveries during the rotation: %+v / %+v", withOld, withNew)
	}
	if rcv.bad != 0 {
		t.Errorf("%d deliveries failed verification", rcv.bad)
	}
}

// TestWebhookPermissionsAndURLs: subscriptions need the scope's manage
// permission (team owners, department admins, platform admins); objects
// the caller cannot read are NOT_FOUND; URLs must be https to public
// addresses unless the platform allows a host or range.
func TestWebhookPermissionsAndURLs(t *testing.T) {
	e := webhookEnv(t, 15)
	url := "http://127.0.0.1:9/hook"
	for _, c := range []struct {
		user string
		sub  *pb.WebhookSubscription
		want codes.Code
	}{
		{"bob", &pb.WebhookSubscription{Team: teamA, Url: url}, codes.OK},
		{"carol", &pb.WebhookSubscription{Team: teamA, Url: url}, codes.PermissionDenied},
		{"erin", &pb.WebhookSubscription{Team: teamA, Url: url}, codes.NotFound},
		{"frank", &pb.WebhookSubscription{Team: teamA, Url: url}, codes.OK},
		{"frank", &pb.WebhookSubscription{Department: deptA, Url: url}, codes.OK},
		{"bob", &pb.WebhookSubscription{Department: deptA, Url: url}, codes.PermissionDenied},
		{"frank", &pb.WebhookSubscription{Department: deptB, Url: url}, codes.NotFound},
		{"frank", &pb.WebhookSubscription{Url: url}, codes.PermissionDenied},
		{"alice", &pb.WebhookSubscription{Url: url}, codes.OK},
		{"alice", &pb.WebhookSubscription{Url: "https://169.254.169.254/latest/meta-data"}, codes.InvalidArgument},
		{"alice", &pb.WebhookSubscription{Url: "https://10.1.2.3/hook"}, codes.InvalidArgument},
		{"alice", &pb.WebhookSubscription{Url: "https://[::ffff:169.254.169.254]/hook"}, codes.InvalidArgument},
		{"alice", &pb.WebhookSubscription{Url: "http://93.184.215.14/hook"}, codes.InvalidArgument},
		{"alice", &pb.WebhookSubscription{Url: "https://user:pw@127.0.0.1/hook"}, codes.InvalidArgument},
		{"alice", &pb.WebhookSubscription{Url: url, EventTypes: []string{"no such type"}}, codes.InvalidArgument},
	} {
		_, err := createHook(t, e, c.user, "h-"+strconv.Itoa(int(time.Now().UnixNano()%1e9)), c.sub)
		if got := apiWantCode(t, err, c.want); c.want != codes.OK && got == nil {
			t.Errorf("%s %v: want %v", c.user, c.sub, c.want)
		}
	}
}

// TestWebhookReceiverDownThenUp: while the receiver answers 503 the
// deliveries are retried with backoff; once it is up everything arrives,
// in order per object, with the same ids. A receiver that never recovers
// gets its subscription disabled, which is itself an event and an audit
// entry.
func TestWebhookReceiverDownThenUp(t *testing.T) {
	e := webhookEnv(t, 1000)
	rcv := newReceiver(t)
	sub, err := createHook(t, e, "alice", "all-requests", &pb.WebhookSubscription{Url: rcv.srv.URL, EventTypes: []string{"request.*"}})
	if err != nil {
		t.Fatal(err)
	}
	rcv.set(sub.GetSecret(), http.StatusServiceUnavailable)
	var reqs []string
	for i := range 3 {
		reqs = append(reqs, wfCreate(t, e, "bob", wfSmallVC("team-a", "down-"+strconv.Itoa(i))).GetName())
	}
	for _, r := range reqs {
		wfApprove(t, e, "alice", r)
	}
	hooks := pb.NewWebhookServiceClient(e.Conn)
	// Wait until a delivery failed at least twice.
	for i := 0; ; i++ {
		log := apiCall(hooks.ListWebhookDeliveries(e.As(t, "alice"), &pb.ListWebhookDeliveriesRequest{Parent: sub.GetName()})).must(t)
		retried := false
		for _, d := range log.GetWebhookDeliveries() {
			retried = retried || (d.GetAttempts() >= 2 && d.GetLastStatusCode() == 503)
		}
		if retried {
			break
		}
		if i > 500 {
			t.Fatalf("no retries: %v", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rcv.set("", 0)
	got := rcv.waitFor(6)
	last := map[string]int64{}
	types := map[string][]string{}
	for _, d := range got {
		if d.pos <= last[d.ev.Subject] {
			t.Errorf("%s: position %d after %d", d.ev.Subject, d.pos, last[d.ev.Subject])
		}
		last[d.ev.Subject] = d.pos
		types[d.ev.Subject] = append(types[d.ev.Subject], d.ev.Type)
	}
	for _, r := range reqs {
		if ts := types[r]; len(ts) != 2 || ts[0] != "dev.gpuplane.request.created" || ts[1] != "dev.gpuplane.request.approved" {
			t.Errorf("%s: %v", r, ts)
		}
	}

}

// TestWebhookAutoDisable: a receiver that never recovers gets its
// subscription disabled after the configured run of failures, which is
// itself an event and an audit entry.
func TestWebhookAutoDisable(t *testing.T) {
	e := webhookEnv(t, 3)
	rcv := newReceiver(t)
	hooks := pb.NewWebhookServiceClient(e.Conn)
	sub, err := createHook(t, e, "alice", "dead-end", &pb.WebhookSubscription{Url: rcv.srv.URL, EventTypes: []string{"request.*"}})
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := createHook(t, e, "alice", "hook-events", &pb.WebhookSubscription{Url: rcv.srv.URL + "/ok", EventTypes: []string{"webhook.disabled"}})
	if err != nil {
		t.Fatal(err)
	}
	rcv.set(watcher.GetSecret(), 0)
	rcv.mu.Lock()
	rcv.status = 0
	rcv.mu.Unlock()
	// The dead end answers 500: a handler in front of the receiver.
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer dead.Close()
	sub = apiCall(hooks.UpdateWebhookSubscription(e.As(t, "alice"), &pb.UpdateWebhookSubscriptionRequest{
		WebhookSubscription: &pb.WebhookSubscription{Name: sub.GetName(), Url: dead.URL, Etag: sub.GetEtag()}, UpdateMask: apiMask("url")})).must(t)
	for i := range 3 {
		wfCreate(t, e, "bob", wfSmallVC("team-a", "dead-"+strconv.Itoa(i)))
	}
	for i := 0; ; i++ {
		s := apiCall(hooks.GetWebhookSubscription(e.As(t, "alice"), &pb.GetWebhookSubscriptionRequest{Name: sub.GetName()})).must(t)
		if s.GetDisabled() {
			if s.GetDisabledReason() == "" {
				t.Error("disabled without a reason")
			}
			break
		}
		if i > 1000 {
			t.Fatalf("never disabled: %v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := rcv.waitFor(1)
	if got[0].ev.Type != "dev.gpuplane.webhook.disabled" || got[0].ev.Subject != sub.GetName() {
		t.Errorf("the disabling as an event: %+v", got[0])
	}
	audit := apiListAudit(t, e, "alice", `resource = "`+sub.GetName()+`"`)
	found := false
	for _, a := range audit {
		found = found || a.GetAction() == "DisableWebhookSubscription"
	}
	if !found {
		t.Errorf("no audit entry for the disabling: %v", audit)
	}
}
