package quota

import (
	"fmt"
	"math"
	"math/bits"
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Level is a layer of the quota hierarchy that a quota is carved from.
type Level string

// Levels, top down.
const (
	LevelCluster    Level = "cluster"
	LevelDepartment Level = "department"
	LevelTeam       Level = "team"
)

// Node is one ancestor of the quota being checked.
type Node struct {
	Level Level
	Name  string
	// Capacity is what this level may hand out: the cluster's (overcommitted)
	// capacity, a department's budget or a team's quota.
	Capacity Resources
	// Used is what this level has already handed out to its children, NOT
	// counting the quota being created or changed, so that a change is
	// checked as "others + new" rather than "others + old + new".
	Used Resources
}

// Shortfall is one resource at one level that cannot take the new quota.
type Shortfall struct {
	Level    Level
	Name     string
	Resource Resource
	// Human text with units, e.g. "4 GPU", "500m", "64Gi".
	Requested, Free, Capacity, Used string
	// Raw amounts in centi-GPUs, millicores or bytes. FreeRaw is negative
	// when the level is already over capacity (e.g. nodes were removed).
	RequestedRaw, FreeRaw, CapacityRaw, UsedRaw int64
}

func (s Shortfall) String() string {
	return fmt.Sprintf("%s %q: %s: requested %s but only %s of %s is free (%s already assigned)",
		s.Level, s.Name, s.Resource, s.Requested, s.Free, s.Capacity, s.Used)
}

// CheckFit checks a new quota against every level it is carved from. path
// runs top-down (cluster first) and ends at the direct parent. At each level
// Used + newQuota must be within Capacity for each resource. Every violation
// is returned, top-down and in AllResources order, so a user learns in one
// round trip everything that has to change; nil means it fits. Exactly full
// fits.
func CheckFit(path []Node, newQuota Resources) []Shortfall {
	return checkFit(path, Resources{}, newQuota, false)
}

// CheckFitChange is CheckFit for a change from oldQuota to newQuota: only
// resources that grow are checked. Without this a level that is already
// over capacity (a node left the cluster, a budget was cut) would block
// every change, even one that gives resources back or leaves that resource
// untouched.
func CheckFitChange(path []Node, oldQuota, newQuota Resources) []Shortfall {
	return checkFit(path, oldQuota, newQuota, true)
}

func checkFit(path []Node, oldQuota, newQuota Resources, onlyGrowth bool) []Shortfall {
	var out []Shortfall
	for _, n := range path {
		for k, want := range newQuota.All() {
			if onlyGrowth && want <= oldQuota.Get(k) {
				continue
			}
			used, capacity := n.Used.Get(k), n.Capacity.Get(k)
			if satAdd(used, want) <= capacity {
				continue
			}
			free := satSub(capacity, used)
			out = append(out, Shortfall{
				Level:        n.Level,
				Name:         n.Name,
				Resource:     k,
				Requested:    k.Format(want),
				Free:         k.Format(max(free, 0)),
				Capacity:     k.Format(capacity),
				Used:         k.Format(used),
				RequestedRaw: want,
				FreeRaw:      free,
				CapacityRaw:  capacity,
				UsedRaw:      used,
			})
		}
	}
	return out
}

// FitError turns shortfalls into the domain error (nil when there are
// none). field is the message path of the quota being requested, e.g.
// "virtual_cluster.quota"; each shortfall becomes a violation on its
// resource's sub-field. The metadata names the first (highest) level that
// is short, which is the one a user must talk to.
func FitError(field string, shortfalls []Shortfall) error {
	if len(shortfalls) == 0 {
		return nil
	}
	e := errs.New(errs.KindFailedPrecondition, errs.ReasonQuotaExceeded,
		"the requested quota does not fit in %s", describeLevels(shortfalls))
	for _, s := range shortfalls {
		e.Violations = append(e.Violations, errs.FieldViolation{
			Field: joinField(field, s.Resource.Field()), Description: s.String(),
		})
	}
	first := shortfalls[0]
	return e.With("level", string(first.Level)).With("name", first.Name).With("resource", string(first.Resource))
}

func describeLevels(shortfalls []Shortfall) string {
	var names []string
	seen := map[string]bool{}
	for _, s := range shortfalls {
		n := fmt.Sprintf("%s %q", s.Level, s.Name)
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return strings.Join(names, ", ")
}

func joinField(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// BelowAllocation is one resource whose new quota is under what workloads
// currently hold.
type BelowAllocation struct {
	Resource                   Resource
	Requested, Allocated       string
	RequestedRaw, AllocatedRaw int64
}

func (b BelowAllocation) String() string {
	return fmt.Sprintf("new %s quota %s is below the %s currently allocated", b.Resource, b.Requested, b.Allocated)
}

// ShrinkCheck refuses to set a quota below current allocation unless the
// requester accepted that KAI may preempt running workloads to get there:
// KAI itself will happily accept the smaller queue and start reclaiming,
// which must never be a surprise. nil means the shrink may go ahead.
func ShrinkCheck(newQuota, allocated Resources, acceptPreemption bool) []BelowAllocation {
	if acceptPreemption {
		return nil
	}
	var out []BelowAllocation
	for k, want := range newQuota.All() {
		if have := allocated.Get(k); want < have {
			out = append(out, BelowAllocation{
				Resource:     k,
				Requested:    k.Format(want),
				Allocated:    k.Format(have),
				RequestedRaw: want,
				AllocatedRaw: have,
			})
		}
	}
	return out
}

// ShrinkError turns ShrinkCheck's result into the domain error (nil when
// empty); field is as for FitError.
func ShrinkError(field string, below []BelowAllocation) error {
	if len(below) == 0 {
		return nil
	}
	e := errs.New(errs.KindFailedPrecondition, errs.ReasonBelowAllocation,
		"the new quota is below what running workloads currently use; free resources first, or accept preemption")
	for _, b := range below {
		e.Violations = append(e.Violations, errs.FieldViolation{
			Field: joinField(field, b.Resource.Field()), Description: b.String(),
		})
	}
	return e.With("resource", string(below[0].Resource))
}

// overcommitScale is the precision of overcommit ratios: 1/10000.
const overcommitScale = 10_000

// MaxOvercommit bounds the overcommit ratio; beyond it a quota says nothing.
const MaxOvercommit = 100.0

// ClusterCapacity is the capacity the platform may hand out at the cluster
// level: host capacity times the overcommit ratio, rounded down per
// resource. A ratio of 0 means "not configured" and is taken as 1.0.
//
// The ratio is first fixed to 4 decimal places and then applied in integer
// arithmetic, because float products drift below the exact answer
// (100 * 1.15 == 114.99999999999999) and a floor would then lose a whole
// unit.
func ClusterCapacity(host Resources, overcommit float64) (Resources, error) {
	if overcommit == 0 {
		overcommit = 1
	}
	if math.IsNaN(overcommit) || overcommit <= 0 || overcommit > MaxOvercommit {
		return Resources{}, fmt.Errorf("overcommit ratio %v must be greater than 0 and at most %v", overcommit, MaxOvercommit)
	}
	if v := host.Validate("host_capacity"); len(v) > 0 {
		return Resources{}, v.Err()
	}
	num := uint64(math.Round(overcommit * overcommitScale))
	if num == 0 {
		return Resources{}, fmt.Errorf("overcommit ratio %v is below the precision of 1/%d", overcommit, overcommitScale)
	}
	var out Resources
	for k, v := range host.All() {
		out = out.With(k, scaleDown(v, num, overcommitScale))
	}
	return out, nil
}

// scaleDown returns floor(v * num / den) for v >= 0 without overflow,
// saturating at MaxInt64.
func scaleDown(v int64, num, den uint64) int64 {
	hi, lo := bits.Mul64(uint64(v), num)
	if hi >= den {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, den)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}
