#!/usr/bin/env bash
# make lint-openapi: Redocly's recommended rules over api/openapi.yaml
# (config: redocly.yaml). Fails on any error, and on any warning whose rule
# redocly.yaml does not set to `warn` with a justification.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed=$(sed -n 's/^  \([a-z0-9-]*\): warn.*/\1/p' redocly.yaml | paste -sd, -)
report=$(node_modules/.bin/redocly lint --config redocly.yaml --format=json api/openapi.yaml 2>/dev/null) || true
ALLOWED="$allowed" node -e '
  const r = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const allowed = new Set((process.env.ALLOWED || "").split(",").filter(Boolean));
  const bad = r.problems.filter(p => p.severity === "error" || !allowed.has(p.ruleId));
  for (const p of r.problems) {
    const at = (p.location[0] || {}).pointer || "";
    console.log(`${bad.includes(p) ? "FAIL" : "ok  "} ${p.severity} ${p.ruleId} ${at}: ${p.message}`);
  }
  console.log(`redocly ${r.version}: ${r.totals.errors} errors, ${r.totals.warnings} warnings (justified in redocly.yaml: ${[...allowed].join(", ") || "none"})`);
  process.exit(bad.length ? 1 : 0);
' <<<"$report"
