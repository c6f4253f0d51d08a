package app_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
)

// TestWorkerServesMetrics: `gpuplane worker` alone serves its metrics on
// --metrics-addr (promlint-clean), and stops the listener on shutdown.
func TestWorkerServesMetrics(t *testing.T) {
	t.Parallel()
	cfg := app.Defaults()
	cfg.DatabaseURL = storetest.New(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	// The client does not contact the API server until there is work, and
	// this database has none.
	host := &rest.Config{Host: "http://127.0.0.1:1"}
	w, err := app.NewWorker(context.Background(), cfg, app.Options{
		HostConfig: host, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	resp, err := http.Get("http://" + w.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{
		"gpuplane_reconcile_queue_depth 0",
		"gpuplane_reconcile_queue_due 0",
		"gpuplane_reconcile_in_flight 0",
		`gpuplane_metrics_query_up{query="reconcile_queue"} 1`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		if !strings.Contains(string(body), "\n"+want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(body), "gpuplane_store_group_") {
		t.Errorf("the worker reports group-commit counters; it runs no API changes, only serve should")
	}
	if strings.Contains(string(body), "gpuplane_virtual_clusters") {
		t.Errorf("the worker reports API-side state gauges; only serve should")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker stopped with: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not stop")
	}
	if c, err := net.DialTimeout("tcp", w.MetricsAddr(), time.Second); err == nil {
		c.Close()
		t.Error("metrics listener still open after shutdown")
	}
}
