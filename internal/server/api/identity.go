package api

import (
	"context"
	"sort"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/names"
)

// GetCurrentUser implements pb.IdentityServiceServer.
func (s *Identity) GetCurrentUser(ctx context.Context, _ *pb.GetCurrentUserRequest) (*pb.User, error) {
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	u := &pb.User{
		Subject:       a.Principal.Subject,
		Username:      a.Principal.Username,
		Email:         a.Principal.Email,
		Groups:        a.Principal.Groups,
		PlatformAdmin: a.PlatformAdmin,
	}
	for _, d := range a.AdminDepartments() {
		u.AdminOfDepartments = append(u.AdminOfDepartments, names.Department(d))
	}
	for _, team := range a.ReadableTeams() {
		g := a.Teams[team]
		b := &pb.TeamRoleBinding{Team: names.Team(team), Role: pb.TeamRole(pb.TeamRole_value[g.Role.String()])}
		for _, m := range g.Via {
			b.ViaMembers = append(b.ViaMembers, names.Member(team, m))
		}
		sort.Strings(b.ViaMembers)
		u.TeamRoles = append(u.TeamRoles, b)
	}
	return u, nil
}
