package devenv

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// TestDevModePrintsWhatRuns: the configuration gpuplane-dev prints is the
// one it runs, with what dev mode fills in itself (throwaway database,
// dev issuer, local host cluster, charts from the module cache, the
// worker, CORS for the portal), not the empty flags it started from.
func TestDevModePrintsWhatRuns(t *testing.T) {
	envtestenv.SkipIfShort(t)
	if _, err := envtestenv.AssetsDir(""); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // dev mode writes its kubeconfig there
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	outR, outW := io.Pipe()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--metrics-addr", "",
			"--issuer-addr", "127.0.0.1:0", "--log-level", "warn"}, outW, &stderr)
		outW.Close()
	}()
	running := false
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "gpuplane-dev is running") {
			running = true
			cancel()
		}
	}
	if code := <-done; !running {
		t.Fatalf("dev mode did not start (exit %d); stderr:\n%s", code, stderr.String())
	}

	printed := map[string]string{}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 1 && strings.HasPrefix(line, "  ") {
			printed[f[0]] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), f[0]))
		}
	}
	for flag, check := range map[string]func(string) bool{
		"database-url":         func(v string) bool { return strings.HasPrefix(v, "postgres") && !strings.Contains(v, "password=") },
		"oidc-issuer-url":      func(v string) bool { return strings.HasPrefix(v, "http") },
		"kubeconfig":           func(v string) bool { _, err := os.Stat(v); return err == nil },
		"vcluster-chart-dir":   func(v string) bool { return strings.Contains(v, "0.36.1=") && strings.Contains(v, "0.20.0=") },
		"run-worker":           func(v string) bool { return v == "true" },
		"cors-allowed-origins": func(v string) bool { return v == DevPortalOrigins },
	} {
		if v, ok := printed[flag]; !ok || !check(v) {
			t.Errorf("printed %s = %q, not what dev mode runs", flag, v)
		}
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr.String())
	}
}

// lockedBuffer is a strings.Builder safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
