package server

import (
	"net/http"
	"net/http/httptest"
)

// CORSHandlerForTest returns a function that sends a GET with the given
// Origin through withCORS(c) and returns the answer's headers.
func CORSHandlerForTest(c CORSConfig) func(origin string) http.Header {
	h := withCORS(c, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	return func(origin string) http.Header {
		req := httptest.NewRequest(http.MethodGet, "/v1/teams", nil)
		req.Header.Set("Origin", origin)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Header()
	}
}

// HTTPHandler is the public HTTP listener's handler (fuzzing without a
// socket).
func HTTPHandler(s *Server) http.Handler { return s.http.Handler }
