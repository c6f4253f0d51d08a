// Package server runs the gRPC API and its REST gateway: listeners,
// interceptors (request id, logging, metrics, recovery, authentication)
// and the one mapping of domain errors to gRPC statuses (toStatus). The
// handlers are internal/server/api's.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api"
	gpuplanev1 "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/telemetry"
)

// Config is what the server needs; internal/app fills it.
type Config struct {
	GRPCAddr string // e.g. ":9090"; "127.0.0.1:0" in tests
	// GRPCListener, when set, is used instead of listening on GRPCAddr
	// (internal/app listens first: kubeconfigs name the bound address).
	GRPCListener net.Listener
	HTTPAddr     string // e.g. ":8080"; public: nothing on it names tenants
	// MetricsAddr serves /metrics (and /healthz) privately (metrics name
	// every team); "" serves no metrics.
	MetricsAddr string
	// MaxRequestBytes bounds REST bodies (413 past it) and gRPC messages;
	// 0 is DefaultMaxRequestBytes.
	MaxRequestBytes int64
	Logger          *slog.Logger
	Auth            Authenticator
	// Classify turns storage errors into domain errors before toStatus
	// maps them (store.Classify: by SQLSTATE and error type, e.g. an
	// unreachable database is UNAVAILABLE); nil leaves errors as they are.
	Classify func(error) error
	// Ready reports whether the server can serve (database reachable, schema
	// current); nil error = ready.
	Ready    func(ctx context.Context) error
	Registry *prometheus.Registry
	Services Services
	// TracerProvider traces HTTP requests, RPCs and the gateway's calls
	// (telemetry.go); nil traces nothing.
	TracerProvider trace.TracerProvider
	// CORS lets browser pages on other origins call the REST API (cors.go);
	// the zero value sends no CORS headers.
	CORS CORSConfig
}

// Services are the domain implementations behind the API.
type Services struct {
	Departments    gpuplanev1.DepartmentServiceServer
	Teams          gpuplanev1.TeamServiceServer
	Members        gpuplanev1.MemberServiceServer
	Identity       gpuplanev1.IdentityServiceServer
	Audit          gpuplanev1.AuditServiceServer
	VirtualCluster gpuplanev1.VirtualClusterServiceServer
	Requests       gpuplanev1.RequestServiceServer
	Policies       gpuplanev1.ApprovalPolicyServiceServer
	HostClusters   gpuplanev1.HostClusterServiceServer
	Watch          gpuplanev1.WatchServiceServer
	Webhooks       gpuplanev1.WebhookServiceServer
}

// Server owns both listeners.
type Server struct {
	log      *slog.Logger
	auth     Authenticator
	classify func(error) error
	metrics  *metrics
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	// gwConn is the loopback connection to our own gRPC port, for the
	// gateway's streams; inproc serves its unary calls (inprocess.go).
	gwConn  *grpc.ClientConn
	inproc  *inProcessConn
	lisGRPC net.Listener
	lisHTTP net.Listener
	// metricsHTTP and lisMetrics are nil without Config.MetricsAddr.
	metricsHTTP *http.Server
	lisMetrics  net.Listener
}

