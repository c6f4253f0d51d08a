package quota

import (
	"iter"
	"math"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Resource names one kind of quantity. The values are the names users see in
// shortfall reports and the KAI queue resource keys.
type Resource string

// Resources.
const (
	ResourceGPU    Resource = "gpu"
	ResourceCPU    Resource = "cpu"
	ResourceMemory Resource = "memory"
)

// AllResources is the fixed reporting order: GPU first because it is the
// scarce resource everyone asks about.
var AllResources = [...]Resource{ResourceGPU, ResourceCPU, ResourceMemory}

// Field is the proto field name of the resource inside a quota message.
func (r Resource) Field() string {
	switch r {
	case ResourceGPU:
		return "gpu"
	case ResourceCPU:
		return "cpu_millis"
	case ResourceMemory:
		return "memory_bytes"
	}
	return string(r)
}

// Format renders a raw amount of this resource for humans, with its unit.
func (r Resource) Format(raw int64) string {
	switch r {
	case ResourceGPU:
		return FormatGPU(GPU(raw))
	case ResourceCPU:
		return FormatCPU(raw)
	case ResourceMemory:
		return FormatMemory(raw)
	}
	return "?"
}

const (
	// MaxCPUMillis is one million cores.
	MaxCPUMillis int64 = 1_000_000_000
	// MaxMemoryBytes is 1 EiB. Like MaxGPU it leaves 8x headroom below
	// int64 overflow when quotas are summed.
	MaxMemoryBytes int64 = 1 << 60
)

// Resources is a quota, budget, capacity or allocation.
type Resources struct {
	GPU         GPU
	CPUMillis   int64
	MemoryBytes int64
}

// Get returns the raw amount of one resource (centi-GPUs, millicores, bytes).
func (r Resources) Get(k Resource) int64 {
	switch k {
	case ResourceGPU:
		return int64(r.GPU)
	case ResourceCPU:
		return r.CPUMillis
	case ResourceMemory:
		return r.MemoryBytes
	}
	return 0
}

// With returns a copy of r with one resource set to a raw amount.
func (r Resources) With(k Resource, raw int64) Resources {
	switch k {
	case ResourceGPU:
		r.GPU = GPU(raw)
	case ResourceCPU:
		r.CPUMillis = raw
	case ResourceMemory:
		r.MemoryBytes = raw
	}
	return r
}

// All yields every resource with its raw amount in AllResources order.
func (r Resources) All() iter.Seq2[Resource, int64] {
	return func(yield func(Resource, int64) bool) {
		for _, k := range AllResources {
			if !yield(k, r.Get(k)) {
				return
			}
		}
	}
}

// Add saturates instead of wrapping: a sum that overflowed to a negative
// number would make an over-full level look empty and approve a request.
func (r Resources) Add(o Resources) Resources {
	return Resources{
		GPU:         GPU(satAdd(int64(r.GPU), int64(o.GPU))),
		CPUMillis:   satAdd(r.CPUMillis, o.CPUMillis),
		MemoryBytes: satAdd(r.MemoryBytes, o.MemoryBytes),
	}
}

// Sub may go negative (e.g. free = capacity - used on an over-committed
// level); it saturates for the same reason as Add.
func (r Resources) Sub(o Resources) Resources {
	return Resources{
		GPU:         GPU(satSub(int64(r.GPU), int64(o.GPU))),
		CPUMillis:   satSub(r.CPUMillis, o.CPUMillis),
		MemoryBytes: satSub(r.MemoryBytes, o.MemoryBytes),
	}
}

// Fits reports whether every resource of r is at most the one in within.
func (r Resources) Fits(within Resources) bool {
	return r.GPU <= within.GPU && r.CPUMillis <= within.CPUMillis && r.MemoryBytes <= within.MemoryBytes
}

// IsZero reports whether r grants nothing.
func (r Resources) IsZero() bool { return r == Resources{} }

// Validate checks signs and bounds. field is the message path of the quota
// (e.g. "quota" or "team.quota"); violations name the sub-field, as in
// "quota.gpu".
func (r Resources) Validate(field string) errs.Violations {
	var v errs.Violations
	limits := Resources{GPU: MaxGPU, CPUMillis: MaxCPUMillis, MemoryBytes: MaxMemoryBytes}
	for k, raw := range r.All() {
		path := k.Field()
		if field != "" {
			path = field + "." + path
		}
		switch limit := limits.Get(k); {
		case raw < 0:
			v.Add(path, "must not be negative (got %s)", k.Format(raw))
		case raw > limit:
			v.Add(path, "must be at most %s (got %s)", k.Format(limit), k.Format(raw))
		}
	}
	return v
}

func satAdd(a, b int64) int64 {
	s := a + b
	// Overflow happened iff both operands have the same sign and the sum's
	// sign differs from it.
	if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
		if a >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}
