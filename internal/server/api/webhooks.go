package api

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/webhook"
)

// WebhookDeps configure webhook subscriptions.
type WebhookDeps struct {
	// URLs decides which URLs subscriptions may name (nil: https to public
	// addresses only).
	URLs *webhook.URLPolicy
}

const (
	defaultSecretOverlap = 24 * time.Hour
	maxSecretOverlap     = 7 * 24 * time.Hour
)

// canManageWebhook: team owners (and department admins) manage their
// team's subscriptions, department admins their department's, platform
// admins the platform's. Reading needs the same: subscriptions name other
// systems' endpoints.
func canManageWebhook(a *identity.Access, s webhook.Subscription) bool {
	switch {
	case s.Team != "":
		return a.CanManageMembers(s.Team, s.Department)
	case s.Department != "":
		return a.IsDepartmentAdmin(s.Department)
	}
	return a.PlatformAdmin
}

// manageableScope is the list scope of canManageWebhook.
func manageableScope(a *identity.Access) store.Scope {
	if a.PlatformAdmin {
		return store.Scope{All: true}
	}
	var teams []string
	for _, t := range a.ReadableTeams() {
		if a.TeamRole(t) >= identity.RoleOwner {
			teams = append(teams, t)
		}
	}
	return store.Scope{Teams: teams, Departments: a.AdminDepartments()}
}

func (s *Webhooks) urls() *webhook.URLPolicy {
	if s.webhooks.URLs == nil {
		return &webhook.URLPolicy{}
	}
	return s.webhooks.URLs
}

// manageable reads the named subscription for a caller who manages it;
// others get NOT_FOUND.
func (s *Webhooks) manageable(ctx context.Context, q store.Querier, name string, lock bool) (webhook.Subscription, *identity.Access, error) {
	id, err := webhook.ParseName("name", name)
	if err != nil {
		return webhook.Subscription{}, nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return webhook.Subscription{}, nil, err
	}
	sub, err := webhook.Get(ctx, q, id, lock)
	if err != nil {
		return sub, a, err
	}
	if !canManageWebhook(a, sub) {
		return webhook.Subscription{}, a, errs.NotFound(name)
	}
	return sub, a, nil
}

