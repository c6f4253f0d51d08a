package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/fleet"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/request"
	"github.com/gpuplane/gpuplane/internal/server"
	"github.com/gpuplane/gpuplane/internal/server/api"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/telemetry"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// Options are the parts tests and dev mode inject instead of building
// from configuration.
type Options struct {
	Logger *slog.Logger
	// Capacity overrides the static capacity from configuration.
	Capacity tenancy.CapacitySource
	// OIDCCACert overrides OIDCCAFile (dev issuer with its own CA).
	OIDCCACert []byte
	// Now overrides the clock (expiry tests).
	Now func() time.Time
	// HostConfig overrides the host cluster from configuration.
	HostConfig *rest.Config
	// Kubeconfigs overrides where virtual clusters' CA and admin
	// kubeconfig come from (default: the host cluster, when there is one).
	Kubeconfigs api.Kubeconfigs
	// TracerProvider overrides the one built from the OTEL_* environment
	// (tests record spans in memory).
	TracerProvider trace.TracerProvider
}

// App is a built, listening gpuplane server.
type App struct {
	cfg      Config
	log      *slog.Logger
	pool     *pgxpool.Pool
	db       *store.DB
	server   *server.Server
	Tenancy  *tenancy.Service
	Requests *request.Service
	Fleet    *fleet.Service
	API      *api.API
	// Host is the host cluster gpuplane runs in (host cluster "default"
	// after migration 000008); nil without one.
	Host *hostcluster.Client
	// HostClusters reaches the other host clusters through their
	// kubeconfig Secrets; nil without a host cluster.
	HostClusters *hostcluster.Registry
	Worker       *reconcile.Worker // nil unless cfg.RunWorker
	feed         *feed
	closers      []func()
}

// NewLogger builds the slog logger the configuration asks for.
func NewLogger(cfg Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(cfg.LogFormat, "text") {
		return slog.New(telemetry.LogHandler(slog.NewTextHandler(os.Stderr, opts)))
	}
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, opts)))
}

