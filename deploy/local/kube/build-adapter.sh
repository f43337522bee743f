#!/usr/bin/env bash
# Build prometheus-adapter (sigs.k8s.io/prometheus-adapter), which serves custom.metrics.k8s.io and
# external.metrics.k8s.io from Prometheus so the controller-manager's real HPA controller can read
# metrics the tests feed (devstack/metrics_adapter.py runs it). Same cache and stamp rules as
# build-binaries.sh: a binary on PATH or in $SERVINGOPS_KUBE_BIN_DIR is used as is, a cached one
# only when its stamp names the pin below.
set -euo pipefail

# The newest release on the Go proxy; go.mod has no replace directives, so `go get` of the command
# package in a throwaway module resolves it as upstream pinned it (k8s.io/* v0.30.0).
PROMETHEUS_ADAPTER_VERSION=v0.12.0

CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
BIN_DIR="$CACHE/bin"
STAMP_DIR="$BIN_DIR/.versions"
NAME=prometheus-adapter
mkdir -p "$BIN_DIR" "$STAMP_DIR"

if [[ -n "${SERVINGOPS_KUBE_BIN_DIR:-}" && -x "$SERVINGOPS_KUBE_BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $SERVINGOPS_KUBE_BIN_DIR/$NAME"; exit 0
fi
if found="$(command -v "$NAME" 2>/dev/null)" && [[ "$found" != "$BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $found"; exit 0
fi
if [[ -x "$BIN_DIR/$NAME" && "$(cat "$STAMP_DIR/$NAME" 2>/dev/null)" == "$PROMETHEUS_ADAPTER_VERSION" ]]; then
  echo "== $NAME: using $BIN_DIR/$NAME"; exit 0
fi

export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=mod"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/servingops-adapter-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

start=$(date +%s)
echo ">> building $NAME $PROMETHEUS_ADAPTER_VERSION"
cd "$WORK"
go mod init servingops.local/adapter-build >/dev/null 2>&1
go get "sigs.k8s.io/prometheus-adapter/cmd/adapter@$PROMETHEUS_ADAPTER_VERSION" 2> >(grep -v '^go: added' >&2)
# Link under a private name, then rename: a running copy or a parallel build is unharmed.
go build -trimpath -ldflags="-s -w" -o "$BIN_DIR/.$NAME.$$" sigs.k8s.io/prometheus-adapter/cmd/adapter
mv -f "$BIN_DIR/.$NAME.$$" "$BIN_DIR/$NAME"
echo "$PROMETHEUS_ADAPTER_VERSION" >"$STAMP_DIR/$NAME"
echo "<< built $NAME in $(($(date +%s) - start))s -> $BIN_DIR/$NAME"
