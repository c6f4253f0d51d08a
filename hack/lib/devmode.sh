# shellcheck shell=bash
# Dev mode on free loopback ports for the end-to-end scripts
# (hack/test-portal.sh, hack/test-readme.sh); source it, then call
# devmode_ports and devmode_start. They set HTTP_PORT GRPC_PORT ISSUER_PORT
# APP_PORT, API_URL, ISSUER_URL, APP_URL, work (a temporary directory with
# gpuplane-dev and dev.log) and DEV_CACHE (dev mode's XDG_CACHE_HOME: it
# writes its kubeconfig there, and a developer's `make run` keeps theirs);
# dev mode is stopped on exit.
#
#   DEV_MAIN, DEV_ARGS  the dev-mode command (set by the Makefile)
#   PORTAL_KEEP_LOGS=1  keep the work directory with dev mode's log

DEV_MAIN=${DEV_MAIN:-./cmd/gpuplane-dev}
DEV_ARGS=${DEV_ARGS-}

step() { echo; echo "=== $(basename "$0" .sh): $* ($(date +%H:%M:%S))"; }
die() { echo "$(basename "$0" .sh): $*" >&2; exit 1; }

work=$(mktemp -d)
dev_pid=
devmode_cleanup() {
  local rc=$?
  if [[ -n "$dev_pid" ]] && kill -0 "$dev_pid" 2>/dev/null; then
    echo "stopping dev mode (pid $dev_pid)"
    kill -TERM -- "-$dev_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$dev_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$dev_pid" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$work/dev.log" ]]; then
    echo "--- last lines of dev mode's log ($work/dev.log)"
    tail -n 40 "$work/dev.log" || true
  fi
  if [[ $rc -eq 0 && -z "${PORTAL_KEEP_LOGS:-}" ]]; then rm -rf "$work"; else echo "logs kept in $work"; fi
  exit $rc
}
trap devmode_cleanup EXIT

# devmode_ports picks the ports (before devmode_start, so its flags can
# name them).
devmode_ports() {
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
  DEV_CACHE="$work/cache"
}

# devmode_start [extra dev-mode flags...]
devmode_start() {
  [[ -n "${HTTP_PORT:-}" ]] || devmode_ports
  step "building the dev-mode command ($DEV_MAIN)"
  go build -o "$work/gpuplane-dev" "$DEV_MAIN"

  step "starting dev mode: API $API_URL, gRPC 127.0.0.1:$GRPC_PORT, issuer $ISSUER_URL"
  local assets
  assets=$(hack/envtest-assets.sh)
  mkdir -p "$DEV_CACHE"
  # shellcheck disable=SC2086 # DEV_ARGS is a word list
  setsid env KUBEBUILDER_ASSETS="$assets" XDG_CACHE_HOME="$DEV_CACHE" \
    GOCACHE="$(go env GOCACHE)" GOMODCACHE="$(go env GOMODCACHE)" \
    "$work/gpuplane-dev" $DEV_ARGS \
    --http-addr "127.0.0.1:$HTTP_PORT" --grpc-addr "127.0.0.1:$GRPC_PORT" \
    --metrics-addr 127.0.0.1:0 --issuer-addr "127.0.0.1:$ISSUER_PORT" "$@" \
    >"$work/dev.log" 2>&1 </dev/null &
  dev_pid=$!

  local deadline=$((SECONDS + 240))
  until curl -fsS "$API_URL/readyz" >/dev/null 2>&1; do
    kill -0 "$dev_pid" 2>/dev/null || die "dev mode exited before it was ready"
    ((SECONDS < deadline)) || die "dev mode was not ready within 240 s"
    sleep 1
  done
  echo "dev mode ready after $((SECONDS - deadline + 240)) s"
}
