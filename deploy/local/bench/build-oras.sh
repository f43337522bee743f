#!/usr/bin/env bash
# Build the `oras` CLI, the peer bench/agent_pull.py measures the node agent against, from its
# upstream Go module at the pinned version below.
#
# Built by `./dev setup` and `./dev test` (the BenchmarkJob pod pushes its results with it, devstack/bench_runner.py);
# bench/agent_pull.py builds it on demand too.
# A binary already in $SERVINGOPS_KUBE_BIN_DIR or on PATH is used as is; one in the cache
# counts only when its stamp names the pinned version, so bumping the pin rebuilds.
set -euo pipefail

ORAS_VERSION=v1.3.6 # go.mod has no replace directives, so `go install module@version` works

MODULE=oras.land/oras
NAME=oras
CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
BIN_DIR="$CACHE/bin"
STAMP_DIR="$BIN_DIR/.versions"
mkdir -p "$BIN_DIR" "$STAMP_DIR"

if [[ -n "${SERVINGOPS_KUBE_BIN_DIR:-}" && -x "$SERVINGOPS_KUBE_BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $SERVINGOPS_KUBE_BIN_DIR/$NAME"; exit 0
fi
if found="$(command -v "$NAME" 2>/dev/null)" && [[ "$found" != "$BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $found"; exit 0
fi
if [[ -x "$BIN_DIR/$NAME" && "$(cat "$STAMP_DIR/$NAME" 2>/dev/null)" == "$ORAS_VERSION" ]]; then
  echo "== $NAME: using $BIN_DIR/$NAME"; exit 0
fi
start="$(date +%s)"

export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/servingops-oras-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo ">> building $NAME $ORAS_VERSION"
# GOBIN to a private directory, then rename: a running copy or a parallel build is unharmed.
# The version the upstream Makefile stamps, so `oras version` names the release.
GOBIN="$WORK/bin" go install -trimpath \
  -ldflags="-s -w -X $MODULE/internal/version.Version=${ORAS_VERSION#v} -X $MODULE/internal/version.BuildMetadata=" \
  "$MODULE/cmd/$NAME@$ORAS_VERSION"
mv -f "$WORK/bin/$NAME" "$BIN_DIR/.$NAME.$$"
mv -f "$BIN_DIR/.$NAME.$$" "$BIN_DIR/$NAME"
echo "$ORAS_VERSION" >"$STAMP_DIR/$NAME"
echo "<< built $NAME in $(($(date +%s) - start))s -> $BIN_DIR/$NAME"
