# gpuplane — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
# go.mod and go.sum must be complete; `make check-tidy` says when they are not.
export GOFLAGS := -mod=readonly
BIN := $(CURDIR)/bin
TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv3
LINTER := $(BIN)/golangci-lint
GO_TEST_FLAGS ?= -count=1 -timeout 30m

.PHONY: run test test-go test-race test-readme test-portal test-unit build generate generate-ts check-generated check-generated-ts lint lint-portal lint-openapi check-tidy check-deps buf-breaking tools envtest bench fuzz clean

# The dev-mode command. `make run` and the browser test (hack/test-portal.sh)
# both start it from here, so moving it is a one-line change.
DEV_MAIN := ./cmd/gpuplane-dev
DEV_ARGS :=

## run: everything locally on embedded defaults (throwaway PostgreSQL, dev OIDC issuer, local host cluster)
# Built, then exec'd (not `go run`): a hard kill of make's child then hits
# the dev process itself, whose children die with it (internal/devenv/lifeline).
run: envtest
	go build -o $(BIN)/gpuplane-dev $(DEV_MAIN)
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" exec $(BIN)/gpuplane-dev $(DEV_ARGS)

## test: all tests against real PostgreSQL, a real kube-apiserver and a real OIDC issuer,
## then the TypeScript client's and Backstage plugin's tests, in a real browser too
test: test-go test-portal test-readme

test-go: envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test $(GO_TEST_FLAGS) ./...
	@# The SDK and the API package are their own modules (docs/api-conventions.md).
	cd api && go vet ./...
	cd pkg/client && go test $(GO_TEST_FLAGS) ./...
	@# A client generated from api/openapi.yaml by oapi-codegen, against the server.
	cd test/oapiclient && go test $(GO_TEST_FLAGS) ./...
	@# vCluster's pod syncer, imported at the default chart version in its own
	@# module (docs/vcluster-verification.md); first run builds vCluster's deps.
	cd test/vclusterproof && go test $(GO_TEST_FLAGS) ./...

## test-race: the race detector over the code that runs concurrently: whole packages where
## it is cheap (queue leases, key-set refetch, caches, interceptors and graceful stop,
## transactions with retries, the dev-mode lifeline), and the concurrency tests of the
## worker and the API (two workers, busy slots, shutdown, racing approvals and deletes,
## database restart under load); CI runs it after `make test`
RACE_PACKAGES := ./internal/workqueue/... ./internal/identity/... ./internal/server/... ./internal/store/... \
	./internal/request/... ./internal/policy/... ./internal/devenv/lifeline/...
RACE_RECONCILE_TESTS := ^(TestTwoWorkers|TestBusyWorkerClaimsWhenASlotFrees|TestWorkerReleasesLeasesOnShutdown|TestHostOutageDuringResync)$$
RACE_APP_TESTS := ^(TestWorkflowRace.*|TestConcurrentTeamDeleteAndWrites|TestWriteUnderADeletedTeamIsNotFound|TestGracefulShutdown|TestDatabaseRestartUnderLoad)$$
test-race: envtest
	go test -race $(GO_TEST_FLAGS) $(RACE_PACKAGES)
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test -race $(GO_TEST_FLAGS) -run '$(RACE_RECONCILE_TESTS)' ./internal/reconcile/
	go test -race $(GO_TEST_FLAGS) -run '$(RACE_APP_TESTS)' ./internal/app/

## test-unit: the fast part, with no kube-apiserver (PostgreSQL and the OIDC issuer are still real);
## tests that need envtest skip under -short and run in `make test`
test-unit:
	go test -short $(GO_TEST_FLAGS) ./...

## test-readme: README.md's walkthrough (blocks marked readme-test) against dev mode on free ports; every `# ->` checked
test-readme: envtest
	DEV_MAIN="$(DEV_MAIN)" DEV_ARGS="$(DEV_ARGS)" hack/test-readme.sh

## test-portal: Jest unit tests, then Playwright in Debian's chromium against dev mode on free ports
test-portal: envtest node_modules/.package-lock.json
	DEV_MAIN="$(DEV_MAIN)" DEV_ARGS="$(DEV_ARGS)" hack/test-portal.sh

