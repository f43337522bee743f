"""The per-Instance rows of an InferenceReplica's status, in either of their two spellings (seed 004,
InferenceReplicaStatus, InstanceStatusColumns and its groups and entries).

DenseV1 is `status.instanceStatuses`, one OMENativeInstanceStatus per Instance. ColumnarV2 is
`status.instanceStatusEncoding: ColumnarV2` with `status.instanceStatusColumns`: each value shared
by many Instances is stored once against the index set of the Instances carrying it, and the
per-Instance records (conditions, readySince, operation, lastFailure, announced) stay keyed by
index in entries. `encode` / `decode` convert between rows and columns; `status_rows` reads the
rows of a status in whichever spelling it holds; `with_rows` picks the spelling of a write.

The canonical row. Both spellings must decode to the same rows, so a row is compared in one form
(`normalize_row`):
- a default value is absent (None): incarnation 0, an empty revision, a zero count, admitted
  false, activeOrdinal 0, an empty conditions or announced list. ColumnarV2 cannot tell "0" from
  "absent" (a member missing from every group takes the default), so DenseV1 rows are written
  without them too;
- readyPodCount, scheduledPodCount and nodesOccupied are never set. The seed keeps them "for API
  compatibility" and says OMENative does not persist them (readiness, scheduling and placement are
  read from the Pods), and ColumnarV2 has no column for them: the engine leaves them unset, and
  `normalize_row` drops them, so a DenseV1 row that carries them reads as the row ColumnarV2 would
  give back;
- every other field (index, phase, the revisions, the other counts, the entry records) is kept
  unchanged.

Every function here is pure and deterministic (no clock, no randomness, stable orders): the
replica workflow calls them. Anything that cannot be spelled, or a ColumnarV2 value that breaks a
rule of the seed, raises ColumnsError (a ValueError) naming the first problem.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from servingops.api_models.ome.enums import InstanceStatusEncoding, OMENativeInstancePhase
from servingops.api_models.ome.index_sets import (
    INT32_MAX,
    IndexSetError,
    format_index_set,
    index_set_size,
    parse_index_ranges,
    parse_index_set,
)
from servingops.api_models.ome.instance_status import (
    InstanceStatusColumns,
    InstanceStatusCountGroup,
    InstanceStatusEntry,
    InstanceStatusIncarnationGroup,
    InstanceStatusPhaseGroup,
    InstanceStatusRevisionGroup,
    OMENativeInstanceStatus,
)
from servingops.api_models.ome.replica import InferenceReplicaStatus

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# How much DenseV1 JSON a status may carry before a write switches to ColumnarV2. etcd refuses a
# write over 1.5 MiB (its --max-request-bytes default: the apiserver answers "etcdserver: request
# is too large"), and the rows share the object with the spec (the rendered pod template of every
# runner), metadata and managedFields, conditions, retry blocks, traffic and up to a rate window of
# migration records. A third of the limit for the rows leaves the rest of the object 1 MiB.
# Measured (bench/instance_columns_sizes.py): a typical row (Ready, one pod, one revision
# "llama-3-70b-engine-5d8f7c9b6d", its own readySince) is ~220 bytes of DenseV1 JSON, so such a
# replica is written as ColumnarV2 from 2,378 Instances on (2,217 when each row also says admitted:
# true); ColumnarV2 keeps only an entry with readySince per Instance (~50 bytes): 10,277 bytes for
# 200 rows, 101,284 bytes for 2,000.
DEFAULT_BUDGET_BYTES = 512 * 1024

# The most rows `decode` expands. A two-word index set ("0-2147483646") names two billion
# Instances; no InferenceReplica has more Instances than a cluster has pods, and Kubernetes'
# scalability envelope is 150,000 pods per cluster.
MAX_ROWS = 150_000

# The wire names of the three status fields that hold the rows.
DENSE_FIELD = "instanceStatuses"
ENCODING_FIELD = "instanceStatusEncoding"
COLUMNS_FIELD = "instanceStatusColumns"

V = TypeVar("V", bound=Hashable)


class ColumnsError(ValueError):
    """Rows that cannot be encoded, or columns that break a rule of the seed."""


# --- the canonical row ----------------------------------------------------------------------------


def _is_default(value: object) -> bool:
    # bool is an int: False is a default like 0. A StrEnum phase is never empty.
    return value is None or (isinstance(value, (int, str, list)) and not value)


def _row(index: int, **values: Any) -> OMENativeInstanceStatus:
    """A canonical row: only the non-default values are set."""
    return OMENativeInstanceStatus(index=index, **{k: v for k, v in values.items() if not _is_default(v)})


def _check_row(row: OMENativeInstanceStatus) -> int:
    """The row's index, once every field ColumnarV2 carries is one it can spell."""
    index = row.index
    if index is None or isinstance(index, bool):
        raise ColumnsError("a row needs an index")
    if not 0 <= index <= INT32_MAX:
        raise ColumnsError(f"row index {index} is not a nonnegative int32")
    if row.phase is None:
        raise ColumnsError(f"row {index} has no phase: every Instance has one (ColumnarV2 has no default phase)")
    if row.incarnation is not None and not INT64_MIN <= row.incarnation <= INT64_MAX:
        raise ColumnsError(f"row {index}: incarnation {row.incarnation} is not an int64")
    for name in ("pod_count", "serving_pod_count", "available_pod_count"):
        count = getattr(row, name)
        if count is not None and not 0 <= count <= INT32_MAX:
            raise ColumnsError(f"row {index}: {name} {count} is not a nonnegative int32")
    if row.active_ordinal not in (None, 0, 1):
        raise ColumnsError(f"row {index}: activeOrdinal {row.active_ordinal} is neither 0 nor 1")
    return index


