package quota

import (
	"math"
	"math/big"
	"reflect"
	"testing"

	"github.com/gpuplane/gpuplane/internal/errs"
)

func TestResourcesArithmetic(t *testing.T) {
	a := Resources{GPU: 150, CPUMillis: 4000, MemoryBytes: 8 << 30}
	b := Resources{GPU: 50, CPUMillis: 500, MemoryBytes: 1 << 30}
	if got, want := a.Add(b), (Resources{GPU: 200, CPUMillis: 4500, MemoryBytes: 9 << 30}); got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
	if got, want := b.Sub(a), (Resources{GPU: -100, CPUMillis: -3500, MemoryBytes: -(7 << 30)}); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
	if !b.Fits(a) || a.Fits(b) || !a.Fits(a) {
		t.Error("Fits: wrong answer for smaller, larger or equal")
	}
	// One resource over is enough to not fit.
	if (Resources{GPU: 1}).Fits(Resources{CPUMillis: 1000}) {
		t.Error("GPU over but Fits reported true")
	}
	if !(Resources{}).IsZero() || a.IsZero() {
		t.Error("IsZero wrong")
	}
}

func TestResourcesAddSaturates(t *testing.T) {
	big := Resources{GPU: math.MaxInt64 - 1, CPUMillis: math.MaxInt64, MemoryBytes: math.MaxInt64}
	got := big.Add(Resources{GPU: 5, CPUMillis: 1, MemoryBytes: math.MaxInt64})
	if got.GPU != math.MaxInt64 || got.CPUMillis != math.MaxInt64 || got.MemoryBytes != math.MaxInt64 {
		t.Fatalf("Add overflowed: %+v", got)
	}
	neg := Resources{CPUMillis: math.MinInt64 + 1}.Sub(Resources{CPUMillis: 10})
	if neg.CPUMillis != math.MinInt64 {
		t.Fatalf("Sub underflowed: %+v", neg)
	}
	if got := (Resources{MemoryBytes: 5}).Sub(Resources{MemoryBytes: math.MinInt64}); got.MemoryBytes != math.MaxInt64 {
		t.Fatalf("Sub(MinInt64) = %d, want MaxInt64", got.MemoryBytes)
	}
}

func TestResourcesIteration(t *testing.T) {
	r := Resources{GPU: 25, CPUMillis: 500, MemoryBytes: 1 << 30}
	var keys []Resource
	var vals []int64
	for k, v := range r.All() {
		keys = append(keys, k)
		vals = append(vals, v)
		if r.With(k, v) != r {
			t.Errorf("With(%s, Get) changed the value", k)
		}
	}
	if !reflect.DeepEqual(keys, []Resource{ResourceGPU, ResourceCPU, ResourceMemory}) ||
		!reflect.DeepEqual(vals, []int64{25, 500, 1 << 30}) {
		t.Fatalf("All yielded %v %v", keys, vals)
	}
	for range r.All() {
		break // early stop must not panic
	}
	if got := r.With(ResourceCPU, 7); got.CPUMillis != 7 || got.GPU != 25 {
		t.Fatalf("With = %+v", got)
	}
}

