package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Node pools. Every node carries the label gpuplane.io/pool=<pool> (nodes
// without it count as SharedPool); a DEDICATED team's pool is fenced by the
// taint gpuplane.io/pool=<pool>:NoSchedule, so only pods that tolerate it
// (its own virtual clusters' pods, through the vCluster values) land there.
const (
	// SharedPool is the pool SHARED teams share.
	SharedPool = "shared"
	// dedicatedPoolPrefix starts the default pool of a DEDICATED team.
	dedicatedPoolPrefix = "dedicated-"
	// sandboxPoolPrefix starts the default slice of a SANDBOX team.
	sandboxPoolPrefix = "sandbox-"
)

// SandboxPool is the default node slice of a SANDBOX team:
// "sandbox-<team>", shortened like DedicatedPool.
func SandboxPool(team string) string {
	if len(sandboxPoolPrefix)+len(team) <= 63 {
		return sandboxPoolPrefix + team
	}
	sum := sha256.Sum256([]byte(team))
	return sandboxPoolPrefix + strings.TrimRight(team[:46], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// DedicatedPool is the default node pool of a DEDICATED team:
// "dedicated-<team>". Team ids may be 63 characters, the limit of a label
// value, so a longer result keeps its first 44 characters of the id and
// appends 8 hex digits of the id's SHA-256, which keeps it unique.
// Migration 000004 computes the same value in SQL for existing teams.
func DedicatedPool(team string) string {
	if len(dedicatedPoolPrefix)+len(team) <= 63 {
		return dedicatedPoolPrefix + team
	}
	sum := sha256.Sum256([]byte(team))
	return dedicatedPoolPrefix + strings.TrimRight(team[:44], "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// CheckPool reports why pool cannot name a DEDICATED team's node pool, or
// "" when it can: it becomes a label value and a taint value, so it must be
// a DNS-1123 label, and it cannot be the shared pool.
func CheckPool(pool string) string {
	if pool == SharedPool {
		return `"shared" is the pool of SHARED teams; a DEDICATED team needs a pool of its own`
	}
	return CheckID(pool)
}
