package app_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/app"
	"github.com/gpuplane/gpuplane/internal/apptest"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/store/storetest"
	"github.com/gpuplane/gpuplane/internal/tenancy"
)

// A team's quota is carved from its node pool as well as from its
// department: SHARED teams together fit the shared pool, a DEDICATED team
// fits its own pool, whose default is dedicated-<team> and which only
// platform admins may choose.
func TestTeamQuotaFitsItsNodePool(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Capacity: tenancy.StaticPoolCapacity{
		names.SharedPool:   {GPU: quota.GPUs(16), CPUMillis: 256_000, MemoryBytes: 2 << 40},
		"dedicated-vision": {GPU: quota.GPUs(8), CPUMillis: 96_000, MemoryBytes: 768 * apiGiB},
		"gpu-h100":         {GPU: quota.GPUs(4), CPUMillis: 96_000, MemoryBytes: 768 * apiGiB},
	}})
	apiCreateDepartment(t, e, "alice", "research", "Research", apiQuota("28", 448_000, 2<<40+1536*apiGiB), "research-admins")
	dept := "departments/research"
	create := func(user, id string, tier pb.IsolationTier, pool, gpu string) (*pb.Team, error) {
		return e.Teams.CreateTeam(e.As(t, user), &pb.CreateTeamRequest{TeamId: id, Team: &pb.Team{
			Department: dept, IsolationTier: tier, NodePool: pool, Quota: apiQuota(gpu, 1000, apiGiB)}})
	}
	wantRefused := func(err error, code codes.Code, fragments ...string) {
		t.Helper()
		st := apiWantCode(t, err, code)
		text := st.Message()
		for _, v := range apiViolations(t, st) {
			text += "\n" + v
		}
		for _, f := range fragments {
			if !strings.Contains(text, f) {
				t.Errorf("error %q does not contain %q", text, f)
			}
		}
	}

	shared := apiCall(create("frank", "vision-s", pb.IsolationTier_SHARED, "", "10")).must(t)
	if shared.GetNodePool() != names.SharedPool {
		t.Errorf("SHARED team pool %q", shared.GetNodePool())
	}
	_, err := create("frank", "nlp", pb.IsolationTier_SHARED, "", "8")
	wantRefused(err, codes.FailedPrecondition, `does not fit in pool "shared"`, "only 6 GPU of 16 GPU is free")

	dedicated := apiCall(create("frank", "vision", pb.IsolationTier_DEDICATED, "", "6")).must(t)
	if dedicated.GetNodePool() != "dedicated-vision" {
		t.Errorf("DEDICATED team pool %q, want dedicated-vision", dedicated.GetNodePool())
	}
	_, err = e.Teams.UpdateTeam(e.As(t, "frank"), &pb.UpdateTeamRequest{
		Team: &pb.Team{Name: "teams/vision", Quota: apiQuota("9", 1000, apiGiB)}, UpdateMask: apiMask("quota")})
	wantRefused(err, codes.FailedPrecondition, `pool "dedicated-vision"`, "requested 9 GPU but only 8 GPU of 8 GPU is free")

	_, err = create("frank", "speech", pb.IsolationTier_DEDICATED, "", "1")
	wantRefused(err, codes.FailedPrecondition, `node pool "dedicated-speech" has no gpu at all: nodes join it with the label gpuplane.io/pool=dedicated-speech and the taint gpuplane.io/pool=dedicated-speech:NoSchedule`)
	_, err = create("frank", "speech", pb.IsolationTier_DEDICATED, "gpu-h100", "1")
	wantRefused(err, codes.PermissionDenied, "only platform admins choose a DEDICATED team's node pool")
	speech := apiCall(create("alice", "speech", pb.IsolationTier_DEDICATED, "gpu-h100", "1")).must(t)
	if speech.GetNodePool() != "gpu-h100" {
		t.Errorf("chosen pool %q", speech.GetNodePool())
	}
	_, err = create("alice", "speech-2", pb.IsolationTier_DEDICATED, "gpu-h100", "0")
	wantRefused(err, codes.FailedPrecondition, `node pool "gpu-h100" is already dedicated to another team`)
	_, err = create("alice", "nlp", pb.IsolationTier_SHARED, "gpu-h100", "1")
	st := apiWantCode(t, err, codes.InvalidArgument)
	if v := apiViolations(t, st)["team.node_pool"]; !strings.Contains(v, "only DEDICATED and SANDBOX teams have a node pool of their own") {
		t.Errorf("team.node_pool violation %q", v)
	}
	_, err = create("alice", "nlp", pb.IsolationTier_DEDICATED, names.SharedPool, "1")
	apiWantCode(t, err, codes.InvalidArgument)

	// A whole-object update that repeats the chosen pool is no choice: a
	// department admin may send it.
	apiCall(e.Teams.UpdateTeam(e.As(t, "frank"), &pb.UpdateTeamRequest{
		Team: &pb.Team{Name: "teams/speech", DisplayName: "Speech", IsolationTier: pb.IsolationTier_DEDICATED, NodePool: "gpu-h100",
			Quota: apiQuota("1", 1000, apiGiB)}})).must(t)

	// An approved team-quota request is held to the pool too.
	apiCreateMember(t, e, "alice", "teams/vision-s", "bob", devUser("bob"), pb.TeamRole_OWNER)
	r := apiCall(e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{Team: "teams/vision-s",
		Payload: &pb.Request_ChangeTeamQuota{ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{Quota: apiQuota("17", 1000, apiGiB)}}}})).must(t)
	_, err = e.Requests.ApproveRequest(e.As(t, "alice"), &pb.ApproveRequestRequest{Name: r.GetName()})
	wantRefused(err, codes.FailedPrecondition, `does not fit in pool shared: 16 GPU free, 17 GPU requested (gpu)`)

	// Changing tier moves the team between pools, and its quota must fit
	// the new one in full.
	moved := apiCall(e.Teams.UpdateTeam(e.As(t, "frank"), &pb.UpdateTeamRequest{
		Team: &pb.Team{Name: "teams/vision", IsolationTier: pb.IsolationTier_SHARED}, UpdateMask: apiMask("isolation_tier")})).must(t)
	if moved.GetNodePool() != names.SharedPool {
		t.Errorf("after moving to SHARED: pool %q", moved.GetNodePool())
	}
	_, err = e.Teams.UpdateTeam(e.As(t, "frank"), &pb.UpdateTeamRequest{
		Team: &pb.Team{Name: "teams/vision-s", Quota: apiQuota("11", 1000, apiGiB)}, UpdateMask: apiMask("quota")})
	wantRefused(err, codes.FailedPrecondition, `pool "shared"`)
	back := apiCall(e.Teams.UpdateTeam(e.As(t, "frank"), &pb.UpdateTeamRequest{
		Team: &pb.Team{Name: "teams/vision", IsolationTier: pb.IsolationTier_DEDICATED}, UpdateMask: apiMask("isolation_tier")})).must(t)
	if back.GetNodePool() != "dedicated-vision" {
		t.Errorf("after moving back to DEDICATED: pool %q", back.GetNodePool())
	}
}

