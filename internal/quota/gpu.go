package quota

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// GPU is an amount of GPU in hundredths of a device. Fractions are what KAI's
// GPU sharing hands out, and a decimal fixed point keeps 0.25 + 0.75 == 1
// exact, which float64 would not guarantee for every split (0.1 + 0.2).
type GPU int64

const (
	// CentiGPU is the smallest amount that can be granted.
	CentiGPU GPU = 1
	// OneGPU is a whole device.
	OneGPU GPU = 100
	// MaxGPU bounds any single GPU quantity. It is far above any real
	// cluster yet keeps sums of thousands of quotas far from int64 overflow.
	MaxGPU GPU = 100_000 * OneGPU
)

// GPUs returns n whole devices.
func GPUs(n int64) GPU { return GPU(n) * OneGPU }

// ParseGPU reads a non-negative decimal with at most two fractional digits
// ("0", "2", "0.5", "0.25", "1.75"). The grammar is deliberately narrower
// than strconv.ParseFloat: no sign, exponent, NaN, Inf, whitespace or
// hex, so a value means the same to every client. Error texts are written to
// be used as a field violation description.
func ParseGPU(s string) (GPU, error) {
	whole, frac, err := splitDecimal(s, 2)
	if err != nil {
		return 0, fmt.Errorf("%q is not a GPU amount: %w (use e.g. \"2\", \"0.5\" or \"0.25\")", s, err)
	}
	limit := int64(MaxGPU / OneGPU)
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > limit {
		return 0, fmt.Errorf("%q GPUs is more than the maximum of %d", s, limit)
	}
	g := GPU(n) * OneGPU
	if frac != "" {
		f, _ := strconv.ParseInt(frac+strings.Repeat("0", 2-len(frac)), 10, 64)
		g += GPU(f)
	}
	if g > MaxGPU {
		return 0, fmt.Errorf("%q GPUs is more than the maximum of %d", s, limit)
	}
	return g, nil
}

// splitDecimal checks s against digits["."digits] with at most maxFrac
// fractional digits and returns the two digit runs. Leading digits are
// required so ".5" and "5." are refused as likely typos.
const maxDecimalLen = 40

func splitDecimal(s string, maxFrac int) (whole, frac string, err error) {
	if s == "" {
		return "", "", errors.New("a number is required")
	}
	// Bounds every later step (big.Rat parsing in particular) to a small
	// input; no valid amount needs more characters.
	if len(s) > maxDecimalLen {
		return "", "", fmt.Errorf("it is longer than %d characters", maxDecimalLen)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || !allDigits(whole) {
		return "", "", errors.New("only digits and one decimal point are allowed")
	}
	if hasDot {
		if frac == "" || !allDigits(frac) {
			return "", "", errors.New("only digits and one decimal point are allowed")
		}
		if len(frac) > maxFrac {
			return "", "", fmt.Errorf("at most %d decimal places are allowed", maxFrac)
		}
	}
	return whole, frac, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String renders the shortest exact decimal ("2", "0.5", "0.25"), which
// ParseGPU reads back to the same value. Negative amounts only arise from
// Sub and are rendered with a sign.
func (g GPU) String() string {
	sign := ""
	u := uint64(g)
	if g < 0 {
		sign = "-"
		u = -u
	}
	whole, frac := u/100, u%100
	switch {
	case frac == 0:
		return fmt.Sprintf("%s%d", sign, whole)
	case frac%10 == 0:
		return fmt.Sprintf("%s%d.%d", sign, whole, frac/10)
	default:
		return fmt.Sprintf("%s%d.%02d", sign, whole, frac)
	}
}

// IsWhole reports whether g is a whole number of devices; dedicated-tier
// tenants may only hold whole GPUs because KAI does not isolate GPU memory.
func (g GPU) IsWhole() bool { return g%OneGPU == 0 }

// KAI returns the amount in devices, the unit of KAI queue gpu fields.
// Dividing the exact integer once yields the float64 nearest the decimal,
// i.e. the same value a "0.1" literal would parse to.
func (g GPU) KAI() float64 { return float64(g) / float64(OneGPU) }
