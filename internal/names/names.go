// Package names validates ids and parses AIP resource names
// ("teams/team-a/members/bob").
package names

import (
	"regexp"
	"strings"

	"github.com/gpuplane/gpuplane/internal/errs"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CheckID reports why id is not a DNS-1123 label, or "" when it is. Ids
// become Kubernetes namespace and KAI queue names, hence the rule.
func CheckID(id string) string {
	switch {
	case id == "":
		return "must not be empty"
	case len(id) > 63:
		return "must be at most 63 characters (a DNS-1123 label)"
	case !dnsLabel.MatchString(id):
		return "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
	}
	return ""
}

// ValidateID adds a violation on field when id is not a DNS-1123 label.
func ValidateID(v *errs.Violations, field, id string) {
	if why := CheckID(id); why != "" {
		v.Add(field, "%q %s", id, why)
	}
}

// Parse splits name by the pattern's collection segments, e.g.
// Parse("teams/a/members/b", "teams", "members") = ["a", "b"]. Ids must be
// DNS-1123 labels; errors name field.
func Parse(field, name string, collections ...string) ([]string, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 2*len(collections) {
		return nil, malformed(field, name, collections)
	}
	ids := make([]string, len(collections))
	for i, c := range collections {
		if parts[2*i] != c {
			return nil, malformed(field, name, collections)
		}
		id := parts[2*i+1]
		if why := CheckID(id); why != "" {
			return nil, errs.InvalidField(field, "%q: id %q %s", name, id, why)
		}
		ids[i] = id
	}
	return ids, nil
}

func malformed(field, name string, collections []string) error {
	var b strings.Builder
	for i, c := range collections {
		if i > 0 {
			b.WriteByte('/')
		}
		singular := strings.TrimSuffix(c, "s")
		if strings.HasSuffix(c, "ies") {
			singular = strings.TrimSuffix(c, "ies") + "y"
		}
		b.WriteString(c + "/{" + singular + "}")
	}
	if name == "" {
		return errs.InvalidField(field, "required; expected %s", b.String())
	}
	return errs.InvalidField(field, "%q is not a valid name; expected %s", name, b.String())
}

// Department is the resource name of a department id.
func Department(id string) string { return "departments/" + id }

// Team is the resource name of a team id.
func Team(id string) string { return "teams/" + id }

// Member is the resource name of a member of a team.
func Member(team, id string) string { return "teams/" + team + "/members/" + id }

// VirtualCluster is the resource name of a virtual cluster of a team.
func VirtualCluster(team, id string) string {
	return "teams/" + team + "/virtualClusters/" + id
}

// Request is the resource name of a request id.
func Request(id string) string { return "requests/" + id }

// ApprovalPolicy is the resource name of an approval policy id.
func ApprovalPolicy(id string) string { return "approvalPolicies/" + id }

// HostCluster is the resource name of a host cluster id.
func HostCluster(id string) string { return "hostClusters/" + id }

// ParseDepartment etc. return the ids inside a resource name.
func ParseDepartment(field, name string) (string, error) {
	ids, err := Parse(field, name, "departments")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// ParseTeam returns the team id in a team name.
func ParseTeam(field, name string) (string, error) {
	ids, err := Parse(field, name, "teams")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// ParseMember returns the team and member ids in a member name.
func ParseMember(field, name string) (team, member string, err error) {
	ids, err := Parse(field, name, "teams", "members")
	if err != nil {
		return "", "", err
	}
	return ids[0], ids[1], nil
}

// ParseVirtualCluster returns the team and virtual-cluster ids in a
// virtual-cluster name.
func ParseVirtualCluster(field, name string) (team, vc string, err error) {
	ids, err := Parse(field, name, "teams", "virtualClusters")
	if err != nil {
		return "", "", err
	}
	return ids[0], ids[1], nil
}

// ParseApprovalPolicy returns the policy id in an approval-policy name.
func ParseApprovalPolicy(field, name string) (string, error) {
	ids, err := Parse(field, name, "approvalPolicies")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// ParseHostCluster returns the host cluster id in a host-cluster name.
func ParseHostCluster(field, name string) (string, error) {
	ids, err := Parse(field, name, "hostClusters")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// ParseRequest accepts server-generated request ids (lowercase hex with a
// prefix, which are also DNS labels).
func ParseRequest(field, name string) (string, error) {
	ids, err := Parse(field, name, "requests")
	if err != nil {
		return "", err
	}
	return ids[0], nil
}
