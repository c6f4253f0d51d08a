package errs

import "testing"

func TestFieldPaths(t *testing.T) {
	for _, c := range []struct{ proto, json string }{
		{"request.create_virtual_cluster.spec.quota.cpu_millis", "request.createVirtualCluster.spec.quota.cpuMillis"},
		{"member_id", "memberId"},
		{"update_mask", "updateMask"},
		{"department.admin_groups[2]", "department.adminGroups[2]"},
		{"name", "name"},
		{"", ""},
		{"team.quota.gpu", "team.quota.gpu"},
	} {
		if got := JSONFieldPath(c.proto); got != c.json {
			t.Errorf("JSONFieldPath(%q) = %q, want %q", c.proto, got, c.json)
		}
		if got := ProtoFieldPath(c.json); got != c.proto {
			t.Errorf("ProtoFieldPath(%q) = %q, want %q", c.json, got, c.proto)
		}
		if got := ProtoFieldPath(c.proto); got != c.proto {
			t.Errorf("ProtoFieldPath(%q) changed a proto path to %q", c.proto, got)
		}
	}
}
