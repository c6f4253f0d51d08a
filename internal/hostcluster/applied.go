package hostcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A resync of a virtual cluster nothing has touched since its last Apply
// should cost neither writes nor requests: re-applying its objects with
// server-side apply, probing the guardrails and reading the Helm release
// is tens of milliseconds of API server work, which for 10,000 virtual
// clusters would not fit a resync interval. Observe reads from watch
// caches (cache.go), so the check below is made in memory.
//
// So the Client remembers, per virtual cluster, what its last successful
// Apply left behind: a fingerprint of the desired state and a version of
// every object it wrote (below). Observe reads the same versions, and
// Unchanged compares them. A version changes with every write that can
// change what the object enforces, by anyone, so a match proves the host
// objects are exactly as Apply left them:
//
//   - the namespace: its resourceVersion (any write; its labels carry the
//     Pod Security level);
//   - queues, the shared admission policies and bindings, the network
//     policy: UID and
//     metadata.generation, which the API server bumps on every spec change
//     (not on status writes, which KAI and the policy type checker make all
//     the time); the UID catches a delete and re-create;
//   - the Helm release: revision, status and values hash of its last record.
//
// What the versions do not cover is not checked by the full Apply either
// (the objects inside the Helm release: Apply leaves an unchanged release
// alone) or is observed anyway (the team's RBAC inside the virtual cluster).
// The one thing only a full Apply re-checks is whether the vCluster control
// plane pod still passes the namespace's Pod Security level
// (checkControlPlaneAdmitted), which changes only with the namespace or the
// release, both covered; as a backstop a full Apply runs again at least every
// fullApplyInterval.

// fullApplyInterval bounds how long Unchanged trusts a record before the
// caller must run a full Apply again.
var fullApplyInterval = time.Hour

// appliedRecord is what the last successful Apply of a virtual cluster left
// on the host.
type appliedRecord struct {
	desired  string            // fingerprint of the desired state
	versions map[string]string // object key -> version (see above)
	at       time.Time
}

// fingerprint identifies everything Apply renders for vc on this Client
// (whose settings never change): the virtual cluster as given (with
// SliceNodes filled in), whether mutating policies are used, and the chart's
// digest.
func (c *Client) fingerprint(ctx context.Context, vc VirtualCluster, mutating bool) (string, error) {
	lc, err := c.loadChart(ctx, vc.ChartVersion)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(vc)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(data)
	fmt.Fprintf(h, "\x00%t\x00%s", mutating, lc.digest)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Object keys in version maps.
const (
	versionNamespace = "namespace"
	versionNetpol    = "networkpolicy"
	versionRelease   = "release"
)

func queueVersionKey(name string) string { return "queue/" + name }

func policyVersionKey(kind string) string { return "admission/" + kind }

// Admission object kinds in version maps.
const (
	vapKind  = "ValidatingAdmissionPolicy"
	vapbKind = "ValidatingAdmissionPolicyBinding"
	mapKind  = "MutatingAdmissionPolicy"
	mapbKind = "MutatingAdmissionPolicyBinding"
)

// specVersion is the version of an object whose spec is what matters.
func specVersion(uid types.UID, generation int64) string {
	return string(uid) + "@" + strconv.FormatInt(generation, 10)
}

// objectVersion is the version of an object any write to which matters.
func objectVersion(uid types.UID, resourceVersion string) string {
	return string(uid) + "@rv" + resourceVersion
}

func releaseStateVersion(r *ReleaseState) string {
	return fmt.Sprintf("%d/%s/%s", r.Revision, r.Status, r.ValuesHash)
}

// remember records a successful Apply.
func (c *Client) remember(vcName, desired string, versions map[string]string) {
	c.appliedMu.Lock()
	defer c.appliedMu.Unlock()
	c.applied[vcName] = appliedRecord{desired: desired, versions: versions, at: time.Now()}
}

func (c *Client) forget(vcName string) {
	c.appliedMu.Lock()
	defer c.appliedMu.Unlock()
	delete(c.applied, vcName)
	delete(c.verified, vcName)
	c.virtualMu.Lock()
	delete(c.virtual, vcName)
	c.virtualMu.Unlock()
}

// Unchanged reports whether the host still holds exactly what this Client's
// last successful Apply of vc wrote, for the same desired state, as o (from
// Observe, just now) shows it (a successful Apply verified the guardrails'
// enforcement): then Apply would write nothing and can be skipped. It is false
// when this Client never applied vc (a new worker process applies
// everything once), when anything differs, and once the record is older
// than fullApplyInterval.
func (c *Client) Unchanged(ctx context.Context, vc VirtualCluster, o Observed) (bool, error) {
	if err := vc.Validate(); err != nil {
		return false, err
	}
	c.appliedMu.Lock()
	rec, ok := c.applied[vc.Name]
	c.appliedMu.Unlock()
	if !ok || time.Since(rec.at) > fullApplyInterval || !maps.Equal(rec.versions, o.versions) {
		return false, nil
	}
	if c.settings.Profile(vc.Tier).OwnScheduler {
		// The slice's nodes are input to the guardrails.
		nodes, err := c.sliceNodes(ctx, vc)
		if err != nil {
			return false, err
		}
		vc.SliceNodes = nodes
	}
	mutating, err := c.MutatingAdmissionPolicySupported()
	if err != nil {
		return false, err
	}
	desired, err := c.fingerprint(ctx, vc, mutating)
	if err != nil {
		return false, err
	}
	return desired == rec.desired, nil
}

// guardrailVersions is the key under which verified guardrails are
// remembered: the versions of the admission objects, in a fixed order.
func guardrailVersions(versions map[string]string, mutating bool) string {
	kinds := guardrailKinds(mutating)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = versions[policyVersionKey(k)]
	}
	return strings.Join(parts, ",")
}

// enforcementVerified reports whether a probe showed the guardrails in
// force for vcName with exactly this key: the same admission objects (UIDs,
// spec generations), namespace and parameters. The API server never
// unloads a policy it enforces while the object stays the same (and an API
// server that restarts admits nothing until it has loaded every policy
// again), so that check need not be repeated.
func (c *Client) enforcementVerified(vcName, key string) bool {
	c.appliedMu.Lock()
	defer c.appliedMu.Unlock()
	return c.verified[vcName] == key
}

func (c *Client) rememberVerified(vcName, key string) {
	c.appliedMu.Lock()
	defer c.appliedMu.Unlock()
	c.verified[vcName] = key
}
