package app_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// bigJSON is a valid JSON request body of n bytes that costs the client
// no memory: {"displayName":"aaaa…a"}.
type bigJSON struct {
	n, sent int64
}

func (b *bigJSON) Read(p []byte) (int, error) {
	const head, tail = `{"displayName":"`, `"}`
	if b.sent >= b.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), b.n-b.sent)
	for i := range p[:k] {
		switch off := b.sent + int64(i); {
		case off < int64(len(head)):
			p[i] = head[off]
		case off >= b.n-int64(len(tail)):
			p[i] = tail[off-(b.n-int64(len(tail)))]
		default:
			p[i] = 'a'
		}
	}
	b.sent += k
	return int(k), nil
}

// heapSampler records the largest live heap seen while it runs.
type heapSampler struct {
	peak atomic.Uint64
	stop chan struct{}
	done chan struct{}
}

func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func totalAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := liveHeap(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 { close(h.stop); <-h.done; return h.peak.Load() }

// TestUnauthenticatedBodyIsNotRead: a 100 MB POST without a token is
// refused (401) before the server reads the body, so neither the server's
// live heap nor its allocations grow with the body. Not parallel: the
// numbers are of this process, which runs nothing else meanwhile.
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	const size = 100 << 20
	for _, c := range []struct {
		name, authorization string
		want                int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"forged token", "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			baseHeap, baseAllocs := liveHeap(), totalAllocs()
			sampler := sampleHeap()
			req, err := http.NewRequest(http.MethodPost, e.HTTPBase+"/v1/teams?teamId=big", &bigJSON{n: size})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = -1 // chunked: the server cannot refuse by Content-Length alone
			req.Header.Set("Content-Type", "application/json")
			if c.authorization != "" {
				req.Header.Set("Authorization", c.authorization)
			}
			resp, err := http.DefaultClient.Do(req)
			peak := sampler.Stop()
			allocs := totalAllocs() - baseAllocs
			if err != nil {
				t.Fatalf("POST of %d MB: %v", size>>20, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			growth := int64(peak) - int64(baseHeap)
			t.Logf("100 MB unauthenticated POST: HTTP %d; live heap %.1f MB before, peak %.1f MB during (growth %.1f MB); %.1f MB allocated in total",
				resp.StatusCode, mb(baseHeap), mb(peak), float64(growth)/(1<<20), mb(allocs))
			r := apptest.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
			apiWantHTTP(t, r, c.want)
			apiWantCode(t, apiRESTStatus(t, r).Err(), codes.Unauthenticated)
			if growth > 8<<20 || allocs > 16<<20 {
				t.Errorf("the server's heap grew by %.1f MB (allocated %.1f MB) for a body it must not read", float64(growth)/(1<<20), mb(allocs))
			}
		})
	}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// TestRequestBodyCap: an authenticated REST body past --max-request-bytes
// is refused with 413 and a google.rpc.Status naming the limit, whether or
// not it announces its length; a body at the limit is read.
func TestRequestBodyCap(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	e := apptest.Start(t, apptest.Options{Seed: true, Config: func(c *app.Config) { c.MaxRequestBytes = limit }})
	tok := "Bearer " + e.Token(t, "alice")
	post := func(t *testing.T, body string, chunked bool) apptest.Response {
		t.Helper()
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length from net/http
		}
		req, err := http.NewRequest(http.MethodPost, e.HTTPBase+"/v1/departments?departmentId=d"+fmt.Sprint(len(body)), rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return apptest.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	}
	// A valid department whose display name pads the body to n bytes.
	body := func(n int) string {
		head, tail := `{"displayName":"`, `"}`
		return head + strings.Repeat(" ", n-len(head)-len(tail)) + tail
	}
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			r := post(t, body(limit+1), chunked)
			apiWantHTTP(t, r, http.StatusRequestEntityTooLarge)
			st := apiRESTStatus(t, r)
			if ei := apiErrorInfo(t, st); ei.GetReason() != "REQUEST_TOO_LARGE" || ei.GetMetadata()["limitBytes"] != fmt.Sprint(limit) {
				t.Errorf("413 ErrorInfo: %v", ei)
			}
			if v := apiViolations(t, st); !strings.Contains(v["body"], fmt.Sprint(limit)) {
				t.Errorf("413 violations: %v", v)
			}
		})
	}
	// At the limit the body is read and validated (the display name is too
	// long for a department: 400, not 413).
	r := post(t, body(limit), true)
	apiWantHTTP(t, r, http.StatusBadRequest)
	r = post(t, body(200), false)
	apiWantHTTP(t, r, http.StatusOK)
}
