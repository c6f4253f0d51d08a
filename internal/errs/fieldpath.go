package errs

import "strings"

// JSONFieldPath turns a field path of proto names into the same path of
// JSON names: "request.create_virtual_cluster.spec.quota.cpu_millis" ->
// "request.createVirtualCluster.spec.quota.cpuMillis". Index suffixes
// ("admin_groups[2]") are kept. Domain code names fields by proto name, as
// gRPC callers see them; the REST gateway (internal/server) renders every
// violation with this, so REST callers see the names of the JSON they sent.
// The rule is protojson's default JSON name (no json_name options in the
// API): drop each underscore and upper-case the letter after it.
func JSONFieldPath(path string) string {
	if !strings.Contains(path, "_") {
		return path
	}
	var b strings.Builder
	b.Grow(len(path))
	up := false
	for _, r := range path {
		switch {
		case r == '_':
			up = true
			continue
		case up && r >= 'a' && r <= 'z':
			r -= 'a' - 'A'
		}
		up = false
		b.WriteRune(r)
	}
	return b.String()
}

// ProtoFieldPath is the inverse of JSONFieldPath for lowerCamelCase paths:
// "quotaBudget.cpuMillis" -> "quota_budget.cpu_millis". Paths already in
// proto form come back unchanged, so callers accept both.
func ProtoFieldPath(path string) string {
	if strings.IndexFunc(path, func(r rune) bool { return r >= 'A' && r <= 'Z' }) < 0 {
		return path
	}
	var b strings.Builder
	b.Grow(len(path) + 4)
	for _, r := range path {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