# npm dependencies of clients/typescript and plugins/gpuplane, exactly as locked.
node_modules/.package-lock.json: package-lock.json package.json clients/typescript/package.json plugins/gpuplane/package.json
	npm ci --no-audit --no-fund

## bench: every benchmark behind the performance bar in one run, then each bar's verdict
## (hack/bench.sh; PostgreSQL and etcd run durably; run it on a quiet machine)
bench: envtest
	hack/bench.sh

## fuzz: every go test -fuzz target for FUZZTIME each (default 10s); seeds in testdata/fuzz
fuzz:
	hack/fuzz.sh

## build: the production binary (gpuplane), the CLI and the dev command
build:
	go build -o $(BIN)/ ./cmd/...

## envtest: build kube-apiserver + etcd once per machine (cached under ~/.cache/gpuplane)
envtest:
	@hack/envtest-assets.sh >/dev/null

$(TOOLS) &:
	cd tools && GOBIN=$(BIN) go install tool

tools: $(TOOLS)

# golangci-lint, pinned in its own module (tools/lint) so its dependencies
# never meet buf's.
$(LINTER): tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && GOBIN=$(BIN) go install tool

## generate: protobuf Go code, gRPC, gateway and the OpenAPI document from proto/
generate: tools
	hack/googleapis.sh
	$(BIN)/buf lint
	rm -rf api/gpuplane api/openapi
	$(BIN)/buf generate
	go run ./hack/openapimerge api/openapi/gpuplane/v1 api/openapi.yaml
	cd test/oapiclient && go generate ./...
	$(MAKE) generate-ts

## generate-ts: the TypeScript client's types from api/openapi.yaml (openapi-typescript)
generate-ts: node_modules/.package-lock.json
	npm run --silent generate

## check-generated: fail when committed generated code differs from proto/
check-generated: generate
	@if [ -n "$$(git status --porcelain -- api test/oapiclient)" ]; then \
		echo "generated code in api/ or test/oapiclient is stale; run 'make generate' and commit:"; git status --porcelain -- api test/oapiclient; exit 1; fi

## check-generated-ts: fail when the TypeScript client's types differ from api/openapi.yaml
check-generated-ts: generate-ts
	@if [ -n "$$(git status --porcelain -- clients/typescript/src/generated)" ]; then \
		echo "clients/typescript/src/generated is stale; run 'make generate-ts' and commit:"; \
		git status --porcelain -- clients/typescript/src/generated; exit 1; fi

## lint-portal: type-check, lint and build (as published) the TypeScript client and the plugin
lint-portal: node_modules/.package-lock.json
	npm run --silent lint
	npm run --silent build

## lint-openapi: Redocly (recommended rules, redocly.yaml) over api/openapi.yaml; justified warnings only
lint-openapi: node_modules/.package-lock.json
	hack/lint-openapi.sh

## buf-breaking: fail when proto/ breaks compatibility with the previous commit (the previous main on CI)
buf-breaking: tools
	hack/buf-breaking.sh

## lint: go vet, golangci-lint (.golangci.yml) and tidy modules
lint: $(LINTER) check-tidy
	go vet ./...
	cd test/vclusterproof && go vet ./...
	cd pkg/client && go vet ./...
	cd test/oapiclient && go vet ./...
	$(LINTER) run ./...
	cd test/vclusterproof && $(LINTER) run ./...
	cd pkg/client && $(LINTER) run ./...
	cd api && $(LINTER) run ./...

## check-tidy: fail when go.mod/go.sum of any module differ from `go mod tidy`
check-tidy:
	@for m in . api pkg/client tools tools/lint test/vclusterproof test/oapiclient; do \
		(cd $$m && go mod tidy -diff) || { echo "$$m: go.mod/go.sum are not tidy; run 'go mod tidy' there and commit"; exit 1; }; \
	done

## check-deps: the production binary links no dev or test code, the worker and domain no API layer
check-deps:
	go test -count=1 -run 'TestProductionBinaryLinksNoDevCode|TestLayers' ./cmd/gpuplane/
	@echo "cmd/gpuplane links $$(go list -deps ./cmd/gpuplane | wc -l) packages"

clean:
	rm -rf $(BIN) third_party node_modules dist-types
