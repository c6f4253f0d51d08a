package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics count what the HTTP listener serves, by route pattern: the
// REST gateway as a whole ("/v1/", whose calls gpuplane_grpc_server_*
// count per method) and the plain endpoints (/healthz, /readyz, /metrics,
// /openapi.*). Requests no route matched count as route "unmatched".
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_http_server_requests_total",
			Help: "HTTP requests completed, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuplane_http_server_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// wrap instruments mux. It must sit directly around the http.ServeMux: the
// mux records the matched pattern on the very request it is handed.
func (m *httpMetrics) wrap(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := http.StatusOK
		w = httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(c int) {
					code = c
					next(c)
				}
			},
		})
		mux.ServeHTTP(w, r)
		route := routeLabel(r.Pattern)
		method := methodLabel(r.Method)
		m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
	})
}

// routeLabel drops the method from a "GET /healthz" pattern.
func routeLabel(pattern string) string {
	if pattern == "" {
		return "unmatched"
	}
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		return pattern[i+1:]
	}
	return pattern
}

// methodLabel bounds the label to the standard methods: clients choose
// the method, and a label must not grow with what they send.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}
