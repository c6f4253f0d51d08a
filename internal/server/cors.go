package server

import (
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CORSConfig says which browser origins may call the REST API from their
// own pages (a Backstage plugin, an internal portal). Browsers send the
// caller's OIDC token in the Authorization header, so no cookies are needed;
// AllowCredentials exists for deployments behind a cookie-based proxy.
type CORSConfig struct {
	// AllowedOrigins are exact origins ("https://backstage.example.com"),
	// normalized by NewCORSConfig, or the single entry "*" for any origin.
	// Empty: the server sends no CORS headers and browsers on other origins
	// cannot read its answers.
	AllowedOrigins []string
	// AllowCredentials sends Access-Control-Allow-Credentials: true. Never
	// together with "*": any site could then act with a visitor's cookies.
	AllowCredentials bool
	// MaxAge is how long a browser may cache a preflight answer.
	MaxAge time.Duration
}

// The REST gateway's methods and the request headers a browser client
// needs; anything else is refused at preflight.
var (
	corsMethods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete}
	corsHeaders = []string{"Authorization", "Content-Type", textproto.CanonicalMIMEHeaderKey(RequestIDHeader), "Accept", "Accept-Language", "Content-Language"}
	// Exposed so a portal can show the request id of a failed call, which
	// is what the server logs and audit events are keyed by.
	corsExposedHeaders = []string{textproto.CanonicalMIMEHeaderKey(RequestIDHeader)}
)

const corsWildcard = "*"

// NewCORSConfig parses a comma-separated origin list as given to
// --cors-allowed-origins and checks it: each origin is scheme://host[:port]
// (http or https, no path), or the list is exactly "*".
func NewCORSConfig(origins string, allowCredentials bool, maxAge time.Duration) (CORSConfig, error) {
	c := CORSConfig{AllowCredentials: allowCredentials, MaxAge: maxAge}
	for _, raw := range strings.Split(origins, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if raw == corsWildcard {
			c.AllowedOrigins = append(c.AllowedOrigins, corsWildcard)
			continue
		}
		o, err := normalizeOrigin(raw)
		if err != nil {
			return CORSConfig{}, fmt.Errorf("cors-allowed-origins: %q: %w", raw, err)
		}
		if !slices.Contains(c.AllowedOrigins, o) {
			c.AllowedOrigins = append(c.AllowedOrigins, o)
		}
	}
	if slices.Contains(c.AllowedOrigins, corsWildcard) {
		if len(c.AllowedOrigins) > 1 {
			return CORSConfig{}, fmt.Errorf("cors-allowed-origins: \"*\" allows every origin; list origins or give \"*\" alone")
		}
		if allowCredentials {
			return CORSConfig{}, fmt.Errorf("cors-allow-credentials cannot be combined with cors-allowed-origins \"*\": list the origins that may send credentials")
		}
	}
	if maxAge < 0 {
		return CORSConfig{}, fmt.Errorf("cors-max-age must not be negative")
	}
	return c, nil
}

// normalizeOrigin returns the serialized origin a browser sends in the
// Origin header: lower-case scheme and host, no default port, no path.
func normalizeOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("not a URL: %w", err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("must start with http:// or https://")
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("has no host")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("an origin is scheme://host[:port], without user, path, query or fragment")
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, "*") {
		return "", fmt.Errorf("wildcards inside an origin are not supported; list each origin")
	}
	port := u.Port()
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("invalid port %q", port)
		}
	}
	if (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, nil
}

// withCORS answers preflight requests from allowed origins and marks actual
// responses readable for them. Requests without an Origin header (curl,
// gpuplanectl, same-origin) pass through untouched apart from Vary.
func withCORS(c CORSConfig, next http.Handler) http.Handler {
	if len(c.AllowedOrigins) == 0 {
		return next
	}
	wildcard := slices.Contains(c.AllowedOrigins, corsWildcard)
	if wildcard {
		// Whatever built c: a wildcard never goes out with credentials.
		c.AllowCredentials = false
	}
	allowed := func(origin string) bool {
		if wildcard {
			return true
		}
		o, err := normalizeOrigin(origin)
		return err == nil && slices.Contains(c.AllowedOrigins, o)
	}
	methods := strings.Join(corsMethods, ", ")
	headers := strings.Join(corsHeaders, ", ")
	exposed := strings.Join(corsExposedHeaders, ", ")
	if c.MaxAge < 0 {
		c.MaxAge = 0
	}
	maxAge := strconv.Itoa(int(c.MaxAge / time.Second))

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The answer depends on Origin even when it carries no CORS headers,
		// so caches must not hand one origin's answer to another.
		h.Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		allowOrigin := origin
		if wildcard {
			allowOrigin = corsWildcard
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			if reason := preflightRefusal(allowed(origin), r); reason != "" {
				http.Error(w, "CORS preflight refused: "+reason, http.StatusForbidden)
				return
			}
			h.Set("Access-Control-Allow-Origin", allowOrigin)
			if c.AllowCredentials {
				h.Set("Access-Control-Allow-Credentials", "true")
			}
			h.Set("Access-Control-Allow-Methods", methods)
			h.Set("Access-Control-Allow-Headers", headers)
			h.Set("Access-Control-Max-Age", maxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if allowed(origin) {
			h.Set("Access-Control-Allow-Origin", allowOrigin)
			if c.AllowCredentials {
				h.Set("Access-Control-Allow-Credentials", "true")
			}
			h.Set("Access-Control-Expose-Headers", exposed)
		}
		next.ServeHTTP(w, r)
	})
}

// preflightRefusal says why a preflight is refused, or "" when it is not.
func preflightRefusal(originAllowed bool, r *http.Request) string {
	if !originAllowed {
		return fmt.Sprintf("origin %q is not allowed (server flag --cors-allowed-origins)", r.Header.Get("Origin"))
	}
	method := r.Header.Get("Access-Control-Request-Method")
	if !slices.Contains(corsMethods, method) {
		return fmt.Sprintf("method %q is not allowed; allowed: %s", method, strings.Join(corsMethods, ", "))
	}
	for _, line := range r.Header.Values("Access-Control-Request-Headers") {
		for _, name := range strings.Split(line, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if !slices.ContainsFunc(corsHeaders, func(h string) bool { return strings.EqualFold(h, name) }) {
				return fmt.Sprintf("header %q is not allowed; allowed: %s", name, strings.Join(corsHeaders, ", "))
			}
		}
	}
	return ""
}
