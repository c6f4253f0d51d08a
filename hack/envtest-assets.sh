#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries envtest needs from the Go module
# proxy (the usual prebuilt download is not reachable everywhere) and caches
# them by version outside the clone, so a fresh clone on the same machine
# reuses them. Prints the directory holding the binaries on stdout; progress
# goes to stderr because the first build takes several minutes.
set -euo pipefail

K8S_VERSION="${ENVTEST_K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ENVTEST_ETCD_VERSION:-3.6.16}"
CACHE_ROOT="${GPUPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuplane}"
BIN="$CACHE_ROOT/envtest/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"

log() { echo "envtest-assets: $*" >&2; }

if [[ -x "$BIN/kube-apiserver" && -x "$BIN/etcd" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$BIN"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOWORK=off

if [[ ! -x "$BIN/etcd" ]]; then
  log "building etcd v$ETCD_VERSION (about 30 s)..."
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init envtest-etcd >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2
  go build -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
  log "etcd ready"
fi

if [[ ! -x "$BIN/kube-apiserver" ]]; then
  log "building kube-apiserver v$K8S_VERSION (about 6 minutes on 2 cores, once per machine)..."
  mkdir -p "$work/apiserver" && cd "$work/apiserver"
  go mod init envtest-apiserver >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" > dl.json
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
  staging_minor="0.${K8S_VERSION#1.}"
  # k8s.io/kubernetes replaces its staging modules with local paths; point each
  # at the published module of the matching version instead.
  {
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo "replace ("
    grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$gomod" | awk -v v="v$staging_minor" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >> go.mod
  log "resolving $(grep -c ' => ' go.mod) staging modules..."
  go mod tidy >&2 2>/dev/null || true
    go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" >&2
  ( while sleep 30; do log "still compiling kube-apiserver..."; done ) &
  ticker=$!
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  vpkg=k8s.io/component-base/version
  go build -ldflags "-X $vpkg.gitVersion=v$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean" \
    -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
  kill "$ticker" 2>/dev/null || true
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  log "kube-apiserver ready"
fi
echo "$BIN"
