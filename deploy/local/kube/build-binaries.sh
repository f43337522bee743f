#!/usr/bin/env bash
# Build the local cluster's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, kubectl for the end-to-end tests, helm, which lints, renders and
# installs deploy/chart, the Kueue controller, started only by the admission tests,
# prometheus-adapter, which serves the metrics APIs the real HPA controller reads, and KEDA's
# operator and metrics adapter, started only by the KEDA tests) from their upstream Go modules
# at the pinned versions below.
#
# A binary already in $SERVINGOPS_KUBE_BIN_DIR or on PATH is used as is; one in the cache
# counts only when it was built at the pinned version (a stamp file records it), so bumping
# a pin rebuilds. Builds happen in throwaway modules outside the repo; the Go module and
# build caches are reused, so a second run does nothing and a rebuild only relinks.
#
#   build-binaries.sh                 what the local cluster and `./dev up` run (CORE below)
#   build-binaries.sh kueue ...       just the named binaries (devstack builds Kueue,
#                                     prometheus-adapter and KEDA this way when a test first asks)
#   build-binaries.sh --all           every binary
#
# Runs of the script take turns (flock on the cache): a second asker waits for the first
# build and then finds the binary there instead of building it again.
set -euo pipefail

KUBERNETES_VERSION=v1.35.4 # builds with go1.25+; its go.mod pins etcd client v3.6.5
ETCD_VERSION=v3.6.8        # etcd 3.6 server, the line kubernetes 1.35 is tested against
KWOK_VERSION=v0.8.0        # go 1.26.0, client-go v0.36 (one minor of skew is supported)
HELM_VERSION=v3.22.0       # go 1.26.0; its go.mod has no replace directives
# devstack/kube.py reads these pins to copy CRD manifests (and kwok's stages) out of the
# module cache, so every version of the local cluster is pinned here.
GATEWAY_API_VERSION=v1.5.0 # standard channel (not built): HTTPRoute, and TLSRoute, without which Traefik never syncs
KUEUE_VERSION=v0.17.0      # CRDs copied; the controller (cmd/kueue) built for devstack/kueue.py
KEDA_VERSION=v2.21.0       # go 1.26.0 (v2.21.1 needs 1.27.4); CRDs copied; keda (cmd/operator) and keda-adapter
                           # (cmd/adapter) built in a wrapper module with its go.mod's replace lines
ENVOY_GATEWAY_VERSION=v1.9.1 # only the BackendTrafficPolicy CRD is copied (spec.traffic's policy; Envoy Gateway is not run)
PROMETHEUS_ADAPTER_VERSION=v0.12.0 # the newest release; no replace directives (k8s.io/* v0.30.0)

CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
BIN_DIR="$CACHE/bin"
STAMP_DIR="$BIN_DIR/.versions"
mkdir -p "$BIN_DIR" "$STAMP_DIR"
exec 9>"$BIN_DIR/.build.lock"
flock 9

CORE=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm)
OPTIONAL=(kueue prometheus-adapter keda keda-adapter)
case "${1:-}" in
  "") WANTED=("${CORE[@]}") ;;
  --all) WANTED=("${CORE[@]}" "${OPTIONAL[@]}") ;;
  *) WANTED=("$@") ;;
esac

# Static binaries; -buildvcs=false because the throwaway module is not a repository;
# -mod=mod lets `go get` record what the named packages import. Parallelism stays at Go's
# default (-p = number of CPUs), which is right on a 2-core machine.
export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -mod=mod"
LDFLAGS_BASE="-s -w"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/servingops-kube-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Prints where a usable binary is, or nothing.
existing() {
  local name="$1" version="$2" found
  if [[ -n "${SERVINGOPS_KUBE_BIN_DIR:-}" && -x "$SERVINGOPS_KUBE_BIN_DIR/$name" ]]; then
    echo "$SERVINGOPS_KUBE_BIN_DIR/$name"; return
  fi
  if found="$(command -v "$name" 2>/dev/null)" && [[ "$found" != "$BIN_DIR/$name" ]]; then
    echo "$found"; return
  fi
  if [[ -x "$BIN_DIR/$name" && "$(cat "$STAMP_DIR/$name" 2>/dev/null)" == "$version" ]]; then
    echo "$BIN_DIR/$name"
  fi
}

# Field of `go mod download -json` (Dir, GoMod, ...) for module@version.
mod_field() {
  (cd "$WORK" && go mod download -json "$1") | sed -n "s/^[[:space:]]*\"$2\": \"\(.*\)\",\{0,1\}$/\1/p"
}

now() { date +%s; }

# new_module DIR: a throwaway main module.
new_module() {
  mkdir -p "$1"
  (cd "$1" && go mod init servingops.local/kube-build >/dev/null 2>&1)
}

