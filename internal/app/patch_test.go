package app_test

import (
	"net/http"
	"testing"

	"github.com/gpuplane/gpuplane/internal/apptest"
)

// A client that reads an object, edits it and PATCHes the whole thing back
// (the gateway then masks every field in the body) must succeed as long as
// immutable fields are unchanged, and must be refused when they change.
func TestRESTPatchWholeObjectRoundTrip(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})

	team := e.Do(t, "alice", "GET", "/v1/teams/team-a", nil).Map(t)
	team["displayName"] = "Vision"
	r := e.Do(t, "alice", "PATCH", "/v1/teams/team-a", team)
	if r.Status != http.StatusOK {
		t.Fatalf("whole-object PATCH of a team: %d %s", r.Status, r.Body)
	}
	if got := r.Map(t)["displayName"]; got != "Vision" {
		t.Fatalf("displayName = %v", got)
	}

	team = r.Map(t)
	team["department"] = "departments/elsewhere"
	if r := e.Do(t, "alice", "PATCH", "/v1/teams/team-a", team); r.Status != http.StatusBadRequest {
		t.Fatalf("moving a team to another department: %d %s, want 400", r.Status, r.Body)
	}

	member := e.Do(t, "bob", "GET", "/v1/teams/team-a/members/carol", nil).Map(t)
	member["role"] = "VIEWER"
	if r := e.Do(t, "bob", "PATCH", "/v1/teams/team-a/members/carol", member); r.Status != http.StatusOK {
		t.Fatalf("whole-object PATCH of a member: %d %s", r.Status, r.Body)
	}
	member = e.Do(t, "bob", "GET", "/v1/teams/team-a/members/carol", nil).Map(t)
	member["user"] = "mallory@example.com"
	if r := e.Do(t, "bob", "PATCH", "/v1/teams/team-a/members/carol", member); r.Status != http.StatusBadRequest {
		t.Fatalf("changing a member's user: %d %s, want 400", r.Status, r.Body)
	}

	// A body the gateway cannot decode still gets the standard error shape.
	r = e.Do(t, "alice", "POST", "/v1/teams?teamId=x", `{"isolationTier": "PLATINUM"}`)
	if r.Status != http.StatusBadRequest {
		t.Fatalf("undecodable body: %d %s", r.Status, r.Body)
	}
	details, _ := r.Map(t)["details"].([]any)
	if len(details) != 2 {
		t.Fatalf("undecodable body: want ErrorInfo and BadRequest details, got %s", r.Body)
	}
}
