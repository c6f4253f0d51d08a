package server

import (
	"context"
	"fmt"
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
type routeTable []route

type route struct {
	template string
	match    *regexp.Regexp
	methods  []string
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
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	var t routeTable
	for p, ops := range doc.Paths {
		var expr strings.Builder
		expr.WriteString("^")
		last := 0
		for _, m := range pathParamPattern.FindAllStringIndex(p, -1) {
			expr.WriteString(regexp.QuoteMeta(p[last:m[0]]))
			expr.WriteString(`[^/:]+`)
			last = m[1]
		}
		expr.WriteString(regexp.QuoteMeta(p[last:]) + "$")
		r := route{template: p, match: regexp.MustCompile(expr.String())}
		for m := range ops {
			r.methods = append(r.methods, strings.ToUpper(m))
		}
		sort.Strings(r.methods)
		t = append(t, r)
	}
	return t, nil
}

// allowed lists the methods the route of path answers; nil when no route
// matches.
func (t routeTable) allowed(path string) []string {
	var out []string
	for _, r := range t {
		if r.match.MatchString(path) {
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
		if methods := t.allowed(r.URL.Path); len(methods) > 0 && !slices.Contains(methods, r.Method) {
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