func TestResourcesValidate(t *testing.T) {
	tests := []struct {
		name  string
		r     Resources
		field string
		want  []string
	}{
		{name: "zero ok", r: Resources{}, field: "quota"},
		{name: "max ok", r: Resources{GPU: MaxGPU, CPUMillis: MaxCPUMillis, MemoryBytes: MaxMemoryBytes}, field: "quota"},
		{name: "negatives", r: Resources{GPU: -1, CPUMillis: -1, MemoryBytes: -1}, field: "quota",
			want: []string{"quota.gpu", "quota.cpu_millis", "quota.memory_bytes"}},
		{name: "over bounds", r: Resources{GPU: MaxGPU + 1, MemoryBytes: MaxMemoryBytes + 1}, field: "team.quota",
			want: []string{"team.quota.gpu", "team.quota.memory_bytes"}},
		{name: "no prefix", r: Resources{CPUMillis: MaxCPUMillis + 1}, want: []string{"cpu_millis"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.r.Validate(tt.field)
			var got []string
			for _, fv := range v {
				got = append(got, fv.Field)
				if fv.Description == "" {
					t.Errorf("%s: empty description", fv.Field)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("fields = %v, want %v (%v)", got, tt.want, v)
			}
			if len(tt.want) > 0 && errs.KindOf(v.Err()) != errs.KindInvalidArgument {
				t.Fatalf("Err kind = %v", errs.KindOf(v.Err()))
			}
		})
	}
}

func TestToKAI(t *testing.T) {
	tests := []struct {
		name             string
		r                Resources
		gpu, cpu, memory float64
	}{
		{name: "64Gi rounds down", r: Resources{GPU: 800, CPUMillis: 16000, MemoryBytes: 64 << 30}, gpu: 8, cpu: 16000, memory: 68719},
		{name: "fractional gpu", r: Resources{GPU: 25, CPUMillis: 500, MemoryBytes: 512 << 20}, gpu: 0.25, cpu: 500, memory: 536},
		{name: "exact megabytes", r: Resources{MemoryBytes: 1_000_000_000}, memory: 1000},
		{name: "under one megabyte", r: Resources{MemoryBytes: 999_999}, memory: 0},
		{name: "zero", r: Resources{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, c, m := ToKAI(tt.r)
			if g != tt.gpu || c != tt.cpu || m != tt.memory {
				t.Fatalf("ToKAI = %v, %v, %v; want %v, %v, %v", g, c, m, tt.gpu, tt.cpu, tt.memory)
			}
		})
	}
}

// status.allocated is a Kubernetes resource list (devices, cores, bytes);
// every amount rounds up to the platform's unit, exactly (no float noise:
// 0.29 devices is 29 hundredths, not 30).
func TestAllocatedFromKAIRoundsUp(t *testing.T) {
	d := DecimalOf
	huge, _ := new(big.Int).SetString("1000000000000000000000000000000", 10)
	tests := []struct {
		name          string
		gpu, cpu, mem Decimal
		want          Resources
	}{
		{name: "exact", gpu: d(29, -2), cpu: d(15, -1), mem: d(64<<30, 0), want: Resources{GPU: 29, CPUMillis: 1500, MemoryBytes: 64 << 30}},
		{name: "milli GPUs", gpu: d(1505, -3), cpu: d(2, 0), mem: d(1500, 3), want: Resources{GPU: 151, CPUMillis: 2000, MemoryBytes: 1_500_000}},
		{name: "partial units round up", gpu: d(251, -3), cpu: d(2, -4), mem: d(5, -7), want: Resources{GPU: 26, CPUMillis: 1, MemoryBytes: 1}},
		{name: "far below one unit is one", gpu: d(1, -90), cpu: d(1, -60), mem: d(3, -50), want: Resources{GPU: 1, CPUMillis: 1, MemoryBytes: 1}},
		{name: "negative and missing read as zero", gpu: d(-5, 0), cpu: Decimal{}, mem: d(-1, 9)},
		{name: "huge clamps", gpu: d(1, 60), cpu: Decimal{Unscaled: huge}, mem: d(9, 18),
			want: Resources{GPU: MaxGPU, CPUMillis: MaxCPUMillis, MemoryBytes: MaxMemoryBytes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AllocatedFromKAI(tt.gpu, tt.cpu, tt.mem); got != tt.want {
				t.Fatalf("AllocatedFromKAI = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Negative amounts are "unlimited" on the platform side and -1 in KAI.
func TestToKAIUnlimited(t *testing.T) {
	g, c, m := ToKAI(Resources{GPU: -1, CPUMillis: -1, MemoryBytes: -1})
	if g != KAIUnlimited || c != KAIUnlimited || m != KAIUnlimited {
		t.Fatalf("ToKAI(unlimited) = %v, %v, %v; want -1 each", g, c, m)
	}
	g, c, m = ToKAI(Resources{GPU: 50, CPUMillis: -1, MemoryBytes: 1_999_999})
	if g != 0.5 || c != KAIUnlimited || m != 1 {
		t.Fatalf("ToKAI(mixed) = %v, %v, %v; want 0.5, -1, 1", g, c, m)
	}
}
