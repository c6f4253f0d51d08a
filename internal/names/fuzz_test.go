package names

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// patterns are the resource names the API accepts, each with the function
// that builds a name from ids and the one that parses it.
var patterns = []struct {
	collections []string
	build       func(ids []string) string
	parse       func(field, name string) ([]string, error)
}{
	{[]string{"departments"}, func(ids []string) string { return Department(ids[0]) }, one(ParseDepartment)},
	{[]string{"teams"}, func(ids []string) string { return Team(ids[0]) }, one(ParseTeam)},
	{[]string{"teams", "members"}, func(ids []string) string { return Member(ids[0], ids[1]) }, two(ParseMember)},
	{[]string{"teams", "virtualClusters"}, func(ids []string) string { return VirtualCluster(ids[0], ids[1]) }, two(ParseVirtualCluster)},
	{[]string{"requests"}, func(ids []string) string { return Request(ids[0]) }, one(ParseRequest)},
	{[]string{"approvalPolicies"}, func(ids []string) string { return ApprovalPolicy(ids[0]) }, one(ParseApprovalPolicy)},
}

func one(fn func(field, name string) (string, error)) func(string, string) ([]string, error) {
	return func(field, name string) ([]string, error) {
		id, err := fn(field, name)
		if err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
}

func two(fn func(field, name string) (string, string, error)) func(string, string) ([]string, error) {
	return func(field, name string) ([]string, error) {
		a, b, err := fn(field, name)
		if err != nil {
			return nil, err
		}
		return []string{a, b}, nil
	}
}

// FuzzParseNames checks every resource-name parser on any text:
//   - no panic;
//   - a rejection is INVALID_ARGUMENT / INVALID_FIELD with one violation on
//     the field passed in;
//   - an accepted name yields ids that are DNS-1123 labels (they become
//     namespace and queue names) and builds back to exactly the input;
//   - ids are accepted exactly when Kubernetes' own DNS-1123 label check
//     accepts them.
func FuzzParseNames(f *testing.F) {
	for _, s := range []string{
		"teams/team-a", "teams/team-a/members/bob", "teams/a/virtualClusters/ml", "departments/research",
		"requests/req-0123abcd", "approvalPolicies/small", "teams/Team-A", "teams/a/", "/teams/a", "teams//members/b",
		"teams/a/members/b/extra", "teams/" + strings.Repeat("a", 64), "teams/té", "teams/a\x00b", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		for _, p := range patterns {
			ids, err := p.parse("parent", name)
			if err != nil {
				e, ok := errs.As(err)
				if !ok || e.Kind != errs.KindInvalidArgument || e.Reason != errs.ReasonInvalidField {
					t.Fatalf("parse %v (%q): error %v is not INVALID_ARGUMENT/INVALID_FIELD", p.collections, name, err)
				}
				if len(e.Violations) != 1 || e.Violations[0].Field != "parent" || e.Violations[0].Description == "" {
					t.Fatalf("parse %v (%q): violations %v, want one on parent", p.collections, name, e.Violations)
				}
				continue
			}
			if len(ids) != len(p.collections) {
				t.Fatalf("parse %v (%q) = %v", p.collections, name, ids)
			}
			for _, id := range ids {
				if CheckID(id) != "" || len(validation.IsDNS1123Label(id)) != 0 {
					t.Fatalf("parse %v (%q) accepted id %q that is no DNS-1123 label", p.collections, name, id)
				}
			}
			if back := p.build(ids); back != name {
				t.Fatalf("parse %v (%q) = %v builds back to %q", p.collections, name, ids, back)
			}
		}
		// The same text as an id.
		if ours, k8s := CheckID(name) == "", len(validation.IsDNS1123Label(name)) == 0; ours != k8s {
			t.Fatalf("CheckID(%q) valid=%v, Kubernetes says %v", name, ours, k8s)
		}
		var v errs.Violations
		ValidateID(&v, "team_id", name)
		if (len(v) == 0) != (CheckID(name) == "") || (len(v) == 1 && v[0].Field != "team_id") {
			t.Fatalf("ValidateID(%q) = %v, CheckID says %q", name, v, CheckID(name))
		}
	})
}
