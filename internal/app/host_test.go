package app

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The worker's rate limit towards host clusters is what the flags say,
// and never silently client-go's own default (5/s, burst 10), which QPS 0
// or a burst of 0 would give.
func TestHostRateLimitSetting(t *testing.T) {
	cfg := Defaults()
	rc := &rest.Config{}
	TuneHostConfig(cfg)(rc)
	if rc.QPS != DefaultHostClusterQPS || rc.Burst != DefaultHostClusterBurst || rc.Timeout != 30*time.Second {
		t.Errorf("defaults: QPS %v burst %d timeout %s", rc.QPS, rc.Burst, rc.Timeout)
	}
	if err := checkHostRateLimit(cfg); err != nil {
		t.Errorf("defaults refused: %v", err)
	}

	cfg.HostClusterQPS = -1
	TuneHostConfig(cfg)(rc)
	if rc.QPS >= 0 {
		t.Errorf("negative QPS should mean no client-side limit: QPS %v", rc.QPS)
	}

	for _, bad := range []struct {
		qps   float64
		burst int
		want  string
	}{{0, 100, "host-cluster-qps must not be 0"}, {50, 0, "host-cluster-burst must be at least 1"}} {
		cfg.HostClusterQPS, cfg.HostClusterBurst = bad.qps, bad.burst
		if err := checkHostRateLimit(cfg); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("QPS %v burst %d: %v, want %q", bad.qps, bad.burst, err, bad.want)
		}
	}
}
