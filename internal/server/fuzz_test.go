package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	pathpkg "path"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/server"
)

// tokenOK accepts "Bearer ok" and nothing else.
type tokenOK struct{}

func (tokenOK) Verify(_ context.Context, raw string) (identity.Principal, error) {
	if raw != "ok" {
		return identity.Principal{}, errs.New(errs.KindUnauthenticated, errs.ReasonUnauthenticated, "invalid token")
	}
	return identity.Principal{Subject: "fuzz", Username: "fuzz@example.org"}, nil
}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete, http.MethodPut}

// FuzzRESTRequest sends arbitrary REST calls (method, path under /v1/,
// query, body, with or without a valid token) through the public HTTP
// handler: the body guard, the gateway's routing and decoding, the text
// check and the gRPC interceptor chain, to services that implement nothing.
// Whatever comes in, the answer is a google.rpc.Status with a 4xx status
// (501 when the input decoded into a valid call), never a 500 or a panic.
func FuzzRESTRequest(f *testing.F) {
	srv, err := server.New(context.Background(), server.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", MaxRequestBytes: 4096,
		Logger: slog.New(slog.DiscardHandler), Auth: tokenOK{},
		Services: server.Services{
			Departments: pb.UnimplementedDepartmentServiceServer{}, Teams: pb.UnimplementedTeamServiceServer{},
			Members: pb.UnimplementedMemberServiceServer{}, Identity: pb.UnimplementedIdentityServiceServer{},
			Audit: pb.UnimplementedAuditServiceServer{}, VirtualCluster: pb.UnimplementedVirtualClusterServiceServer{},
			Requests: pb.UnimplementedRequestServiceServer{}, Policies: pb.UnimplementedApprovalPolicyServiceServer{},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	f.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	h := server.HTTPHandler(srv)

	f.Fuzz(func(t *testing.T, method uint8, path, query string, body []byte, token bool) {
		r := &http.Request{
			Method: fuzzMethods[int(method)%len(fuzzMethods)],
			URL:    &url.URL{Path: "/v1/" + path, RawQuery: query},
			Proto:  "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json"}},
			Host:   "fuzz", RemoteAddr: "127.0.0.1:1",
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		r.ContentLength = int64(len(body))
		if token {
			r.Header.Set("Authorization", "Bearer ok")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(t.Context()))
		code := w.Code
		if (code == http.StatusMovedPermanently || code == http.StatusTemporaryRedirect) && pathpkg.Clean(r.URL.Path) != r.URL.Path {
			return // the mux redirects to the clean path first
		}
		if code == http.StatusOK || code >= 500 && code != http.StatusNotImplemented {
			t.Fatalf("%s %q ? %q (%d body bytes): HTTP %d: %s", r.Method, r.URL.Path, query, len(body), code, w.Body)
		}
		var st spb.Status
		if err := protojson.Unmarshal(w.Body.Bytes(), &st); err != nil {
			t.Fatalf("%s %q: HTTP %d with a body that is no google.rpc.Status (%v): %q", r.Method, r.URL.Path, code, err, w.Body)
		}
		if !token && code != http.StatusUnauthorized && code != http.StatusBadRequest {
			t.Fatalf("%s %q without a token: HTTP %d", r.Method, r.URL.Path, code)
		}
	})
}
