# gpuplane — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
export GOFLAGS := -mod=mod
BIN := $(CURDIR)/bin
TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv3
GO_TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: run test test-go test-portal build generate generate-ts check-generated check-generated-ts lint lint-portal tools envtest bench clean

# The dev-mode command. `make run` and the browser test (hack/test-portal.sh)
# both start it from here, so moving it is a one-line change.
DEV_MAIN := ./cmd/gpuplane
DEV_ARGS := dev

## run: everything locally on embedded defaults (throwaway PostgreSQL, dev OIDC issuer, local host cluster)
run: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go run $(DEV_MAIN) $(DEV_ARGS)

## test: all tests against real PostgreSQL, a real kube-apiserver and a real OIDC issuer,
## then the TypeScript client's and Backstage plugin's tests, in a real browser too
test: test-go test-portal

test-go: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test $(GO_TEST_FLAGS) ./...

## test-portal: Jest unit tests, then Playwright in Debian's chromium against dev mode on free ports
test-portal: envtest node_modules/.package-lock.json
	DEV_MAIN="$(DEV_MAIN)" DEV_ARGS="$(DEV_ARGS)" hack/test-portal.sh

# npm dependencies of clients/typescript and plugins/gpuplane, exactly as locked.
node_modules/.package-lock.json: package-lock.json package.json clients/typescript/package.json plugins/gpuplane/package.json
	npm ci --no-audit --no-fund

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
	$(MAKE) generate-ts

## generate-ts: the TypeScript client's types from api/openapi.yaml (openapi-typescript)
generate-ts: node_modules/.package-lock.json
	npm run --silent generate

## check-generated: fail when committed generated code differs from proto/
check-generated: generate
	@if [ -n "$$(git status --porcelain -- api)" ]; then \
		echo "generated code in api/ is stale; run 'make generate' and commit:"; git status --porcelain -- api; exit 1; fi

## check-generated-ts: fail when the TypeScript client's types differ from api/openapi.yaml
check-generated-ts: generate-ts
	@if [ -n "$$(git status --porcelain -- clients/typescript/src/generated)" ]; then \
		echo "clients/typescript/src/generated is stale; run 'make generate-ts' and commit:"; \
		git status --porcelain -- clients/typescript/src/generated; exit 1; fi

## lint-portal: type-check, lint and build (as published) the TypeScript client and the plugin
lint-portal: node_modules/.package-lock.json
	npm run --silent lint
	npm run --silent build

lint:
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^api/'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go' | grep -v '^api/'); exit 1)

clean:
	rm -rf $(BIN) third_party node_modules dist-types
