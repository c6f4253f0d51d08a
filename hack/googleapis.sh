#!/usr/bin/env bash
# Builds the git-ignored third_party/googleapis that buf.yaml lists: links to
# google/api/{annotations,http}.proto in the grpc-gateway v1.16.0 Go module
# in the module cache, and google/api/field_behavior.proto rendered from the
# descriptor in google.golang.org/genproto (hack/googleapisproto), which that
# copy lacks. Nothing upstream is copied into the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(cd tools && GOFLAGS=-mod=mod go mod download -json github.com/grpc-ecosystem/grpc-gateway@v1.16.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
out=third_party/googleapis
rm -rf "$out"
mkdir -p "$out/google/api"
for f in annotations.proto http.proto; do
  ln -s "$dir/third_party/googleapis/google/api/$f" "$out/google/api/$f"
done
go run ./hack/googleapisproto "$out"
