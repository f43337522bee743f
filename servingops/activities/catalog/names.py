"""Public catalog model names for Hugging Face entries.

Seed 000: `spec.source.catalog.name` is "the public catalog model name", a DNS-1123 subdomain, while a
Hub repository id (`Qwen/Qwen2.5-7B_instruct`) is not one. Every entry of a stored index gets one
public name, as a pure function of the whole index (so a catalog revision fixes them all):

- the repository id lowercased, `/` as `--`, every character outside `[a-z0-9.-]` as `-`, runs of
  `-` around a `.` folded (`a-.b` -> `a.b`), trimmed to start and end with a letter or digit:
  `qwen--qwen2.5-7b-instruct`;
- one that still does not fit (empty, longer than 253) is `hf-` and 16 hex of the id's sha256;
- two ids with the same name (`Org/M` and `org/m`) both take `-` and 8 hex of their own id's
  sha256, so neither shadows the other and a name never changes meaning within a revision.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import TypeVar

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NAME = 253

T = TypeVar("T")


def _hash(repo_id: str, length: int) -> str:
    return hashlib.sha256(repo_id.encode()).hexdigest()[:length]


def public_name(repo_id: str) -> str:
    """The name one repository id maps to before collisions are resolved."""
    name = repo_id.lower().replace("/", "--")
    name = re.sub(r"[^a-z0-9.-]", "-", name)
    name = re.sub(r"-*\.-*", ".", name)
    name = re.sub(r"\.{2,}", ".", name).strip(".-")
    if not name or len(name) > MAX_NAME or not DNS1123_SUBDOMAIN.match(name):
        return f"hf-{_hash(repo_id, 16)}"
    return name


def public_names(repo_ids: Iterable[str]) -> dict[str, str]:
    """public name -> repository id, for every id of one index."""
    by_name: dict[str, list[str]] = {}
    for repo_id in sorted(set(repo_ids)):
        by_name.setdefault(public_name(repo_id), []).append(repo_id)
    names: dict[str, str] = {}
    for name, ids in by_name.items():
        if len(ids) == 1:
            names[name] = ids[0]
            continue
        for repo_id in ids:
            names[f"{name[:MAX_NAME - 9]}-{_hash(repo_id, 8)}"] = repo_id
    return names
