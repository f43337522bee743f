#!/usr/bin/env bash
# Move the product packages into the real package directory servingops/ (issue 29: no symlinks for imports to go
# through) and point the docs at their new paths. Re-runnable and idempotent: on a checkout where servingops/<pkg>
# is still a link to ../<pkg> (for instance a main that gained a package or files after this branch was cut), it
# replaces each link by the folder it names; docs already pointing at servingops/<pkg>/ are left alone.
#   tools/relayout.sh           move every linked package, then rewrite the docs' paths
#   tools/relayout.sh --docs    only rewrite the docs' paths (after taking main's side of a docs conflict)
# Stages everything it changes (git mv / git add); commit it yourself.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

if [ "${1:-}" != "--docs" ]; then
  for link in servingops/*; do
    [ -L "$link" ] || continue
    name=$(basename "$link")
    target=$(readlink "$link")
    if [ "$target" != "../$name" ] || [ ! -d "$name" ]; then
      echo "relayout: $link -> $target is not a link to ../$name; left alone" >&2; continue
    fi
    git rm --quiet --cached "$link"
    rm "$link"
    git mv "$name" "$link"
    echo "relayout: $name/ -> $link/" >&2
  done
  # A checkout or rebase across the move leaves a top-level folder holding bytecode only (__pycache__, ignored):
  # removed. A folder with any other file in it is left alone and named (untracked work of yours).
  for link in servingops/*/; do
    name=$(basename "$link")
    [ -d "$name" ] && [ -z "$(git ls-files -- "$name")" ] || continue
    if [ -z "$(find "$name" -type f ! -path '*/__pycache__/*' -print -quit)" ]; then
      rm -rf "$name"
    else
      echo "relayout: $name/ still holds files git does not track; move them into $link yourself" >&2
    fi
  done
fi

# The docs name product files by their path in the checkout: `activities/serving/runtimes.py` becomes
# `servingops/activities/serving/runtimes.py`. Only a path whose first part is a package of servingops/ and whose
# next part exists there is rewritten (`runtime/<ns>/<name>/<uid>`, a workflow id, is not), outside fenced blocks.
python3 - README.md docs/*.md <<'PY'
import re
import sys
from pathlib import Path

packages = sorted(p.name for p in Path("servingops").iterdir() if p.is_dir() and (p / "__init__.py").exists())
pattern = re.compile(r"(?<![\w./<{-])(" + "|".join(map(re.escape, packages)) + r")/([\w.-]*)(?![<{*])")


def rewrite(match: re.Match[str]) -> str:
    package, rest = match.group(1), match.group(2)
    if rest and not (Path("servingops", package, rest).exists() or Path("servingops", package, rest + ".py").exists()):
        return match.group(0)
    return f"servingops/{package}/{rest}"


for name in sys.argv[1:]:
    path = Path(name)
    text = path.read_text()
    # Drawings and commands in fenced blocks keep their columns: only the prose and tables are rewritten.
    lines, fenced = text.splitlines(keepends=True), False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines[i] = pattern.sub(rewrite, line)
    new = "".join(lines)
    if new != text:
        path.write_text(new)
        print(f"relayout: paths in {name}", file=sys.stderr)
PY
git add README.md docs
