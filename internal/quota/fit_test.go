package quota

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// gpus rounds because the literal 2.01 * 100 is 200.99999999999997, the
// very float trap GPU exists to avoid.
func gpus(n float64) GPU { return GPU(math.Round(n * 100)) }

// A small hierarchy: cluster 16 GPU / 256 CPU / 1Ti, department "research"
// with an 8 GPU budget, team "vision" with a 4 GPU quota.
func testPath(clusterUsed, deptUsed, teamUsed Resources) []Node {
	return []Node{
		{Level: LevelCluster, Name: "gpu-a", Capacity: Resources{GPU: gpus(16), CPUMillis: 256_000, MemoryBytes: 1 << 40}, Used: clusterUsed},
		{Level: LevelDepartment, Name: "research", Capacity: Resources{GPU: gpus(8), CPUMillis: 64_000, MemoryBytes: 512 << 30}, Used: deptUsed},
		{Level: LevelTeam, Name: "vision", Capacity: Resources{GPU: gpus(4), CPUMillis: 32_000, MemoryBytes: 128 << 30}, Used: teamUsed},
	}
}

type short struct {
	level    Level
	resource Resource
	free     int64
}

func TestCheckFit(t *testing.T) {
	small := Resources{GPU: gpus(1), CPUMillis: 4000, MemoryBytes: 16 << 30}
	tests := []struct {
		name  string
		path  []Node
		quota Resources
		want  []short
	}{
		{name: "fits everywhere", path: testPath(Resources{}, Resources{}, Resources{}), quota: small},
		{name: "empty path fits", quota: small},
		{name: "zero quota fits a full team",
			path: testPath(Resources{}, Resources{}, Resources{GPU: gpus(4), CPUMillis: 32_000, MemoryBytes: 128 << 30})},
		{name: "team exactly full fits",
			path:  testPath(Resources{}, Resources{}, Resources{GPU: gpus(3), CPUMillis: 28_000, MemoryBytes: 112 << 30}),
			quota: small},
		{name: "fractions fill a team exactly",
			path:  testPath(Resources{}, Resources{}, Resources{GPU: gpus(3.75)}),
			quota: Resources{GPU: gpus(0.25)}},
		{name: "team short by a hundredth",
			path:  testPath(Resources{}, Resources{}, Resources{GPU: gpus(3.76)}),
			quota: Resources{GPU: gpus(0.25)},
			want:  []short{{LevelTeam, ResourceGPU, 24}}},
		{name: "department exactly full fits",
			path:  testPath(Resources{}, Resources{GPU: gpus(7)}, Resources{}),
			quota: small},
		{name: "department short",
			path:  testPath(Resources{}, Resources{GPU: gpus(7.5)}, Resources{}),
			quota: small,
			want:  []short{{LevelDepartment, ResourceGPU, 50}}},
		{name: "cluster exactly full fits",
			path:  testPath(Resources{GPU: gpus(15)}, Resources{}, Resources{}),
			quota: small},
		{name: "cluster short",
			path:  testPath(Resources{GPU: gpus(15.5)}, Resources{}, Resources{}),
			quota: small,
			want:  []short{{LevelCluster, ResourceGPU, 50}}},
		{name: "every violation top-down in resource order",
			path: testPath(
				Resources{GPU: gpus(16), MemoryBytes: 1 << 40},
				Resources{CPUMillis: 62_000},
				Resources{GPU: gpus(4), CPUMillis: 30_000, MemoryBytes: 120 << 30}),
			quota: Resources{GPU: gpus(1), CPUMillis: 4000, MemoryBytes: 16 << 30},
			want: []short{
				{LevelCluster, ResourceGPU, 0},
				{LevelCluster, ResourceMemory, 0},
				{LevelDepartment, ResourceCPU, 2000},
				{LevelTeam, ResourceGPU, 0},
				{LevelTeam, ResourceCPU, 2000},
				{LevelTeam, ResourceMemory, 8 << 30},
			}},
		{name: "already over capacity reports negative free",
			path:  testPath(Resources{GPU: gpus(18)}, Resources{}, Resources{}),
			quota: Resources{GPU: gpus(0.5)},
			want:  []short{{LevelCluster, ResourceGPU, -200}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckFit(tt.path, tt.quota)
			var gotShort []short
			for _, s := range got {
				gotShort = append(gotShort, short{s.Level, s.Resource, s.FreeRaw})
				if s.RequestedRaw != tt.quota.Get(s.Resource) {
					t.Errorf("RequestedRaw = %d, want %d", s.RequestedRaw, tt.quota.Get(s.Resource))
				}
			}
			if !reflect.DeepEqual(gotShort, tt.want) {
				t.Fatalf("CheckFit = %v\nwant %v", gotShort, tt.want)
			}
			if len(tt.want) == 0 && FitError("quota", got) != nil {
				t.Fatal("FitError != nil without shortfalls")
			}
		})
	}
}

