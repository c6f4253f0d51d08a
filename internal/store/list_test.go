package store

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/store/filter"
)

// Placeholders added by handlers must continue after the filter's.
func TestListQueryNumbersArgumentsAfterTheFilter(t *testing.T) {
	q, err := NewList(0, `state = PENDING AND team = "teams/a"`, filter.Schema{
		"state": {Column: "state", Type: filter.Enum, Enum: []string{"PENDING"}},
		"team":  {Column: "team_id", Type: filter.String, Strip: "teams/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if q.Size != DefaultPageSize {
		t.Fatalf("size %d", q.Size)
	}
	if got := q.Arg("x"); got != "$3" {
		t.Fatalf("first handler placeholder %s, want $3", got)
	}
	if len(q.args) != 3 || q.args[0] != "PENDING" || q.args[1] != "a" || q.args[2] != "x" {
		t.Fatalf("args %v", q.args)
	}
	if _, err := NewList(-1, "", nil); err == nil {
		t.Fatal("negative page size accepted")
	}
	if _, err := NewList(0, "nope = 1", filter.Schema{}); err == nil {
		t.Fatal("unknown filter field accepted")
	}
}
