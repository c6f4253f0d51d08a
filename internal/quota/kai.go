package quota

import "math"

// KAI Scheduler queue units: gpu in devices, cpu in millicores and memory in
// megabytes of 10^6 bytes (not MiB). This file is the one place platform
// quantities and KAI's meet, in both directions:
//
//   - platform -> KAI (ToKAI): quotas and limits written into Queue specs
//     round DOWN, so a queue never guarantees or allows more than was
//     approved;
//   - KAI -> platform (AllocatedFromKAI): what a queue reports as allocated
//     rounds UP, so usage is never understated (a shrink must not slip under
//     what really runs).
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

// AllocatedFromKAI converts what KAI reports as allocated (queue
// status.allocated) back to platform units, rounding UP: an allocation read
// too low would let a shrink slip under what is really running. Negative or
// NaN inputs, which KAI does not report for allocations, read as zero.
func AllocatedFromKAI(gpu, cpuMillis, memoryMB float64) Resources {
	return Resources{
		GPU:         GPU(ceilClamp(gpu*float64(OneGPU), int64(MaxGPU))),
		CPUMillis:   ceilClamp(cpuMillis, MaxCPUMillis),
		MemoryBytes: ceilClamp(memoryMB*bytesPerKAIMegabyte, MaxMemoryBytes),
	}
}

// ceilClamp tolerates float noise from the unit conversion: 0.29 devices is
// 28.999999999999996 centi-GPUs after the multiplication, which must read as
// 29, not 30.
func ceilClamp(v float64, limit int64) int64 {
	if !(v > 0) { // also catches NaN
		return 0
	}
	if v >= float64(limit) {
		return limit
	}
	r := math.Round(v)
	if math.Abs(v-r) <= 1e-12*math.Max(1, v) {
		return int64(r)
	}
	return int64(math.Ceil(v))
}
