package server_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/server"
)

const (
	portalOrigin = "https://backstage.example.com"
	otherOrigin  = "https://evil.example.net"
)

type corsAnswer struct {
	status int
	header http.Header
	body   string
}

// corsCall sends method to url with an Origin header (when set) and extra
// headers, as a browser would, and returns the raw answer.
func corsCall(t *testing.T, method, url, origin, token string, headers map[string]string) corsAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return corsAnswer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func preflight(t *testing.T, url, origin, method, headers string) corsAnswer {
	t.Helper()
	h := map[string]string{"Access-Control-Request-Method": method}
	if headers != "" {
		h["Access-Control-Request-Headers"] = headers
	}
	return corsCall(t, http.MethodOptions, url, origin, "", h)
}

func varies(h http.Header, name string) bool {
	for _, line := range h.Values("Vary") {
		for _, v := range strings.Split(line, ",") {
			if strings.EqualFold(strings.TrimSpace(v), name) {
				return true
			}
		}
	}
	return false
}

func listHas(h http.Header, key, want string) bool {
	return slices.ContainsFunc(strings.Split(h.Get(key), ","), func(v string) bool {
		return strings.EqualFold(strings.TrimSpace(v), want)
	})
}

// TestCORSOnRealServer drives the REST API of a real server (real OIDC
// issuer, real PostgreSQL) the way a browser on another origin does: the
// preflight of a JSON POST with a bearer token, then the call itself.
func TestCORSOnRealServer(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Seed: true, Config: func(c *app.Config) {
		c.CORSAllowedOrigins = portalOrigin + ", http://localhost:3000"
		c.CORSMaxAge = 90 * time.Second
	}})
	requests := e.HTTPBase + "/v1/requests"

	t.Run("preflight from an allowed origin", func(t *testing.T) {
		a := preflight(t, requests, portalOrigin, "POST", "authorization,content-type")
		if a.status != http.StatusNoContent {
			t.Fatalf("status %d, want 204: %s", a.status, a.body)
		}
		if got := a.header.Get("Access-Control-Allow-Origin"); got != portalOrigin {
			t.Errorf("Allow-Origin %q, want the caller's origin %q", got, portalOrigin)
		}
		for _, m := range []string{"GET", "POST", "PATCH", "DELETE"} {
			if !listHas(a.header, "Access-Control-Allow-Methods", m) {
				t.Errorf("Allow-Methods %q lacks %s", a.header.Get("Access-Control-Allow-Methods"), m)
			}
		}
		for _, h := range []string{"Authorization", "Content-Type", "X-Request-Id"} {
			if !listHas(a.header, "Access-Control-Allow-Headers", h) {
				t.Errorf("Allow-Headers %q lacks %s", a.header.Get("Access-Control-Allow-Headers"), h)
			}
		}
		if got := a.header.Get("Access-Control-Max-Age"); got != "90" {
			t.Errorf("Max-Age %q, want 90", got)
		}
		if got := a.header.Get("Access-Control-Allow-Credentials"); got != "" {
			t.Errorf("Allow-Credentials %q without --cors-allow-credentials", got)
		}
		for _, v := range []string{"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"} {
			if !varies(a.header, v) {
				t.Errorf("preflight answer does not vary on %s: %q", v, a.header.Values("Vary"))
			}
		}
	})

	t.Run("origins compare as browsers serialize them", func(t *testing.T) {
		// Same origin, other spelling: scheme and host are case-insensitive.
		if a := preflight(t, requests, "HTTPS://Backstage.Example.com", "GET", ""); a.status != http.StatusNoContent {
			t.Errorf("upper-case spelling of an allowed origin: %d %s", a.status, a.body)
		}
		// Another port is another origin.
		if a := preflight(t, requests, "http://localhost:3001", "GET", ""); a.status != http.StatusForbidden {
			t.Errorf("other port: status %d, want 403", a.status)
		}
	})

	t.Run("preflight from another origin is refused", func(t *testing.T) {
		a := preflight(t, requests, otherOrigin, "POST", "authorization")
		if a.status != http.StatusForbidden {
			t.Fatalf("status %d, want 403", a.status)
		}
		if got := a.header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("refused preflight carries Allow-Origin %q", got)
		}
		if !strings.Contains(a.body, "cors-allowed-origins") {
			t.Errorf("refusal does not say which setting decides: %q", a.body)
		}
	})

	t.Run("preflight for a method or header the API does not take is refused", func(t *testing.T) {
		if a := preflight(t, requests, portalOrigin, "PUT", ""); a.status != http.StatusForbidden || !strings.Contains(a.body, "PUT") {
			t.Errorf("PUT: %d %q, want 403 naming the method", a.status, a.body)
		}
		if a := preflight(t, requests, portalOrigin, "POST", "authorization, x-forwarded-user"); a.status != http.StatusForbidden || !strings.Contains(a.body, "x-forwarded-user") {
			t.Errorf("extra header: %d %q, want 403 naming the header", a.status, a.body)
		}
	})

	t.Run("the call itself is readable by the allowed origin, errors too", func(t *testing.T) {
		a := corsCall(t, "GET", e.HTTPBase+"/v1/users/me", portalOrigin, e.Token(t, "bob"), nil)
		if a.status != http.StatusOK || !strings.Contains(a.body, "bob@example.com") {
			t.Fatalf("GET /v1/users/me as bob: %d %s", a.status, a.body)
		}
		if got := a.header.Get("Access-Control-Allow-Origin"); got != portalOrigin {
			t.Errorf("Allow-Origin %q, want %q", got, portalOrigin)
		}
		if !listHas(a.header, "Access-Control-Expose-Headers", "X-Request-Id") {
			t.Errorf("X-Request-Id not exposed: %q", a.header.Get("Access-Control-Expose-Headers"))
		}
		if !varies(a.header, "Origin") {
			t.Errorf("answer does not vary on Origin: %q", a.header.Values("Vary"))
		}
		// A portal must be able to read why a call failed.
		a = corsCall(t, "GET", e.HTTPBase+"/v1/users/me", portalOrigin, "", nil)
		if a.status != http.StatusUnauthorized || a.header.Get("Access-Control-Allow-Origin") != portalOrigin {
			t.Errorf("401 without a token: status %d, Allow-Origin %q", a.status, a.header.Get("Access-Control-Allow-Origin"))
		}
		if !strings.Contains(a.body, "UNAUTHENTICATED") {
			t.Errorf("401 body lacks its ErrorInfo reason: %s", a.body)
		}
	})

	t.Run("another origin gets the answer but no permission to read it", func(t *testing.T) {
		a := corsCall(t, "GET", e.HTTPBase+"/v1/users/me", otherOrigin, e.Token(t, "bob"), nil)
		if got := a.header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("Allow-Origin %q for an origin that is not allowed", got)
		}
		if !varies(a.header, "Origin") {
			t.Errorf("answer does not vary on Origin: %q", a.header.Values("Vary"))
		}
	})

	t.Run("calls without Origin are untouched", func(t *testing.T) {
		a := corsCall(t, "GET", e.HTTPBase+"/v1/users/me", "", e.Token(t, "bob"), nil)
		if a.status != http.StatusOK {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
		if got := a.header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("Allow-Origin %q on a same-origin call", got)
		}
	})
}

