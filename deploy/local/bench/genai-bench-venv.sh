#!/usr/bin/env bash
# A virtual environment of its own for genai-bench (PyPI, pinned below), the command the local stack's pod
# runtime runs for a BenchmarkJob's pod (devstack/pod_runtime.py). genai-bench pulls transformers, datasets,
# locust, gevent, pandas, matplotlib, openai and more: never into the product's .venv.
#
# Kept outside the repository, in the cache ($SERVINGOPS_CACHE, default ~/.cache/servingops), reused when its
# stamp names the pinned version and constraints; prints the venv's bin directory on its last line.
# genai-bench 0.0.5 needs Python < 3.13: the first of python3.12, python3.11, python3.10 found is used.
set -euo pipefail

GENAI_BENCH_VERSION=0.0.5
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONSTRAINTS="$HERE/genai-bench-constraints.txt"
CACHE="${SERVINGOPS_CACHE:-$HOME/.cache/servingops}"
VENV="$CACHE/genai-bench-$GENAI_BENCH_VERSION"
want="$GENAI_BENCH_VERSION $(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)"

if [[ -x "$VENV/bin/genai-bench" && "$(cat "$VENV/.stamp" 2>/dev/null)" == "$want" ]]; then
  echo "== genai-bench: using $VENV" >&2; echo "$VENV/bin"; exit 0
fi
python=""
for candidate in python3.12 python3.11 python3.10; do
  # (a pyenv shim may be on PATH for a version it does not serve: ask the interpreter itself)
  if "$candidate" -c 'import venv' >/dev/null 2>&1; then python="$candidate"; break; fi
done
[[ -n "$python" ]] || { echo "genai-bench $GENAI_BENCH_VERSION needs Python 3.10 to 3.12" >&2; exit 1; }
start="$(date +%s)"
mkdir -p "$CACHE"
exec 9>"$CACHE/.genai-bench.lock"
flock 9
rm -rf "$VENV"
"$python" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -c "$CONSTRAINTS" "genai-bench==$GENAI_BENCH_VERSION" >&2
echo "$want" >"$VENV/.stamp"
echo "== genai-bench $GENAI_BENCH_VERSION installed in $VENV in $(( $(date +%s) - start ))s" >&2
echo "$VENV/bin"
