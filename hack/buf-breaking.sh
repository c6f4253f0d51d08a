#!/usr/bin/env bash
# buf breaking: proto/ against the previous commit (on CI's clone of main,
# the previous main). Works on a shallow clone by fetching one more commit;
# when there is no previous commit at all it says so and passes.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${BUF_BREAKING_AGAINST:-HEAD~1}
have() { git rev-parse --verify -q "$ref^{commit}" >/dev/null; }
if ! have && [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  echo "buf breaking: shallow clone, fetching the previous commit"
  git fetch -q --deepen=1 origin || true
fi
if ! have; then
  echo "buf breaking: no commit $ref to compare with (first commit of the history); nothing can break yet"
  exit 0
fi
# google/api protos come from the Go module cache, not from git (see
# hack/googleapis.sh): check the previous commit's proto/ and buf.yaml out
# into a temporary directory and link the same googleapis there.
hack/googleapis.sh
prev=$(mktemp -d)
trap 'rm -rf "$prev"' EXIT
git archive "$ref" proto buf.yaml | tar -x -C "$prev"
mkdir -p "$prev/third_party"
ln -s "$PWD/third_party/googleapis" "$prev/third_party/googleapis"
echo "buf breaking: proto/ against $ref ($(git rev-parse --short "$ref"))"
bin/buf breaking --against "$prev"
