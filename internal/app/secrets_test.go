package app_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/metadata"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/telemetry"
)

// telLockedBuffer is a bytes.Buffer safe for concurrent log writes.
type telLockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *telLockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *telLockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSecretsNeverLogged starts the server with a database URL holding a
// password, logs at debug level (as JSON, the production format), serves
// calls with valid, invalid and malformed bearer tokens over REST and gRPC,
// and shuts down; neither the log nor the printed configuration may
// contain the password or any token.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	var logs telLockedBuffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	var printed bytes.Buffer
	var password string
	e := apptest.Start(t, apptest.Options{Seed: true, Logger: logger, Config: func(cfg *app.Config) {
		u, err := url.Parse(cfg.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		// The test server may trust local connections; then the password
		// is not checked, but the server still holds it.
		pw, ok := u.User.Password()
		if !ok {
			pw = "Pa55-w0rd-never-logged"
			u.User = url.UserPassword(u.User.Username(), pw)
		}
		password = pw
		cfg.DatabaseURL = u.String()
		cfg.LogLevel = "debug"
		cfg.Print(&printed)
	}})

	bogus := []string{
		"not-a-jwt-but-a-secret-7f3a9c",
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.c2lnbmF0dXJlLXNlY3JldC1iNGQy", // well-formed, unsigned by the issuer
	}
	// REST: valid tokens, bogus ones, an error from the domain.
	for _, user := range []string{"alice", "bob"} {
		if r := e.Do(t, user, "GET", "/v1/teams", nil); r.Status != http.StatusOK {
			t.Fatalf("GET /v1/teams as %s: %d %s", user, r.Status, r.Body)
		}
	}
	if r := e.Do(t, "bob", "GET", "/v1/departments/nope", nil); r.Status != http.StatusNotFound {
		t.Fatalf("GET a missing department: %d", r.Status)
	}
	for _, tok := range bogus {
		req, _ := http.NewRequest("GET", e.HTTPBase+"/v1/teams", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("bogus token: HTTP %d", resp.StatusCode)
		}
	}
	// gRPC: the same.
	if _, err := e.Teams.ListTeams(e.As(t, "alice"), &pb.ListTeamsRequest{}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range bogus {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
		if _, err := e.Teams.ListTeams(ctx, &pb.ListTeamsRequest{}); err == nil {
			t.Fatal("bogus token accepted")
		}
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	out := logs.String()
	if !strings.Contains(out, `"msg":"rpc"`) || !strings.Contains(out, `"level":"DEBUG"`) {
		t.Fatalf("expected debug-level rpc records in the log, got:\n%s", out)
	}
	secrets := map[string]string{"database password": password}
	for _, user := range []string{"alice", "bob"} {
		tok := e.Token(t, user)
		secrets[user+"'s token"] = tok
		secrets[user+"'s token signature"] = tok[strings.LastIndex(tok, ".")+1:]
	}
	for i, tok := range bogus {
		secrets["bogus token "+string(rune('A'+i))] = tok
	}
	for what, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log contains the %s", what)
		}
		if strings.Contains(printed.String(), s) {
			t.Errorf("the printed configuration contains the %s", what)
		}
	}
	if !strings.Contains(printed.String(), "REDACTED") {
		t.Errorf("printed configuration does not show the redacted password:\n%s", printed.String())
	}
	t.Logf("%d bytes of debug log checked; printed configuration:\n%s", len(out), printed.String())
}
