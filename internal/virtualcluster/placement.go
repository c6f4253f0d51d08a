package virtualcluster

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
)

// Placement is what a create request asks about where the virtual cluster
// runs. Empty, the platform chooses among the host clusters that take the
// team's isolation tier (internal/fleet).
type Placement struct {
	// HostCluster is the id of the host cluster to run on ("" = any).
	HostCluster string
	// Labels the host cluster must carry, e.g. region=eu, gpu-model=h100.
	Labels map[string]string
}

// IsZero reports a placement that asks for nothing.
func (p Placement) IsZero() bool { return p.HostCluster == "" && len(p.Labels) == 0 }

// placementJSON is the API's Placement message.
type placementJSON struct {
	HostCluster       string            `json:"host_cluster,omitempty"`
	HostClusterLabels map[string]string `json:"host_cluster_labels,omitempty"`
}

func (p Placement) json() *placementJSON {
	if p.IsZero() {
		return nil
	}
	j := &placementJSON{HostClusterLabels: p.Labels}
	if p.HostCluster != "" {
		j.HostCluster = names.HostCluster(p.HostCluster)
	}
	return j
}

func (j *placementJSON) placement() Placement {
	if j == nil {
		return Placement{}
	}
	p := Placement{Labels: j.HostClusterLabels}
	p.HostCluster = strings.TrimPrefix(j.HostCluster, "hostClusters/")
	return p
}

// labelKey is the label key syntax host clusters and placements use: a
// Kubernetes label key in lowercase without '_' (request payloads are
// stored as protojson documents whose keys are renamed between snake_case
// and lowerCamelCase, so keys must survive both ways unchanged).
var labelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

var labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$`)

// ValidateLabels checks host-cluster labels (and placement constraints)
// under field: at most 32, keys as labelKey says, values Kubernetes label
// values.
func ValidateLabels(v *errs.Violations, field string, labels map[string]string) {
	if len(labels) > 32 {
		v.Add(field, "at most 32 labels (got %d)", len(labels))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if !labelKey.MatchString(k) {
			v.Add(field, "key %q: must be a label key in lowercase letters, digits, '-' and '.', with an optional prefix ending in '/' (e.g. region, gpuplane.io/gpu-model)", k)
		}
		if val := labels[k]; !labelValue.MatchString(val) {
			v.Add(field, "value %q of %q: must be a Kubernetes label value (at most 63 characters: letters, digits, '-', '_', '.')", val, k)
		}
	}
}
