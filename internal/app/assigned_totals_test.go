package app_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/apptest"
)

// The department's assigned_* totals (kept by a trigger, read by the quota
// check) must always equal the sum of its teams' quotas, through creates,
// quota updates, approved quota requests and deletes.
func TestDepartmentAssignedTotalsMatchTeams(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	alice := e.As(t, "alice")
	check := func(step string) {
		t.Helper()
		var gpu, cpu, mem, sGPU, sCPU, sMem int64
		err := e.App.Pool().QueryRow(context.Background(), `
			SELECT d.assigned_gpu_centi, d.assigned_cpu_millis, d.assigned_memory_bytes,
			       COALESCE(SUM(t.gpu_centi), 0), COALESCE(SUM(t.cpu_millis), 0), COALESCE(SUM(t.memory_bytes), 0)
			  FROM departments d LEFT JOIN teams t ON t.department_id = d.id
			 WHERE d.id = 'research' GROUP BY d.id`).Scan(&gpu, &cpu, &mem, &sGPU, &sCPU, &sMem)
		if err != nil {
			t.Fatal(err)
		}
		if gpu != sGPU || cpu != sCPU || mem != sMem {
			t.Fatalf("%s: assigned totals %d/%d/%d, teams sum to %d/%d/%d", step, gpu, cpu, mem, sGPU, sCPU, sMem)
		}
	}
	check("seeded")
	if _, err := e.Teams.CreateTeam(alice, &pb.CreateTeamRequest{TeamId: "team-c", Team: &pb.Team{
		Department: "departments/research", IsolationTier: pb.IsolationTier_SHARED,
		Quota: &pb.Quota{Gpu: "1.25", CpuMillis: 1000, MemoryBytes: 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	check("after create")
	if _, err := e.Teams.UpdateTeam(alice, &pb.UpdateTeamRequest{Team: &pb.Team{Name: "teams/team-c",
		Quota: &pb.Quota{Gpu: "0.5", CpuMillis: 3000, MemoryBytes: 2 << 30}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"quota"}}}); err != nil {
		t.Fatal(err)
	}
	check("after update")
	r, err := e.Requests.CreateRequest(e.As(t, "bob"), &pb.CreateRequestRequest{Request: &pb.Request{Team: "teams/team-a",
		Payload: &pb.Request_ChangeTeamQuota{ChangeTeamQuota: &pb.ChangeTeamQuotaPayload{
			Quota: &pb.Quota{Gpu: "3", CpuMillis: 30_000, MemoryBytes: 200 << 30}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Requests.ApproveRequest(alice, &pb.ApproveRequestRequest{Name: r.GetName()}); err != nil {
		t.Fatal(err)
	}
	check("after an approved team quota change")
	if _, err := e.Teams.DeleteTeam(alice, &pb.DeleteTeamRequest{Name: "teams/team-c"}); err != nil {
		t.Fatal(err)
	}
	check("after delete")
}
