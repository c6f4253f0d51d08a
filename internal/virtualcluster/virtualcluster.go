package virtualcluster

import (
	"time"

	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
)

// MaxIDLength leaves room for the "vc-" prefix of the host namespace and
// leaf queue within a 63-character DNS label.
const MaxIDLength = 60

// Spec is what a team asked for: the desired state.
type Spec struct {
	DisplayName         string
	Quota               quota.Resources
	Limit               *quota.Resources // nil: no limit
	OverQuotaWeight     int32
	Priority            int32
	AllowFractionalGPUs bool
	KubernetesVersion   string
	ChartVersion        string
	ExpireTime          *time.Time
	// Placement is where the create request asked it to run.
	Placement Placement
	// Sleep: it should be asleep (control plane at zero, leaf queue
	// admitting nothing); set by :sleep, cleared by :wake.
	Sleep bool
}

// VirtualCluster is a stored virtual cluster: spec, status and row
// metadata.
type VirtualCluster struct {
	// UID names this incarnation: the id may be taken again once this one
	// is gone.
	UID                string
	ID, Team           string
	Spec               Spec
	Phase              Phase
	Conditions         []Condition
	Generation         int64
	ObservedGeneration int64
	Endpoint           string
	StatusMessage      string
	Allocated          quota.Resources
	// HostCluster is the id of the host cluster it runs on, chosen when
	// its create request was approved ("" until then).
	HostCluster      string
	Version          int64
	Created, Updated time.Time
}

// Name is the API resource name.
func (v VirtualCluster) Name() string { return names.VirtualCluster(v.Team, v.ID) }

// Etag of the current version.
func (v VirtualCluster) Etag() string { return store.Etag(v.Version, v.Updated) }

// SpecJSON is the API's VirtualClusterSpec message.
type SpecJSON struct {
	DisplayName         string           `json:"display_name,omitempty"`
	Quota               *jsonshape.Quota `json:"quota,omitempty"`
	Limit               *jsonshape.Quota `json:"limit,omitempty"`
	OverQuotaWeight     int32            `json:"over_quota_weight,omitempty"`
	Priority            int32            `json:"priority,omitempty"`
	AllowFractionalGPUs bool             `json:"allow_fractional_gpus,omitempty"`
	KubernetesVersion   string           `json:"kubernetes_version,omitempty"`
	ChartVersion        string           `json:"chart_version,omitempty"`
	ExpireTime          *jsonshape.Time  `json:"expire_time,omitempty"`
	Placement           *placementJSON   `json:"placement,omitempty"`
	Sleep               bool             `json:"sleep,omitempty"`
}

// JSON renders the spec as the API does.
func (s Spec) JSON() *SpecJSON {
	return &SpecJSON{
		DisplayName: s.DisplayName, Quota: jsonshape.QuotaOf(s.Quota), Limit: jsonshape.QuotaPtr(s.Limit),
		OverQuotaWeight: s.OverQuotaWeight, Priority: s.Priority, AllowFractionalGPUs: s.AllowFractionalGPUs,
		KubernetesVersion: s.KubernetesVersion, ChartVersion: s.ChartVersion, ExpireTime: jsonshape.At(s.ExpireTime),
		Placement: s.Placement.json(), Sleep: s.Sleep,
	}
}

// Spec reads a stored spec back (request payloads).
func (j *SpecJSON) Spec() (Spec, error) {
	if j == nil {
		return Spec{}, nil
	}
	s := Spec{DisplayName: j.DisplayName, OverQuotaWeight: j.OverQuotaWeight, Priority: j.Priority,
		AllowFractionalGPUs: j.AllowFractionalGPUs, KubernetesVersion: j.KubernetesVersion, ChartVersion: j.ChartVersion,
		Placement: j.Placement.placement()}
	var err error
	if s.Quota, err = j.Quota.Resources(); err != nil {
		return s, err
	}
	if j.Limit != nil {
		l, err := j.Limit.Resources()
		if err != nil {
			return s, err
		}
		s.Limit = &l
	}
	if j.ExpireTime != nil {
		t := j.ExpireTime.Time
		s.ExpireTime = &t
	}
	return s, nil
}

type statusJSON struct {
	Phase              Phase            `json:"phase,omitempty"`
	Conditions         []conditionJSON  `json:"conditions,omitempty"`
	ObservedGeneration jsonshape.Int64  `json:"observed_generation,omitempty"`
	Endpoint           string           `json:"endpoint,omitempty"`
	Message            string           `json:"message,omitempty"`
	Allocated          *jsonshape.Quota `json:"allocated,omitempty"`
	HostCluster        string           `json:"host_cluster,omitempty"`
}

// Snapshot is the virtual cluster as the API renders it (the
// VirtualCluster message), for audit events.
type Snapshot struct {
	Name       string          `json:"name,omitempty"`
	Spec       *SpecJSON       `json:"spec,omitempty"`
	Status     *statusJSON     `json:"status,omitempty"`
	Generation jsonshape.Int64 `json:"generation,omitempty"`
	Etag       string          `json:"etag,omitempty"`
	CreateTime *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders v for the audit log.
func (v VirtualCluster) Snapshot() *Snapshot {
	return &Snapshot{
		Name: v.Name(),
		Spec: v.Spec.JSON(),
		Status: &statusJSON{
			Phase: v.Phase, Conditions: conditionsJSON(v.Conditions), ObservedGeneration: jsonshape.Int64(v.ObservedGeneration),
			Endpoint: v.Endpoint, Message: v.StatusMessage, Allocated: jsonshape.QuotaOf(v.Allocated),
			HostCluster: hostClusterName(v.HostCluster),
		},
		Generation: jsonshape.Int64(v.Generation),
		Etag:       v.Etag(),
		CreateTime: &jsonshape.Time{Time: v.Created},
		UpdateTime: &jsonshape.Time{Time: v.Updated},
	}
}

// WithMessage returns the snapshot with status.message replaced (the
// drift-repair audit event names what was repaired).
func (s *Snapshot) WithMessage(msg string) *Snapshot {
	c := *s
	st := *s.Status
	st.Message = msg
	c.Status = &st
	return &c
}

// hostClusterName is the resource name of a host cluster id ("" stays "").
func hostClusterName(id string) string {
	if id == "" {
		return ""
	}
	return names.HostCluster(id)
}