func devUser(name string) string { return name + "@example.com" }

// Migration 000004 gives existing DEDICATED teams the pool names.DedicatedPool
// computes, including the shortened form of long team ids.
func TestMigrationGivesDedicatedTeamsTheirPool(t *testing.T) {
	dsn := storetest.New(t)
	ctx := context.Background()
	// Back to the schema before migration 4, whatever came after it.
	latest, err := store.LatestSchemaVersion()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateDown(ctx, dsn, int(latest)-3); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	long := strings.Repeat("a", 43) + "-" + strings.Repeat("b", 19)
	teams := map[string]string{"team-b": "DEDICATED", long: "DEDICATED", strings.Repeat("c", 53): "DEDICATED", "team-a": "SHARED"}
	if _, err := pool.Exec(ctx, `INSERT INTO departments (id, display_name) VALUES ('d', 'D')`); err != nil {
		t.Fatal(err)
	}
	for id, tier := range teams {
		if _, err := pool.Exec(ctx, `INSERT INTO teams (id, department_id, display_name, isolation_tier) VALUES ($1, 'd', $3, $2)`, id, tier, "team "+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.MigrateUp(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	for id, tier := range teams {
		var got string
		if err := pool.QueryRow(ctx, `SELECT node_pool FROM teams WHERE id = $1`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		want := names.SharedPool
		if tier == "DEDICATED" {
			want = names.DedicatedPool(id)
		}
		if got != want {
			t.Errorf("team %q: migrated pool %q, want %q", id, got, want)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE teams SET node_pool = 'dedicated-team-b' WHERE id = 'team-a'`); err == nil {
		t.Error("a SHARED team must not get a dedicated pool")
	}
}

// The tier profiles come from configuration; a value the guardrails cannot
// enforce stops the server at start.
func TestTierProfileConfiguration(t *testing.T) {
	c := app.Defaults()
	p, err := c.TierProfiles()
	if err != nil {
		t.Fatal(err)
	}
	if s := p[hostcluster.TierShared]; s.PodSecurity != "baseline" || strings.Join(s.PriorityClasses, ",") != "train,build-preemptible" ||
		strings.Join(s.Preemptibility, ",") != "preemptible" || !s.FractionalGPUs {
		t.Errorf("SHARED defaults %+v", s)
	}
	if d := p[hostcluster.TierDedicated]; strings.Join(d.PriorityClasses, ",") != "train,build-preemptible,build,inference" || d.FractionalGPUs {
		t.Errorf("DEDICATED defaults %+v", d)
	}
	c.SharedPodSecurity, c.DedicatedPriorityClasses = "restricted", " inference, build "
	p, err = c.TierProfiles()
	if err != nil {
		t.Fatal(err)
	}
	if p[hostcluster.TierShared].PodSecurity != "restricted" || strings.Join(p[hostcluster.TierDedicated].PriorityClasses, ",") != "inference,build" {
		t.Errorf("configured profiles %+v", p)
	}
	c.DedicatedPodSecurity = "privileged"
	if _, err := c.TierProfiles(); err == nil || !strings.Contains(err.Error(), `pod security "privileged"`) {
		t.Errorf("privileged Pod Security accepted: %v", err)
	}
	c.DedicatedPodSecurity, c.DedicatedPriorityClasses = "baseline", "inference,system-cluster-critical"
	if _, err := c.TierProfiles(); err == nil || !strings.Contains(err.Error(), `priority class "system-cluster-critical"`) {
		t.Errorf("a system priority class accepted for tenants: %v", err)
	}
}