def normalize_row(row: OMENativeInstanceStatus) -> OMENativeInstanceStatus:
    """The row as both spellings carry it (see the module's docstring); the input is not changed."""
    index = _check_row(row)
    return _row(
        index,
        incarnation=row.incarnation,
        phase=row.phase,
        running_revision=row.running_revision,
        target_revision=row.target_revision,
        pod_count=row.pod_count,
        serving_pod_count=row.serving_pod_count,
        available_pod_count=row.available_pod_count,
        admitted=row.admitted,
        active_ordinal=row.active_ordinal,
        **_records(row),
    )


def normalize_rows(rows: Iterable[OMENativeInstanceStatus]) -> list[OMENativeInstanceStatus]:
    """Every row canonical, in the same order; duplicate indexes are refused."""
    canonical = [normalize_row(row) for row in rows]
    seen: set[int] = set()
    for row in canonical:
        assert row.index is not None  # _check_row
        if row.index in seen:
            raise ColumnsError(f"two rows have index {row.index}: an Instance has one row")
        seen.add(row.index)
    if len(canonical) > MAX_ROWS:
        raise ColumnsError(f"{len(canonical)} rows: more than {MAX_ROWS}")
    return canonical


def _records(row: OMENativeInstanceStatus | InstanceStatusEntry) -> dict[str, Any]:
    """The per-Instance records an entry carries, copied (rows and columns never share objects)."""
    return {
        "conditions": copy.deepcopy(row.conditions) or None,
        "ready_since": row.ready_since,
        "operation": copy.deepcopy(row.operation),
        "last_failure": copy.deepcopy(row.last_failure),
        "announced": list(row.announced) if row.announced else None,
    }


# --- encode ---------------------------------------------------------------------------------------


def _bytewise(value: Any) -> bytes:
    return str(value).encode("utf-8")


def _numeric(value: Any) -> int:
    return int(value)


def _grouped(
    rows: Sequence[OMENativeInstanceStatus], value_of: Callable[[OMENativeInstanceStatus], V | None],
    order: Callable[[V], Any],
) -> list[tuple[V, str]]:
    """(value, canonical index set) per non-default value, in the column's canonical value order."""
    indexes: dict[V, list[int]] = {}
    for row in rows:
        value = value_of(row)
        if value is not None:
            assert row.index is not None
            indexes.setdefault(value, []).append(row.index)
    return [(value, format_index_set(indexes[value])) for value in sorted(indexes, key=order)]


