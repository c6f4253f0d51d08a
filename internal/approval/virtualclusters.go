package approval

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/filter"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// VirtualClusterColumns is the column list scanned by ScanVirtualCluster.
const VirtualClusterColumns = `id, team_id, display_name, gpu_centi, cpu_millis, memory_bytes,
	limit_gpu_centi, limit_cpu_millis, limit_memory_bytes, over_quota_weight, priority, allow_fractional_gpus,
	kubernetes_version, chart_version, expire_time, phase, conditions, generation, observed_generation,
	endpoint, status_message, alloc_gpu_centi, alloc_cpu_millis, alloc_memory_bytes, version, create_time, update_time`

// VirtualClusterRow is a stored virtual cluster.
type VirtualClusterRow struct {
	ID, Team, DisplayName string
	Quota                 quota.Resources
	Limit                 *quota.Resources
	OverQuotaWeight       int32
	Priority              int32
	AllowFractionalGPUs   bool
	KubernetesVersion     string
	ChartVersion          string
	ExpireTime            *time.Time
	Phase                 string
	Conditions            []*pb.Condition
	Generation            int64
	ObservedGeneration    int64
	Endpoint              string
	StatusMessage         string
	Allocated             quota.Resources
	Version               int64
	Created, Updated      time.Time
}

// ScanVirtualCluster reads one row selected with VirtualClusterColumns.
func ScanVirtualCluster(row pgx.Row) (VirtualClusterRow, error) {
	var v VirtualClusterRow
	var lg, lc, lm *int64
	var conds []byte
	err := row.Scan(&v.ID, &v.Team, &v.DisplayName, &v.Quota.GPU, &v.Quota.CPUMillis, &v.Quota.MemoryBytes,
		&lg, &lc, &lm, &v.OverQuotaWeight, &v.Priority, &v.AllowFractionalGPUs,
		&v.KubernetesVersion, &v.ChartVersion, &v.ExpireTime, &v.Phase, &conds, &v.Generation, &v.ObservedGeneration,
		&v.Endpoint, &v.StatusMessage, &v.Allocated.GPU, &v.Allocated.CPUMillis, &v.Allocated.MemoryBytes,
		&v.Version, &v.Created, &v.Updated)
	if err != nil {
		return v, err
	}
	if lg != nil && lc != nil && lm != nil {
		v.Limit = &quota.Resources{GPU: quota.GPU(*lg), CPUMillis: *lc, MemoryBytes: *lm}
	}
	v.Conditions, err = DecodeConditions(conds)
	return v, err
}

