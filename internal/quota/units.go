package quota

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// FormatGPU renders an amount of GPU with its unit ("2 GPU", "0.25 GPU").
func FormatGPU(g GPU) string { return g.String() + " GPU" }

// FormatCPU renders whole cores as "16 CPU" and anything else in millicores
// ("500m", "2500m"), which is exact and what Kubernetes users type.
func FormatCPU(millis int64) string {
	if millis%1000 == 0 {
		return strconv.FormatInt(millis/1000, 10) + " CPU"
	}
	return strconv.FormatInt(millis, 10) + "m"
}

// ParseCPU reads cores ("16", "2.5", "0.001") or millicores ("500m"). The
// result must be a whole number of millicores: KAI and Kubernetes cannot
// express less.
func ParseCPU(s string) (int64, error) {
	num, milli := strings.CutSuffix(s, "m")
	whole, frac, err := splitDecimal(num, 3)
	if err != nil {
		return 0, fmt.Errorf("%q is not a CPU amount: %w (use e.g. \"16\", \"2.5\" or \"500m\")", s, err)
	}
	mult := int64(1000)
	if milli {
		mult = 1
	}
	r := decimalTimes(whole, frac, mult)
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of millicores", s)
	}
	if r.Num().Cmp(big.NewInt(MaxCPUMillis)) > 0 {
		return 0, fmt.Errorf("%q is more than the maximum of %s", s, FormatCPU(MaxCPUMillis))
	}
	return r.Num().Int64(), nil
}

type memUnit struct {
	suffix string
	bytes  int64
}

// memUnits is ordered largest first so formatting picks the biggest exact
// unit. "k" is lower case as in Kubernetes; "K" is accepted by no one there
// and refused here too.
var memUnits = []memUnit{
	{"Ei", 1 << 60}, {"Pi", 1 << 50}, {"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10},
	{"E", 1e18}, {"P", 1e15}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3},
}

// FormatMemory renders bytes exactly, in the largest unit that divides them
// ("64Gi", "512Mi", "1G"); amounts that are no multiple of 1000 or 1024 stay
// plain bytes. Exactness beats brevity here: the text is shown next to
// budgets, and "about 64Gi" would hide the byte that makes a request not fit.
// The output is accepted by ParseMemory and by Kubernetes.
func FormatMemory(b int64) string {
	if b == 0 {
		return "0"
	}
	sign := ""
	u := b
	if b < 0 {
		if b == -b { // MinInt64 has no positive counterpart
			return strconv.FormatInt(b, 10)
		}
		sign, u = "-", -b
	}
	best := memUnit{"", 1}
	for _, mu := range memUnits {
		if u%mu.bytes == 0 && mu.bytes > best.bytes {
			best = mu
		}
	}
	return sign + strconv.FormatInt(u/best.bytes, 10) + best.suffix
}

// ParseMemory reads a Kubernetes-style byte quantity: a non-negative decimal
// with an optional binary (Ki..Ei) or decimal (k..E) suffix, e.g. "64Gi",
// "512Mi", "1G", "1.5Gi", "1000". The amount must come to a whole number of
// bytes. Exponent notation, milli-bytes and signs are refused: they are legal
// Kubernetes quantities but never what a person means for a quota.
func ParseMemory(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, mu := range memUnits {
		if n, ok := strings.CutSuffix(s, mu.suffix); ok {
			num, mult = n, mu.bytes
			break
		}
	}
	whole, frac, err := splitDecimal(num, 18)
	if err != nil {
		return 0, fmt.Errorf("%q is not a memory amount: %w (use e.g. \"64Gi\", \"512Mi\" or \"1G\")", s, err)
	}
	r := decimalTimes(whole, frac, mult)
	if !r.IsInt() {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	if r.Num().Cmp(big.NewInt(MaxMemoryBytes)) > 0 {
		return 0, fmt.Errorf("%q is more than the maximum of %s", s, FormatMemory(MaxMemoryBytes))
	}
	return r.Num().Int64(), nil
}

// decimalTimes returns whole.frac * mult exactly. The digit runs have been
// checked by splitDecimal, so parsing cannot fail.
func decimalTimes(whole, frac string, mult int64) *big.Rat {
	r, _ := new(big.Rat).SetString(whole + "." + frac + "0")
	return r.Mul(r, new(big.Rat).SetInt64(mult))
}
