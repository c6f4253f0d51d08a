// Package request holds requests — a team asking for a virtual cluster, a
// resize, more team quota, a newer vCluster version or a deletion — with their typed State and Kind,
// the state machine, approval (by a person or by a CEL policy), rejection,
// cancellation and expiry, and the repositories that own the requests and
// approval_policies tables. Every decision runs in one transaction with
// the quota hierarchy check (internal/tenancy), the virtual cluster's
// change, the audit events and the reconcile work. It knows nothing of
// gRPC, HTTP or Kubernetes.
package request

import (
	"encoding/json"
	"time"

	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Kind is what a request asks for (the API's Request.Kind names).
type Kind string

// Kinds.
const (
	KindCreateVirtualCluster      Kind = "CREATE_VIRTUAL_CLUSTER"
	KindChangeVirtualClusterQuota Kind = "CHANGE_VIRTUAL_CLUSTER_QUOTA"
	KindChangeTeamQuota           Kind = "CHANGE_TEAM_QUOTA"
	KindDeleteVirtualCluster      Kind = "DELETE_VIRTUAL_CLUSTER"
	// KindChangeVirtualClusterVersion moves a virtual cluster to a newer
	// vCluster chart and/or virtual Kubernetes version.
	KindChangeVirtualClusterVersion Kind = "CHANGE_VIRTUAL_CLUSTER_VERSION"
	// KindSleepVirtualCluster and KindWakeVirtualCluster put a virtual
	// cluster to sleep and wake it, as the :sleep and :wake methods do.
	KindSleepVirtualCluster Kind = "SLEEP_VIRTUAL_CLUSTER"
	KindWakeVirtualCluster  Kind = "WAKE_VIRTUAL_CLUSTER"
)

// Kinds are all kinds, in API order.
var Kinds = []Kind{KindCreateVirtualCluster, KindChangeVirtualClusterQuota, KindChangeTeamQuota, KindDeleteVirtualCluster,
	KindChangeVirtualClusterVersion, KindSleepVirtualCluster, KindWakeVirtualCluster}

// Payload is what a request asks for; exactly one field is set.
type Payload struct {
	Create          *CreatePayload
	ChangeVCQuota   *ChangeVCQuotaPayload
	ChangeTeamQuota *ChangeTeamQuotaPayload
	Delete          *DeletePayload
	ChangeVersion   *ChangeVersionPayload
	Sleep           *SleepPayload
}

// SleepPayload puts a virtual cluster to sleep (Wake false) or wakes it.
type SleepPayload struct {
	VirtualCluster string // resource name
	Wake           bool
}

// CreatePayload asks for a new virtual cluster.
type CreatePayload struct {
	VirtualClusterID string
	Spec             virtualcluster.Spec
	VirtualCluster   string // resource name, set when stored
}

// ChangeVCQuotaPayload resizes a virtual cluster.
type ChangeVCQuotaPayload struct {
	VirtualCluster   string // resource name
	Quota            quota.Resources
	Limit            *quota.Resources
	AcceptPreemption bool
}

// ChangeTeamQuotaPayload changes the team's quota.
type ChangeTeamQuotaPayload struct {
	Quota            quota.Resources
	AcceptPreemption bool
}

// DeletePayload deletes a virtual cluster.
type DeletePayload struct {
	VirtualCluster string // resource name
}

// ChangeVersionPayload moves a virtual cluster to another vCluster chart
// and/or virtual Kubernetes version (upgrades only); both are stored
// resolved (ResolveUpgrade).
type ChangeVersionPayload struct {
	VirtualCluster    string // resource name
	ChartVersion      string
	KubernetesVersion string
}

// Kind is the kind the payload asks for ("" when none is set).
func (p Payload) Kind() Kind {
	switch {
	case p.Create != nil:
		return KindCreateVirtualCluster
	case p.ChangeVCQuota != nil:
		return KindChangeVirtualClusterQuota
	case p.ChangeTeamQuota != nil:
		return KindChangeTeamQuota
	case p.Delete != nil:
		return KindDeleteVirtualCluster
	case p.ChangeVersion != nil:
		return KindChangeVirtualClusterVersion
	case p.Sleep != nil && p.Sleep.Wake:
		return KindWakeVirtualCluster
	case p.Sleep != nil:
		return KindSleepVirtualCluster
	}
	return ""
}

// target is the resource name of the existing virtual cluster a payload
// acts on ("" for a create or a team quota change).
func (p Payload) target() string {
	switch {
	case p.ChangeVCQuota != nil:
		return p.ChangeVCQuota.VirtualCluster
	case p.Delete != nil:
		return p.Delete.VirtualCluster
	case p.ChangeVersion != nil:
		return p.ChangeVersion.VirtualCluster
	case p.Sleep != nil:
		return p.Sleep.VirtualCluster
	}
	return ""
}

// wanted is the quota (and limit) a payload asks for, and whether it
// accepts preemption.
func (p Payload) wanted() (q quota.Resources, limit *quota.Resources, accept bool) {
	switch {
	case p.Create != nil:
		return p.Create.Spec.Quota, p.Create.Spec.Limit, false
	case p.ChangeVCQuota != nil:
		return p.ChangeVCQuota.Quota, p.ChangeVCQuota.Limit, p.ChangeVCQuota.AcceptPreemption
	case p.ChangeTeamQuota != nil:
		return p.ChangeTeamQuota.Quota, nil, p.ChangeTeamQuota.AcceptPreemption
	}
	return quota.Resources{}, nil, false
}

// Request is a stored request.
type Request struct {
	ID, Team, Department string
	Seq                  int64
	Kind                 Kind
	VirtualCluster       *string // id, for requests about one
	Payload              Payload
	Justification        string
	State                State
	Requester, Decider   string
	DecideTime           *time.Time
	DecisionReason       string
	ApprovalPolicy       *string
	TargetGeneration     *int64
	FailureMessage       string
	Version              int64
	Created, Updated     time.Time

	// locked is what Decide read for approving it in this transaction
	// (nil: approve reads what it needs).
	locked *lockedRows
}

// Name is the API resource name.
func (r Request) Name() string { return names.Request(r.ID) }

// Etag of the current version.
func (r Request) Etag() string { return store.Etag(r.Version, r.Updated) }

// vcID is the virtual cluster the request is about ("" for team quota).
func (r Request) vcID() string {
	if r.VirtualCluster == nil {
		return ""
	}
	return *r.VirtualCluster
}

// The payload's JSON: the API's oneof fields, with proto names.
type payloadJSON struct {
	CreateVirtualCluster      *createJSON          `json:"create_virtual_cluster,omitempty"`
	ChangeVirtualClusterQuota *changeVCQuotaJSON   `json:"change_virtual_cluster_quota,omitempty"`
	ChangeTeamQuota           *changeTeamQuotaJSON `json:"change_team_quota,omitempty"`
	DeleteVirtualCluster      *deleteJSON          `json:"delete_virtual_cluster,omitempty"`
	ChangeVersion             *changeVersionJSON   `json:"change_virtual_cluster_version,omitempty"`
	SleepVirtualCluster       *deleteJSON          `json:"sleep_virtual_cluster,omitempty"`
	WakeVirtualCluster        *deleteJSON          `json:"wake_virtual_cluster,omitempty"`
}

type createJSON struct {
	VirtualClusterID string                   `json:"virtual_cluster_id,omitempty"`
	Spec             *virtualcluster.SpecJSON `json:"spec,omitempty"`
	VirtualCluster   string                   `json:"virtual_cluster,omitempty"`
}

type changeVCQuotaJSON struct {
	VirtualCluster   string           `json:"virtual_cluster,omitempty"`
	Quota            *jsonshape.Quota `json:"quota,omitempty"`
	Limit            *jsonshape.Quota `json:"limit,omitempty"`
	AcceptPreemption bool             `json:"accept_preemption,omitempty"`
}

type changeTeamQuotaJSON struct {
	Quota            *jsonshape.Quota `json:"quota,omitempty"`
	AcceptPreemption bool             `json:"accept_preemption,omitempty"`
}

// deleteJSON names the virtual cluster a request acts on (delete, sleep,
// wake).
type deleteJSON struct {
	VirtualCluster string `json:"virtual_cluster,omitempty"`
}

type changeVersionJSON struct {
	VirtualCluster    string `json:"virtual_cluster,omitempty"`
	ChartVersion      string `json:"chart_version,omitempty"`
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
}

func (p Payload) json() payloadJSON {
	var j payloadJSON
	switch {
	case p.Create != nil:
		j.CreateVirtualCluster = &createJSON{VirtualClusterID: p.Create.VirtualClusterID, Spec: p.Create.Spec.JSON(), VirtualCluster: p.Create.VirtualCluster}
	case p.ChangeVCQuota != nil:
		c := p.ChangeVCQuota
		j.ChangeVirtualClusterQuota = &changeVCQuotaJSON{VirtualCluster: c.VirtualCluster, Quota: jsonshape.QuotaOf(c.Quota),
			Limit: jsonshape.QuotaPtr(c.Limit), AcceptPreemption: c.AcceptPreemption}
	case p.ChangeTeamQuota != nil:
		j.ChangeTeamQuota = &changeTeamQuotaJSON{Quota: jsonshape.QuotaOf(p.ChangeTeamQuota.Quota), AcceptPreemption: p.ChangeTeamQuota.AcceptPreemption}
	case p.Delete != nil:
		j.DeleteVirtualCluster = &deleteJSON{VirtualCluster: p.Delete.VirtualCluster}
	case p.ChangeVersion != nil:
		c := p.ChangeVersion
		j.ChangeVersion = &changeVersionJSON{VirtualCluster: c.VirtualCluster, ChartVersion: c.ChartVersion, KubernetesVersion: c.KubernetesVersion}
	case p.Sleep != nil && p.Sleep.Wake:
		j.WakeVirtualCluster = &deleteJSON{VirtualCluster: p.Sleep.VirtualCluster}
	case p.Sleep != nil:
		j.SleepVirtualCluster = &deleteJSON{VirtualCluster: p.Sleep.VirtualCluster}
	}
	return j
}

func (j payloadJSON) payload() (Payload, error) {
	var p Payload
	var err error
	switch {
	case j.CreateVirtualCluster != nil:
		c := &CreatePayload{VirtualClusterID: j.CreateVirtualCluster.VirtualClusterID, VirtualCluster: j.CreateVirtualCluster.VirtualCluster}
		c.Spec, err = j.CreateVirtualCluster.Spec.Spec()
		p.Create = c
	case j.ChangeVirtualClusterQuota != nil:
		c := &ChangeVCQuotaPayload{VirtualCluster: j.ChangeVirtualClusterQuota.VirtualCluster, AcceptPreemption: j.ChangeVirtualClusterQuota.AcceptPreemption}
		if c.Quota, err = j.ChangeVirtualClusterQuota.Quota.Resources(); err == nil && j.ChangeVirtualClusterQuota.Limit != nil {
			var l quota.Resources
			l, err = j.ChangeVirtualClusterQuota.Limit.Resources()
			c.Limit = &l
		}
		p.ChangeVCQuota = c
	case j.ChangeTeamQuota != nil:
		c := &ChangeTeamQuotaPayload{AcceptPreemption: j.ChangeTeamQuota.AcceptPreemption}
		c.Quota, err = j.ChangeTeamQuota.Quota.Resources()
		p.ChangeTeamQuota = c
	case j.DeleteVirtualCluster != nil:
		p.Delete = &DeletePayload{VirtualCluster: j.DeleteVirtualCluster.VirtualCluster}
	case j.ChangeVersion != nil:
		c := j.ChangeVersion
		p.ChangeVersion = &ChangeVersionPayload{VirtualCluster: c.VirtualCluster, ChartVersion: c.ChartVersion, KubernetesVersion: c.KubernetesVersion}
	case j.SleepVirtualCluster != nil:
		p.Sleep = &SleepPayload{VirtualCluster: j.SleepVirtualCluster.VirtualCluster}
	case j.WakeVirtualCluster != nil:
		p.Sleep = &SleepPayload{VirtualCluster: j.WakeVirtualCluster.VirtualCluster, Wake: true}
	}
	return p, err
}

// EncodePayload renders the payload column: the protojson document of a
// Request with only its payload set (lowerCamelCase names), the format
// rows have always had.
func EncodePayload(p Payload) ([]byte, error) {
	raw, err := json.Marshal(p.json())
	if err != nil {
		return nil, err
	}
	return jsonshape.CamelKeys(raw)
}

// DecodePayload parses the payload column.
func DecodePayload(raw []byte) (Payload, error) {
	snake, err := jsonshape.SnakeKeysForDecode(raw)
	if err != nil {
		return Payload{}, err
	}
	var j payloadJSON
	if err := json.Unmarshal(snake, &j); err != nil {
		return Payload{}, err
	}
	return j.payload()
}

// snapshotJSON is the API's Request message.
type snapshotJSON struct {
	Name       string `json:"name,omitempty"`
	Team       string `json:"team,omitempty"`
	Department string `json:"department,omitempty"`
	Kind       Kind   `json:"kind,omitempty"`
	payloadJSON
	Justification  string          `json:"justification,omitempty"`
	State          State           `json:"state,omitempty"`
	Requester      string          `json:"requester,omitempty"`
	Decider        string          `json:"decider,omitempty"`
	DecideTime     *jsonshape.Time `json:"decide_time,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
	ApprovalPolicy string          `json:"approval_policy,omitempty"`
	FailureMessage string          `json:"failure_message,omitempty"`
	Etag           string          `json:"etag,omitempty"`
	CreateTime     *jsonshape.Time `json:"create_time,omitempty"`
	UpdateTime     *jsonshape.Time `json:"update_time,omitempty"`
}

// Snapshot renders r as the API does (the Request message), for audit.
func (r Request) Snapshot() any {
	s := snapshotJSON{
		Name: r.Name(), Team: names.Team(r.Team), Department: names.Department(r.Department), Kind: r.Kind,
		payloadJSON: r.Payload.json(), Justification: r.Justification, State: r.State, Requester: r.Requester,
		Decider: r.Decider, DecideTime: jsonshape.At(r.DecideTime), DecisionReason: r.DecisionReason,
		FailureMessage: r.FailureMessage, Etag: r.Etag(),
		CreateTime: &jsonshape.Time{Time: r.Created}, UpdateTime: &jsonshape.Time{Time: r.Updated},
	}
	if r.ApprovalPolicy != nil {
		s.ApprovalPolicy = names.ApprovalPolicy(*r.ApprovalPolicy)
	}
	return s
}