# build VERSION MODDIR EXTRA_LDFLAGS NAME=PACKAGE...: the named main packages in one `go build`
# (several: the packages they share are planned once, and one binary's link overlaps the next
# one's compiling), each installed under NAME with VERSION's stamp.
build() {
  local version="$1" dir="$2" ldflags="$LDFLAGS_BASE $3" out="$BIN_DIR/.build.$$" start pair name pkg base
  local names=() pkgs=()
  shift 3
  for pair in "$@"; do names+=("${pair%%=*}"); pkgs+=("${pair#*=}"); done
  start="$(now)"
  echo ">> building ${names[*]} $version (${pkgs[*]})"
  # Link into a private folder, then rename: a running copy or a parallel build is unharmed.
  mkdir -p "$out"
  (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$out/" "${pkgs[@]}")
  for pair in "$@"; do
    name="${pair%%=*}" pkg="${pair#*=}" base="${pair##*/}"
    # go build names a binary after its package's last element, or the one before a major version (/v3).
    [[ "$base" =~ ^v[0-9]+$ ]] && pkg="${pkg%/*}" && base="${pkg##*/}"
    mv -f "$out/$base" "$BIN_DIR/$name"
    echo "$version" >"$STAMP_DIR/$name"
  done
  rmdir "$out"
  echo "<< built ${names[*]} in $(($(now) - start))s -> $BIN_DIR"
}

# resolve DIR PACKAGE...: add the requirements of the named packages to DIR's go.mod,
# downloading what is missing from the module cache.
resolve() {
  local dir="$1"; shift
  # `go: added ...` lines are noise; keep the downloads and any error.
  (cd "$dir" && go get "$@" 2> >(grep -v '^go: added' >&2))
}

# Each group is one throwaway module: prepare_GROUP resolves it (downloads only), build_GROUP
# compiles and links what is missing of it.
KUBE_DIR="$WORK/kubernetes"
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

prepare_etcd() {
  # etcd's server module replaces its sibling modules with ../ paths (ignored here); its
  # requirements already name the published versions, so no replace is needed.
  new_module "$WORK/etcd"
  resolve "$WORK/etcd" "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
}

build_etcd() {
  build "$ETCD_VERSION" "$WORK/etcd" "" etcd=go.etcd.io/etcd/server/v3
}

prepare_kube() {
  # k8s.io/kubernetes requires its ~30 staging modules at v0.0.0 and replaces them with
  # ./staging paths, which a dependent module ignores: replace each with the published
  # v0.<minor>.<patch> twin of v1.<minor>.<patch>, reading the list from upstream go.mod.
  new_module "$KUBE_DIR"
  local gomod staging_version="v0.${KUBERNETES_VERSION#v1.}" name pkgs=()
  gomod="$(mod_field "k8s.io/kubernetes@$KUBERNETES_VERSION" GoMod)"
  {
    # Same language version and GODEBUG defaults as the upstream build.
    grep -E '^godebug ' "$gomod" || true
    echo "replace ("
    awk -v v="$staging_version" '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " " v }' "$gomod"
    echo ")"
  } >>"$KUBE_DIR/go.mod"
  (cd "$KUBE_DIR" && go mod edit -go="$(awk '$1 == "go" { print $2; exit }' "$gomod")")
  for name in "${KUBE_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$name@$KUBERNETES_VERSION"); done
  resolve "$KUBE_DIR" "${pkgs[@]}"
}

# build_kube NAME...: the missing Kubernetes binaries, in one build.
build_kube() {
  local minor major=1 x p name pairs=()
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  # What hack/lib/version.sh stamps, so /version reports the real release.
  x=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    x+=" -X $p.gitTreeState=clean"
  done
  for name in "$@"; do pairs+=("$name=k8s.io/kubernetes/cmd/$name"); done
  build "$KUBERNETES_VERSION" "$KUBE_DIR" "$x" "${pairs[@]}"
}

