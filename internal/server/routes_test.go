package server

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api"
)

// allowedByRegexp is routeTable.allowed as the OpenAPI templates read as
// regular expressions (a parameter is [^/:]+): the reference the segment
// matcher must agree with.
func allowedByRegexp(t routeTable, path string) []string {
	var out []string
	for _, r := range t.routes {
		var expr strings.Builder
		expr.WriteString("^")
		last := 0
		for _, m := range pathParamPattern.FindAllStringIndex(r.template, -1) {
			expr.WriteString(regexp.QuoteMeta(r.template[last:m[0]]))
			expr.WriteString(`[^/:]+`)
			last = m[1]
		}
		expr.WriteString(regexp.QuoteMeta(r.template[last:]) + "$")
		if regexp.MustCompile(expr.String()).MatchString(path) {
			for _, m := range r.methods {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func FuzzRouteTableAllowed(f *testing.F) {
	routes, err := newRouteTable(api.OpenAPI)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/v1/teams", "/v1/teams/a", "/v1/teams/a/", "/v1/teams//members", "/v1/requests/r1:cancel",
		"/v1/requests/r1:", "/v1/requests/:cancel", "/v1/requests:checkFit", "/v1/requests/a:b:approve", "v1/teams",
		"/v1/teams/a/virtualClusters/b:kubeconfig", "/v1/teams/-/virtualClusters", "/", "", "/v1/users/me", "/v1/users/you"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		got, want := routes.allowed(path), allowedByRegexp(routes, path)
		if !slices.Equal(got, want) {
			t.Fatalf("allowed(%q) = %v, the templates as regular expressions say %v", path, got, want)
		}
		// The per-call check says what allowed does about each method.
		for _, m := range []string{"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"} {
			if got, want := routes.wrongMethod(path, m), len(want) > 0 && !slices.Contains(want, m); got != want {
				t.Fatalf("wrongMethod(%q, %s) = %v, want %v (allowed: %v)", path, m, got, want, routes.allowed(path))
			}
		}
	})
}
