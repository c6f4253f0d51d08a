package tenancy

import (
	"strings"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
)

// QuotaFromProto validates and converts an API quota; nil means zero.
func QuotaFromProto(v *errs.Violations, field string, q *pb.Quota) quota.Resources {
	var r quota.Resources
	if q == nil {
		return r
	}
	if q.Gpu != "" {
		g, err := quota.ParseGPU(q.Gpu)
		if err != nil {
			v.Add(field+".gpu", "%v", err)
		}
		r.GPU = g
	}
	r.CPUMillis = q.CpuMillis
	r.MemoryBytes = q.MemoryBytes
	for _, fv := range r.Validate(field) {
		*v = append(*v, fv)
	}
	return r
}

// QuotaToProto renders r for the API.
func QuotaToProto(r quota.Resources) *pb.Quota {
	return &pb.Quota{Gpu: r.GPU.String(), CpuMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
}

// checkDisplayName bounds free text the UI shows.
func checkDisplayName(v *errs.Violations, field, s string) {
	if len(s) > 256 {
		v.Add(field, "must be at most 256 characters")
	}
	if strings.ContainsRune(s, 0) {
		v.Add(field, "must not contain NUL characters")
	}
}