// New builds everything in dependency order and listens; nothing serves
// until Run. On error, what was built is closed again.
func New(ctx context.Context, cfg Config, opts Options) (_ *App, err error) {
	a := &App{cfg: cfg, log: opts.Logger}
	if a.log == nil {
		a.log = NewLogger(cfg)
	}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if cfg.DatabaseURL == "" {
		return nil, errors.New("database URL is required (--database-url or DATABASE_URL)")
	}
	cors, err := server.NewCORSConfig(cfg.CORSAllowedOrigins, cfg.CORSAllowCredentials, cfg.CORSMaxAge)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	tp, closeTracing, err := tracerProvider(ctx, opts, "serve", a.log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, closeTracing)
	a.pool, err = store.Open(ctx, cfg.DatabaseURL, int32(cfg.DatabaseMaxConns), store.WithTracer(telemetry.PGXTracer(tp)))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	a.closers = append(a.closers, a.pool.Close)
	if a.feed, err = newFeed(a.pool, cfg, a.log, true); err != nil {
		return nil, err
	}
	a.db = a.feed.db
	reg := newRegistry(a.db, a.log)
	reg.MustRegister(stateCollectors(a.db, a.log)...)
	reg.MustRegister(groupCommitCollectors(a.db)...)

	caPEM := opts.OIDCCACert
	if caPEM == nil && cfg.OIDCCAFile != "" {
		if caPEM, err = os.ReadFile(cfg.OIDCCAFile); err != nil {
			return nil, fmt.Errorf("read OIDC CA file: %w", err)
		}
	}
	if cfg.OIDCIssuerURL == "" {
		return nil, errors.New("OIDC issuer URL is required (--oidc-issuer-url)")
	}
	verifier, err := identity.NewVerifier(ctx, identity.VerifierConfig{
		IssuerURL: cfg.OIDCIssuerURL, ClientID: cfg.OIDCClientID, UsernameClaim: cfg.OIDCUsernameClaim,
		GroupsClaim: cfg.OIDCGroupsClaim, CACertPEM: caPEM, KeyRefetchInterval: cfg.OIDCKeyRefetchInterval,
		Logf: func(format string, args ...any) { a.log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, fmt.Errorf("OIDC: %w", err)
	}

	rc := opts.HostConfig
	if rc == nil {
		if rc, err = hostConfig(cfg); err != nil {
			return nil, err
		}
	}
	var hs hosts
	if rc != nil {
		if hs, err = newHosts(rc, cfg, a.log, tp); err != nil {
			return nil, err
		}
		a.Host, a.HostClusters = hs.home, hs.registry
		a.closers = append(a.closers, hs.close)
	}
	if cfg.RunWorker {
		if a.Host == nil {
			return nil, errors.New("--run-worker needs a host cluster (--kubeconfig, KUBECONFIG or in-cluster config)")
		}
		a.Worker = reconcile.New(a.db, a.Host, a.log, workerConfig(cfg, hs, reg, tp))
	}

	// With a host cluster, capacity is what the worker observes on every
	// host cluster; without one, the static capacity from configuration.
	capacity := opts.Capacity
	observedCapacity := capacity == nil && a.Host != nil
	if observedCapacity {
		capacity = fleet.ObservedCapacity{DB: a.db}
	}
	if capacity == nil {
		var v []string
		var c quota.Resources
		if c.GPU, err = quota.ParseGPU(cfg.CapacityGPU); err != nil {
			v = append(v, "capacity-gpu: "+err.Error())
		}
		if c.CPUMillis, err = quota.ParseCPU(cfg.CapacityCPU); err != nil {
			v = append(v, "capacity-cpu: "+err.Error())
		}
		if c.MemoryBytes, err = quota.ParseMemory(cfg.CapacityMemory); err != nil {
			v = append(v, "capacity-memory: "+err.Error())
		}
		if len(v) > 0 {
			return nil, fmt.Errorf("invalid configuration: %s", strings.Join(v, "; "))
		}
		capacity = tenancy.StaticCapacity(c)
	}
	if _, err := cfg.TierProfiles(); err != nil {
		return nil, err
	}
	if _, err := quota.ClusterCapacity(quota.Resources{}, cfg.Overcommit); err != nil {
		return nil, fmt.Errorf("invalid configuration: overcommit: %w", err)
	}

	versions, err := cfg.ChartVersions()
	if err != nil {
		return nil, err
	}
	a.Tenancy = tenancy.NewService(capacity, cfg.Overcommit, request.TeamHistory{})
	a.Fleet = fleet.NewService(cfg.Overcommit, observedCapacity)
	a.Requests = request.NewService(a.db, a.Tenancy, a.Fleet, versions, a.log, opts.Now)

	// Listen on the gRPC port before building the handlers: kubeconfigs
	// name the API address, by default the bound one.
	grpcLis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen gRPC on %s: %w", cfg.GRPCAddr, err)
	}
	apiEndpoint := cfg.PublicAPIAddress
	if apiEndpoint == "" {
		// Without a configured public address only local clients work.
		apiEndpoint = dialableAddress(grpcLis.Addr().String())
	}
	kubeconfigs := opts.Kubeconfigs
	if kubeconfigs == nil && a.Host != nil {
		kubeconfigs = fleetKubeconfigs{db: a.db, hosts: hs}
	}
	a.API = api.New(api.Deps{DB: a.db, Tenancy: a.Tenancy, Requests: a.Requests, Fleet: a.Fleet, PlatformAdminGroups: cfg.AdminGroups(),
		Kubeconfigs: kubeconfigs, APIEndpoint: apiEndpoint, Log: a.log,
		Events: a.feed.hub, WatchHeartbeat: cfg.WatchHeartbeat, Webhooks: api.WebhookDeps{URLs: a.feed.urls}})
	a.server, err = server.New(ctx, server.Config{
		GRPCAddr: cfg.GRPCAddr, GRPCListener: grpcLis, HTTPAddr: cfg.HTTPAddr, MetricsAddr: cfg.MetricsAddr,
		MaxRequestBytes: int64(cfg.MaxRequestBytes), Logger: a.log, Auth: verifier, Classify: store.Classify, Registry: reg,
		TracerProvider: tp, CORS: cors, Ready: a.ready,
		Services: server.Services{
			Departments:    &api.Departments{API: a.API},
			Teams:          &api.Teams{API: a.API},
			Members:        &api.Members{API: a.API},
			Identity:       &api.Identity{API: a.API},
			Audit:          &api.Audit{API: a.API},
			VirtualCluster: &api.VirtualClusters{API: a.API},
			Requests:       &api.Requests{API: a.API},
			Policies:       &api.Policies{API: a.API},
			HostClusters:   &api.HostClusters{API: a.API},
			Watch:          &api.Watches{API: a.API},
			Webhooks:       &api.Webhooks{API: a.API},
		},
	})
	if err != nil {
		grpcLis.Close()
		return nil, err
	}
	return a, nil
}

// ready: database reachable and schema at the version this binary embeds.
func (a *App) ready(ctx context.Context) error {
	current, latest, dirty, err := store.SchemaStatus(ctx, a.pool)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if dirty {
		return fmt.Errorf("schema version %d is dirty (a migration failed half-way); fix it and run 'gpuplane migrate'", current)
	}
	if current < latest {
		return fmt.Errorf("schema is at version %d, this server needs %d; run 'gpuplane migrate up'", current, latest)
	}
	return nil
}

// GRPCAddr is the bound gRPC address.
func (a *App) GRPCAddr() string { return a.server.GRPCAddr() }

// HTTPAddr is the bound HTTP address.
func (a *App) HTTPAddr() string { return a.server.HTTPAddr() }

// DB is the store; its commits wake the event sequencer (tests that play
// the worker write through it).
func (a *App) DB() *store.DB { return a.db }

// MetricsAddr is the bound metrics address ("" without --metrics-addr).
func (a *App) MetricsAddr() string { return a.server.MetricsAddr() }

// Pool is the database pool (tests and dev seeding).
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Run serves until ctx ends, then stops gracefully within the configured
// deadline and closes everything in reverse order.
func (a *App) Run(ctx context.Context) error {
	defer a.close()
	errc := make(chan error, 1)
	a.feed.start(ctx)
	defer a.feed.shutdown()
	go func() { errc <- a.server.Serve() }()
	if a.cfg.ExpiryInterval > 0 {
		go a.expiryLoop(ctx)
	}
	workerCtx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	workerDone := make(chan struct{})
	if a.Worker != nil {
		go func() { defer close(workerDone); _ = a.Worker.Run(workerCtx) }()
	} else {
		close(workerDone)
	}
	defer func() { stopWorker(); <-workerDone }()
	a.log.Info("gpuplane serving", "grpc", a.GRPCAddr(), "http", a.HTTPAddr(), "metrics", a.MetricsAddr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.log.Info("shutting down", "deadline", a.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	// Watches end first, each telling its client where to resume; a
	// graceful stop would otherwise wait for them until the deadline.
	a.feed.closeWatches()
	err := a.server.Shutdown(sctx)
	if serr := <-errc; err == nil {
		err = serr
	}
	return err
}

func (a *App) expiryLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := a.Requests.ExpireVirtualClusters(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("expiry sweep failed", "error", err)
			} else if n > 0 {
				a.log.Info("expired virtual clusters scheduled for deletion", "count", n)
			}
		}
	}
}

func (a *App) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// Run is New followed by Run.
func Run(ctx context.Context, cfg Config, opts Options) error {
	a, err := New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// RunWorker runs only the host-cluster worker (gpuplane worker): no API
// servers. Several replicas may run; claims use row leases. Its metrics
// are served on --metrics-addr (worker.go).
func RunWorker(ctx context.Context, cfg Config, log *slog.Logger) error {
	w, err := NewWorker(ctx, cfg, Options{Logger: log})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