// DecodeConditions parses the conditions column (protojson objects).
func DecodeConditions(raw []byte) ([]*pb.Condition, error) {
	var items []json.RawMessage
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
	}
	out := make([]*pb.Condition, 0, len(items))
	for _, it := range items {
		c := &pb.Condition{}
		if err := protojson.Unmarshal(it, c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// EncodeConditions renders conditions for the conditions column.
func EncodeConditions(conds []*pb.Condition) ([]byte, error) {
	items := make([]json.RawMessage, 0, len(conds))
	for _, c := range conds {
		b, err := protojson.Marshal(c)
		if err != nil {
			return nil, err
		}
		items = append(items, b)
	}
	return json.Marshal(items)
}

// Name is the resource name.
func (v VirtualClusterRow) Name() string { return names.VirtualCluster(v.Team, v.ID) }

// Proto renders the API resource.
func (v VirtualClusterRow) Proto() *pb.VirtualCluster {
	spec := &pb.VirtualClusterSpec{
		DisplayName:         v.DisplayName,
		Quota:               tenancy.QuotaToProto(v.Quota),
		OverQuotaWeight:     v.OverQuotaWeight,
		Priority:            v.Priority,
		AllowFractionalGpus: v.AllowFractionalGPUs,
		KubernetesVersion:   v.KubernetesVersion,
		ChartVersion:        v.ChartVersion,
	}
	if v.Limit != nil {
		spec.Limit = tenancy.QuotaToProto(*v.Limit)
	}
	if v.ExpireTime != nil {
		spec.ExpireTime = timestamppb.New(*v.ExpireTime)
	}
	return &pb.VirtualCluster{
		Name: v.Name(),
		Spec: spec,
		Status: &pb.VirtualClusterStatus{
			Phase:              pb.VirtualClusterStatus_Phase(pb.VirtualClusterStatus_Phase_value[v.Phase]),
			Conditions:         v.Conditions,
			ObservedGeneration: v.ObservedGeneration,
			Endpoint:           v.Endpoint,
			Message:            v.StatusMessage,
			Allocated:          tenancy.QuotaToProto(v.Allocated),
		},
		Generation: v.Generation,
		Etag:       tenancy.Etag(v.Version, v.Updated),
		CreateTime: timestamppb.New(v.Created),
		UpdateTime: timestamppb.New(v.Updated),
	}
}

// GetVirtualClusterRow reads by id; lock takes a row lock.
func GetVirtualClusterRow(ctx context.Context, q tenancy.Querier, id string, lock bool) (VirtualClusterRow, error) {
	sql := `SELECT ` + VirtualClusterColumns + ` FROM virtual_clusters WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	v, err := ScanVirtualCluster(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, errs.NotFound("virtual cluster " + id)
	}
	return v, err
}

// VirtualClusters implements pb.VirtualClusterServiceServer.
type VirtualClusters struct {
	pb.UnimplementedVirtualClusterServiceServer
	*Service
}

func (s *VirtualClusters) GetVirtualCluster(ctx context.Context, req *pb.GetVirtualClusterRequest) (*pb.VirtualCluster, error) {
	teamID, vcID, err := names.ParseVirtualCluster("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if _, _, err := s.Tenancy.ReadableTeam(ctx, "name", names.Team(teamID)); err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return nil, errs.NotFound(req.GetName())
		}
		return nil, err
	}
	v, err := GetVirtualClusterRow(ctx, s.Tenancy.Pool, vcID, false)
	if err != nil || v.Team != teamID {
		return nil, errs.NotFound(req.GetName())
	}
	return v.Proto(), nil
}

var phaseNames = []string{PhasePendingApproval, PhaseProvisioning, PhaseReady, PhaseDegraded, PhaseDeleting, PhaseDeleted, PhaseFailed, PhaseRejected}

var vcFilter = filter.Schema{
	"phase": {Column: "phase", Type: filter.Enum, Enum: phaseNames},
}

func (s *VirtualClusters) ListVirtualClusters(ctx context.Context, req *pb.ListVirtualClustersRequest) (*pb.ListVirtualClustersResponse, error) {
	q, err := store.NewList(req.GetPageSize(), req.GetFilter(), vcFilter)
	if err != nil {
		return nil, err
	}
	scope := "vcs|" + req.GetParent() + "|" + req.GetFilter()
	var after string
	if err := store.DecodePageToken(req.GetPageToken(), scope, &after); err != nil {
		return nil, err
	}
	q.Where("id > " + q.Arg(after))
	if req.GetParent() == "teams/-" {
		a, err := s.Tenancy.Access(ctx)
		if err != nil {
			return nil, err
		}
		if !a.PlatformAdmin {
			q.Where("team_id = ANY(" + q.Arg(a.ReadableTeams()) + ") OR team_id IN (SELECT id FROM teams WHERE department_id = ANY(" + q.Arg(a.AdminDepartments()) + "))")
		}
	} else {
		t, _, err := s.Tenancy.ReadableTeam(ctx, "parent", req.GetParent())
		if err != nil {
			return nil, err
		}
		q.Where("team_id = " + q.Arg(t.ID))
	}
	list, more, err := store.FetchPage(ctx, s.Tenancy.Pool, q, `SELECT `+VirtualClusterColumns+` FROM virtual_clusters`, "id", ScanVirtualCluster)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListVirtualClustersResponse{}
	if more {
		resp.NextPageToken = store.EncodePageToken(scope, list[len(list)-1].ID)
	}
	for _, v := range list {
		resp.VirtualClusters = append(resp.VirtualClusters, v.Proto())
	}
	return resp, nil
}
