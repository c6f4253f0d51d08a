package identity

import "sort"

// Role is a team role; higher values include the lower ones.
type Role int

// Roles, lowest first.
const (
	RoleNone Role = iota
	RoleViewer
	RoleMember
	RoleOwner
)

func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "VIEWER"
	case RoleMember:
		return "MEMBER"
	case RoleOwner:
		return "OWNER"
	}
	return "NONE"
}

// ParseRole maps the stored role text to a Role.
func ParseRole(s string) Role {
	switch s {
	case "VIEWER":
		return RoleViewer
	case "MEMBER":
		return RoleMember
	case "OWNER":
		return RoleOwner
	}
	return RoleNone
}

// TeamGrant is what a caller holds on one team.
type TeamGrant struct {
	Department string
	Role       Role
	// Member ids that grant the role (a user entry and group entries).
	Via []string
}

// Access is everything the authorization rules need to know about a caller,
// loaded once per call. The rules:
//   - platform admins (configured OIDC groups) may do anything;
//   - department admins (the department's admin_groups) manage the
//     department's teams, members and requests, and decide its requests;
//   - team OWNERs manage members and ask for resources; MEMBERs and
//     VIEWERs read (MEMBERs also use the virtual clusters).
//
// Objects a caller cannot read are reported as NOT_FOUND, so names of other
// teams' objects do not leak; objects it can read but not change give
// PERMISSION_DENIED.
type Access struct {
	Principal     Principal
	PlatformAdmin bool
	AdminOf       map[string]bool // department ids
	Teams         map[string]TeamGrant
}

// IsDepartmentAdmin reports platform admins and admins of dept.
func (a *Access) IsDepartmentAdmin(dept string) bool {
	return a.PlatformAdmin || a.AdminOf[dept]
}

// TeamRole is the caller's role on team (RoleNone when it has none).
func (a *Access) TeamRole(team string) Role { return a.Teams[team].Role }

// CanReadDepartment allows admins of it, and anyone with a role in one of its teams.
func (a *Access) CanReadDepartment(dept string) bool {
	if a.IsDepartmentAdmin(dept) {
		return true
	}
	for _, g := range a.Teams {
		if g.Department == dept && g.Role > RoleNone {
			return true
		}
	}
	return false
}

// CanReadTeam allows department admins and any team role.
func (a *Access) CanReadTeam(team, dept string) bool {
	return a.IsDepartmentAdmin(dept) || a.TeamRole(team) >= RoleViewer
}

// CanManageTeam allows creating, updating and deleting the team itself.
func (a *Access) CanManageTeam(dept string) bool { return a.IsDepartmentAdmin(dept) }

// CanManageMembers allows team owners and department admins.
func (a *Access) CanManageMembers(team, dept string) bool {
	return a.IsDepartmentAdmin(dept) || a.TeamRole(team) >= RoleOwner
}

// CanRequest allows asking for resources on behalf of the team.
func (a *Access) CanRequest(team, dept string) bool {
	return a.IsDepartmentAdmin(dept) || a.TeamRole(team) >= RoleOwner
}

// CanDecide allows approving or rejecting requests of the department.
func (a *Access) CanDecide(dept string) bool { return a.IsDepartmentAdmin(dept) }

// CanUseVirtualClusters allows getting a kubeconfig and running workloads.
func (a *Access) CanUseVirtualClusters(team string) bool {
	return a.TeamRole(team) >= RoleViewer
}

// ReadableTeams and ReadableDepartments scope list queries for callers who
// are not platform admins (callers filter by "team in T or department in D").
func (a *Access) ReadableTeams() []string {
	out := make([]string, 0, len(a.Teams))
	for t, g := range a.Teams {
		if g.Role > RoleNone {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// AdminDepartments are the departments the caller administers.
func (a *Access) AdminDepartments() []string {
	out := make([]string, 0, len(a.AdminOf))
	for d, ok := range a.AdminOf {
		if ok {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// MemberDepartments are departments the caller reads through a team role.
func (a *Access) MemberDepartments() []string {
	seen := map[string]bool{}
	for _, g := range a.Teams {
		if g.Role > RoleNone {
			seen[g.Department] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
