#!/usr/bin/env bash
# Links google/api/{annotations,http}.proto from the grpc-gateway v1.16.0 Go
# module in the module cache (not copied into the repo).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(cd tools && GOFLAGS=-mod=mod go mod download -json github.com/grpc-ecosystem/grpc-gateway@v1.16.0 | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
mkdir -p third_party
ln -sfn "$dir/third_party/googleapis" third_party/googleapis
