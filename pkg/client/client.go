// Package client is the Go SDK of the gpuplane API: one gRPC connection
// with a client for every service, bearer credentials from an OIDC token
// source on every call, and retries of idempotent reads while the server
// is UNAVAILABLE.
//
//	c, err := client.New(ctx, client.Config{
//		Address:   "gpuplane.example.com:443",
//		TokenFunc: client.StaticToken(idToken),
//	})
//	if err != nil { ... }
//	defer c.Close()
//	me, err := c.Identity.GetCurrentUser(ctx, &gpuplanev1.GetCurrentUserRequest{})
//
// Errors are gRPC statuses carrying a google.rpc.ErrorInfo (domain
// "gpuplane.dev", a stable reason such as QUOTA_EXCEEDED) and, for bad
// input, BadRequest field violations; AsError unpacks them, the Reason*
// constants name the reasons and IsNotFound, IsQuotaExceeded, ... test for
// them. AllTeams, AllRequests, ... (and Items for any List RPC) iterate over
// every page; WaitForVirtualCluster and WaitForRequest wait for a phase or a
// final state.
//
// This package is its own module (github.com/gpuplane/gpuplane/pkg/client),
// with the generated API package in another
// (github.com/gpuplane/gpuplane/api): importing it brings gRPC and protobuf,
// never the server's Kubernetes, Helm or pgx dependencies.
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/oauth2"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

// Config configures New.
type Config struct {
	// Address is the gRPC address of the API server, "host:port" (or any
	// gRPC target such as "dns:///host:port").
	Address string

	// The caller's credential, sent as "authorization: Bearer <token>" on
	// every call. Set one of TokenSource and TokenFunc, or neither for
	// unauthenticated calls (only health checks and reflection answer).
	//
	// TokenSource is asked for a token on every call, so it should cache
	// and refresh (oauth2.ReuseTokenSource, or an oauth2.Config's
	// TokenSource). gpuplane verifies OIDC ID tokens: when the token has
	// an "id_token" extra (what an OIDC token endpoint returns) that is
	// sent, otherwise AccessToken.
	TokenSource oauth2.TokenSource
	// TokenFunc returns the raw token for one call.
	TokenFunc func(ctx context.Context) (string, error)

	// Insecure uses plaintext gRPC (local development). Tokens are then
	// sent in clear text.
	Insecure bool
	// TLSConfig overrides the TLS settings (default: system roots,
	// TLS 1.2 or later). Ignored when Insecure.
	TLSConfig *tls.Config

	// UserAgent is prepended to gRPC's own user agent.
	UserAgent string

	// MaxAttempts bounds how often an idempotent read (every RPC the REST
	// API maps to GET, and CheckFit) is tried while the server answers
	// UNAVAILABLE, with exponential backoff; default 5 (gRPC's maximum),
	// 1 disables retries. Writes are never retried: pass a request_id and
	// retry yourself, the server then answers a replay with the first
	// result.
	MaxAttempts int

	// DialOptions are appended to the options New uses.
	DialOptions []grpc.DialOption
}

// Client is a connection to a gpuplane API server. It is safe for
// concurrent use.
type Client struct {
	Conn *grpc.ClientConn

	Departments     pb.DepartmentServiceClient
	Teams           pb.TeamServiceClient
	Members         pb.MemberServiceClient
	Identity        pb.IdentityServiceClient
	Audit           pb.AuditServiceClient
	VirtualClusters pb.VirtualClusterServiceClient
	Requests        pb.RequestServiceClient
	Policies        pb.ApprovalPolicyServiceClient
}