// GetWebhookSubscription implements pb.WebhookServiceServer.
func (s *Webhooks) GetWebhookSubscription(ctx context.Context, req *pb.GetWebhookSubscriptionRequest) (*pb.WebhookSubscription, error) {
	sub, _, err := s.manageable(ctx, s.db, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	return subscriptionToProto(sub, false), nil
}

// ListWebhookSubscriptions implements pb.WebhookServiceServer.
func (s *Webhooks) ListWebhookSubscriptions(ctx context.Context, req *pb.ListWebhookSubscriptionsRequest) (*pb.ListWebhookSubscriptionsResponse, error) {
	o := webhook.ListOptions{PageSize: req.GetPageSize(), Filter: req.GetFilter()}
	if err := webhook.CheckList(o); err != nil {
		return nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	o.Scope = manageableScope(a)
	list, next, err := page(req.GetPageToken(), "webhooks|"+req.GetFilter(), "", idCursor,
		func(after string) ([]webhook.Subscription, bool, error) {
			o.After = after
			return webhook.List(ctx, s.db, o)
		},
		func(w webhook.Subscription) string { return w.ID },
		func(w webhook.Subscription) *pb.WebhookSubscription { return subscriptionToProto(w, false) })
	if err != nil {
		return nil, err
	}
	return &pb.ListWebhookSubscriptionsResponse{WebhookSubscriptions: list, NextPageToken: next}, nil
}

// CreateWebhookSubscription implements pb.WebhookServiceServer.
func (s *Webhooks) CreateWebhookSubscription(ctx context.Context, req *pb.CreateWebhookSubscriptionRequest) (*pb.WebhookSubscription, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	var v errs.Violations
	names.ValidateID(&v, "webhook_subscription_id", req.GetWebhookSubscriptionId())
	w := req.GetWebhookSubscription()
	if w == nil {
		v.Add("webhook_subscription", "required")
		return nil, v.Err()
	}
	if len(w.GetDisplayName()) > 256 {
		v.Add("webhook_subscription.display_name", "must be at most 256 characters")
	}
	webhook.ValidateEventTypes(&v, "webhook_subscription.event_types", w.GetEventTypes())
	if w.GetTeam() != "" && w.GetDepartment() != "" {
		v.Add("webhook_subscription.department", "set team or department, not both (a team subscription is in its team's department)")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	sub := webhook.Subscription{ID: req.GetWebhookSubscriptionId(), DisplayName: w.GetDisplayName(), URL: w.GetUrl(),
		EventTypes: w.GetEventTypes(), Disabled: w.GetDisabled()}
	switch {
	case w.GetTeam() != "":
		t, _, err := s.readableTeam(ctx, "webhook_subscription.team", w.GetTeam())
		if err != nil {
			return nil, err
		}
		sub.Team, sub.Department = t.ID, t.Department
	case w.GetDepartment() != "":
		id, err := names.ParseDepartment("webhook_subscription.department", w.GetDepartment())
		if err != nil {
			return nil, err
		}
		if !a.CanReadDepartment(id) {
			return nil, errs.NotFound(w.GetDepartment())
		}
		if _, err := tenancy.GetDepartment(ctx, s.db, id, false); err != nil {
			return nil, err
		}
		sub.Department = id
	}
	if !canManageWebhook(a, sub) {
		return nil, errs.PermissionDenied("%s", manageRule(sub))
	}
	if err := s.urls().Check(ctx, "webhook_subscription.url", sub.URL); err != nil {
		return nil, err
	}
	return create(ctx, s.db, "", a.Principal.Subject, "CreateWebhookSubscription", req.GetRequestId(), req,
		func() *pb.WebhookSubscription { return &pb.WebhookSubscription{} },
		func(ctx context.Context, tx *store.Tx) (*pb.WebhookSubscription, error) {
			row, err := webhook.Create(ctx, tx, a.Principal, req.GetRequestId(), sub)
			if err != nil {
				return nil, err
			}
			return subscriptionToProto(row, true), nil
		})
}

func manageRule(s webhook.Subscription) string {
	switch {
	case s.Team != "":
		return "only the team's owners and its department's admins manage the webhooks of " + names.Team(s.Team)
	case s.Department != "":
		return "only the admins of " + names.Department(s.Department) + " manage its webhooks"
	}
	return "only platform admins manage platform-wide webhooks (set team or department for a narrower scope)"
}

// UpdateWebhookSubscription implements pb.WebhookServiceServer.
func (s *Webhooks) UpdateWebhookSubscription(ctx context.Context, req *pb.UpdateWebhookSubscriptionRequest) (*pb.WebhookSubscription, error) {
	w := req.GetWebhookSubscription()
	if w == nil {
		return nil, errs.InvalidField("webhook_subscription", "required")
	}
	paths := map[string]bool{}
	mask := req.GetUpdateMask().GetPaths()
	if len(mask) == 0 || (len(mask) == 1 && mask[0] == "*") {
		mask = []string{"display_name", "url", "event_types", "disabled"}
	}
	var v errs.Violations
	for _, m := range mask {
		switch m {
		case "display_name", "url", "event_types", "disabled":
			paths[m] = true
		default:
			v.Add("update_mask", "path %q cannot be updated; updatable: display_name, url, event_types, disabled", m)
		}
	}
	if paths["display_name"] && len(w.GetDisplayName()) > 256 {
		v.Add("webhook_subscription.display_name", "must be at most 256 characters")
	}
	if paths["event_types"] {
		webhook.ValidateEventTypes(&v, "webhook_subscription.event_types", w.GetEventTypes())
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if _, _, err := s.manageable(ctx, s.db, w.GetName(), false); err != nil {
		return nil, err
	}
	if paths["url"] {
		if err := s.urls().Check(ctx, "webhook_subscription.url", w.GetUrl()); err != nil {
			return nil, err
		}
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.WebhookSubscription, error) {
		cur, a, err := s.manageable(ctx, tx, w.GetName(), true)
		if err != nil {
			return nil, err
		}
		row, err := webhook.Update(ctx, tx, a.Principal, cur.ID, w.GetEtag(), func(next *webhook.Subscription) {
			if paths["display_name"] {
				next.DisplayName = w.GetDisplayName()
			}
			if paths["url"] {
				next.URL = w.GetUrl()
			}
			if paths["event_types"] {
				next.EventTypes = w.GetEventTypes()
			}
			if paths["disabled"] {
				next.Disabled = w.GetDisabled()
			}
		})
		if err != nil {
			return nil, err
		}
		return subscriptionToProto(row, false), nil
	})
}

// DeleteWebhookSubscription implements pb.WebhookServiceServer.
func (s *Webhooks) DeleteWebhookSubscription(ctx context.Context, req *pb.DeleteWebhookSubscriptionRequest) (*emptypb.Empty, error) {
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*emptypb.Empty, error) {
		cur, a, err := s.manageable(ctx, tx, req.GetName(), true)
		if err != nil {
			return nil, err
		}
		return &emptypb.Empty{}, webhook.Delete(ctx, tx, a.Principal, cur.ID, req.GetEtag())
	})
}

// RotateWebhookSecret implements pb.WebhookServiceServer.
func (s *Webhooks) RotateWebhookSecret(ctx context.Context, req *pb.RotateWebhookSecretRequest) (*pb.WebhookSubscription, error) {
	ttl := defaultSecretOverlap
	if d := req.GetPreviousSecretTtl(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 || d.AsDuration() > maxSecretOverlap {
			return nil, errs.InvalidField("previous_secret_ttl", "must be between 0 and 168h (7 days)")
		}
		if d.AsDuration() > 0 {
			ttl = d.AsDuration()
		}
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.WebhookSubscription, error) {
		cur, a, err := s.manageable(ctx, tx, req.GetName(), true)
		if err != nil {
			return nil, err
		}
		row, err := webhook.Rotate(ctx, tx, a.Principal, cur.ID, req.GetEtag(), ttl, time.Now())
		if err != nil {
			return nil, err
		}
		return subscriptionToProto(row, true), nil
	})
}

