# gpuplane — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
export GOFLAGS := -mod=mod
BIN := $(CURDIR)/bin
TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv3
GO_TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: run test build generate check-generated lint tools envtest bench clean

## run: everything locally on embedded defaults (throwaway PostgreSQL, dev OIDC issuer, local host cluster)
run: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go run ./cmd/gpuplane dev

## test: all tests against real PostgreSQL, a real kube-apiserver and a real OIDC issuer
test: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test $(GO_TEST_FLAGS) ./...
	@# vCluster's pod syncer, imported at the default chart version in its own
	@# module (docs/vcluster-verification.md); first run builds vCluster's deps.
	cd test/vclusterproof && go test $(GO_TEST_FLAGS) ./...

## bench: the benchmarks behind the numbers in the closing notes
bench: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test -run '^$$' -bench . -benchmem -count=1 ./...

build:
	go build -o $(BIN)/ ./cmd/...

## envtest: build kube-apiserver + etcd once per machine (cached under ~/.cache/gpuplane)
envtest:
	@hack/envtest-assets.sh >/dev/null

$(TOOLS) &:
	cd tools && GOBIN=$(BIN) go install tool

tools: $(TOOLS)

## generate: protobuf Go code, gRPC, gateway and the OpenAPI document from proto/
generate: tools
	hack/googleapis.sh
	$(BIN)/buf lint
	rm -rf api/gpuplane api/openapi
	$(BIN)/buf generate
	go run ./hack/openapimerge api/openapi/gpuplane/v1 api/openapi.yaml

## check-generated: fail when committed generated code differs from proto/
check-generated: generate
	@if [ -n "$$(git status --porcelain -- api)" ]; then \
		echo "generated code in api/ is stale; run 'make generate' and commit:"; git status --porcelain -- api; exit 1; fi

lint:
	go vet ./...
	cd test/vclusterproof && go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^api/'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go' | grep -v '^api/'); exit 1)

clean:
	rm -rf $(BIN) third_party
