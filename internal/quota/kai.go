package quota

import "math/big"

// KAI Scheduler queue units: gpu in devices, cpu in millicores and memory in
// megabytes of 10^6 bytes (not MiB). This file is the one place platform
// quantities and KAI's meet, in both directions:
//
//   - platform -> KAI (ToKAI): quotas and limits written into Queue specs
//     round DOWN, so a queue never guarantees or allows more than was
//     approved;
//   - KAI -> platform (AllocatedFromKAI): what a queue reports as allocated
//     rounds UP, so usage is never understated (a shrink must not slip under
//     what really runs). status.allocated is not in queue units: it is an
//     ordinary Kubernetes resource list (GPU devices, CPU cores, memory
//     bytes), which internal/hostcluster parses into Decimals.
const bytesPerKAIMegabyte = 1_000_000

// KAIUnlimited is KAI's "no quota / no limit" value.
const KAIUnlimited = -1

// ToKAI converts a quota or limit to KAI queue units. A negative amount
// means unlimited and becomes KAIUnlimited (-1) for that resource.
//
// Memory is rounded down to whole megabytes: the queue must never guarantee
// or allow more than the platform granted, and losing under 1 MB of a quota
// is harmless, while rounding up would let the sum of queue quotas exceed a
// parent that was checked exactly. 64Gi = 68719.476736 MB becomes 68719.
func ToKAI(r Resources) (gpu, cpuMillis, memoryMB float64) {
	unlimitedOr := func(v int64, f func() float64) float64 {
		if v < 0 {
			return KAIUnlimited
		}
		return f()
	}
	return unlimitedOr(int64(r.GPU), r.GPU.KAI),
		unlimitedOr(r.CPUMillis, func() float64 { return float64(r.CPUMillis) }),
		unlimitedOr(r.MemoryBytes, func() float64 { return float64(KAIMemoryMB(r.MemoryBytes)) })
}

// KAIMemoryMB is bytes in whole KAI megabytes, rounded down (see ToKAI).
func KAIMemoryMB(bytes int64) int64 {
	if bytes <= 0 {
		return 0
	}
	return bytes / bytesPerKAIMegabyte
}

// Decimal is an exact decimal amount, Unscaled x 10^Exponent: how a
// Kubernetes resource.Quantity holds "1505m" (1505, -3) or "64Gi", so that
// reading one needs no floating point.
type Decimal struct {
	Unscaled *big.Int
	Exponent int32
}

// DecimalOf is unscaled x 10^exponent.
func DecimalOf(unscaled int64, exponent int32) Decimal {
	return Decimal{Unscaled: big.NewInt(unscaled), Exponent: exponent}
}

// AllocatedFromKAI converts what a KAI queue reports as allocated to
// platform units. KAI's queue controller fills status.allocated with the
// summed requests of the queue's running pods as an ordinary Kubernetes
// resource list — GPUs in devices, CPU in cores, memory in bytes — not in
// the queue units ToKAI writes. Each amount rounds UP to the platform's
// unit (a hundredth of a GPU, a millicore, a byte): an allocation read too
// low would let a shrink slip under what is really running. Negative
// amounts, which KAI does not report, read as zero; amounts beyond the
// platform's maxima read as the maxima.
func AllocatedFromKAI(gpuDevices, cpuCores, memoryBytes Decimal) Resources {
	return Resources{
		GPU:         GPU(ceilToUnit(gpuDevices, -2, int64(MaxGPU))),
		CPUMillis:   ceilToUnit(cpuCores, -3, MaxCPUMillis),
		MemoryBytes: ceilToUnit(memoryBytes, 0, MaxMemoryBytes),
	}
}

// maxDecimalShift bounds the powers of ten ceilToUnit computes: 10^40 of
// any unit is far beyond every limit, and 10^-40 of one rounds up to one.
const maxDecimalShift = 40

// ceilToUnit is d in units of 10^unitExponent, rounded up, within [0, limit].
func ceilToUnit(d Decimal, unitExponent int32, limit int64) int64 {
	if d.Unscaled == nil || d.Unscaled.Sign() <= 0 {
		return 0
	}
	shift := int64(d.Exponent) - int64(unitExponent)
	n := new(big.Int).Set(d.Unscaled)
	switch {
	case shift > maxDecimalShift:
		return limit
	case shift >= 0:
		n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(shift), nil))
	default:
		if -shift > maxDecimalShift+int64(len(n.String())) {
			return 1 // far below one unit, but not zero
		}
		var rem big.Int
		n.QuoRem(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(-shift), nil), &rem)
		if rem.Sign() != 0 {
			n.Add(n, big.NewInt(1))
		}
	}
	if !n.IsInt64() || n.Int64() > limit {
		return limit
	}
	return n.Int64()
}
