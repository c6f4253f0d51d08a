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

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Fields(string(out))
}

const module = "github.com/gpuplane/gpuplane/"

// The layers: the worker and the domain never link the API layer (the
// generated gRPC code or its adapters), and the domain packages import
// nothing of gRPC, HTTP or Kubernetes themselves.
func TestLayers(t *testing.T) {
	apiLayer := []string{module + "api/gpuplane/v1", module + "internal/server"}
	domain := []string{"internal/reqctx", "internal/store", "internal/audit", "internal/virtualcluster", "internal/tenancy", "internal/fleet",
		"internal/request", "internal/workqueue", "internal/quota", "internal/policy", "internal/jsonshape"}
	for _, pkg := range append([]string{"internal/reconcile"}, domain...) {
		for _, dep := range goList(t, "-deps", module+pkg) {
			for _, f := range apiLayer {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s links %s: the worker and the domain must not depend on the API layer", pkg, dep)
				}
			}
		}
	}
	for _, pkg := range domain {
		for _, imp := range goList(t, "-f", `{{join .Imports "\n"}}`, module+pkg) {
			if strings.HasPrefix(imp, "google.golang.org/grpc") || strings.HasPrefix(imp, "k8s.io/") ||
				imp == "net/http" || strings.HasPrefix(imp, "google.golang.org/protobuf") {
				t.Errorf("domain package %s imports %s", pkg, imp)
			}
		}
	}
}
