package quota

import (
	"math/big"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"
)

// wantParseError checks what every quantity parser promises of a refusal:
// an error whose text quotes the input (it becomes a field violation
// description that must say what was wrong with which value).
func wantParseError(t *testing.T, fn, s string, err error) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, strconv.Quote(s)) {
		t.Fatalf("%s(%q): error %q does not quote the input", fn, s, msg)
	}
	if !utf8.ValidString(msg) {
		t.Fatalf("%s(%q): error text is not valid UTF-8", fn, s)
	}
}

// kubernetes parses s as a Kubernetes quantity; ok is false when
// Kubernetes refuses it.
func kubernetes(s string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

// FuzzParseGPU: ParseGPU never panics; an accepted amount is within
// [0, MaxGPU], equals the input read as an exact decimal (big.Rat) times
// 100, and String gives the shortest form, which parses back to the same
// amount and formats the same again.
func FuzzParseGPU(f *testing.F) {
	for _, s := range []string{"0", "2", "0.5", "0.25", "1.75", "100000", "100000.01", "0.001", ".5", "5.", "1e2", "-1", "+1", " 1", "٣", "01.10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGPU(s)
		if err != nil {
			wantParseError(t, "ParseGPU", s, err)
			return
		}
		if g < 0 || g > MaxGPU {
			t.Fatalf("ParseGPU(%q) = %d, outside [0, %d]", s, g, MaxGPU)
		}
		exact, ok := new(big.Rat).SetString(s)
		if !ok || exact.Mul(exact, big.NewRat(int64(OneGPU), 1)).Cmp(big.NewRat(int64(g), 1)) != 0 {
			t.Fatalf("ParseGPU(%q) = %d centi-GPU, not the exact value of the decimal", s, g)
		}
		again, err := ParseGPU(g.String())
		if err != nil || again != g {
			t.Fatalf("ParseGPU(%q) = %d; String %q parses to %d, %v", s, g, g.String(), again, err)
		}
		if FormatGPU(g) != g.String()+" GPU" {
			t.Fatalf("FormatGPU(%d) = %q", g, FormatGPU(g))
		}
	})
}

// FuzzParseCPU: ParseCPU never panics; whatever it accepts Kubernetes
// accepts as the same number of millicores; the result is within
// [0, MaxCPUMillis]; and the number FormatCPU prints reads back the same.
func FuzzParseCPU(f *testing.F) {
	for _, s := range []string{"16", "0", "500m", "2.5", "0.001", "2000m", "1000000", "1000000.001", "0.0005", "1.5m", "m", "1e3", "16 CPU", "1M", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseCPU(s)
		if err != nil {
			wantParseError(t, "ParseCPU", s, err)
			return
		}
		if m < 0 || m > MaxCPUMillis {
			t.Fatalf("ParseCPU(%q) = %d, outside [0, %d]", s, m, MaxCPUMillis)
		}
		q, ok := kubernetes(s)
		if !ok || q.MilliValue() != m {
			t.Fatalf("ParseCPU(%q) = %dm; Kubernetes reads %v (ok %v) = %dm", s, m, q.String(), ok, q.MilliValue())
		}
		checkCPUFormat(t, m)
	})
}

// checkCPUFormat: FormatCPU prints "N CPU" for whole cores and "Nm"
// otherwise; the number part parses back to the same millicores.
func checkCPUFormat(t *testing.T, m int64) {
	t.Helper()
	text := FormatCPU(m)
	number, cores := strings.CutSuffix(text, " CPU")
	if !cores && !strings.HasSuffix(text, "m") {
		t.Fatalf("FormatCPU(%d) = %q has no unit", m, text)
	}
	back, err := ParseCPU(number)
	if err != nil || back != m {
		t.Fatalf("FormatCPU(%d) = %q reads back as %d, %v", m, text, back, err)
	}
}

// FuzzParseMemory: ParseMemory never panics; whatever it accepts
// Kubernetes accepts as the same number of bytes; the result is within
// [0, MaxMemoryBytes]; and FormatMemory's text parses back to the same
// bytes, in Kubernetes too.
func FuzzParseMemory(f *testing.F) {
	for _, s := range []string{"64Gi", "512Mi", "1G", "1.5Gi", "1000", "1Ei", "1.5", "1K", "1k", "1e3", "0.5Ki", "1Ki1", "Gi", "0.000000000000000001E", "1.0000000000000000001Ei"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseMemory(s)
		if err != nil {
			wantParseError(t, "ParseMemory", s, err)
			return
		}
		if b < 0 || b > MaxMemoryBytes {
			t.Fatalf("ParseMemory(%q) = %d, outside [0, %d]", s, b, MaxMemoryBytes)
		}
		q, ok := kubernetes(s)
		if !ok || q.Value() != b {
			t.Fatalf("ParseMemory(%q) = %d; Kubernetes reads %v (ok %v) = %d", s, b, q.String(), ok, q.Value())
		}
		checkMemoryFormat(t, b)
	})
}

func checkMemoryFormat(t *testing.T, b int64) {
	t.Helper()
	text := FormatMemory(b)
	back, err := ParseMemory(text)
	if err != nil || back != b {
		t.Fatalf("FormatMemory(%d) = %q reads back as %d, %v", b, text, back, err)
	}
	if q, ok := kubernetes(text); !ok || q.Value() != b {
		t.Fatalf("FormatMemory(%d) = %q; Kubernetes reads %d (ok %v)", b, text, q.Value(), ok)
	}
}

// FuzzFormatQuantities starts from raw amounts instead of text: every
// amount a quota may hold formats to text that parses back exactly, and
// Validate accepts exactly the amounts within bounds, naming the field
// of each one that is not.
func FuzzFormatQuantities(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0))
	f.Add(int64(25), int64(2500), int64(64<<30))
	f.Add(int64(MaxGPU), MaxCPUMillis, MaxMemoryBytes)
	f.Add(int64(-1), int64(-1000), int64(-1))
	f.Add(int64(MaxGPU)+1, MaxCPUMillis+1, MaxMemoryBytes+1)
	f.Add(int64(1), int64(1), int64(1000*1024))
	f.Fuzz(func(t *testing.T, gpu, cpu, mem int64) {
		r := Resources{GPU: GPU(gpu), CPUMillis: cpu, MemoryBytes: mem}
		v := r.Validate("quota")
		bad := map[string]bool{}
		for _, x := range v {
			bad[x.Field] = true
			if x.Description == "" {
				t.Fatalf("violation on %s without description", x.Field)
			}
		}
		for k, raw := range r.All() {
			limit := Resources{GPU: MaxGPU, CPUMillis: MaxCPUMillis, MemoryBytes: MaxMemoryBytes}.Get(k)
			field := "quota." + k.Field()
			inRange := raw >= 0 && raw <= limit
			if bad[field] == inRange {
				t.Fatalf("Validate(%v): %s = %d reported %v, want %v", r, field, raw, bad[field], !inRange)
			}
			if !inRange {
				continue
			}
			switch k {
			case ResourceGPU:
				if back, err := ParseGPU(GPU(raw).String()); err != nil || int64(back) != raw {
					t.Fatalf("GPU %d formats as %q, reads back %d, %v", raw, GPU(raw).String(), back, err)
				}
			case ResourceCPU:
				checkCPUFormat(t, raw)
			case ResourceMemory:
				checkMemoryFormat(t, raw)
			}
		}
	})
}