def _index_set_or_none(indexes: Iterable[int]) -> str | None:
    listed = list(indexes)
    return format_index_set(listed) if listed else None


def encode(rows: Sequence[OMENativeInstanceStatus]) -> InstanceStatusColumns:
    """The ColumnarV2 columns of `rows` (at least one). Only the fields ColumnarV2 carries are read;
    defaults are never grouped, groups are in canonical value order, entries ascend by index."""
    canonical = normalize_rows(rows)
    if not canonical:
        raise ColumnsError("ColumnarV2 spells at least one row (members is a nonempty index set); "
                           "no rows is an empty DenseV1 list")
    order = [row.index for row in canonical if row.index is not None]
    ascending = sorted(order)
    by_index = sorted(canonical, key=lambda row: row.index or 0)
    return InstanceStatusColumns(
        members=format_index_set(order),
        row_order=None if order == ascending else order,
        phases=[InstanceStatusPhaseGroup(value=v, indexes=s)
                for v, s in _grouped(canonical, lambda r: r.phase, _bytewise)],
        running_revisions=[InstanceStatusRevisionGroup(value=v, indexes=s)
                           for v, s in _grouped(canonical, lambda r: r.running_revision, _bytewise)] or None,
        target_revisions=[InstanceStatusRevisionGroup(value=v, indexes=s)
                          for v, s in _grouped(canonical, lambda r: r.target_revision, _bytewise)] or None,
        incarnations=[InstanceStatusIncarnationGroup(value=v, indexes=s)
                      for v, s in _grouped(canonical, lambda r: r.incarnation, _numeric)] or None,
        pod_counts=_count_groups(canonical, lambda r: r.pod_count),
        serving_pod_counts=_count_groups(canonical, lambda r: r.serving_pod_count),
        available_pod_counts=_count_groups(canonical, lambda r: r.available_pod_count),
        admitted=_index_set_or_none(row.index for row in by_index if row.admitted and row.index is not None),
        active_ordinal_one=_index_set_or_none(
            row.index for row in by_index if row.active_ordinal == 1 and row.index is not None),
        entries=[InstanceStatusEntry(index=row.index, **_records(row))
                 for row in by_index if _carries_records(row)] or None,
    )


def _count_groups(
    rows: Sequence[OMENativeInstanceStatus], value_of: Callable[[OMENativeInstanceStatus], int | None],
) -> list[InstanceStatusCountGroup] | None:
    return [InstanceStatusCountGroup(value=v, indexes=s) for v, s in _grouped(rows, value_of, _numeric)] or None


def _carries_records(row: OMENativeInstanceStatus | InstanceStatusEntry) -> bool:
    return bool(row.conditions or row.announced) or any(
        value is not None for value in (row.ready_since, row.operation, row.last_failure))


# --- decode ---------------------------------------------------------------------------------------


def _column(
    name: str, groups: Sequence[tuple[V | None, str | None]] | None, members: set[int],
    order: Callable[[V], Any], valid: Callable[[V], bool], rule: str, *, complete: bool = False,
) -> dict[int, V]:
    """Index -> value of one grouped column, after checking the seed's rules for it: each group a
    valid value over a canonical index set of members, groups pairwise disjoint and strictly in
    canonical value order (so no value twice); with `complete`, every member in some group."""
    if groups is None:
        if complete and members:
            raise ColumnsError(f"{name} is missing: every member has one")
        return {}
    if not groups:
        raise ColumnsError(f"{name} is an empty list: leave the column out instead")
    values: dict[int, V] = {}
    previous: V | None = None
    for position, (value, indexes) in enumerate(groups):
        where = f"{name}[{position}]"
        if value is None or not valid(value):
            raise ColumnsError(f"{where}: value {_show(value)} is not allowed ({rule})")
        if previous is not None and not order(previous) < order(value):
            raise ColumnsError(f"{where}: value {_show(value)} is not after {_show(previous)} in canonical value order")
        previous = value
        for index in _subset(where, indexes, members):
            if index in values:
                raise ColumnsError(f"{where}: index {index} is also in the group of {_show(values[index])}")
            values[index] = value
    if complete and len(values) != len(members):
        missing = format_index_set(members - values.keys())
        raise ColumnsError(f"{name}: members {missing} are in no group")
    return values


