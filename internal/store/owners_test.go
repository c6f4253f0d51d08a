package store_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sqlStatement finds SQL that reads or writes a table in Go source.
var sqlStatement = regexp.MustCompile(`(?i)\b(SELECT\s.*\sFROM\s|INSERT\s+INTO\s|DELETE\s+FROM\s|UPDATE\s+[a-z_]+(\s+[a-z])?\s+SET\s)`)

// owners are the only non-test files that may hold SQL for a table: one
// repository per table, beside the package that owns it, and the store's
// own plumbing (migrations, idempotency_keys, test databases).
var owners = []string{
	"internal/virtualcluster/store.go",        // virtual_clusters, held_quota (kept by its triggers)
	"internal/tenancy/store_departments.go",   // departments
	"internal/tenancy/store_teams.go",         // teams
	"internal/tenancy/store_members.go",       // members
	"internal/request/store_requests.go",      // requests
	"internal/request/store_policies.go",      // approval_policies
	"internal/workqueue/workqueue.go",         // reconcile_work
	"internal/audit/audit.go",                 // audit_events
	"internal/events/store.go",                // event_feed, event_positions
	"internal/webhook/store_subscriptions.go", // webhook_subscriptions
	"internal/webhook/store_deliveries.go",    // webhook_deliveries, webhook_dispatch
	"internal/fleet/store.go",                 // host_clusters
	"internal/store/idempotency.go",           // idempotency_keys
	"internal/store/migrate.go",               // schema_migrations
	"internal/store/storetest/storetest.go",   // throwaway test databases
}

// TestNoSQLOutsideTheOwners keeps "one owner per table" true: a statement
// on a table anywhere else fails the build's tests.
func TestNoSQLOutsideTheOwners(t *testing.T) {
	root := "../.."
	allowed := map[string]bool{}
	for _, o := range owners {
		allowed[o] = true
		if _, err := os.Stat(filepath.Join(root, o)); err != nil {
			t.Errorf("owner %s: %v", o, err)
		}
	}
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch rel {
			case ".git", "api", "node_modules", "third_party", "bin", "plugins":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || allowed[rel] {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(src), "\n") {
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "//") {
				continue
			}
			if sqlStatement.MatchString(line) {
				t.Errorf("%s:%d holds SQL outside the table owners: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files; is the walk rooted at the module?", checked)
	}
}
