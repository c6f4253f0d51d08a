package app_test

import (
	"net/http"
	"testing"

	"github.com/gpuplane/gpuplane/internal/apptest"
)

func TestSmoke(t *testing.T) {
	e := apptest.Start(t, apptest.Options{Seed: true})
	r := e.Do(t, "alice", "GET", "/v1/teams", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	t.Logf("%s", r.Body)
	r = e.Do(t, "erin", "GET", "/v1/teams/team-a/members", nil)
	t.Logf("%d %s", r.Status, r.Body)
	r = e.Do(t, "", "GET", "/v1/teams", nil)
	t.Logf("%d %s", r.Status, r.Body)
}
