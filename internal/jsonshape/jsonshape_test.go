package jsonshape

import (
	"bytes"
	"encoding/json"
	"reflect"
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

// SnakeKeysForDecode decodes to the same value as SnakeKeys (which
// re-encodes the whole document), for any document whose objects have no
// two keys of the same snake_case name: for those SnakeKeys keeps either
// value (it renames through a Go map), so it is no reference.
func FuzzSnakeKeysForDecode(f *testing.F) {
	for _, seed := range []string{
		`{"createVirtualCluster":{"spec":{"allowFractionalGpus":true,"quota":{"cpuMillis":"5"}},"virtualClusterId":"x"},"list":[{"lastTransitionTime":"t"}]}`,
		`[{"type":"Ready","lastTransitionTime":"2026-01-02T03:04:05Z","message":"a \"quoted\": value","observedGeneration":"3"}]`,
		` { "aB" : { "cD":[1, 2.5e3, null, true, "eF:"] } , "g\u0048i": "x" } `,
		`{"emptyKey":{},"":"","x":"\\"}`, `"justAString"`, `{"a":}`, `[`, ``,
		`{"aB":0,"a_b":1}`, // skipped: the names clash
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		want, werr := SnakeKeys([]byte(doc))
		got, gerr := SnakeKeysForDecode([]byte(doc))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: SnakeKeys error %v, SnakeKeysForDecode error %v", doc, werr, gerr)
		}
		if werr != nil {
			return
		}
		decode := func(b []byte) (any, error) {
			var v any
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber() // numbers as written: 1E700 is no float64
			return v, d.Decode(&v)
		}
		if v, err := decode([]byte(doc)); err == nil && snakeNamesClash(v) {
			t.Skip("two keys of one object have the same snake_case name")
		}
		w, err := decode(want)
		if err != nil {
			t.Fatalf("SnakeKeys(%q) = %s, not JSON: %v", doc, want, err)
		}
		g, err := decode(got)
		if err != nil {
			t.Fatalf("SnakeKeysForDecode(%q) = %s, not JSON: %v", doc, got, err)
		}
		if !reflect.DeepEqual(w, g) {
			t.Fatalf("%q:\n SnakeKeys          %s\n SnakeKeysForDecode %s", doc, want, got)
		}
	})
}

// snakeNamesClash reports whether an object in v has two keys that snake
// renames to the same name.
func snakeNamesClash(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		seen := make(map[string]bool, len(x))
		for k, e := range x {
			if seen[snake(k)] || snakeNamesClash(e) {
				return true
			}
			seen[snake(k)] = true
		}
	case []any:
		for _, e := range x {
			if snakeNamesClash(e) {
				return true
			}
		}
	}
	return false
}