// New listens on both addresses and wires everything; Serve starts serving.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.Classify == nil {
		cfg.Classify = func(err error) error { return err }
	}
	s := &Server{log: cfg.Logger, auth: cfg.Auth, classify: cfg.Classify, metrics: newMetrics(cfg.Registry)}
	var err error
	if s.lisGRPC = cfg.GRPCListener; s.lisGRPC == nil {
		if s.lisGRPC, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return nil, fmt.Errorf("listen gRPC on %s: %w", cfg.GRPCAddr, err)
		}
	}
	if s.lisHTTP, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		s.lisGRPC.Close()
		return nil, fmt.Errorf("listen HTTP on %s: %w", cfg.HTTPAddr, err)
	}
	if cfg.MetricsAddr != "" {
		if s.lisMetrics, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			s.closeListeners()
			return nil, fmt.Errorf("listen metrics on %s: %w", cfg.MetricsAddr, err)
		}
		s.metricsHTTP = telemetry.NewMetricsServer(cfg.Registry, cfg.Logger)
	}
	s.lisGRPC = newDrainListener(s.lisGRPC) // see Shutdown

	// One unary interceptor, built once, for the gRPC server and the
	// gateway's in-process calls alike, so the two cannot drift apart.
	unary := chainUnary(s.unaryChain, annotateSpan)
	serverOpts := []grpc.ServerOption{grpc.UnaryInterceptor(unary), grpc.ChainStreamInterceptor(s.streamChain),
		grpc.MaxRecvMsgSize(int(cfg.MaxRequestBytes))}
	// Stats handlers only when tracing is on (telemetry.Tracing); nil ones
	// are skipped by the in-process calls too.
	var serverStats, clientStats stats.Handler
	if telemetry.Tracing(cfg.TracerProvider) {
		serverStats, clientStats = grpcServerTracing(cfg.TracerProvider), grpcClientTracing(cfg.TracerProvider)
		serverOpts = append(serverOpts, grpc.StatsHandler(serverStats))
	}
	s.grpc = grpc.NewServer(serverOpts...)
	s.inproc = &inProcessConn{log: s.log, methods: map[string]inProcessMethod{}, unary: unary,
		clientStats: clientStats, serverStats: serverStats}
	// Every API service is served by the gRPC server and in-process by the
	// same implementation.
	reg := serviceRegistrar{grpc: s.grpc, conn: s.inproc}
	svc := cfg.Services
	gpuplanev1.RegisterDepartmentServiceServer(reg, svc.Departments)
	gpuplanev1.RegisterTeamServiceServer(reg, svc.Teams)
	gpuplanev1.RegisterMemberServiceServer(reg, svc.Members)
	gpuplanev1.RegisterIdentityServiceServer(reg, svc.Identity)
	gpuplanev1.RegisterAuditServiceServer(reg, svc.Audit)
	gpuplanev1.RegisterVirtualClusterServiceServer(reg, svc.VirtualCluster)
	gpuplanev1.RegisterRequestServiceServer(reg, svc.Requests)
	gpuplanev1.RegisterApprovalPolicyServiceServer(reg, svc.Policies)
	if svc.HostClusters != nil {
		gpuplanev1.RegisterHostClusterServiceServer(reg, svc.HostClusters)
	}
	gpuplanev1.RegisterWatchServiceServer(reg, svc.Watch)
	gpuplanev1.RegisterWebhookServiceServer(reg, svc.Webhooks)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	// The gateway's streams dial our own gRPC port (unary calls run
	// in-process, inprocess.go), so they pass the very same interceptor
	// chain (authentication, logging, metrics, error mapping). No idle
	// timeout: the connection must stay up while Shutdown drains, when the
	// gRPC port no longer accepts new connections.
	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithIdleTimeout(0)}
	if clientStats != nil {
		dialOpts = append(dialOpts, grpc.WithStatsHandler(clientStats))
	}
	s.gwConn, err = grpc.NewClient(s.lisGRPC.Addr().String(), dialOpts...)
	if err != nil {
		s.closeListeners()
		return nil, fmt.Errorf("dial own gRPC port: %w", err)
	}
	routes, err := newRouteTable(api.OpenAPI)
	if err != nil {
		s.gwConn.Close()
		s.closeListeners()
		return nil, err
	}
	for _, p := range nonAPIRoutes {
		routes.add(route{template: p, segments: []segment{{prefix: strings.TrimPrefix(p, "/")}}, methods: []string{"GET", "HEAD"}})
	}
	gw := runtime.NewServeMux(
		// Only what the server reads becomes metadata: the request id
		// (Authorization the gateway always passes on). The default would
		// copy every "permanent" header, cookies included, into each call.
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if strings.EqualFold(key, RequestIDHeader) {
				return RequestIDHeader, true
			}
			return "", false
		}),
		runtime.WithOutgoingHeaderMatcher(func(key string) (string, bool) {
			if key == RequestIDHeader {
				return textproto.CanonicalMIMEHeaderKey(RequestIDHeader), true
			}
			return "", false
		}),
		runtime.WithErrorHandler(gatewayErrorHandler),
		runtime.WithRoutingErrorHandler(routes.gatewayRoutingError),
		runtime.WithStreamErrorHandler(streamErrorHandler),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, newRESTMarshaler()),
	)
	s.inproc.loopback = s.gwConn
	conn := s.inproc
	if err := errors.Join(
		gpuplanev1.RegisterDepartmentServiceHandlerClient(ctx, gw, gpuplanev1.NewDepartmentServiceClient(conn)),
		gpuplanev1.RegisterTeamServiceHandlerClient(ctx, gw, gpuplanev1.NewTeamServiceClient(conn)),
		gpuplanev1.RegisterMemberServiceHandlerClient(ctx, gw, gpuplanev1.NewMemberServiceClient(conn)),
		gpuplanev1.RegisterIdentityServiceHandlerClient(ctx, gw, gpuplanev1.NewIdentityServiceClient(conn)),
		gpuplanev1.RegisterAuditServiceHandlerClient(ctx, gw, gpuplanev1.NewAuditServiceClient(conn)),
		gpuplanev1.RegisterVirtualClusterServiceHandlerClient(ctx, gw, gpuplanev1.NewVirtualClusterServiceClient(conn)),
		gpuplanev1.RegisterRequestServiceHandlerClient(ctx, gw, gpuplanev1.NewRequestServiceClient(conn)),
		gpuplanev1.RegisterApprovalPolicyServiceHandlerClient(ctx, gw, gpuplanev1.NewApprovalPolicyServiceClient(conn)),
		gpuplanev1.RegisterHostClusterServiceHandlerClient(ctx, gw, gpuplanev1.NewHostClusterServiceClient(conn)),
		gpuplanev1.RegisterWatchServiceHandlerClient(ctx, gw, gpuplanev1.NewWatchServiceClient(conn)),
		gpuplanev1.RegisterWebhookServiceHandlerClient(ctx, gw, gpuplanev1.NewWebhookServiceClient(conn)),
	); err != nil {
		s.gwConn.Close()
		s.closeListeners()
		return nil, fmt.Errorf("register gateway: %w", err)
	}

	openapiYAML := api.OpenAPI
	openapiJSON, err := yaml.YAMLToJSON(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	mux := http.NewServeMux()
	// Authentication comes first, even before the method check: an
	// unauthenticated caller learns nothing but 401 (or 400 for a malformed
	// request), and never has a body read past the cap.
	mux.Handle("/v1/", s.guardREST(gw, cfg.MaxRequestBytes, routes.checkMethod(withDecodeErrors(gw))))
	mux.HandleFunc("/", routes.routingError)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if cfg.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := cfg.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openapiYAML)
	})
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapiJSON)
	})
	s.http = &http.Server{
		Handler:           withStreams(httpTracing(cfg.TracerProvider, newHTTPMetrics(cfg.Registry).wrap(withCORS(cfg.CORS, mux)))),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// nonAPIRoutes are the HTTP server's routes outside the REST API (GET and
// HEAD), for the Allow header of a wrong method (405).
var nonAPIRoutes = []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml", "/openapi.json"}

// GRPCAddr is the bound gRPC address (useful with port 0).
func (s *Server) GRPCAddr() string { return s.lisGRPC.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.lisHTTP.Addr().String() }

// MetricsAddr is the bound metrics address ("" without one).
func (s *Server) MetricsAddr() string {
	if s.lisMetrics == nil {
		return ""
	}
	return s.lisMetrics.Addr().String()
}

// Serve blocks until every server stops; it returns the first failure.
func (s *Server) Serve() error {
	servers := 2
	errc := make(chan error, 3)
	go func() { errc <- s.grpc.Serve(s.lisGRPC) }()
	serveHTTP := func(srv *http.Server, lis net.Listener) {
		err := srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}
	go serveHTTP(s.http, s.lisHTTP)
	if s.metricsHTTP != nil {
		servers++
		go serveHTTP(s.metricsHTTP, s.lisMetrics)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	var first error
	for range servers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Shutdown stops accepting calls and lets in-flight ones finish until ctx
// ends; then it cuts the rest off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	// Both ports refuse new connections from now on; REST calls in flight
	// still reach the services (in-process, and streams over the gateway's
	// open connection).
	if d, ok := s.lisGRPC.(*drainListener); ok {
		d.drain()
	}
	herr := s.http.Shutdown(ctx)
	// The HTTP server waited for its calls; in-process calls of REST
	// requests it gave up on (ctx ended) are cut off here, and any call
	// from now on is refused with UNAVAILABLE.
	_ = s.inproc.gate.close(ctx)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	s.gwConn.Close()
	if s.metricsHTTP != nil {
		// Last, so scrapes see the shutdown through.
		_ = s.metricsHTTP.Shutdown(ctx)
	}
	return herr
}

func (s *Server) closeListeners() {
	s.lisGRPC.Close()
	s.lisHTTP.Close()
	if s.lisMetrics != nil {
		s.lisMetrics.Close()
	}
}
