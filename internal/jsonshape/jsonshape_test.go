package jsonshape

import (
	"testing"
	"time"
)

func TestFormatTimeLikeProtojson(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	for ns, want := range map[int]string{
		0:           "2026-01-02T02:04:05Z",
		120_000_000: "2026-01-02T02:04:05.120Z",
		123_450_000: "2026-01-02T02:04:05.123450Z",
		1:           "2026-01-02T02:04:05.000000001Z",
	} {
		if got := FormatTime(base.Add(time.Duration(ns))); got != want {
			t.Errorf("FormatTime(+%dns) = %s, want %s", ns, got, want)
		}
	}
}

func TestKeyCaseRoundTrip(t *testing.T) {
	in := `{"create_virtual_cluster":{"virtual_cluster_id":"x","spec":{"allow_fractional_gpus":true,"quota":{"cpu_millis":"5"}}},"list":[{"last_transition_time":"t"}]}`
	c, err := CamelKeys([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"createVirtualCluster":{"spec":{"allowFractionalGpus":true,"quota":{"cpuMillis":"5"}},"virtualClusterId":"x"},"list":[{"lastTransitionTime":"t"}]}`
	if string(c) != want {
		t.Fatalf("CamelKeys = %s\nwant %s", c, want)
	}
	s, err := SnakeKeys(c)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := SnakeKeys([]byte(in)) // sorted the same way
	if string(s) != string(back) {
		t.Fatalf("SnakeKeys(CamelKeys(x)) = %s, want %s", s, back)
	}
}

func TestInt64(t *testing.T) {
	var n Int64
	for _, in := range []string{`"42"`, `42`} {
		if err := n.UnmarshalJSON([]byte(in)); err != nil || n != 42 {
			t.Errorf("UnmarshalJSON(%s) = %d, %v", in, n, err)
		}
	}
	if b, _ := Int64(-7).MarshalJSON(); string(b) != `"-7"` {
		t.Errorf("MarshalJSON = %s", b)
	}
}
