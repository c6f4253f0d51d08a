#!/usr/bin/env bash
# Prints the path of a kubectl for the README walkthrough test: the one on
# PATH, else one built from the Go module proxy (k8s.io/kubectl at the
# envtest Kubernetes version) and cached beside the envtest binaries, as
# hack/envtest-assets.sh does for kube-apiserver (no prebuilt download).
set -euo pipefail
if command -v kubectl >/dev/null 2>&1; then command -v kubectl; exit 0; fi

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.37.2}"
CACHE_ROOT="${GPUPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuplane}"
BIN="$CACHE_ROOT/kubectl/v$K8S_VERSION"
if [[ -x "$BIN/kubectl" ]]; then echo "$BIN/kubectl"; exit 0; fi

echo "kubectl.sh: building kubectl v$K8S_VERSION from the Go module proxy (once per machine)..." >&2
mkdir -p "$BIN"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-mod=mod GOWORK=off
go mod init kubectl-build >/dev/null 2>&1
cat > main.go <<'GO'
// kubectl, from its published library.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() { cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()) }
GO
go get "k8s.io/kubectl@v0.${K8S_VERSION#1.}" >&2
go mod tidy >&2
go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$K8S_VERSION" -o "$BIN/kubectl.tmp" .
mv "$BIN/kubectl.tmp" "$BIN/kubectl"
echo "$BIN/kubectl"
