#!/usr/bin/env bash
# Runs every `go test -fuzz` target of the module for FUZZTIME (default 10s)
# each, one after another (go test fuzzes one target per invocation), and
# prints per target the fuzzing time, executions and executions per second.
# New targets are found by name (func FuzzXxx in a _test.go file); their
# seed corpora live in testdata/fuzz/FuzzXxx next to the test.
#
# A failing input is written by go test to the package's
# testdata/fuzz/FuzzXxx/ directory: commit it with the fix, and it stays a
# regression test in every `make test`.
#
# FUZZMINIMIZETIME (default 3s) bounds how long a new corpus entry is
# minimised, which otherwise can take most of a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-10s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-3s}

mapfile -t targets < <(grep -rHo '^func Fuzz[A-Za-z0-9_]*' --include='*_test.go' internal pkg cmd 2>/dev/null |
  sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)$|\1 \2|' | sort -u)
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi

# fuzz_one DIR NAME OUT fuzzes one target, its output in OUT.
fuzz_one() {
  go test "./$1" -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" >"$3" 2>&1
}

# coordinator_race DIR NAME OUT: the failure in OUT is the toolchain's
# deadline race, not a finding: the target's only complaint is "context
# deadline exceeded", go test wrote no failing input, and its corpus
# directory got no new (untracked) input.
coordinator_race() {
  local corpus="$1/testdata/fuzz/$2"
  grep -qE "^--- FAIL: $2 " "$3" || return 1
  [ "$(grep -A1 -E "^--- FAIL: $2 " "$3" | tail -1 | sed -E 's/^[[:space:]]+//')" = "context deadline exceeded" ] || return 1
  ! grep -q 'Failing input written to' "$3" || return 1
  [ -z "$(git status --porcelain --untracked-files=all -- "$corpus" 2>/dev/null)" ] || return 1
}

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
rows=()
failed=0
for t in "${targets[@]}"; do
  dir=${t% *} name=${t#* }
  out="$log/$name.$(echo "$dir" | tr / _).out"
  echo "=== fuzz $dir $name for $FUZZTIME"
  if fuzz_one "$dir" "$name" "$out"; then
    result=ok
  elif coordinator_race "$dir" "$name" "$out"; then
    # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
    # failure (golang/go#75804, fixed in Go 1.27): the target ends with a
    # bare "context deadline exceeded" and writes no failing input. Only
    # that signature is run again, once; a second failure of any kind, or
    # any failure that wrote an input, fails the run.
    echo "fuzz: $name ended with the coordinator's deadline race (golang/go#75804, no failing input written); running it once more"
    if fuzz_one "$dir" "$name" "$out"; then
      result=ok-rerun
    else
      result=FAILED
      failed=1
      cat "$out"
    fi
  else
    result=FAILED
    failed=1
    cat "$out"
  fi
  last=$(grep -E '^fuzz: elapsed: [0-9]+s, execs: [0-9]+' "$out" | tail -1 || true)
  secs=$(sed -E 's/^fuzz: elapsed: ([0-9]+)s.*/\1/' <<<"$last")
  execs=$(sed -E 's/.*execs: ([0-9]+).*/\1/' <<<"$last")
  found=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
  rate=-
  if [ -n "$secs" ] && [ "$secs" -gt 0 ]; then rate=$((execs / secs)); fi
  rows+=("$(printf '%-28s %-24s %-9s %6ss %10s %10s %6s' "$dir" "$name" "$result" "${secs:--}" "${execs:--}" "$rate" "${found:--}")")
done

echo
printf '%-28s %-24s %-9s %7s %10s %10s %6s\n' package target result fuzzed execs execs/s new
printf '%s\n' "${rows[@]}"
exit "$failed"