// ListWebhookDeliveries implements pb.WebhookServiceServer.
func (s *Webhooks) ListWebhookDeliveries(ctx context.Context, req *pb.ListWebhookDeliveriesRequest) (*pb.ListWebhookDeliveriesResponse, error) {
	if err := webhook.CheckDeliveryList(req.GetPageSize(), req.GetFilter()); err != nil {
		return nil, err
	}
	sub, _, err := s.manageable(ctx, s.db, req.GetParent(), false)
	if err != nil {
		return nil, err
	}
	list, next, err := page(req.GetPageToken(), "deliveries|"+req.GetParent()+"|"+req.GetFilter(), webhook.FirstPage, nil,
		func(before int64) ([]webhook.Delivery, bool, error) {
			return webhook.ListDeliveries(ctx, s.db, sub.ID, req.GetPageSize(), req.GetFilter(), before)
		},
		func(d webhook.Delivery) int64 { return d.ID }, deliveryToProto)
	if err != nil {
		return nil, err
	}
	return &pb.ListWebhookDeliveriesResponse{WebhookDeliveries: list, NextPageToken: next}, nil
}

// RedeliverWebhookDelivery implements pb.WebhookServiceServer.
func (s *Webhooks) RedeliverWebhookDelivery(ctx context.Context, req *pb.RedeliverWebhookDeliveryRequest) (*pb.WebhookDelivery, error) {
	parts, err := names.Parse("name", req.GetName(), webhook.Collection, "deliveries")
	if err != nil {
		return nil, err
	}
	id, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || id <= 0 {
		return nil, errs.NotFound(req.GetName())
	}
	return mutate(ctx, s.db, "", func(ctx context.Context, tx *store.Tx) (*pb.WebhookDelivery, error) {
		sub, _, err := s.manageable(ctx, tx, webhook.Name(parts[0]), false)
		if err != nil {
			return nil, err
		}
		d, err := webhook.Redeliver(ctx, tx, sub.ID, id)
		if err != nil {
			return nil, err
		}
		return deliveryToProto(d), nil
	})
}

func subscriptionToProto(s webhook.Subscription, withSecret bool) *pb.WebhookSubscription {
	w := &pb.WebhookSubscription{Name: s.Name(), DisplayName: s.DisplayName, Url: s.URL, EventTypes: s.EventTypes,
		Disabled: s.Disabled, DisabledReason: s.DisabledReason, ConsecutiveFailures: s.ConsecutiveFailures,
		StartPosition: s.StartPosition, Etag: s.Etag(), CreateTime: ts(s.Created), UpdateTime: ts(s.Updated)}
	if s.Team != "" {
		w.Team = names.Team(s.Team)
	} else if s.Department != "" {
		w.Department = names.Department(s.Department)
	}
	if s.PreviousSecretExpire != nil {
		w.PreviousSecretExpireTime = ts(*s.PreviousSecretExpire)
	}
	if withSecret {
		w.Secret = s.Secret
	}
	return w
}

func deliveryToProto(d webhook.Delivery) *pb.WebhookDelivery {
	out := &pb.WebhookDelivery{Name: d.Name(), EventId: strconv.FormatInt(d.EventID, 10), EventType: d.EventType,
		Resource: d.Resource, Position: d.Position, State: pb.WebhookDelivery_State(pb.WebhookDelivery_State_value[d.State]),
		Attempts: d.Attempts, NextAttemptTime: ts(d.NextAttempt), LastStatusCode: d.LastStatusCode, LastError: d.LastError,
		CreateTime: ts(d.Created)}
	if d.LastAttempt != nil {
		out.LastAttemptTime = ts(*d.LastAttempt)
		out.LastDuration = durationpb.New(d.LastDuration)
	}
	if d.Completed != nil {
		out.CompleteTime = timestamppb.New(*d.Completed)
	}
	if d.State != webhook.StatePending {
		out.NextAttemptTime = nil
	}
	return out
}