func TestCORSWildcardNeverWithCredentials(t *testing.T) {
	t.Parallel()
	e := apptest.Start(t, apptest.Options{Config: func(c *app.Config) { c.CORSAllowedOrigins = "*" }})
	a := preflight(t, e.HTTPBase+"/v1/teams", otherOrigin, "GET", "authorization")
	if a.status != http.StatusNoContent || a.header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("wildcard preflight: %d, Allow-Origin %q", a.status, a.header.Get("Access-Control-Allow-Origin"))
	}
	if got := a.header.Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("wildcard answered with Allow-Credentials %q", got)
	}

	// Even a hand-built config cannot make the handler pair them.
	h := server.CORSHandlerForTest(server.CORSConfig{AllowedOrigins: []string{"*"}, AllowCredentials: true})
	if got := h(otherOrigin).Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("hand-built wildcard config sent Allow-Credentials %q", got)
	}
	h = server.CORSHandlerForTest(server.CORSConfig{AllowedOrigins: []string{portalOrigin}, AllowCredentials: true})
	got := h(portalOrigin)
	if got.Get("Access-Control-Allow-Credentials") != "true" || got.Get("Access-Control-Allow-Origin") != portalOrigin {
		t.Errorf("listed origin with credentials: Allow-Credentials %q, Allow-Origin %q",
			got.Get("Access-Control-Allow-Credentials"), got.Get("Access-Control-Allow-Origin"))
	}
}

func TestNewCORSConfig(t *testing.T) {
	t.Parallel()
	ok, err := server.NewCORSConfig(" https://Backstage.example.com:443 ,http://localhost:3000/, http://[::1]:3000,https://backstage.example.com", false, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://backstage.example.com", "http://localhost:3000", "http://[::1]:3000"}
	if !slices.Equal(ok.AllowedOrigins, want) {
		t.Errorf("normalized origins %q, want %q", ok.AllowedOrigins, want)
	}
	if none, err := server.NewCORSConfig("", true, 0); err != nil || len(none.AllowedOrigins) != 0 {
		t.Errorf("empty list: %v %v", none, err)
	}
	for in, wantErr := range map[string]string{
		"backstage.example.com":            "http:// or https://",
		"ftp://backstage.example.com":      "http:// or https://",
		"https://backstage.example.com/ui": "without user, path",
		"https://u@backstage.example.com":  "without user, path",
		"https://*.example.com":            "wildcards inside an origin",
		"https://example.com:99999":        "port",
		"*, https://example.com":           `give "*" alone`,
		"https://":                         "no host",
	} {
		if _, err := server.NewCORSConfig(in, false, time.Minute); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: error %v, want one containing %q", in, err, wantErr)
		}
	}
	if _, err := server.NewCORSConfig("*", true, time.Minute); err == nil || !strings.Contains(err.Error(), "cannot be combined") {
		t.Errorf("wildcard with credentials: %v", err)
	}
	if _, err := server.NewCORSConfig("*", false, -time.Second); err == nil {
		t.Error("negative max age accepted")
	}
}
