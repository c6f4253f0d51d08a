package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// forbiddenInProduction are packages the production binary must never link:
// dev mode's OIDC issuer, throwaway PostgreSQL and local API server, test
// harnesses, and the Queue CRD test fixture. They live behind
// cmd/gpuplane-dev and _test.go files.
var forbiddenInProduction = []string{
	"github.com/zitadel/",                          // dev OIDC issuer
	"sigs.k8s.io/controller-runtime/pkg/envtest",   // local kube-apiserver + etcd
	"github.com/testcontainers/",                   // test databases in Docker
	"github.com/gpuplane/gpuplane/deploy/crds",     // test Queue CRD
	"github.com/gpuplane/gpuplane/internal/devenv", // and pgserver, oidcdev, vclusterchart
	"github.com/gpuplane/gpuplane/internal/envtestenv",
	"github.com/gpuplane/gpuplane/internal/apptest",
	"github.com/gpuplane/gpuplane/internal/store/storetest",
}

// TestProductionBinaryLinksNoDevCode runs `go list -deps` on this command
// and fails on any dev or test package in the list.
func TestProductionBinaryLinksNoDevCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/gpuplane/gpuplane/cmd/gpuplane").Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps printed %d packages; expected the whole dependency list", len(deps))
	}
	for _, p := range deps {
		for _, f := range forbiddenInProduction {
			if strings.HasPrefix(p, f) {
				t.Errorf("cmd/gpuplane links %s (forbidden prefix %s): dev and test code must stay out of the production binary", p, f)
			}
		}
	}
	t.Logf("cmd/gpuplane links %d packages", len(deps))
}
