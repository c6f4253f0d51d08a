package server

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// routeTable knows the REST API's routes from the OpenAPI document the
// server serves, so a wrong method can be answered with the methods that
// are right (Allow) without a second list of routes to keep in step.
//
// Every REST call asks it (checkMethod), so matching is by segments, not
// regular expressions: a template segment is a literal, or one {param}
// with a literal before and after it (":approve"); a parameter matches one
// or more characters other than '/' and ':'.
type routeTable struct {
	routes []route
	// bySegments indexes routes by how many segments their path has.
	bySegments map[int][]int
}

type route struct {
	template string
	segments []segment
	methods  []string
}

type segment struct {
	prefix, suffix string
	param          bool
}

func (g segment) matches(s string) bool {
	if !g.param {
		return s == g.prefix
	}
	if len(s) <= len(g.prefix)+len(g.suffix) || !strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	return !strings.ContainsRune(s[len(g.prefix):len(s)-len(g.suffix)], ':')
}

// pathParamPattern is one {param} of an OpenAPI path; ids are DNS labels
// or the wildcard "-", never containing '/' or ':' (the custom-method
// separator).
var pathParamPattern = regexp.MustCompile(`\{[^}]+\}`)

func newRouteTable(openapi []byte) (routeTable, error) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(openapi, &doc); err != nil {
		return routeTable{}, fmt.Errorf("openapi document: %w", err)
	}
	t := routeTable{bySegments: map[int][]int{}}
	for p, ops := range doc.Paths {
		r := route{template: p}
		for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			params := pathParamPattern.FindAllStringIndex(seg, -1)
			switch len(params) {
			case 0:
				r.segments = append(r.segments, segment{prefix: seg})
			case 1:
				r.segments = append(r.segments, segment{prefix: seg[:params[0][0]], suffix: seg[params[0][1]:], param: true})
			default:
				return routeTable{}, fmt.Errorf("openapi path %s: more than one parameter in segment %q", p, seg)
			}
		}
		for m := range ops {
			r.methods = append(r.methods, strings.ToUpper(m))
		}
		sort.Strings(r.methods)
		t.add(r)
	}
	return t, nil
}

func (t *routeTable) add(r route) {
	t.bySegments[len(r.segments)] = append(t.bySegments[len(r.segments)], len(t.routes))
	t.routes = append(t.routes, r)
}

// matching yields the routes whose template path matches.
func (t routeTable) matching(path string) iter.Seq[*route] {
	return func(yield func(*route) bool) {
		if !strings.HasPrefix(path, "/") {
			return
		}
		rest := path[1:]
		for _, i := range t.bySegments[strings.Count(rest, "/")+1] {
			if r := &t.routes[i]; r.matchPath(rest) && !yield(r) {
				return
			}
		}
	}
}

// allowed lists the methods the route of path answers; nil when no route
// matches.
func (t routeTable) allowed(path string) []string {
	var out []string
	for r := range t.matching(path) {
		for _, m := range r.methods {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	sort.Strings(out)
	return out
}

// wrongMethod reports whether routes match path but none takes method:
// allowed(path) is not empty and lacks method. It runs on every call, so
// unlike allowed it stops at the first route that takes the call and
// builds no list.
func (t routeTable) wrongMethod(path, method string) bool {
	matched := false
	for r := range t.matching(path) {
		if slices.Contains(r.methods, method) {
			return false
		}
		matched = true
	}
	return matched
}

// matchPath reports whether path (without its leading '/') has r's
// segments.
func (r *route) matchPath(path string) bool {
	for _, g := range r.segments {
		seg, rest, _ := strings.Cut(path, "/")
		if !g.matches(seg) {
			return false
		}
		path = rest
	}
	return true
}

// routingError answers requests no route takes, in the same shape as every
// other error (google.rpc.Status with an ErrorInfo):
//
//   - 405 Method Not Allowed, with Allow listing the route's methods, for a
//     route that exists under other methods (reason METHOD_NOT_ALLOWED; the
//     status code is UNIMPLEMENTED, as grpc-gateway reports it, but the HTTP
//     status is 405 rather than the 501 it would map to: the server does
//     implement the route, just not that method);
//   - 404 with reason ROUTE_NOT_FOUND for a path no route matches, so a
//     mistyped URL is told apart from an object that does not exist
//     (NOT_FOUND).
func (t routeTable) routingError(w http.ResponseWriter, r *http.Request) {
	if methods := t.allowed(r.URL.Path); len(methods) > 0 && !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		e := errs.New(errs.KindUnknown, errs.ReasonMethodNotAllowed, "method %s is not allowed on %s; allowed: %s",
			r.Method, r.URL.Path, strings.Join(methods, ", ")).With("method", r.Method).With("allow", strings.Join(methods, ", "))
		writeStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, e)
		return
	}
	e := errs.New(errs.KindNotFound, errs.ReasonRouteNotFound, "no API route matches %s %s; the REST API's routes are in /openapi.yaml",
		r.Method, r.URL.Path).With("path", r.URL.Path)
	writeStatus(w, http.StatusNotFound, codes.NotFound, e)
}

// checkMethod answers a method the route does not take before the gateway
// sees it: the gateway would read "/v1/requests/r1:cancel" under GET as the
// request "r1:cancel" and answer 400 about a bad id, where the caller needs
// to hear that the route takes POST.
func (t routeTable) checkMethod(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.wrongMethod(r.URL.Path, r.Method) {
			t.routingError(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// gatewayRoutingError is the gateway's runtime.RoutingErrorHandlerFunc.
func (t routeTable) gatewayRoutingError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, _ int) {
	t.routingError(w, r)
}

func writeStatus(w http.ResponseWriter, httpStatus int, code codes.Code, e *errs.Error) {
	body, err := newRESTMarshaler().Marshal(statusOf(code, e).Proto())
	if err != nil {
		http.Error(w, e.Message, httpStatus)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(body)
}