// New connects lazily: it validates cfg and starts dialing in the
// background; the first call waits for the connection. ctx is not kept.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.Address == "" {
		return nil, errors.New("client: Address is required")
	}
	if cfg.TokenSource != nil && cfg.TokenFunc != nil {
		return nil, errors.New("client: set TokenSource or TokenFunc, not both")
	}
	attempts := cfg.MaxAttempts
	if attempts == 0 {
		attempts = 5
	}
	if attempts < 1 || attempts > 5 {
		return nil, fmt.Errorf("client: MaxAttempts %d: must be between 1 and 5", attempts)
	}
	opts := []grpc.DialOption{grpc.WithDefaultServiceConfig(serviceConfig(attempts))}
	if cfg.Insecure {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		tc := cfg.TLSConfig
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	}
	if tok := tokenFunc(cfg); tok != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: tok, secure: !cfg.Insecure}))
	}
	if cfg.UserAgent != "" {
		opts = append(opts, grpc.WithUserAgent(cfg.UserAgent))
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	conn.Connect()
	return &Client{
		Conn:            conn,
		Departments:     pb.NewDepartmentServiceClient(conn),
		Teams:           pb.NewTeamServiceClient(conn),
		Members:         pb.NewMemberServiceClient(conn),
		Identity:        pb.NewIdentityServiceClient(conn),
		Audit:           pb.NewAuditServiceClient(conn),
		VirtualClusters: pb.NewVirtualClusterServiceClient(conn),
		Requests:        pb.NewRequestServiceClient(conn),
		Policies:        pb.NewApprovalPolicyServiceClient(conn),
	}, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.Conn.Close() }

// StaticToken is a TokenFunc that always returns tok.
func StaticToken(tok string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) { return tok, nil }
}

// BearerToken is the token gpuplane expects from an OAuth2 token: the OIDC
// ID token when the token endpoint returned one, else the access token.
func BearerToken(t *oauth2.Token) string {
	if t == nil {
		return ""
	}
	if id, ok := t.Extra("id_token").(string); ok && id != "" {
		return id
	}
	return t.AccessToken
}

func tokenFunc(cfg Config) func(context.Context) (string, error) {
	switch {
	case cfg.TokenFunc != nil:
		return cfg.TokenFunc
	case cfg.TokenSource != nil:
		ts := cfg.TokenSource
		return func(context.Context) (string, error) {
			t, err := ts.Token()
			if err != nil {
				return "", err
			}
			return BearerToken(t), nil
		}
	}
	return nil
}

// bearer implements credentials.PerRPCCredentials.
type bearer struct {
	token  func(context.Context) (string, error)
	secure bool
}

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	tok, err := b.token(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpuplane credentials: %w", err)
	}
	if tok == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.secure }

// ReadMethods are the full gRPC method names ("/gpuplane.v1.TeamService/GetTeam")
// New retries on UNAVAILABLE: those mapped to HTTP GET, and CheckFit (a dry
// run). They are derived from the API's descriptors, so new read RPCs are
// covered without a change here.
func ReadMethods() []string {
	var out []string
	for _, fd := range []protoreflect.FileDescriptor{
		pb.File_gpuplane_v1_tenancy_proto, pb.File_gpuplane_v1_identity_proto,
		pb.File_gpuplane_v1_audit_proto, pb.File_gpuplane_v1_workflow_proto,
	} {
		svcs := fd.Services()
		for i := range svcs.Len() {
			svc := svcs.Get(i)
			methods := svc.Methods()
			for j := range methods.Len() {
				m := methods.Get(j)
				if isRead(m) {
					out = append(out, "/"+string(svc.FullName())+"/"+string(m.Name()))
				}
			}
		}
	}
	return out
}

func isRead(m protoreflect.MethodDescriptor) bool {
	if m.Name() == "CheckFit" {
		return true
	}
	rule, ok := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
	return ok && rule != nil && rule.GetGet() != ""
}

type methodName struct {
	Service string `json:"service"`
	Method  string `json:"method"`
}

func serviceConfig(attempts int) string {
	var names []methodName
	for _, full := range ReadMethods() {
		svc, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
		names = append(names, methodName{Service: svc, Method: m})
	}
	mc := map[string]any{"name": names}
	if attempts > 1 {
		mc["retryPolicy"] = map[string]any{
			"maxAttempts":          attempts,
			"initialBackoff":       "0.1s", // protobuf Duration JSON
			"maxBackoff":           "2s",
			"backoffMultiplier":    2.0,
			"retryableStatusCodes": []string{"UNAVAILABLE"},
		}
	}
	b, err := json.Marshal(map[string]any{"methodConfig": []any{mc}})
	if err != nil {
		panic(err) // static shape
	}
	return string(b)
}
