package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// The watch and webhook rows of the authorization matrix.
//
// A watch is opened as a read would be: on a team or department the caller
// cannot read it is NOT_FOUND before anything is sent; otherwise the first
// message is EXISTING or SYNCED. (Which events a watch then carries is
// TestWatchAuthorizationMatrix's business.)
//
// Webhook subscriptions are read and managed by those who manage their
// scope (internal/server/api/webhooks.go): a team's by its owners and its
// department's admins, a department's by its admins, platform-wide ones by
// platform admins. Everyone else finds none (NOT_FOUND): a subscription
// names another system's endpoint. Creating one in a scope the caller
// reads but does not manage is PERMISSION_DENIED.

// The subscriptions of both worlds, created by alice (hookScopes).
const (
	hookTeamA    = "webhookSubscriptions/hook-team-a"
	hookTeamB    = "webhookSubscriptions/hook-team-b"
	hookTeamC    = "webhookSubscriptions/hook-team-c"
	hookDeptA    = "webhookSubscriptions/hook-research"
	hookDeptB    = "webhookSubscriptions/hook-ops"
	hookPlatform = "webhookSubscriptions/hook-platform"
)

// hookScopes: each subscription's team or department ("" platform-wide).
var hookScopes = map[string]string{
	hookTeamA: teamA, hookTeamB: teamB, hookTeamC: teamC,
	hookDeptA: deptA, hookDeptB: deptB, hookPlatform: "",
}

// hookURL passes the worlds' URL policy (http to 127.0.0.1 allowed) and
// refuses connections, so deliveries stay in the log, pending.
const hookURL = "http://127.0.0.1:9/hook"

// hookWith fills a subscription's team or department from scope.
func hookWith(scope string, w *pb.WebhookSubscription) *pb.WebhookSubscription {
	switch {
	case strings.HasPrefix(scope, "teams/"):
		w.Team = scope
	case strings.HasPrefix(scope, "departments/"):
		w.Department = scope
	}
	return w
}

// addHooks creates the subscriptions of hookScopes as alice, makes an event
// in every team (each subscription matches one or more of them) and waits
// until every subscription has a delivery in its log.
func (w *authzWorld) addHooks(t *testing.T) {
	t.Helper()
	alice := w.e.As(t, "alice")
	hooks := pb.NewWebhookServiceClient(w.e.Conn)
	for name, scope := range hookScopes {
		apiCall(hooks.CreateWebhookSubscription(alice, &pb.CreateWebhookSubscriptionRequest{
			WebhookSubscriptionId: strings.TrimPrefix(name, "webhookSubscriptions/"),
			WebhookSubscription:   hookWith(scope, &pb.WebhookSubscription{Url: hookURL, EventTypes: []string{"team.*"}}),
		})).must(t)
	}
	for _, team := range []string{teamA, teamB, teamC} {
		apiCall(w.e.Teams.UpdateTeam(alice, &pb.UpdateTeamRequest{
			Team: &pb.Team{Name: team, DisplayName: "hooked " + team}, UpdateMask: apiMask("display_name"),
		})).must(t)
	}
	for name := range hookScopes {
		w.firstDelivery(t, name)
	}
}

