"""The migration audit ledger: one controller-owned ConfigMap, NAME in the controller namespace
(the seed: history "archived to a controller-owned ConfigMap"), labelled `ome.io/migration-ledger:
"true"`. One key per migration, `<namespace>.<replica>.<request id>`, holds the terminal record's
JSON (the MigrationStatus as on status.migrations: phase, reason, message, from node, indexes,
times, trigger, attempt, succeeded) with the replica's namespace and name. status.migrations prunes
terminal records after the rate window; the ledger keeps them, bounded: when its keys and values
exceed BOUND_BYTES the oldest entries (completedAt, else startedAt) are dropped first and counted
in the DROPPED annotation.

Why the controller namespace and not one ConfigMap beside each replica: the worker may then change
that one ConfigMap only (a Role with resourceNames), instead of holding write access to every
ConfigMap of every namespace. It is not garbage-collected with a replica: it is an audit record,
bounded as a whole. Upstream OME has no ledger (its code names none), so the name, shape and bound
are this project's. This module is the pure part; activities.py reads and writes the ConfigMap.
"""

from __future__ import annotations

import hashlib
import json
import re

from servingops.api_models.ome.migration import MigrationStatus

NAME = "servingops-migration-ledger"
"""Fixed, so the chart's Role can name it (resourceNames) and an operator can find it."""
LABEL = "ome.io/migration-ledger"
DROPPED = "ome.io/migration-ledger-dropped"
"""Annotation: how many entries the bound has dropped over the ledger's life."""
BOUND_BYTES = 512 * 1024
"""Bytes of keys plus values kept: half the apiserver's 1 MiB object limit, leaving room for metadata
(an entry is ~0.6 KiB, so about eight hundred migrations)."""
_KEY = re.compile(r"[^-._a-zA-Z0-9]")
_KEY_MAX = 253


def key_of(namespace: str, replica: str, request_uuid: str) -> str:
    """A ConfigMap key ([-._a-zA-Z0-9]{1,253}): `<namespace>.<replica>.<request id>`; a key too long
    (a replica name near its 253-character limit) keeps its end and a digest of the whole."""
    key = _KEY.sub("_", f"{namespace}.{replica}.{request_uuid}")
    if len(key) <= _KEY_MAX:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{digest}.{key[-(_KEY_MAX - len(digest) - 1):]}"


def entries(namespace: str, replica: str, records: list[MigrationStatus]) -> dict[str, str]:
    """Key -> value of each record: its JSON as on status.migrations (camelCase) with the replica's
    namespace and name, keys sorted, compact (so a repeated write compares equal)."""
    return {key_of(namespace, replica, r.request_uuid or ""): json.dumps(
        {"namespace": namespace, "inferenceReplica": replica,
         **r.model_dump(by_alias=True, exclude_none=True, mode="json")}, sort_keys=True, separators=(",", ":"))
        for r in records}


def _age(value: str) -> str:
    try:
        record = json.loads(value)
    except ValueError:
        return ""
    if not isinstance(record, dict):
        return ""
    return str(record.get("completedAt") or record.get("startedAt") or "")


def merge(data: dict[str, str], entries: dict[str, str], bound: int = BOUND_BYTES) -> tuple[dict[str, str], int]:
    """The ledger's data with `entries` (key -> record JSON) written over it, and how many entries the
    bound dropped, oldest first (RFC 3339 UTC stamps sort as text; ties by key)."""
    merged = {**data, **entries}
    size = sum(len(k.encode()) + len(v.encode()) for k, v in merged.items())
    dropped = 0
    for key in sorted(merged, key=lambda k: (_age(merged[k]), k)):
        if size <= bound:
            break
        size -= len(key.encode()) + len(merged.pop(key).encode())
        dropped += 1
    return merged, dropped


__all__ = ["BOUND_BYTES", "DROPPED", "LABEL", "NAME", "entries", "key_of", "merge"]
