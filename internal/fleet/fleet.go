// Package fleet holds the host clusters: the Kubernetes clusters with GPUs
// that host virtual clusters. Platform admins register them (how to reach
// each one, the isolation tiers it takes, labels such as region or GPU
// model); the worker observes them (health, Kubernetes and KAI versions,
// capacity per node pool) and records what it saw here; approvals place
// each new virtual cluster on one of them (placement.go). The package owns
// the host_clusters table and knows nothing of gRPC, HTTP or Kubernetes.
package fleet

import (
	"slices"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// DefaultHostCluster is the host cluster migration 000008 creates for the
// cluster an install was configured with before there were many: the one
// gpuplane runs in (or its --kubeconfig).
const DefaultHostCluster = "default"

// DefaultKubeconfigKey is the Secret key a kubeconfig is read from when a
// host cluster names none.
const DefaultKubeconfigKey = "kubeconfig"

// Connection says how gpuplane reaches a host cluster.
type Connection struct {
	// InCluster: the cluster gpuplane runs in, or the one its --kubeconfig
	// names. At most one host cluster is reached this way.
	InCluster bool
	// Secret and Key name a kubeconfig in a Secret of gpuplane's own
	// namespace (on the cluster gpuplane runs in).
	Secret, Key string
}

// HostCluster is a stored host cluster: what an admin set, and what the
// worker last observed.
type HostCluster struct {
	ID, DisplayName string
	Connection      Connection
	// Tiers are the isolation tiers whose virtual clusters it takes.
	Tiers []string
	// Labels describe it for placement (region, gpu-model, ...).
	Labels map[string]string
	// Cordoned keeps its virtual clusters but places no new one on it.
	Cordoned         bool
	Version          int64
	Created, Updated time.Time
	Status           Status
}

// Status is what the worker last observed of a host cluster.
type Status struct {
	Reachable         bool
	KubernetesVersion string
	// KAIVersion is the version KAI Scheduler's installation declares
	// (hostcluster.Probe says where it is read); "" when not found.
	KAIVersion string
	Pools      []PoolStatus
	Conditions []virtualcluster.Condition
	Message    string
	// ObserveTime is the last observation; nil when none happened yet.
	ObserveTime *time.Time
	// UnreachableSince is when it was first seen unreachable in the
	// current outage; nil while reachable.
	UnreachableSince *time.Time
}

// PoolStatus is one node pool as observed: its nodes' allocatable
// resources.
type PoolStatus struct {
	Name     string
	Nodes    int
	Capacity quota.Resources
}

// Name is the API resource name.
func (h HostCluster) Name() string { return names.HostCluster(h.ID) }

// Etag of the current version (status changes do not move it).
func (h HostCluster) Etag() string { return store.Etag(h.Version, h.Updated) }

// Takes reports whether the host cluster takes virtual clusters of tier.
func (h HostCluster) Takes(tier string) bool { return slices.Contains(h.Tiers, tier) }

// Observed reports whether the worker has observed it at least once.
func (h HostCluster) Observed() bool { return h.Status.ObserveTime != nil }

// PoolCapacity is the observed capacity of one node pool (zero when the
// cluster has no node in it).
func (h HostCluster) PoolCapacity(pool string) quota.Resources {
	for _, p := range h.Status.Pools {
		if p.Name == pool {
			return p.Capacity
		}
	}
	return quota.Resources{}
}

// Matches reports whether the host cluster carries every label of want.
func (h HostCluster) Matches(want map[string]string) bool {
	for k, v := range want {
		if have, ok := h.Labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// missingLabels lists the labels of want the host cluster lacks, as k=v.
func (h HostCluster) missingLabels(want map[string]string) []string {
	var out []string
	for k, v := range want {
		if have, ok := h.Labels[k]; !ok || have != v {
			out = append(out, k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

type secretRefJSON struct {
	Name string `json:"name,omitempty"`
	Key  string `json:"key,omitempty"`
}

type poolStatusJSON struct {
	Name     string           `json:"name,omitempty"`
	Nodes    int32            `json:"nodes,omitempty"`
	Capacity *jsonshape.Quota `json:"capacity,omitempty"`
}

type statusJSON struct {
	Reachable         bool             `json:"reachable,omitempty"`
	KubernetesVersion string           `json:"kubernetes_version,omitempty"`
	KAIVersion        string           `json:"kai_version,omitempty"`
	NodePools         []poolStatusJSON `json:"node_pools,omitempty"`
	Message           string           `json:"message,omitempty"`
	ObserveTime       *jsonshape.Time  `json:"observe_time,omitempty"`
	UnreachableSince  *jsonshape.Time  `json:"unreachable_since,omitempty"`
}

// snapshotJSON is the API's HostCluster message (status without the
// conditions and counts, which change with every observation).
type snapshotJSON struct {
	Name             string            `json:"name,omitempty"`
	DisplayName      string            `json:"display_name,omitempty"`
	InCluster        *struct{}         `json:"in_cluster,omitempty"`
	KubeconfigSecret *secretRefJSON    `json:"kubeconfig_secret,omitempty"`
	Tiers            []string          `json:"tiers,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`
	Cordoned         bool              `json:"cordoned,omitempty"`
	Status           *statusJSON       `json:"status,omitempty"`
	Etag             string            `json:"etag,omitempty"`
	CreateTime       *jsonshape.Time   `json:"create_time,omitempty"`
	UpdateTime       *jsonshape.Time   `json:"update_time,omitempty"`
}

// Snapshot renders h as the API does, for audit events.
func (h HostCluster) Snapshot() any {
	s := snapshotJSON{Name: h.Name(), DisplayName: h.DisplayName, Tiers: h.Tiers, Labels: h.Labels, Cordoned: h.Cordoned,
		Etag: h.Etag(), CreateTime: &jsonshape.Time{Time: h.Created}, UpdateTime: &jsonshape.Time{Time: h.Updated}}
	if h.Connection.InCluster {
		s.InCluster = &struct{}{}
	} else {
		s.KubeconfigSecret = &secretRefJSON{Name: h.Connection.Secret, Key: h.Connection.Key}
	}
	st := h.Status
	sj := &statusJSON{Reachable: st.Reachable, KubernetesVersion: st.KubernetesVersion, KAIVersion: st.KAIVersion,
		Message: st.Message, ObserveTime: jsonshape.At(st.ObserveTime), UnreachableSince: jsonshape.At(st.UnreachableSince)}
	for _, p := range st.Pools {
		sj.NodePools = append(sj.NodePools, poolStatusJSON{Name: p.Name, Nodes: int32(p.Nodes), Capacity: jsonshape.QuotaOf(p.Capacity)})
	}
	if h.Observed() {
		s.Status = sj
	}
	return s
}

// describeCluster names a host cluster with its labels, for messages.
func describeCluster(h HostCluster) string {
	if len(h.Labels) == 0 {
		return h.Name()
	}
	var l []string
	for k, v := range h.Labels {
		l = append(l, k+"="+v)
	}
	slices.Sort(l)
	return h.Name() + " (" + strings.Join(l, ", ") + ")"
}
