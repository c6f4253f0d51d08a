package names

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/errs"
)

func TestCheckID(t *testing.T) {
	for id, ok := range map[string]bool{
		"team-a": true, "a": true, "0abc": true, strings.Repeat("a", 63): true,
		"": false, "Team-A": false, "team_a": false, "-team": false, "team-": false,
		strings.Repeat("a", 64): false, "té": false, "a.b": false,
	} {
		if got := CheckID(id) == ""; got != ok {
			t.Errorf("CheckID(%q) valid=%v, want %v (%s)", id, got, ok, CheckID(id))
		}
	}
}

func TestParse(t *testing.T) {
	team, member, err := ParseMember("name", "teams/team-a/members/bob")
	if err != nil || team != "team-a" || member != "bob" {
		t.Fatalf("ParseMember = %q %q %v", team, member, err)
	}
	if id, err := ParseApprovalPolicy("name", "approvalPolicies/small"); err != nil || id != "small" {
		t.Fatalf("ParseApprovalPolicy = %q %v", id, err)
	}
	for _, tc := range []struct{ name, want string }{
		{"", "required; expected teams/{team}/members/{member}"},
		{"teams/team-a", "expected teams/{team}/members/{member}"},
		{"teams/team-a/users/bob", "expected teams/{team}/members/{member}"},
		{"teams/Team-A/members/bob", `id "Team-A" must be a DNS-1123 label`},
	} {
		_, _, err := ParseMember("name", tc.name)
		e, ok := errs.As(err)
		if !ok || e.Kind != errs.KindInvalidArgument || len(e.Violations) != 1 || e.Violations[0].Field != "name" ||
			!strings.Contains(e.Violations[0].Description, tc.want) {
			t.Errorf("ParseMember(%q) = %v, want a violation on name containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := ParseApprovalPolicy("name", "x"); err == nil || !strings.Contains(err.Error(), "approvalPolicies/{approvalPolicy}") {
		t.Errorf("policy pattern in error: %v", err)
	}
	if VirtualCluster("team-a", "ml") != "teams/team-a/virtualClusters/ml" {
		t.Error("VirtualCluster name")
	}
}

func TestDedicatedPool(t *testing.T) {
	if got := DedicatedPool("team-b"); got != "dedicated-team-b" {
		t.Errorf("DedicatedPool(team-b) = %q", got)
	}
	long := strings.Repeat("a", 43) + "-" + strings.Repeat("b", 19) // 63 characters, "-" at position 44
	other := strings.Repeat("a", 43) + "-" + strings.Repeat("c", 19)
	for _, team := range []string{strings.Repeat("x", 53), strings.Repeat("x", 54), long, strings.Repeat("z", 63)} {
		p := DedicatedPool(team)
		if why := CheckPool(p); why != "" {
			t.Errorf("DedicatedPool(%q) = %q: %s", team, p, why)
		}
	}
	if DedicatedPool(long) == DedicatedPool(other) {
		t.Error("shortened pools must stay distinct")
	}
	if got := DedicatedPool(long); !strings.HasPrefix(got, "dedicated-"+strings.Repeat("a", 43)+"-") || len(got) != 10+43+1+8 {
		t.Errorf("shortened pool %q", got)
	}
	if CheckPool(SharedPool) == "" || CheckPool("Bad_Pool") == "" {
		t.Error("shared and invalid pools must be refused")
	}
}