func TestShortfallHumanText(t *testing.T) {
	got := CheckFit(testPath(Resources{}, Resources{GPU: gpus(6), MemoryBytes: 500 << 30}, Resources{}),
		Resources{GPU: gpus(2.5), MemoryBytes: 16 << 30})
	if len(got) != 2 {
		t.Fatalf("got %d shortfalls: %v", len(got), got)
	}
	g := got[0]
	if g.Name != "research" || g.Requested != "2.5 GPU" || g.Free != "2 GPU" || g.Capacity != "8 GPU" || g.Used != "6 GPU" {
		t.Fatalf("gpu shortfall = %+v", g)
	}
	if want := `department "research": gpu: requested 2.5 GPU but only 2 GPU of 8 GPU is free (6 GPU already assigned)`; g.String() != want {
		t.Fatalf("String() = %q\nwant %q", g.String(), want)
	}
	if m := got[1]; m.Requested != "16Gi" || m.Free != "12Gi" || m.Capacity != "512Gi" {
		t.Fatalf("memory shortfall = %+v", m)
	}

	over := CheckFit(testPath(Resources{GPU: gpus(18)}, Resources{}, Resources{}), Resources{GPU: gpus(1)})
	if over[0].Free != "0 GPU" {
		t.Fatalf("over-capacity Free = %q, want 0 GPU", over[0].Free)
	}

	err := FitError("virtual_cluster.quota", got)
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.KindFailedPrecondition || e.Reason != errs.ReasonQuotaExceeded {
		t.Fatalf("FitError = %#v", err)
	}
	if e.Violations[0].Field != "virtual_cluster.quota.gpu" || e.Violations[1].Field != "virtual_cluster.quota.memory_bytes" {
		t.Fatalf("violations = %+v", e.Violations)
	}
	if e.Metadata["level"] != "department" || e.Metadata["name"] != "research" || e.Metadata["resource"] != "gpu" {
		t.Fatalf("metadata = %v", e.Metadata)
	}
	if !strings.Contains(e.Message, `department "research"`) {
		t.Fatalf("message = %q", e.Message)
	}
}

func TestCheckFitChangeOnlyChecksGrowth(t *testing.T) {
	// The cluster lost nodes and is now over on GPU and CPU.
	path := testPath(Resources{GPU: gpus(20), CPUMillis: 300_000}, Resources{}, Resources{})
	old := Resources{GPU: gpus(2), CPUMillis: 8000, MemoryBytes: 16 << 30}

	shrinkCPU := old.With(ResourceCPU, 4000)
	if got := CheckFitChange(path, old, shrinkCPU); len(got) != 0 {
		t.Fatalf("shrinking CPU while GPU is over-committed was refused: %v", got)
	}
	if got := CheckFit(path, shrinkCPU); len(got) != 2 {
		t.Fatalf("CheckFit (no old quota) should report both: %v", got)
	}
	growBoth := Resources{GPU: gpus(3), CPUMillis: 8000, MemoryBytes: 32 << 30}
	got := CheckFitChange(path, old, growBoth)
	if len(got) != 1 || got[0].Resource != ResourceGPU || got[0].Level != LevelCluster {
		t.Fatalf("growing GPU on an over-committed cluster: %v", got)
	}
}

