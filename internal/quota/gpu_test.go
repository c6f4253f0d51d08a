package quota

import (
	"strings"
	"testing"
)

func TestParseGPU(t *testing.T) {
	tests := []struct {
		in      string
		want    GPU
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "2", want: 200},
		{in: "0.5", want: 50},
		{in: "0.50", want: 50},
		{in: "0.25", want: 25},
		{in: "1.75", want: 175},
		{in: "0.01", want: 1},
		{in: "007", want: 700},
		{in: "100000", want: MaxGPU},
		{in: "100000.00", want: MaxGPU},
		{in: "100000.01", wantErr: "maximum"},
		{in: "100001", wantErr: "maximum"},
		{in: "99999999999999999999999", wantErr: "maximum"},
		{in: "0.125", wantErr: "at most 2 decimal places"},
		{in: "", wantErr: "a number is required"},
		{in: "-1", wantErr: "only digits"},
		{in: "+1", wantErr: "only digits"},
		{in: " 1", wantErr: "only digits"},
		{in: "1 ", wantErr: "only digits"},
		{in: "1\n", wantErr: "only digits"},
		{in: "NaN", wantErr: "only digits"},
		{in: "Inf", wantErr: "only digits"},
		{in: "1e2", wantErr: "only digits"},
		{in: "0x10", wantErr: "only digits"},
		{in: ".5", wantErr: "only digits"},
		{in: "5.", wantErr: "only digits"},
		{in: "1.2.3", wantErr: "only digits"},
		{in: "1,5", wantErr: "only digits"},
		{in: "１", wantErr: "only digits"}, // full-width digit
		{in: strings.Repeat("0", 41), wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseGPU(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseGPU(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseGPU(%q) = %v, %v; want %v", tt.in, int64(got), err, int64(tt.want))
			}
		})
	}
}

func TestGPUStringRoundTrips(t *testing.T) {
	tests := []struct {
		g    GPU
		want string
	}{
		{0, "0"}, {1, "0.01"}, {10, "0.1"}, {25, "0.25"}, {50, "0.5"}, {100, "1"},
		{175, "1.75"}, {200, "2"}, {1205, "12.05"}, {MaxGPU, "100000"}, {-50, "-0.5"}, {-125, "-1.25"},
	}
	for _, tt := range tests {
		if got := tt.g.String(); got != tt.want {
			t.Errorf("GPU(%d).String() = %q, want %q", int64(tt.g), got, tt.want)
		}
		if tt.g < 0 {
			continue
		}
		back, err := ParseGPU(tt.want)
		if err != nil || back != tt.g {
			t.Errorf("ParseGPU(%q) = %d, %v; want %d", tt.want, int64(back), err, int64(tt.g))
		}
	}
}

func TestGPUFractionsSumExactly(t *testing.T) {
	q, _ := ParseGPU("0.25")
	h, _ := ParseGPU("0.75")
	if q+h != OneGPU {
		t.Fatalf("0.25 + 0.75 = %v, want 1", q+h)
	}
	// The classic float trap: 0.1 + 0.2 != 0.3 in float64, but must be here.
	a, _ := ParseGPU("0.1")
	b, _ := ParseGPU("0.2")
	c, _ := ParseGPU("0.3")
	if a+b != c {
		t.Fatalf("0.1 + 0.2 = %v, want 0.3", a+b)
	}
	budget := Resources{GPU: OneGPU}
	if !(Resources{GPU: q}).Add(Resources{GPU: h}).Fits(budget) {
		t.Fatal("0.25 + 0.75 GPU does not fit in 1 GPU")
	}
}

func TestGPUIsWholeAndKAI(t *testing.T) {
	tests := []struct {
		g     GPU
		whole bool
		kai   float64
	}{
		{0, true, 0}, {25, false, 0.25}, {50, false, 0.5}, {100, true, 1}, {150, false, 1.5},
		{800, true, 8}, {10, false, 0.1}, {29, false, 0.29},
	}
	for _, tt := range tests {
		if got := tt.g.IsWhole(); got != tt.whole {
			t.Errorf("GPU(%v).IsWhole() = %v, want %v", tt.g, got, tt.whole)
		}
		if got := tt.g.KAI(); got != tt.kai {
			t.Errorf("GPU(%v).KAI() = %v, want %v", tt.g, got, tt.kai)
		}
	}
}