prepare_helm() {
  new_module "$WORK/helm"
  resolve "$WORK/helm" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_helm() {
  local dir="$WORK/helm" client_go major minor x p
  # What helm's Makefile stamps: its release, and the Kubernetes version its lint and
  # template assume by default, derived from the client-go it was built with (v0.X -> 1.X).
  client_go="$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/client-go)"
  major=1; minor="${client_go#v0.}"; minor="${minor%%.*}"
  x="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    x+=" -X $p.k8sVersionMajor=$major -X $p.k8sVersionMinor=$minor"
  done
  build "$HELM_VERSION" "$dir" "$x" helm=helm.sh/helm/v3/cmd/helm
}

prepare_kwok() {
  new_module "$WORK/kwok"
  resolve "$WORK/kwok" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

build_kwok() {
  build "$KWOK_VERSION" "$WORK/kwok" "" kwok=sigs.k8s.io/kwok/cmd/kwok
}

prepare_kueue() {
  # Kueue's go.mod has no replace directives and needs Go 1.25.
  new_module "$WORK/kueue"
  resolve "$WORK/kueue" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
}

build_kueue() {
  # The version stamp is the one its Makefile sets, so the controller logs the release it is.
  build "$KUEUE_VERSION" "$WORK/kueue" "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    kueue=sigs.k8s.io/kueue/cmd/kueue
}

prepare_adapter() {
  new_module "$WORK/adapter"
  resolve "$WORK/adapter" "sigs.k8s.io/prometheus-adapter/cmd/adapter@$PROMETHEUS_ADAPTER_VERSION"
}

build_adapter() {
  build "$PROMETHEUS_ADAPTER_VERSION" "$WORK/adapter" "" prometheus-adapter=sigs.k8s.io/prometheus-adapter/cmd/adapter
}

prepare_keda() {
  # KEDA's go.mod has replace directives, which stop `go install ...@version` and are ignored in a
  # dependent module: the wrapper module copies them (read from upstream go.mod, block or line form).
  local dir="$WORK/keda" gomod
  new_module "$dir"
  gomod="$(mod_field "github.com/kedacore/keda/v2@$KEDA_VERSION" GoMod)"
  (cd "$dir" && go mod edit -go="$(awk '$1 == "go" { print $2; exit }' "$gomod")")
  awk '$1 == "replace" && $2 == "(" { block = 1; next }
       block && $1 == ")" { block = 0; next }
       block || $1 == "replace" {
         sub(/\/\/.*/, ""); if ($1 == "replace") $1 = ""; $0 = $0
         if (NF == 0) next
         split($0, side, "=>"); n = split(side[1], l, " "); m = split(side[2], r, " ")
         print l[1] (n > 1 ? "@" l[2] : "") "=" r[1] (m > 1 ? "@" r[2] : "")
       }' "$gomod" \
    | while read -r pair; do (cd "$dir" && go mod edit -replace="$pair"); done
  resolve "$dir" "github.com/kedacore/keda/v2/cmd/operator@$KEDA_VERSION" "github.com/kedacore/keda/v2/cmd/adapter@$KEDA_VERSION"
}

build_keda() {
  # Both binaries in one build (they share most of KEDA's packages); the version stamp is its Makefile's.
  local x="-X=github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v} -X=github.com/kedacore/keda/v2/version.GitCommit=$KEDA_VERSION"
  build "$KEDA_VERSION" "$WORK/keda" "$x" \
    keda=github.com/kedacore/keda/v2/cmd/operator keda-adapter=github.com/kedacore/keda/v2/cmd/adapter
}

total_start="$(now)"
missing_kube=()
groups=()
declare -A VERSION_OF=(
  [etcd]=$ETCD_VERSION [kube-apiserver]=$KUBERNETES_VERSION [kube-controller-manager]=$KUBERNETES_VERSION
  [kube-scheduler]=$KUBERNETES_VERSION [kwok]=$KWOK_VERSION [kubectl]=$KUBERNETES_VERSION [helm]=$HELM_VERSION
  [kueue]=$KUEUE_VERSION [prometheus-adapter]=$PROMETHEUS_ADAPTER_VERSION
  [keda]=$KEDA_VERSION [keda-adapter]=$KEDA_VERSION
)
for name in "${WANTED[@]}"; do
  if [[ -z "${VERSION_OF[$name]:-}" ]]; then
    echo "!! unknown binary $name (known: ${!VERSION_OF[*]})" >&2
    exit 2
  fi
  version="${VERSION_OF[$name]}"
  if found="$(existing "$name" "$version")" && [[ -n "$found" ]]; then
    echo "== $name: using $found"
    continue
  fi
  case "$name" in
    kube-* | kubectl)
      [[ ${#missing_kube[@]} -eq 0 ]] && groups+=(kube)
      missing_kube+=("$name") ;;
    prometheus-adapter) groups+=(adapter) ;;
    keda | keda-adapter)
      # One group builds both (one go build); either missing rebuilds the pair.
      [[ " ${groups[*]} " == *" keda "* ]] || groups+=(keda) ;;
    *) groups+=("$name") ;;
  esac
done

# Resolve every group at once, in the background: resolving is downloads (minutes on an empty
# module cache) and building is CPU, so the later groups' downloads hide behind the first
# builds. The module cache is safe for concurrent go commands.
declare -A resolving
for group in "${groups[@]}"; do
  ("prepare_$group" >"$WORK/$group.resolve.log" 2>&1) &
  resolving[$group]=$!
done

for group in "${groups[@]}"; do
  wait_start="$(now)"
  if ! wait "${resolving[$group]}"; then
    cat "$WORK/$group.resolve.log" >&2
    echo "!! resolving the $group modules failed" >&2
    exit 1
  fi
  cat "$WORK/$group.resolve.log"
  echo "== $group modules resolved (waited $(($(now) - wait_start))s)"
  if [[ "$group" == kube ]]; then build_kube "${missing_kube[@]}"; else "build_$group"; fi
done
echo "== done in $(($(now) - total_start))s; binaries in $BIN_DIR"