def _show(value: object) -> str:
    # A phase is a StrEnum: shown as its wire value, like a revision.
    return repr(str(value)) if isinstance(value, str) else repr(value)


def _subset(where: str, indexes: str | None, members: set[int]) -> list[int]:
    if indexes is None:
        raise ColumnsError(f"{where}: indexes is missing")
    try:
        listed = parse_index_set(indexes, limit=len(members))
    except IndexSetError as exc:
        raise ColumnsError(f"{where}: {exc}") from exc
    strays = [index for index in listed if index not in members]
    if strays:
        raise ColumnsError(f"{where}: {format_index_set(strays)} are not members")
    return listed


def _members(columns: InstanceStatusColumns) -> list[int]:
    if columns.members is None:
        raise ColumnsError("members is missing")
    try:
        ranges = parse_index_ranges(columns.members)
    except IndexSetError as exc:
        raise ColumnsError(f"members: {exc}") from exc
    if index_set_size(ranges) > MAX_ROWS:
        raise ColumnsError(f"members names {index_set_size(ranges)} Instances, more than {MAX_ROWS}")
    return [index for first, last in ranges for index in range(first, last + 1)]


def _row_order(row_order: list[int] | None, members: list[int]) -> list[int]:
    if row_order is None:
        return members
    if sorted(row_order) != members:
        raise ColumnsError("rowOrder must list every member exactly once")
    if row_order == members:
        raise ColumnsError("rowOrder is the ascending members order: leave it out")
    return list(row_order)


def _entries(entries: list[InstanceStatusEntry] | None, members: set[int]) -> dict[int, InstanceStatusEntry]:
    if entries is None:
        return {}
    if not entries:
        raise ColumnsError("entries is an empty list: leave it out instead")
    found: dict[int, InstanceStatusEntry] = {}
    previous = -1
    for position, entry in enumerate(entries):
        index = entry.index
        if index is None or index not in members:
            raise ColumnsError(f"entries[{position}]: index {index} is not a member")
        if index <= previous:
            raise ColumnsError(f"entries[{position}]: index {index} is not after {previous} (one entry per "
                               "member, ascending)")
        if not _carries_records(entry):
            raise ColumnsError(f"entries[{position}]: an entry must carry at least one of conditions, "
                               "readySince, operation, lastFailure, or announced")
        found[index] = entry
        previous = index
    return found


def _pairs(groups: Sequence[Any] | None) -> list[tuple[Any, str | None]] | None:
    return None if groups is None else [(group.value, group.indexes) for group in groups]


def _flag_set(name: str, indexes: str | None, members: set[int]) -> set[int]:
    return set() if indexes is None else set(_subset(name, indexes, members))


