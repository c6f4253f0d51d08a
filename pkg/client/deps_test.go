package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// serverOnly are module path prefixes of the server's dependency graph that
// must never reach an SDK user's module.
var serverOnly = []string{"k8s.io/", "sigs.k8s.io/", "helm.sh/", "github.com/jackc/", "github.com/loft-sh/", "github.com/golang-migrate/"}

// The SDK is its own module so that importing it does not pull the
// server's dependencies (Kubernetes, Helm, pgx) into a user's module:
// neither its module graph nor the packages it links name any of them, nor
// the server's module.
func TestModuleGraphHasNoServerDependencies(t *testing.T) {
	graph := goCmd(t, "mod", "graph")
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		for _, mod := range strings.Fields(line) {
			for _, bad := range serverOnly {
				if strings.HasPrefix(mod, bad) {
					t.Errorf("module graph has %s (%s)", mod, line)
				}
			}
			if path, _, _ := strings.Cut(mod, "@"); path == "github.com/gpuplane/gpuplane" {
				t.Errorf("module graph has the server's module (%s)", line)
			}
		}
	}
	deps := goCmd(t, "list", "-deps", "-test", "./...")
	for _, p := range strings.Fields(deps) {
		for _, bad := range serverOnly {
			if strings.HasPrefix(p, bad) {
				t.Errorf("the SDK links %s", p)
			}
		}
		if strings.HasPrefix(p, "github.com/gpuplane/gpuplane/") && !strings.HasPrefix(p, "github.com/gpuplane/gpuplane/api/") &&
			!strings.HasPrefix(p, "github.com/gpuplane/gpuplane/pkg/client") {
			t.Errorf("the SDK links %s, outside the api and pkg/client modules", p)
		}
	}
	if !strings.Contains(deps, "github.com/gpuplane/gpuplane/api/gpuplane/v1\n") {
		t.Errorf("go list -deps does not list the API package; the check above proves nothing:\n%s", deps)
	}
}

func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(cmd.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
