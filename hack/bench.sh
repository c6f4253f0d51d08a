#!/usr/bin/env bash
# make bench: every benchmark behind the performance bar, in one run, then
# a summary of each bar's verdict. The benchmarks print one line per bar
# ending in "(bar <target>: meets|MISSES)"; this collects them. Misses do
# not fail the run (the numbers are the report); a benchmark that fails
# does.
#
# Quiet machine, please: the load generator shares the CPUs with the
# systems it measures, on both sides of every ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBEBUILDER_ASSETS="${KUBEBUILDER_ASSETS:-$(hack/envtest-assets.sh)}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {
  echo "== go test $*" >&2
  go test -count=1 -run '^$' -benchmem "$@" 2>&1 | tee -a "$out"
}

# API: creates, quota changes, requests and approvals into one department,
# gets and list pages, each side by side with kube-apiserver CRD objects.
# A fixed count gives every sub-benchmark the same amount of work.
run ./internal/app/ -bench '^(BenchmarkCreate|BenchmarkGet|BenchmarkListPage)$' -benchtime "${BENCH_API_OPS:-3000x}" -timeout 60m
# Change feed latency and idle watchers; a sequencer pass at 1,000 and
# 100,000 events of history.
run ./internal/app/ -bench '^BenchmarkEvents' -timeout 30m
run ./internal/events/ -bench '^BenchmarkSequencerPass$' -benchtime 300x -timeout 30m
# Provisioning: approve -> applied for 1 and 100 virtual clusters against a
# bare helm install, and the resync of unchanged virtual clusters.
run ./internal/reconcile/ -bench . -benchtime "${BENCH_PROVISION_RUNS:-3x}" -timeout 60m
run ./internal/hostcluster/ -bench . -timeout 30m

echo
echo "== Summary: every bar, one line each"
grep -E '\(bar [^)]*: (meets|MISSES)\)' "$out" | sed 's/^/  /'
met=$(grep -cE '\(bar [^)]*: meets\)' "$out" || true)
missed=$(grep -cE '\(bar [^)]*: MISSES\)' "$out" || true)
echo "== $met bars met, $missed missed"
grep -E '^Benchmark[^ ]*: durability:' "$out" | sed 's/^/  /' || true