def decode(columns: InstanceStatusColumns) -> list[OMENativeInstanceStatus]:
    """The canonical rows `columns` spell, in DenseV1 order. Only what `encode` writes is accepted:
    every rule the seed states for ColumnarV2 is checked, so encode(decode(c)) == c."""
    ordered = _members(columns)
    members = set(ordered)
    order = _row_order(columns.row_order, ordered)
    phases: dict[int, OMENativeInstancePhase] = _column(
        "phases", _pairs(columns.phases), members, _bytewise, lambda v: True, "a phase", complete=True)
    running: dict[int, str] = _column("runningRevisions", _pairs(columns.running_revisions), members, _bytewise,
                                      lambda v: v != "", "the empty revision is never grouped")
    target: dict[int, str] = _column("targetRevisions", _pairs(columns.target_revisions), members, _bytewise,
                                     lambda v: v != "", "the empty revision is never grouped")
    incarnations: dict[int, int] = _column(
        "incarnations", _pairs(columns.incarnations), members, _numeric,
        lambda v: v != 0 and INT64_MIN <= v <= INT64_MAX, "a nonzero int64; zero is the absent default")
    counts = {
        name: _column(name, _pairs(groups), members, _numeric, lambda v: 1 <= v <= INT32_MAX,
                      "a positive int32; zero is the absent default")
        for name, groups in (("podCounts", columns.pod_counts), ("servingPodCounts", columns.serving_pod_counts),
                             ("availablePodCounts", columns.available_pod_counts))
    }
    admitted = _flag_set("admitted", columns.admitted, members)
    slot_one = _flag_set("activeOrdinalOne", columns.active_ordinal_one, members)
    entries = _entries(columns.entries, members)
    rows: list[OMENativeInstanceStatus] = []
    for index in order:
        entry = entries.get(index)
        rows.append(_row(
            index,
            incarnation=incarnations.get(index),
            phase=phases[index],
            running_revision=running.get(index),
            target_revision=target.get(index),
            pod_count=counts["podCounts"].get(index),
            serving_pod_count=counts["servingPodCounts"].get(index),
            available_pod_count=counts["availablePodCounts"].get(index),
            admitted=index in admitted,
            active_ordinal=1 if index in slot_one else None,
            **(_records(entry) if entry is not None else {}),
        ))
    return rows


# --- the status fields ------------------------------------------------------------------------------


def status_rows(status: InferenceReplicaStatus | None) -> list[OMENativeInstanceStatus]:
    """The canonical rows of a status, from whichever spelling it holds (none: no rows). A mixed
    spelling, which the CRD's CEL rules refuse on a committed object, raises ColumnsError."""
    if status is None:
        return []
    if status.instance_status_encoding is None:
        if status.instance_status_columns is not None:
            raise ColumnsError("instanceStatusColumns requires instanceStatusEncoding; an unmarked status "
                               "carries only instanceStatuses")
        return normalize_rows(status.instance_statuses or [])
    if status.instance_status_encoding != InstanceStatusEncoding.COLUMNAR_V2:
        raise ColumnsError(f"unknown instanceStatusEncoding {status.instance_status_encoding!r}")
    if status.instance_status_columns is None or status.instance_statuses is not None:
        raise ColumnsError("instanceStatusEncoding: ColumnarV2 requires instanceStatusColumns and forbids "
                           "instanceStatuses")
    return decode(status.instance_status_columns)


def dense_json(rows: Sequence[OMENativeInstanceStatus]) -> list[dict[str, Any]]:
    """The DenseV1 list of canonical rows, as the apiserver stores it."""
    return [row.to_api() for row in normalize_rows(rows)]


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON: what the apiserver stores in etcd for a custom object
    (key order aside, which does not change the size)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def with_rows(rows: Sequence[OMENativeInstanceStatus], *, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> dict[str, Any]:
    """The status fields that hold `rows`, by wire name with JSON values: DenseV1 while the dense
    list's JSON is at most `budget_bytes`, else ColumnarV2. The other spelling's fields are None, so
    the result removes them as a merge patch (or in `kube.patch_status`, where None deletes a field);
    `InferenceReplicaStatus.model_validate(result).to_merge_patch()` gives the same fields back.

    ColumnarV2 is written even when it is itself over the budget: the budget is a share of the
    object, not its limit, and the apiserver is what refuses an object that is too large."""
    dense = dense_json(rows)
    if json_size(dense) <= budget_bytes:
        return {DENSE_FIELD: dense, ENCODING_FIELD: None, COLUMNS_FIELD: None}
    return {
        DENSE_FIELD: None,
        ENCODING_FIELD: InstanceStatusEncoding.COLUMNAR_V2.value,
        COLUMNS_FIELD: encode(rows).to_api(),
    }


__all__ = [
    "COLUMNS_FIELD",
    "DEFAULT_BUDGET_BYTES",
    "DENSE_FIELD",
    "ENCODING_FIELD",
    "MAX_ROWS",
    "ColumnsError",
    "decode",
    "dense_json",
    "encode",
    "json_size",
    "normalize_row",
    "normalize_rows",
    "status_rows",
    "with_rows",
]
