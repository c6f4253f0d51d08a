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

# shellcheck source=hack/lib/devmode.sh
source hack/lib/devmode.sh
CHROMIUM_PATH=${CHROMIUM_PATH:-$(command -v chromium || true)}

[[ -x node_modules/.bin/backstage-cli && -x node_modules/.bin/playwright ]] ||
  die "npm dependencies are missing: run 'npm ci' in the repository root"
[[ -n "$CHROMIUM_PATH" && -x "$CHROMIUM_PATH" ]] ||
  die "chromium not found: install it (Debian: apt-get install chromium) or set CHROMIUM_PATH"
export CHROMIUM_PATH

step "unit tests (Jest): @gpuplane/client and @gpuplane/backstage-plugin"
npm test --workspaces

devmode_ports
devmode_start --cors-allowed-origins "$APP_URL"

step "browser test: Playwright in $CHROMIUM_PATH"
rm -rf plugins/gpuplane/e2e-artifacts
(
  cd plugins/gpuplane
  GPUPLANE_API_URL="$API_URL" GPUPLANE_ISSUER_URL="$ISSUER_URL" PORTAL_APP_PORT="$APP_PORT" \
    ../../node_modules/.bin/playwright test
)
echo "screenshots: plugins/gpuplane/e2e-artifacts/"