func TestShrinkCheck(t *testing.T) {
	allocated := Resources{GPU: gpus(2), CPUMillis: 8000, MemoryBytes: 32 << 30}
	tests := []struct {
		name    string
		quota   Resources
		accept  bool
		wantRes []Resource
	}{
		{name: "growing is fine", quota: allocated.Add(Resources{GPU: 100})},
		{name: "down to exactly allocated is fine", quota: allocated},
		{name: "below on gpu refused", quota: allocated.With(ResourceGPU, 150), wantRes: []Resource{ResourceGPU}},
		{name: "below on all refused", quota: Resources{}, wantRes: []Resource{ResourceGPU, ResourceCPU, ResourceMemory}},
		{name: "below with preemption accepted", quota: Resources{}, accept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ShrinkCheck(tt.quota, allocated, tt.accept)
			var res []Resource
			for _, b := range got {
				res = append(res, b.Resource)
				if b.AllocatedRaw != allocated.Get(b.Resource) || b.RequestedRaw != tt.quota.Get(b.Resource) {
					t.Errorf("raw values wrong: %+v", b)
				}
			}
			if !reflect.DeepEqual(res, tt.wantRes) {
				t.Fatalf("ShrinkCheck resources = %v, want %v", res, tt.wantRes)
			}
		})
	}

	below := ShrinkCheck(Resources{GPU: gpus(1.5), CPUMillis: 8000, MemoryBytes: 32 << 30}, allocated, false)
	if below[0].Allocated != "2 GPU" || below[0].Requested != "1.5 GPU" {
		t.Fatalf("human values = %+v", below[0])
	}
	e, ok := errs.As(ShrinkError("quota", below))
	if !ok || e.Kind != errs.KindFailedPrecondition || e.Reason != errs.ReasonBelowAllocation || e.Violations[0].Field != "quota.gpu" {
		t.Fatalf("ShrinkError = %#v", e)
	}
	if !strings.Contains(e.Violations[0].Description, "2 GPU currently allocated") {
		t.Fatalf("description = %q", e.Violations[0].Description)
	}
	if ShrinkError("quota", nil) != nil {
		t.Fatal("ShrinkError(nil) != nil")
	}
}

func TestClusterCapacity(t *testing.T) {
	host := Resources{GPU: gpus(8), CPUMillis: 128_000, MemoryBytes: 1 << 40}
	tests := []struct {
		name    string
		host    Resources
		ratio   float64
		want    Resources
		wantErr bool
	}{
		{name: "unset means 1.0", host: host, ratio: 0, want: host},
		{name: "1.0", host: host, ratio: 1, want: host},
		{name: "1.5", host: host, ratio: 1.5,
			want: Resources{GPU: gpus(12), CPUMillis: 192_000, MemoryBytes: 3 << 39}},
		{name: "1.15 has no float drift", host: Resources{GPU: gpus(1), CPUMillis: 100, MemoryBytes: 100}, ratio: 1.15,
			want: Resources{GPU: 115, CPUMillis: 115, MemoryBytes: 115}},
		{name: "rounds down", host: Resources{GPU: 1, CPUMillis: 3, MemoryBytes: 7}, ratio: 1.5,
			want: Resources{GPU: 1, CPUMillis: 4, MemoryBytes: 10}},
		{name: "under-commit keeps headroom", host: host, ratio: 0.9,
			want: Resources{GPU: 720, CPUMillis: 115_200, MemoryBytes: (1 << 40) * 9 / 10}},
		{name: "largest host and ratio saturate", host: Resources{GPU: MaxGPU, MemoryBytes: MaxMemoryBytes}, ratio: MaxOvercommit,
			want: Resources{GPU: MaxGPU * 100, MemoryBytes: math.MaxInt64}},
		{name: "negative ratio", host: host, ratio: -1, wantErr: true},
		{name: "NaN ratio", host: host, ratio: math.NaN(), wantErr: true},
		{name: "too large ratio", host: host, ratio: 1000, wantErr: true},
		{name: "below precision", host: host, ratio: 0.00001, wantErr: true},
		{name: "negative host", host: Resources{GPU: -1}, ratio: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ClusterCapacity(tt.host, tt.ratio)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("ClusterCapacity = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOvercommittedClusterFit(t *testing.T) {
	capacity, err := ClusterCapacity(Resources{GPU: gpus(8), CPUMillis: 64_000, MemoryBytes: 256 << 30}, 1.5)
	if err != nil {
		t.Fatal(err)
	}
	node := Node{Level: LevelCluster, Name: "gpu-a", Capacity: capacity, Used: Resources{GPU: gpus(10)}}
	if got := CheckFit([]Node{node}, Resources{GPU: gpus(2)}); len(got) != 0 {
		t.Fatalf("10 + 2 of 8 x 1.5 should fit exactly: %v", got)
	}
	got := CheckFit([]Node{node}, Resources{GPU: gpus(2.01)})
	if len(got) != 1 || got[0].Capacity != "12 GPU" || got[0].FreeRaw != 200 {
		t.Fatalf("2.01 should not fit: %+v", got)
	}
}
