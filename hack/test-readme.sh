#!/usr/bin/env bash
# make test-readme: runs README.md's walkthrough, as a newcomer would,
# against dev mode (the stack `make run` starts) on free ports, and checks
# that every command answers what the README promises.
#
# It runs the ```sh blocks marked <!-- readme-test -->, in order, in one
# bash session, with only these changes: localhost:8080 and the dev
# issuer's address become the test's ports, ~/.cache the test's own cache,
# `go run ./cmd/gpuplane-dev` a prebuilt binary, `go install
# ./cmd/gpuplanectl` a prebuilt binary on PATH, and `gpuplanectl login`
# (a browser) the token of bob in GPUPLANE_TOKEN. Every `# ->` comment's
# backticked parts must appear in the output of the commands since the
# previous check (compared without white space: protojson spaces vary).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=hack/lib/devmode.sh
source hack/lib/devmode.sh
for cmd in curl jq node; do
  command -v "$cmd" >/dev/null || die "$cmd is needed (Debian: apt-get install $cmd)"
done
kubectl=$(hack/kubectl.sh)

devmode_start
mkdir -p "$work/bin" "$work/config"
go build -o "$work/bin/gpuplanectl" ./cmd/gpuplanectl
[[ "$kubectl" == "$work/bin/kubectl" ]] || ln -s "$kubectl" "$work/bin/kubectl"

script="$work/walkthrough.sh"
log="$work/walkthrough.log"
{
  cat <<PRELUDE
export PATH="$work/bin:\$PATH" XDG_CONFIG_HOME="$work/config" GPUPLANE_SERVER=127.0.0.1:$GRPC_PORT
LOG="$log"; mark=0; failed=0
expect() {
  local seen f
  seen=\$(tail -c +\$((mark + 1)) "\$LOG" | tr -d ' \n\t')
  for f in "\$@"; do
    if [[ \$seen != *"\${f//[[:space:]]/}"* ]]; then
      echo "README CHECK FAILED (line \$README_LINE): the output above lacks: \$f"
      failed=\$((failed + 1))
    else
      echo "readme check ok (line \$README_LINE): \$f"
    fi
  done
  mark=\$(stat -c %s "\$LOG")
}
PRELUDE
  # The marked blocks, with their README line numbers, rewritten as above.
  awk -v dev="$work/gpuplane-dev" -v issuer="127.0.0.1:$ISSUER_PORT" -v http="127.0.0.1:$HTTP_PORT" -v cache="$DEV_CACHE" '
    function fragments(line,   out, rest, i, j) {
      out = ""; rest = line
      while ((i = index(rest, "`")) > 0) {
        rest = substr(rest, i + 1); j = index(rest, "`"); if (j == 0) break
        f = substr(rest, 1, j - 1); gsub(/\x27/, "\x27\\\x27\x27", f)
        out = out " \x27" f "\x27"; rest = substr(rest, j + 1)
      }
      return out
    }
    function flush() {
      if (checks != "") print "README_LINE=" checkline "; expect" checks
      checks = ""; ingroup = 0
    }
    /^<!-- readme-test -->$/ { marked = 1; next }
    marked && /^```sh$/ { inblock = 1; marked = 0; print "# --- README.md line " NR; next }
    inblock && /^```$/ { flush(); inblock = 0; next }
    !inblock { marked = 0; next }
    {
      line = $0
      if (line ~ /^# -> / || (ingroup && line ~ /^#    /)) {
        if (!ingroup) checkline = NR
        ingroup = 1; checks = checks fragments(line); print line; next
      }
      flush()
      if (line ~ /^go install \.\/cmd\/gpuplanectl/) { print "echo \"(readme test: gpuplanectl prebuilt on PATH)\""; next }
      if (line ~ /^gpuplanectl login/) { print "export GPUPLANE_TOKEN=\"$(tok bob)\"; echo \"(readme test: bob'"'"'s token instead of a browser login)\""; next }
      gsub(/go run \.\/cmd\/gpuplane-dev token/, dev " token --issuer-addr " issuer, line)
      gsub(/localhost:8080/, http, line)
      gsub(/~\/\.cache\//, cache "/", line)
      print line
    }
  ' README.md
  echo 'echo "README walkthrough: $failed failed check(s)"; exit $((failed > 0))'
} >"$script"

grep -q '^README_LINE=' "$script" || die "no checks found in README.md's readme-test blocks"
step "running README.md's walkthrough ($(grep -c '^README_LINE=' "$script") checks)"
rc=0
bash "$script" >"$log" 2>&1 || rc=$?
cat "$log"
[[ $rc -eq 0 ]] || die "the README walkthrough does not do what it says (script: $script)"
