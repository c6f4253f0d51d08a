package app_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/gpuplane/gpuplane/api/gpuplane/v1" // registers the service descriptors
)

// TestAuthzMatrixCoversEveryRPC walks the gRPC service descriptors of
// gpuplane.v1, so an RPC added to a proto without a row in one of the
// authorization matrices (matrixRows in authz_matrix_test.go, wfOps and
// wfPolicyOps in workflow_authz_test.go) fails here. A row's rpc is
// "Service.Method", optionally with a "(variant)" suffix.
func TestAuthzMatrixCoversEveryRPC(t *testing.T) {
	covered := map[string]bool{}
	add := func(rpc string) {
		name, _, _ := strings.Cut(rpc, "(")
		covered[name] = true
	}
	for _, r := range matrixRows() {
		add(r.rpc)
	}
	fx := &wfFixture{}
	for _, op := range wfOps(fx) {
		add(op.rpc)
	}
	for _, op := range wfPolicyOps(fx) {
		add(op.rpc)
	}

	var all []string
	protoregistry.GlobalFiles.RangeFilesByPackage("gpuplane.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				all = append(all, string(svc.Name())+"."+string(svc.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(all) < 30 {
		t.Fatalf("only %d RPCs found in the gpuplane.v1 descriptors: %v", len(all), all)
	}
	slices.Sort(all)
	for _, rpc := range all {
		if !covered[rpc] {
			t.Errorf("%s has no row in the authorization matrices: add one (who may call it, on whose objects)", rpc)
		}
		delete(covered, rpc)
	}
	for rpc := range covered {
		t.Errorf("matrix row %s names no RPC in the service descriptors", rpc)
	}
	t.Logf("%d RPCs, each with a matrix row", len(all))
}
