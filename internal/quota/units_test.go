package quota

import (
	"strings"
	"testing"
)

func TestParseCPU(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "16", want: 16000},
		{in: "0", want: 0},
		{in: "500m", want: 500},
		{in: "2.5", want: 2500},
		{in: "0.001", want: 1},
		{in: "0.1", want: 100},
		{in: "2000m", want: 2000},
		{in: "1000000", want: MaxCPUMillis},
		{in: "1000000.001", wantErr: "maximum"},
		{in: "0.0005", wantErr: "at most 3 decimal places"},
		{in: "1.5m", wantErr: "whole number of millicores"},
		{in: "m", wantErr: "a number is required"},
		{in: "", wantErr: "a number is required"},
		{in: "-1", wantErr: "only digits"},
		{in: "1e3", wantErr: "only digits"},
		{in: "16 CPU", wantErr: "only digits"},
		{in: "1M", wantErr: "only digits"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseCPU(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseCPU(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseCPU(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatCPU(t *testing.T) {
	tests := []struct {
		millis int64
		want   string
	}{
		{0, "0 CPU"}, {16000, "16 CPU"}, {500, "500m"}, {2500, "2500m"}, {1, "1m"}, {1000, "1 CPU"},
	}
	for _, tt := range tests {
		if got := FormatCPU(tt.millis); got != tt.want {
			t.Errorf("FormatCPU(%d) = %q, want %q", tt.millis, got, tt.want)
		}
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "64Gi", want: 64 << 30},
		{in: "512Mi", want: 512 << 20},
		{in: "1G", want: 1_000_000_000},
		{in: "1000", want: 1000},
		{in: "0", want: 0},
		{in: "1k", want: 1000},
		{in: "1Ki", want: 1024},
		{in: "1.5Gi", want: 3 << 29},
		{in: "0.5k", want: 500},
		{in: "2Ti", want: 2 << 40},
		{in: "1Ei", want: MaxMemoryBytes},
		{in: "1.0001Ei", wantErr: "not a whole number of bytes"},
		{in: "2Ei", wantErr: "maximum"},
		{in: "2E", wantErr: "maximum"},
		{in: "0.1", wantErr: "not a whole number of bytes"},
		{in: "1.0001k", wantErr: "not a whole number of bytes"},
		{in: "1K", wantErr: "only digits"},
		{in: "1GB", wantErr: "only digits"},
		{in: "1gi", wantErr: "only digits"},
		{in: "100m", wantErr: "only digits"},
		{in: "1e9", wantErr: "only digits"},
		{in: "-1Gi", wantErr: "only digits"},
		{in: " 1Gi", wantErr: "only digits"},
		{in: "Gi", wantErr: "a number is required"},
		{in: "", wantErr: "a number is required"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMemory(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMemory(%q) = %v, %v; want error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMemory(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestFormatMemoryRoundTrips(t *testing.T) {
	tests := []struct {
		bytes int64
		want  string
	}{
		{0, "0"},
		{64 << 30, "64Gi"},
		{512 << 20, "512Mi"},
		{1_000_000_000, "1G"},
		{1000, "1k"},
		{1024, "1Ki"},
		{1536 << 20, "1536Mi"},
		{2_048_000, "2000Ki"}, // 1024 beats 1000 when both divide
		{68_719_476_737, "68719476737"},
		{MaxMemoryBytes, "1Ei"},
		{-(1 << 30), "-1Gi"},
	}
	for _, tt := range tests {
		if got := FormatMemory(tt.bytes); got != tt.want {
			t.Errorf("FormatMemory(%d) = %q, want %q", tt.bytes, got, tt.want)
		}
		if tt.bytes < 0 {
			continue
		}
		back, err := ParseMemory(tt.want)
		if err != nil || back != tt.bytes {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", tt.want, back, err, tt.bytes)
		}
	}
}
