// Package devenv starts the embedded development environment (throwaway
// PostgreSQL, dev OIDC issuer, local host cluster) and seeds demo data. It
// is used by `gpuplane-dev` (cmd/gpuplane-dev) and by tests; never by a production server.
package devenv

import (
	"context"
	"fmt"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
	"github.com/gpuplane/gpuplane/internal/reqctx"
	"github.com/gpuplane/gpuplane/internal/server/api"
)

// PlatformAdminGroup is the demo platform-admin group.
const PlatformAdminGroup = "platform-admins"

// DemoUsers are the dev issuer's users: alice is a platform admin; bob owns team-a, carol is a member
// of team-a; dan owns team-b, erin is a member of team-b; frank administers
// the research department. Passwords equal the user names.
var DemoUsers = []oidcdev.User{
	{Username: "alice", Groups: []string{PlatformAdminGroup}},
	{Username: "bob", Groups: []string{"team-a-owners"}},
	{Username: "carol", Groups: []string{"ml-engineers"}},
	{Username: "dan", Groups: []string{"team-b-owners"}},
	{Username: "erin", Groups: []string{"ml-engineers"}},
	{Username: "frank", Groups: []string{"research-admins"}},
}

// Email is the demo user's email (the default username claim).
func Email(user string) string { return user + "@example.com" }

// Principal is what the server sees for a demo user's token.
func Principal(user string) reqctx.Principal {
	for _, u := range DemoUsers {
		if u.Username == user {
			return reqctx.Principal{Subject: oidcdev.Subject(user), Username: Email(user), Email: Email(user), Groups: u.Groups}
		}
	}
	panic("unknown demo user " + user)
}

// DemoCapacity is the static host capacity dev mode starts with, until the
// worker reads the dev cluster's nodes.
var DemoCapacity = quota.Resources{GPU: quota.GPUs(16), CPUMillis: 256_000, MemoryBytes: 2 << 40}

// demoTeams are the seeded teams. A DEDICATED one gets a fake node in its
// own pool (DemoNodes), since its quota must fit that pool.
var demoTeams = []struct {
	id, name string
	tier     pb.IsolationTier
	gpu      string
}{{"team-a", "Team A (vision)", pb.IsolationTier_SHARED, "4"}, {"team-b", "Team B (LLM)", pb.IsolationTier_DEDICATED, "2"}}

// Seed creates the demo department, teams and members through the real
// API handlers as alice, so the audit log shows them. Safe to run again.
func Seed(ctx context.Context, a *api.API) error {
	ctx = reqctx.WithPrincipal(ctx, Principal("alice"))
	depts := &api.Departments{API: a}
	teams := &api.Teams{API: a}
	members := &api.Members{API: a}
	gi := int64(1 << 30)
	ignoreExists := func(err error) error {
		if errs.KindOf(err) == errs.KindAlreadyExists {
			return nil
		}
		return err
	}
	if _, err := depts.CreateDepartment(ctx, &pb.CreateDepartmentRequest{
		DepartmentId: "research", RequestId: "seed-research",
		Department: &pb.Department{DisplayName: "Research", AdminGroups: []string{"research-admins"},
			QuotaBudget: &pb.Quota{Gpu: "8", CpuMillis: 128_000, MemoryBytes: 1024 * gi}},
	}); ignoreExists(err) != nil {
		return fmt.Errorf("seed department: %w", err)
	}
	for _, tm := range demoTeams {
		if _, err := teams.CreateTeam(ctx, &pb.CreateTeamRequest{
			TeamId: tm.id, RequestId: "seed-" + tm.id,
			Team: &pb.Team{Department: "departments/research", DisplayName: tm.name, IsolationTier: tm.tier,
				Quota: &pb.Quota{Gpu: tm.gpu, CpuMillis: 32_000, MemoryBytes: 256 * gi}},
		}); ignoreExists(err) != nil {
			return fmt.Errorf("seed %s: %w", tm.id, err)
		}
	}
	for _, m := range []struct {
		team, user string
		role       pb.TeamRole
	}{{"team-a", "bob", pb.TeamRole_OWNER}, {"team-a", "carol", pb.TeamRole_MEMBER}, {"team-b", "dan", pb.TeamRole_OWNER}, {"team-b", "erin", pb.TeamRole_MEMBER}} {
		if _, err := members.CreateMember(ctx, &pb.CreateMemberRequest{
			Parent: "teams/" + m.team, MemberId: m.user, RequestId: "seed-" + m.team + "-" + m.user,
			Member: &pb.Member{Principal: &pb.Member_User{User: Email(m.user)}, Role: m.role},
		}); ignoreExists(err) != nil {
			return fmt.Errorf("seed member %s: %w", m.user, err)
		}
	}
	return nil
}
