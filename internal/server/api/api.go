// Package api is the thin adapter between the generated API
// (api/gpuplane/v1) and the domain: one file per service. Handlers parse
// and validate the request, load what the caller may do (Access), check
// it, convert proto <-> domain, and call the domain packages (tenancy,
// request, virtualcluster, audit) inside one transaction. This package also
// owns the API mechanics every service shares: idempotent creates
// (request_id replay), etags, page cursors and the list/mutate helpers.
// internal/server turns the errors it returns into gRPC statuses.
package api

import (
	"context"
	"log/slog"
	"time"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// Kubeconfigs reads what the host cluster publishes about a virtual
// cluster; *hostcluster.Client implements it.
type Kubeconfigs interface {
	// VirtualClusterCA is the PEM CA bundle of the virtual API server.
	VirtualClusterCA(ctx context.Context, vcID string) ([]byte, error)
	// AdminKubeconfig is vCluster's own admin kubeconfig (break glass).
	AdminKubeconfig(ctx context.Context, vcID string) ([]byte, error)
}

// Deps are what the handlers need; internal/app builds them.
type Deps struct {
	DB                  *store.DB
	Tenancy             *tenancy.Service
	Requests            *request.Service
	PlatformAdminGroups []string
	// Kubeconfigs is nil without a host cluster: kubeconfigs then carry no
	// CA and break glass is unavailable.
	Kubeconfigs Kubeconfigs
	// APIEndpoint is the gpuplane API address written into kubeconfigs'
	// credential plugin when the caller names none.
	APIEndpoint string
	Log         *slog.Logger
	// Events serves watches (nil: watches are refused); WatchHeartbeat is
	// how often idle watches send a heartbeat (default DefaultHeartbeat).
	Events         *events.Hub
	WatchHeartbeat time.Duration
	// Webhooks manages webhook subscriptions (watch.go, webhooks.go).
	Webhooks WebhookDeps
}

// API implements every gpuplane.v1 service.
type API struct {
	db          *store.DB
	tenancy     *tenancy.Service
	requests    *request.Service
	adminGroups []string
	kubeconfigs Kubeconfigs
	apiEndpoint string
	log         *slog.Logger
	hub         *events.Hub
	heartbeat   time.Duration
	webhooks    WebhookDeps
}

// New builds the handlers.
func New(d Deps) *API {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.WatchHeartbeat <= 0 {
		d.WatchHeartbeat = DefaultHeartbeat
	}
	return &API{db: d.DB, tenancy: d.Tenancy, requests: d.Requests, adminGroups: d.PlatformAdminGroups,
		kubeconfigs: d.Kubeconfigs, apiEndpoint: d.APIEndpoint, log: d.Log, hub: d.Events, heartbeat: d.WatchHeartbeat,
		webhooks: d.Webhooks}
}

// The services, each a view of API with its own generated base.
type (
	// Departments implements pb.DepartmentServiceServer.
	Departments struct {
		pb.UnimplementedDepartmentServiceServer
		*API
	}
	// Teams implements pb.TeamServiceServer.
	Teams struct {
		pb.UnimplementedTeamServiceServer
		*API
	}
	// Members implements pb.MemberServiceServer.
	Members struct {
		pb.UnimplementedMemberServiceServer
		*API
	}
	// Identity implements pb.IdentityServiceServer.
	Identity struct {
		pb.UnimplementedIdentityServiceServer
		*API
	}
	// Audit implements pb.AuditServiceServer.
	Audit struct {
		pb.UnimplementedAuditServiceServer
		*API
	}
	// VirtualClusters implements pb.VirtualClusterServiceServer.
	VirtualClusters struct {
		pb.UnimplementedVirtualClusterServiceServer
		*API
	}
	// Requests implements pb.RequestServiceServer.
	Requests struct {
		pb.UnimplementedRequestServiceServer
		*API
	}
	// Policies implements pb.ApprovalPolicyServiceServer.
	Policies struct {
		pb.UnimplementedApprovalPolicyServiceServer
		*API
	}
	// Watches implements pb.WatchServiceServer.
	Watches struct {
		pb.UnimplementedWatchServiceServer
		*API
	}
	// Webhooks implements pb.WebhookServiceServer.
	Webhooks struct {
		pb.UnimplementedWebhookServiceServer
		*API
	}
)
