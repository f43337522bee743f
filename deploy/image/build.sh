#!/usr/bin/env bash
# Build the servingops image and (with --registry) push it: installs what the build needs when absent,
# then runs build.py with the checkout's venv. Arguments go to build.py (see its --help).
#   mmdebstrap  from the Debian archive, by name (the distribution pins its version)
#   binutils    strip, for the wheels' extension modules (its version is in the dependency layer's key)
#   oras        built from its Go module at the version deploy/local/bench/build-oras.sh pins
# Needs root: mmdebstrap makes the rootfs as root and the bytecode is compiled in a chroot of it.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf '==> %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  echo "deploy/image/build.sh: run as root (mmdebstrap and chroot)" >&2; exit 1
fi
missing=()
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v strip >/dev/null 2>&1 || missing+=(binutils)  # strips the wheels' extension modules
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash deploy/local/bench/build-oras.sh >&2
CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
ORAS="$(command -v oras 2>/dev/null || true)"
for candidate in "${SERVINGOPS_KUBE_BIN_DIR:-}/oras" "$ORAS" "$CACHE/bin/oras"; do
  if [[ -n "$candidate" && -x "$candidate" ]]; then ORAS="$candidate"; break; fi
done
exec .venv/bin/python deploy/image/build.py --oras "$ORAS" "$@"
