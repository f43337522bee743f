#!/usr/bin/env bash
# Build the Argo Rollouts controller, the real peer bench/rollout_promote.py measures
# servingops against, from its upstream Go module at the pinned version below.
#
# Not part of `./dev test`: only the benchmark needs it, and it builds it on demand.
# A binary already in $SERVINGOPS_KUBE_BIN_DIR or on PATH is used as is; one in the cache
# counts only when its stamp names the pinned version, so bumping the pin rebuilds.
set -euo pipefail

ARGO_ROLLOUTS_VERSION=v1.10.2 # its go.mod says go 1.26.10 and replaces k8s.io/* with v0.34.5
# The toolchain that version asks for; the Go command fetches it through the module proxy.
ARGO_ROLLOUTS_GOTOOLCHAIN=go1.26.10

MODULE=github.com/argoproj/argo-rollouts
NAME=rollouts-controller
CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
BIN_DIR="$CACHE/bin"
STAMP_DIR="$BIN_DIR/.versions"
mkdir -p "$BIN_DIR" "$STAMP_DIR"

# Go refuses even to download a module that asks for a newer Go unless told which toolchain to use.
export GOTOOLCHAIN="$ARGO_ROLLOUTS_GOTOOLCHAIN"
export CGO_ENABLED=0
# -mod=mod lets `go get` record what the package imports; the wrapper is not a repository.
export GOFLAGS="-buildvcs=false -mod=mod"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/servingops-argo-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# The CRDs (Rollout, AnalysisRun, Experiment, ...: the controller watches them all) from the same
# module, into $CACHE/crds/argo-rollouts, stamped with the version like the cluster's own CRDs.
CRD_DIR="$CACHE/crds/argo-rollouts"
if [[ "$(cat "$CRD_DIR/.version" 2>/dev/null)" != "$ARGO_ROLLOUTS_VERSION" ]]; then
  moddir="$(cd "$WORK" && go mod download -json "$MODULE@$ARGO_ROLLOUTS_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  mkdir -p "$CACHE/crds"
  staging="$(mktemp -d "$CACHE/crds/.argo-rollouts.XXXXXX")"
  cp "$moddir"/manifests/crds/*-crd.yaml "$staging/"
  chmod 0755 "$staging" && chmod 0644 "$staging"/*.yaml # the module cache's copies are read-only
  echo "$ARGO_ROLLOUTS_VERSION" >"$staging/.version"
  rm -rf "$CRD_DIR" && mv "$staging" "$CRD_DIR"
  echo "== CRDs of argo-rollouts $ARGO_ROLLOUTS_VERSION -> $CRD_DIR"
fi

if [[ -n "${SERVINGOPS_KUBE_BIN_DIR:-}" && -x "$SERVINGOPS_KUBE_BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $SERVINGOPS_KUBE_BIN_DIR/$NAME"; exit 0
fi
if found="$(command -v "$NAME" 2>/dev/null)" && [[ "$found" != "$BIN_DIR/$NAME" ]]; then
  echo "== $NAME: using $found"; exit 0
fi
if [[ -x "$BIN_DIR/$NAME" && "$(cat "$STAMP_DIR/$NAME" 2>/dev/null)" == "$ARGO_ROLLOUTS_VERSION" ]]; then
  echo "== $NAME: using $BIN_DIR/$NAME"; exit 0
fi
start="$(date +%s)"

# `go install module@version` refuses a module with replace directives, and a dependent
# module ignores them: a throwaway wrapper module copies them (the k8s.io/* pins matter,
# the module does not build against the newest k8s.io releases).
cd "$WORK"
go mod init servingops.local/argo-rollouts-build >/dev/null 2>&1
gomod="$(go mod download -json "$MODULE@$ARGO_ROLLOUTS_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
{
  echo
  # Block form `replace ( ... )` and one-line `replace a => b v` alike.
  awk '/^replace \($/ { inblock = 1; print; next }
       inblock { print; if ($0 ~ /^\)$/) inblock = 0; next }
       /^replace / { print }' "$gomod"
} >>go.mod
go mod edit -go="$(awk '$1 == "go" { print $2; exit }' "$gomod")"

echo ">> resolving $MODULE/cmd/$NAME@$ARGO_ROLLOUTS_VERSION (GOTOOLCHAIN=$GOTOOLCHAIN)"
go get "$MODULE/cmd/$NAME@$ARGO_ROLLOUTS_VERSION" 2> >(grep -v '^go: added' >&2)

echo ">> building $NAME $ARGO_ROLLOUTS_VERSION"
# The version the upstream Makefile stamps, so `--version` and the log name the release.
ldflags="-s -w -X $MODULE/utils/version.version=${ARGO_ROLLOUTS_VERSION#v}"
# Link under a private name, then rename: a running copy or a parallel build is unharmed.
go build -trimpath -ldflags="$ldflags" -o "$BIN_DIR/.$NAME.$$" "$MODULE/cmd/$NAME"
mv -f "$BIN_DIR/.$NAME.$$" "$BIN_DIR/$NAME"
echo "$ARGO_ROLLOUTS_VERSION" >"$STAMP_DIR/$NAME"
echo "<< built $NAME in $(($(date +%s) - start))s -> $BIN_DIR/$NAME"