// firstDelivery is the oldest delivery in the subscription's log (read by
// alice), waiting for the dispatcher to make one.
func (w *authzWorld) firstDelivery(t *testing.T, sub string) string {
	t.Helper()
	hooks := pb.NewWebhookServiceClient(w.e.Conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := apiCall(hooks.ListWebhookDeliveries(w.e.As(t, "alice"), &pb.ListWebhookDeliveriesRequest{Parent: sub, PageSize: 500})).must(t)
		if d := resp.GetWebhookDeliveries(); len(d) > 0 {
			return d[len(d)-1].GetName()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no delivery after 30s", sub)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hookNames lists the names of the subscriptions user manages, as
// ListWebhookSubscriptions pages through them.
func hookNames(t *testing.T, w *authzWorld, user string) []string {
	t.Helper()
	hooks := pb.NewWebhookServiceClient(w.e.Conn)
	var out []string
	req := &pb.ListWebhookSubscriptionsRequest{PageSize: 2}
	for {
		resp := apiCall(hooks.ListWebhookSubscriptions(w.e.As(t, user), req)).must(t)
		for _, s := range resp.GetWebhookSubscriptions() {
			if s.GetSecret() != "" {
				t.Errorf("%s lists %s with its secret", user, s.GetName())
			}
			out = append(out, s.GetName())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return out
		}
	}
}

// openWatch opens a stream, receives its first message and closes it: the
// error of opening or of the first receive, nil when the first message is
// EXISTING or SYNCED.
func openWatch[M interface{ GetKind() pb.WatchEventKind }](t *testing.T, ctx context.Context,
	open func(ctx context.Context) (interface{ Recv() (M, error) }, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := open(ctx)
	if err != nil {
		return err
	}
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if k := m.GetKind(); k != pb.WatchEventKind_EXISTING && k != pb.WatchEventKind_SYNCED {
		t.Errorf("the watch starts with %v, want EXISTING or SYNCED", k)
	}
	return nil
}

func eventMatrixRows() []authzRow {
	watchRequests := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		req := &pb.WatchRequestsRequest{}
		switch {
		case strings.HasPrefix(obj, "teams/"):
			req.Team = obj
		case strings.HasPrefix(obj, "departments/"):
			req.Department = obj
		}
		return openWatch(t, ctx, func(ctx context.Context) (interface {
			Recv() (*pb.RequestEvent, error)
		}, error) {
			return pb.NewWatchServiceClient(w.e.Conn).WatchRequests(ctx, req)
		})
	}
	watchVirtualClusters := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		req := &pb.WatchVirtualClustersRequest{Parent: "teams/-"}
		switch {
		case strings.HasPrefix(obj, "teams/"):
			req.Parent = obj
		case strings.HasPrefix(obj, "departments/"):
			req.Department = obj
		}
		return openWatch(t, ctx, func(ctx context.Context) (interface {
			Recv() (*pb.VirtualClusterEvent, error)
		}, error) {
			return pb.NewWatchServiceClient(w.e.Conn).WatchVirtualClusters(ctx, req)
		})
	}

	hooks := func(w *authzWorld) pb.WebhookServiceClient { return pb.NewWebhookServiceClient(w.e.Conn) }
	createHook := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		s, err := hooks(w).CreateWebhookSubscription(ctx, &pb.CreateWebhookSubscriptionRequest{WebhookSubscriptionId: w.uniq("hook"),
			WebhookSubscription: hookWith(obj, &pb.WebhookSubscription{Url: hookURL, EventTypes: []string{"team.*"}})})
		if err == nil && (s.GetSecret() == "" || s.GetTeam()+s.GetDepartment() != obj) {
			t.Errorf("created %v: want its secret and scope %q", s, obj)
		}
		return err
	}
	getHook := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		s, err := hooks(w).GetWebhookSubscription(ctx, &pb.GetWebhookSubscriptionRequest{Name: obj})
		if err == nil && (s.GetName() != obj || s.GetSecret() != "") {
			t.Errorf("GetWebhookSubscription(%s) = %v: want it without its secret", obj, s)
		}
		return err
	}
	updateHook := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		_, err := hooks(w).UpdateWebhookSubscription(ctx, &pb.UpdateWebhookSubscriptionRequest{
			WebhookSubscription: &pb.WebhookSubscription{Name: obj, DisplayName: "renamed by the matrix"}, UpdateMask: apiMask("display_name"),
		})
		return err
	}
	deleteHook := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		// A fresh subscription in obj's scope; a refused delete leaves it.
		alice := w.e.As(t, "alice")
		cp := apiCall(hooks(w).CreateWebhookSubscription(alice, &pb.CreateWebhookSubscriptionRequest{WebhookSubscriptionId: w.uniq("hook"),
			WebhookSubscription: hookWith(hookScopes[obj], &pb.WebhookSubscription{Url: hookURL})})).must(t)
		_, err := hooks(w).DeleteWebhookSubscription(ctx, &pb.DeleteWebhookSubscriptionRequest{Name: cp.GetName()})
		if err != nil {
			if _, gerr := hooks(w).GetWebhookSubscription(alice, &pb.GetWebhookSubscriptionRequest{Name: cp.GetName()}); gerr != nil {
				t.Errorf("a refused delete removed the subscription: %v", gerr)
			}
		}
		return err
	}
	rotateHook := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		s, err := hooks(w).RotateWebhookSecret(ctx, &pb.RotateWebhookSecretRequest{Name: obj})
		if err == nil && s.GetSecret() == "" {
			t.Errorf("rotated %s without showing the new secret", obj)
		}
		return err
	}
	listDeliveries := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		resp, err := hooks(w).ListWebhookDeliveries(ctx, &pb.ListWebhookDeliveriesRequest{Parent: obj})
		if err == nil && len(resp.GetWebhookDeliveries()) == 0 {
			t.Errorf("%s's delivery log is empty", obj)
		}
		return err
	}
	redeliver := func(t *testing.T, w *authzWorld, ctx context.Context, obj string, _ codes.Code) error {
		d := w.firstDelivery(t, obj)
		got, err := hooks(w).RedeliverWebhookDelivery(ctx, &pb.RedeliverWebhookDeliveryRequest{Name: d})
		if err == nil && (got.GetName() != d || got.GetState() != pb.WebhookDelivery_PENDING) {
			t.Errorf("redelivered %v, want %s PENDING", got, d)
		}
		return err
	}

	// Who reads (and manages) each subscription: its scope's managers.
	managers := map[string]string{
		//              alice frank bob carol dan erin nobody
		hookTeamA:    "OK OK OK NF NF NF NF",
		hookTeamB:    "OK OK NF NF OK NF NF",
		hookTeamC:    "OK NF NF NF NF NF NF",
		hookDeptA:    "OK OK NF NF NF NF NF",
		hookDeptB:    "OK NF NF NF NF NF NF",
		hookPlatform: "OK NF NF NF NF NF NF",
	}
	var rows []authzRow
	for _, op := range []struct {
		rpc  string
		call func(t *testing.T, w *authzWorld, ctx context.Context, object string, want codes.Code) error
	}{
		{"WebhookService.GetWebhookSubscription", getHook},
		{"WebhookService.UpdateWebhookSubscription", updateHook},
		{"WebhookService.DeleteWebhookSubscription", deleteHook},
		{"WebhookService.RotateWebhookSecret", rotateHook},
		{"WebhookService.ListWebhookDeliveries", listDeliveries},
		{"WebhookService.RedeliverWebhookDelivery", redeliver},
	} {
		for _, sub := range []string{hookTeamA, hookTeamB, hookTeamC, hookDeptA, hookDeptB, hookPlatform} {
			rows = append(rows, authzRow{op.rpc, sub, managers[sub], op.call})
		}
	}

	return append([]authzRow{
		//                                                         alice frank bob carol dan erin nobody
		{"WatchService.WatchRequests(team)", teamA, "OK OK OK OK NF NF NF", watchRequests},
		{"WatchService.WatchRequests(team)", teamB, "OK OK NF NF OK OK NF", watchRequests},
		{"WatchService.WatchRequests(team)", teamC, "OK NF NF NF NF NF NF", watchRequests},
		{"WatchService.WatchRequests(department)", deptA, "OK OK OK OK OK OK NF", watchRequests},
		{"WatchService.WatchRequests(department)", deptB, "OK NF NF NF NF NF NF", watchRequests},
		{"WatchService.WatchRequests(all)", "", "OK OK OK OK OK OK OK", watchRequests},
		{"WatchService.WatchVirtualClusters(parent)", teamA, "OK OK OK OK NF NF NF", watchVirtualClusters},
		{"WatchService.WatchVirtualClusters(parent)", teamB, "OK OK NF NF OK OK NF", watchVirtualClusters},
		{"WatchService.WatchVirtualClusters(parent)", teamC, "OK NF NF NF NF NF NF", watchVirtualClusters},
		{"WatchService.WatchVirtualClusters(department)", deptA, "OK OK OK OK OK OK NF", watchVirtualClusters},
		{"WatchService.WatchVirtualClusters(department)", deptB, "OK NF NF NF NF NF NF", watchVirtualClusters},
		{"WatchService.WatchVirtualClusters(teams/-)", "", "OK OK OK OK OK OK OK", watchVirtualClusters},

		{"WebhookService.CreateWebhookSubscription(team)", teamA, "OK OK OK PD NF NF NF", createHook},
		{"WebhookService.CreateWebhookSubscription(team)", teamB, "OK OK NF NF OK PD NF", createHook},
		{"WebhookService.CreateWebhookSubscription(team)", teamC, "OK NF NF NF NF NF NF", createHook},
		{"WebhookService.CreateWebhookSubscription(department)", deptA, "OK OK PD PD PD PD NF", createHook},
		{"WebhookService.CreateWebhookSubscription(department)", deptB, "OK NF NF NF NF NF NF", createHook},
		{"WebhookService.CreateWebhookSubscription(platform)", "", "OK PD PD PD PD PD PD", createHook},
		{"WebhookService.ListWebhookSubscriptions", "", "OK OK OK OK OK OK OK", func(t *testing.T, w *authzWorld, ctx context.Context, _ string, _ codes.Code) error {
			_, err := hooks(w).ListWebhookSubscriptions(ctx, &pb.ListWebhookSubscriptionsRequest{})
			return err
		}},
	}, rows...)
}
