// Package apptest starts the real gpuplane server in-process for tests: a
// fresh PostgreSQL database, the in-process OIDC issuer, random ports, and
// real gRPC and HTTP clients.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"k8s.io/client-go/rest"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/server/api"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

var (
	issuerOnce sync.Once
	issuer     *oidcdev.Issuer
	issuerErr  error
)

// Issuer is one dev OIDC issuer per test binary, with the demo users.
func Issuer(t testing.TB) *oidcdev.Issuer {
	issuerOnce.Do(func() {
		issuer, issuerErr = oidcdev.New(context.Background(), oidcdev.Config{Addr: "127.0.0.1:0", Users: devenv.DemoUsers})
	})
	if issuerErr != nil {
		t.Fatalf("apptest: OIDC issuer: %v", issuerErr)
	}
	return issuer
}

// Env is a running server.
type Env struct {
	App      *app.App
	Issuer   *oidcdev.Issuer
	Conn     *grpc.ClientConn
	HTTPBase string
	// MetricsBase is the private metrics listener ("" when a test's
	// Config turned it off).
	MetricsBase string

	Departments    pb.DepartmentServiceClient
	Teams          pb.TeamServiceClient
	Members        pb.MemberServiceClient
	Identity       pb.IdentityServiceClient
	Audit          pb.AuditServiceClient
	VirtualCluster pb.VirtualClusterServiceClient
	Requests       pb.RequestServiceClient
	Policies       pb.ApprovalPolicyServiceClient

	mu     sync.Mutex
	tokens map[string]string

	stopOnce sync.Once
	stop     func() error
	stopErr  error
}

// Options tune Start.
type Options struct {
	Seed     bool // create the demo department, teams and members
	Capacity tenancy.CapacitySource
	// ObservedCapacity leaves capacity to what the worker observes on the
	// host clusters (as `gpuplane serve` with a host cluster does) instead
	// of the demo's static capacity. It needs HostConfig.
	ObservedCapacity bool
	Now              func() time.Time
	Config           func(*app.Config)
	// HostConfig, when set, is the host cluster the server uses (e.g. an
	// envtest API server). The vCluster charts then come from the Go module
	// cache (internal/devenv/vclusterchart) unless Config sets
	// VClusterChartDir.
	HostConfig *rest.Config
	// RunWorker runs the host-cluster worker inside the server, as
	// `gpuplane serve --run-worker` does. It needs HostConfig.
	RunWorker bool
	// Logger replaces the default logger (errors only, to stderr), e.g. to
	// capture what the server logs.
	Logger *slog.Logger
	// TracerProvider records the server's spans (e.g. an SDK provider with
	// an in-memory exporter); nil traces nothing.
	TracerProvider trace.TracerProvider
	// Kubeconfigs replaces the host cluster as the source of virtual
	// clusters' CA and admin kubeconfig.
	Kubeconfigs api.Kubeconfigs
	// Issuer replaces the shared dev issuer (e.g. one a test stops and
	// restarts); it must know the demo users.
	Issuer *oidcdev.Issuer
}

// Start runs a server for the test and stops it at cleanup.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	iss := o.Issuer
	if iss == nil {
		iss = Issuer(t)
	}
	cfg := app.Defaults()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DatabaseURL = storetest.New(t)
	cfg.OIDCIssuerURL = iss.IssuerURL()
	cfg.ExpiryInterval = 0
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "error"
	if o.Capacity == nil && !o.ObservedCapacity {
		o.Capacity = tenancy.StaticCapacity(devenv.DemoCapacity)
	}
	cfg.RunWorker = o.RunWorker
	if o.Config != nil {
		o.Config(&cfg)
	}
	if o.HostConfig != nil && cfg.VClusterChartDir == "" {
		// Every offered chart version from the Go module cache.
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Minute)
		dirs, err := vclusterchart.Flag(cctx, cfg.VClusterChartVersions)
		ccancel()
		if err != nil {
			t.Fatalf("apptest: vCluster charts: %v", err)
		}
		cfg.VClusterChartDir = dirs
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, app.Options{Logger: logger, Capacity: o.Capacity, Now: o.Now, HostConfig: o.HostConfig,
		TracerProvider: o.TracerProvider, Kubeconfigs: o.Kubeconfigs})
	if err != nil {
		cancel()
		t.Fatalf("apptest: start server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("apptest: dial: %v", err)
	}
	stop := func() error { cancel(); return <-done }
	e := &Env{
		App: a, Issuer: iss, Conn: conn, HTTPBase: "http://" + a.HTTPAddr(), tokens: map[string]string{},
		Departments: pb.NewDepartmentServiceClient(conn), Teams: pb.NewTeamServiceClient(conn),
		Members: pb.NewMemberServiceClient(conn), Identity: pb.NewIdentityServiceClient(conn),
		Audit: pb.NewAuditServiceClient(conn), VirtualCluster: pb.NewVirtualClusterServiceClient(conn),
		Requests: pb.NewRequestServiceClient(conn), Policies: pb.NewApprovalPolicyServiceClient(conn),
		stop: stop,
	}
	if addr := a.MetricsAddr(); addr != "" {
		e.MetricsBase = "http://" + addr
	}
	t.Cleanup(func() {
		conn.Close()
		if err := e.Stop(); err != nil {
			t.Errorf("apptest: server stopped with: %v", err)
		}
	})
	if o.Seed {
		if err := devenv.Seed(context.Background(), a.API); err != nil {
			t.Fatalf("apptest: seed: %v", err)
		}
	}
	return e
}

// Stop shuts the server down as SIGTERM would (its Run context ends) and
// returns what Run returned; in-flight calls finish within the shutdown
// timeout. Later calls (and the cleanup) return the same result.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

// Token is a real ID token for a demo user from the issuer.
func (e *Env) Token(t testing.TB, user string) string {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if tok, ok := e.tokens[user]; ok {
		return tok
	}
	tok, err := e.Issuer.Token(context.Background(), user)
	if err != nil {
		t.Fatalf("apptest: token for %s: %v", user, err)
	}
	e.tokens[user] = tok
	return tok
}

// As returns a context whose gRPC calls carry user's bearer token.
func (e *Env) As(t testing.TB, user string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+e.Token(t, user))
}

// Response is a REST answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Map decodes the body into a generic map.
func (r Response) Map(t testing.TB) map[string]any {
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// Do sends a REST call as user ("" = no token). body may be a string or
// any JSON-marshalable value.
func (e *Env) Do(t testing.TB, user, method, path string, body any) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.HTTPBase+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+e.Token(t, user))
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}
