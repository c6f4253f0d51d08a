#!/usr/bin/env bash
# make test-portal: the TypeScript client's and the Backstage plugin's unit
# tests (Jest), then the browser test: dev mode (throwaway PostgreSQL, dev
# OIDC issuer, local host cluster, worker + simulator) on free ports, the
# plugin's dev app, and Playwright driving Debian's chromium through
# sign-in, request, approval and READY. Dev mode is stopped on every exit.
#
#   DEV_MAIN, DEV_ARGS  the dev-mode command (set by the Makefile)
#   CHROMIUM_PATH       the browser (default: chromium on PATH)
#   PORTAL_KEEP_LOGS=1  keep the work directory with dev mode's log
#
# Screenshots: plugins/gpuplane/e2e-artifacts/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

DEV_MAIN=${DEV_MAIN:-./cmd/gpuplane-dev}
DEV_ARGS=${DEV_ARGS-}
CHROMIUM_PATH=${CHROMIUM_PATH:-$(command -v chromium || true)}

step() { echo; echo "=== test-portal: $* ($(date +%H:%M:%S))"; }
die() { echo "test-portal: $*" >&2; exit 1; }

[[ -x node_modules/.bin/backstage-cli && -x node_modules/.bin/playwright ]] ||
  die "npm dependencies are missing: run 'npm ci' in the repository root"
[[ -n "$CHROMIUM_PATH" && -x "$CHROMIUM_PATH" ]] ||
  die "chromium not found: install it (Debian: apt-get install chromium) or set CHROMIUM_PATH"
export CHROMIUM_PATH

step "unit tests (Jest): @gpuplane/client and @gpuplane/backstage-plugin"
npm test --workspaces

work=$(mktemp -d)
dev_pid=
cleanup() {
  local rc=$?
  if [[ -n "$dev_pid" ]] && kill -0 "$dev_pid" 2>/dev/null; then
    echo "test-portal: stopping dev mode (pid $dev_pid)"
    kill -TERM -- "-$dev_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$dev_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$dev_pid" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$work/dev.log" ]]; then
    echo "--- last lines of dev mode's log ($work/dev.log)"
    tail -n 40 "$work/dev.log" || true
  fi
  if [[ $rc -eq 0 && -z "${PORTAL_KEEP_LOGS:-}" ]]; then rm -rf "$work"; else echo "test-portal: logs kept in $work"; fi
  exit $rc
}
trap cleanup EXIT

step "building the dev-mode command ($DEV_MAIN)"
go build -o "$work/gpuplane-dev" "$DEV_MAIN"

# Four free loopback ports, so a `make run` of the developer (8080, 9090,
# 5556, 3000) or another test run never collides with this one.
read -r HTTP_PORT GRPC_PORT ISSUER_PORT APP_PORT < <(node -e '
  const net = require("net");
  const ports = [];
  const next = () => { const s = net.createServer(); s.listen(0, "127.0.0.1", () => {
    ports.push(s.address().port); s.close(() => ports.length < 4 ? next() : console.log(ports.join(" "))); }); };
  next();')
API_URL="http://127.0.0.1:$HTTP_PORT"
ISSUER_URL="http://127.0.0.1:$ISSUER_PORT"
APP_URL="http://localhost:$APP_PORT"

step "starting dev mode: API $API_URL, issuer $ISSUER_URL, CORS for $APP_URL"
assets=$(hack/envtest-assets.sh)
# Its own cache directory: dev mode writes its kubeconfig there, and a
# developer's `make run` must keep theirs. The Go caches stay shared.
mkdir -p "$work/cache"
# shellcheck disable=SC2086 # DEV_ARGS is a word list
setsid env KUBEBUILDER_ASSETS="$assets" XDG_CACHE_HOME="$work/cache" \
  GOCACHE="$(go env GOCACHE)" GOMODCACHE="$(go env GOMODCACHE)" \
  "$work/gpuplane-dev" $DEV_ARGS \
  --http-addr "127.0.0.1:$HTTP_PORT" --grpc-addr "127.0.0.1:$GRPC_PORT" --metrics-addr 127.0.0.1:0 \
  --issuer-addr "127.0.0.1:$ISSUER_PORT" --cors-allowed-origins "$APP_URL" \
  >"$work/dev.log" 2>&1 </dev/null &
dev_pid=$!

deadline=$((SECONDS + 240))
until curl -fsS "$API_URL/readyz" >/dev/null 2>&1; do
  kill -0 "$dev_pid" 2>/dev/null || die "dev mode exited before it was ready"
  ((SECONDS < deadline)) || die "dev mode was not ready within 240 s"
  sleep 1
done
echo "dev mode ready after $((SECONDS - deadline + 240)) s"

step "browser test: Playwright in $CHROMIUM_PATH"
rm -rf plugins/gpuplane/e2e-artifacts
(
  cd plugins/gpuplane
  GPUPLANE_API_URL="$API_URL" GPUPLANE_ISSUER_URL="$ISSUER_URL" PORTAL_APP_PORT="$APP_PORT" \
    ../../node_modules/.bin/playwright test
)
echo "screenshots: plugins/gpuplane/e2e-artifacts/"
