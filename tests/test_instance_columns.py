"""The two spellings of an InferenceReplica's per-Instance rows (seed 004): canonical index sets,
ColumnarV2 encode / decode, the choice of spelling on a write, and the CRD's union rules on the real
apiserver.

Property-style tests draw rows from hand-written generators seeded with random.Random(seed), so a
failure names the seed that reproduces it.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from servingops.api_models.base import Condition
from servingops.api_models.ome import InferenceReplica, InferenceReplicaStatus
from servingops.api_models.ome.enums import InstanceOperationType, OMENativeInstancePhase
from servingops.api_models.ome.index_sets import (
    INT32_MAX,
    IndexSetError,
    format_index_set,
    parse_index_ranges,
    parse_index_set,
)
from servingops.api_models.ome.instance_columns import (
    COLUMNS_FIELD,
    DENSE_FIELD,
    ENCODING_FIELD,
    INT64_MAX,
    INT64_MIN,
    ColumnsError,
    decode,
    dense_json,
    encode,
    json_size,
    normalize_rows,
    status_rows,
    with_rows,
)
from servingops.api_models.ome.instance_status import (
    InstanceOperation,
    InstanceStatusColumns,
    InstanceStatusCountGroup,
    InstanceStatusEntry,
    InstanceStatusIncarnationGroup,
    InstanceStatusPhaseGroup,
    InstanceStatusRevisionGroup,
    InstanceTermination,
    OMENativeInstanceStatus,
)
from tests.crd_helpers import create, manifest, new_namespace, rejection, replace
from tests.support.ome_objects import replica_spec

T0 = dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC)
SEEDS = range(40)
# The index-set pattern of the generated CRD, as the apiserver applies it.
_CRD = Path(__file__).parents[1] / "deploy" / "crds" / "ome.io_inferencereplicas.yaml"
_STATUS = yaml.safe_load(_CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
CRD_PATTERN: str = _STATUS["properties"]["instanceStatusColumns"]["properties"]["members"]["pattern"]

# --- index sets -------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([0], "0"),
        ([0, 1], "0-1"),
        ([2, 0, 1, 4], "0-2,4"),
        ([10, 5, 3, 4, 4], "3-5,10"),
        ([0, 2, 4], "0,2,4"),
        (list(range(9)) + list(range(10, 115)) + [116], "0-8,10-114,116"),
        ([INT32_MAX - 1, INT32_MAX], "2147483646-2147483647"),
    ],
)
def test_index_sets_format_canonically_and_parse_back(indexes: list[int], text: str) -> None:
    assert format_index_set(indexes) == text
    assert parse_index_set(text) == sorted(set(indexes))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("indexes", "complaint"),
    [([], "at least one index"), ([-1, 3], "index -1 is not a nonnegative int32"),
     ([INT32_MAX + 1], "index 2147483648 is not a nonnegative int32")],
)
def test_unspellable_sets_are_refused(indexes: list[int], complaint: str) -> None:
    with pytest.raises(IndexSetError, match=re.escape(complaint)):
        format_index_set(indexes)


NON_CANONICAL: list[tuple[str, str]] = [
    ("", "empty index set"),
    ("01", "leading zero"),
    ("0-010", "leading zero"),
    ("00", "leading zero"),
    (" 1", "whitespace"),
    ("1 ", "whitespace"),
    ("1, 3", "whitespace"),
    ("1\n", "whitespace"),
    ("1-\t3", "whitespace"),
    ("+1", "has a sign"),
    ("-1", "has a sign"),
    ("1-3,2", "overlaps"),
    ("1-3,3-5", "overlaps"),
    ("1,1", "overlaps"),
    ("1,2", "adjacent"),
    ("1-3,4-6", "adjacent"),
    ("5,3", "not ascending"),
    ("0-4,2-3", "overlaps"),
    ("3-3", "first < last"),
    ("5-3", "first < last"),
    ("1,,2", "empty term 2"),
    (",1", "empty term 1"),
    ("1,", "trailing comma"),
    ("2147483648", "exceeds int32"),
    ("0-2147483648", "exceeds int32"),
    ("9" * 5000, "exceeds int32"),
    ("1-", "not an index or a first-last range"),
    ("1--2", "not an index or a first-last range"),
    ("1-2-3", "not an index or a first-last range"),
    ("a", "not an index or a first-last range"),
    ("1.0", "not an index or a first-last range"),
    ("0x1", "not an index or a first-last range"),
    ("\u0663", "not an index or a first-last range"),  # ARABIC-INDIC DIGIT THREE: int() accepts it
    ("\u00b2", "not an index or a first-last range"),  # SUPERSCRIPT TWO: str.isdigit() accepts it
]


@pytest.mark.unit
@pytest.mark.parametrize(("text", "complaint"), NON_CANONICAL, ids=[repr(t)[:20] for t, _ in NON_CANONICAL])
def test_every_non_canonical_spelling_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(IndexSetError, match=re.escape(complaint)):
        parse_index_ranges(text)


@pytest.mark.unit
def test_a_huge_range_is_refused_before_it_is_expanded() -> None:
    assert parse_index_ranges("0-2147483647") == [(0, INT32_MAX)]
    with pytest.raises(IndexSetError, match="names 2147483648 indexes, more than 10"):
        parse_index_set("0-2147483647", limit=10)


def _random_set(rng: random.Random) -> set[int]:
    """Runs and singletons, dense or sparse, sometimes at the top of the int32 range."""
    base = rng.choice([0, rng.randrange(1000), INT32_MAX - 200])
    span = rng.choice([1, 5, 40, 200])
    return {base + offset for offset in range(span + 1) if rng.random() < rng.choice([0.2, 0.6, 0.95])} or {base}


@pytest.mark.unit
@pytest.mark.parametrize("seed", SEEDS)
def test_index_set_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        indexes = _random_set(rng)
        text = format_index_set(indexes)
        assert parse_index_set(text) == sorted(indexes)
        assert format_index_set(parse_index_set(text)) == text
        # What the parser accepts, the CRD's pattern accepts too.
        assert re.fullmatch(CRD_PATTERN, text)
        # Respelling a range as two adjacent terms, or a term twice, is refused.
        ranges = parse_index_ranges(text)
        first, last = rng.choice(ranges)
        if first < last:
            split = rng.randrange(first, last)
            respelled = text.replace(f"{first}-{last}", f"{_term(first, split)},{_term(split + 1, last)}", 1)
            with pytest.raises(IndexSetError, match="adjacent"):
                parse_index_ranges(respelled)
        with pytest.raises(IndexSetError):
            parse_index_ranges(f"{text},{_term(first, last)}")


def _term(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


# --- row generators ---------------------------------------------------------------------------------

PHASES = list(OMENativeInstancePhase)
REVISIONS = [None, "", "llama-engine-5d8f7c9b6d", "llama-engine-6b7d", "llama-engine-B", "rev-10", "rev-9"]
INCARNATIONS = [None, 0, 1, 2, 3, -1, -7, 10, INT64_MIN, INT64_MAX]
COUNTS = [None, 0, 1, 1, 2, 3, 10, INT32_MAX]


def _condition(rng: random.Random) -> Condition:
    return Condition(type=rng.choice(["AllPodsReady", "AllPodsScheduled", "Drained"]),
                     status=rng.choice(["True", "False"]), reason="Observed", message=rng.choice(["", "pod p-0"]),
                     last_transition_time=T0 + dt.timedelta(seconds=rng.randrange(10_000)))


def _operation(rng: random.Random) -> InstanceOperation:
    return InstanceOperation(id=f"op-{rng.randrange(100)}", type=rng.choice(list(InstanceOperationType)),
                             step=rng.choice(["Drain", "WaitReady", None]), started_at=T0,
                             deadline=rng.choice([None, T0 + dt.timedelta(minutes=5)]),
                             retry_count=rng.choice([None, 0, 2]), target_revision=rng.choice(REVISIONS[2:]),
                             hint_target_nodes=rng.choice([None, ["node-b"]]))


def _row(rng: random.Random, index: int) -> OMENativeInstanceStatus:
    """A row with every field ColumnarV2 carries, defaults spelled both ways (absent and explicit),
    and sometimes the fields it does not carry."""
    maybe = rng.random
    return OMENativeInstanceStatus(
        index=index,
        incarnation=rng.choice(INCARNATIONS),
        phase=rng.choice(PHASES),
        running_revision=rng.choice(REVISIONS),
        target_revision=rng.choice(REVISIONS),
        pod_count=rng.choice(COUNTS),
        serving_pod_count=rng.choice(COUNTS),
        available_pod_count=rng.choice(COUNTS),
        admitted=rng.choice([None, False, True]),
        active_ordinal=rng.choice([None, 0, 1]),
        conditions=rng.choice([None, [], [_condition(rng)]]) if maybe() < 0.7 else None,
        ready_since=T0 + dt.timedelta(seconds=index) if maybe() < 0.5 else None,
        operation=_operation(rng) if maybe() < 0.15 else None,
        last_failure=InstanceTermination(pod_name=f"p-{index}", reason="OOMKilled", exit_code=137, time=T0)
        if maybe() < 0.1 else None,
        announced=rng.choice([None, [], [f"GangNoColocation@{index}"]]) if maybe() < 0.2 else None,
        ready_pod_count=rng.choice([None, 1]),
        scheduled_pod_count=rng.choice([None, 1]),
        nodes_occupied=rng.choice([None, ["node-a"]]),
    )


def _rows(rng: random.Random) -> list[OMENativeInstanceStatus]:
    count = rng.choice([1, 2, 5, 30, 120])
    indexes = sorted(_random_set(rng) | {rng.randrange(INT32_MAX)})[:count]
    if rng.random() < 0.5:
        rng.shuffle(indexes)
    # Rows often share everything, as a settled replica's do: copy some rows' values to others.
    template = _row(rng, 0)
    return [template.model_copy(update={"index": i}, deep=True) if rng.random() < 0.4 else _row(rng, i)
            for i in indexes]


def _carried(row: OMENativeInstanceStatus) -> dict[str, Any]:
    """An independent reading of what a row means to ColumnarV2: defaults as values, the
    non-persisted fields left out."""
    return {
        "index": row.index, "phase": row.phase, "incarnation": row.incarnation or 0,
        "runningRevision": row.running_revision or "", "targetRevision": row.target_revision or "",
        "podCount": row.pod_count or 0, "servingPodCount": row.serving_pod_count or 0,
        "availablePodCount": row.available_pod_count or 0, "admitted": bool(row.admitted),
        "activeOrdinal": row.active_ordinal or 0, "conditions": row.conditions or [],
        "readySince": row.ready_since, "operation": row.operation, "lastFailure": row.last_failure,
        "announced": row.announced or [],
    }


# --- encode / decode ----------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("seed", SEEDS)
def test_decode_of_encode_gives_the_rows_back(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(10):
        rows = _rows(rng)
        columns = encode(rows)
        decoded = decode(columns)
        assert [_carried(row) for row in decoded] == [_carried(row) for row in rows]
        assert decoded == normalize_rows(rows)
        # Canonical rows come back equal, and the columns are a fixed point.
        assert decode(encode(decoded)) == decoded
        assert encode(decoded) == columns
        # Through the wire: the apiserver stores JSON.
        assert decode(InstanceStatusColumns.model_validate(columns.to_api())) == decoded
        _assert_canonical_columns(columns, rows)


def _assert_canonical_columns(columns: InstanceStatusColumns, rows: list[OMENativeInstanceStatus]) -> None:
    order = [row.index for row in rows]
    assert columns.row_order == (None if order == sorted(order) else order)
    assert parse_index_set(columns.members or "") == sorted(i for i in order if i is not None)
    phases = [g.value for g in columns.phases or []]
    assert phases == sorted(phases, key=lambda v: str(v).encode())
    for revisions in (columns.running_revisions, columns.target_revisions):
        values = [g.value or "" for g in revisions or []]
        assert "" not in values and values == sorted(values, key=str.encode)
    incarnations = [g.value or 0 for g in columns.incarnations or []]
    assert 0 not in incarnations and incarnations == sorted(incarnations)
    for counts in (columns.pod_counts, columns.serving_pod_counts, columns.available_pod_counts):
        values = [g.value or 0 for g in counts or []]
        assert all(v > 0 for v in values) and values == sorted(values)
    entries = [e.index for e in columns.entries or []]
    assert entries == sorted(entries)
    carrying = {r.index for r in rows if r.conditions or r.ready_since or r.operation or r.last_failure
                or r.announced}
    assert set(entries) == carrying


@pytest.mark.unit
def test_value_orders_are_bytewise_for_strings_and_signed_numeric_for_numbers() -> None:
    values = [(-7, "rev-9", 10), (10, "rev-10", 2), (-1, "B", 1), (2, "a", 3)]
    rows = [OMENativeInstanceStatus(index=i, phase="Ready", incarnation=inc, running_revision=rev, pod_count=pods)
            for i, (inc, rev, pods) in enumerate(values)]
    rows.append(OMENativeInstanceStatus(index=4, phase="Creating"))
    columns = encode(rows)
    assert [(g.value, g.indexes) for g in columns.incarnations or []] == [(-7, "0"), (-1, "2"), (2, "3"), (10, "1")]
    assert [g.value for g in columns.running_revisions or []] == ["B", "a", "rev-10", "rev-9"]
    assert [(g.value, g.indexes) for g in columns.pod_counts or []] == [(1, "2"), (2, "1"), (3, "3"), (10, "0")]
    assert [(g.value, g.indexes) for g in columns.phases or []] == [("Creating", "4"), ("Ready", "0-3")]


@pytest.mark.unit
def test_a_settled_replica_is_a_handful_of_groups() -> None:
    rev = "llama-engine-5d8f7c9b6d"
    rows = [OMENativeInstanceStatus(index=i, phase="Ready", running_revision=rev, target_revision=rev,
                                    pod_count=1, serving_pod_count=1, available_pod_count=1, admitted=True,
                                    incarnation=0, active_ordinal=0, conditions=[])
            for i in [*range(0, 100), *range(101, 200), 250]]
    assert encode(rows).to_api() == {
        "members": "0-99,101-199,250",
        "phases": [{"value": "Ready", "indexes": "0-99,101-199,250"}],
        "runningRevisions": [{"value": rev, "indexes": "0-99,101-199,250"}],
        "targetRevisions": [{"value": rev, "indexes": "0-99,101-199,250"}],
        "podCounts": [{"value": 1, "indexes": "0-99,101-199,250"}],
        "servingPodCounts": [{"value": 1, "indexes": "0-99,101-199,250"}],
        "availablePodCounts": [{"value": 1, "indexes": "0-99,101-199,250"}],
        "admitted": "0-99,101-199,250",
    }


@pytest.mark.unit
@pytest.mark.parametrize(
    ("rows", "complaint"),
    [
        ([], "at least one row"),
        ([OMENativeInstanceStatus(index=1, phase="Ready"), OMENativeInstanceStatus(index=1, phase="Failed")],
         "two rows have index 1"),
        ([OMENativeInstanceStatus(phase="Ready")], "a row needs an index"),
        ([OMENativeInstanceStatus(index=0)], "row 0 has no phase"),
        ([OMENativeInstanceStatus(index=-1, phase="Ready")], "not a nonnegative int32"),
        ([OMENativeInstanceStatus(index=INT32_MAX + 1, phase="Ready")], "not a nonnegative int32"),
        ([OMENativeInstanceStatus(index=0, phase="Ready", pod_count=-1)], "pod_count -1"),
        ([OMENativeInstanceStatus(index=0, phase="Ready", incarnation=INT64_MAX + 1)], "is not an int64"),
        ([OMENativeInstanceStatus.model_construct(index=0, phase="Ready", active_ordinal=2)], "activeOrdinal 2"),
    ],
)
def test_rows_columnar_cannot_spell_are_refused(rows: list[OMENativeInstanceStatus], complaint: str) -> None:
    with pytest.raises(ColumnsError, match=re.escape(complaint)):
        encode(rows)


def _good(**over: Any) -> InstanceStatusColumns:
    """Valid columns (members 0-2,5), with fields replaced; model_construct skips pydantic's own
    bounds so decode's checks are what is exercised."""
    fields: dict[str, Any] = {
        "members": "0-2,5",
        "row_order": [5, 0, 1, 2],
        "phases": [InstanceStatusPhaseGroup(value="Creating", indexes="5"),
                   InstanceStatusPhaseGroup(value="Ready", indexes="0-2")],
        "incarnations": [InstanceStatusIncarnationGroup(value=-3, indexes="1")],
        "pod_counts": [InstanceStatusCountGroup(value=1, indexes="0-2,5")],
        "entries": [InstanceStatusEntry(index=0, ready_since=T0), InstanceStatusEntry(index=5, announced=["x@1"])],
        **over,
    }
    return InstanceStatusColumns.model_construct(**fields)


@pytest.mark.unit
def test_valid_columns_decode() -> None:
    rows = decode(_good())
    assert [(r.index, r.phase, r.incarnation, r.pod_count) for r in rows] == [
        (5, "Creating", None, 1), (0, "Ready", None, 1), (1, "Ready", -3, 1), (2, "Ready", None, 1)]
    assert rows[1].ready_since == T0 and rows[0].announced == ["x@1"]
    assert encode(rows) == InstanceStatusColumns.model_validate(_good().to_api())


def _phase(value: str, indexes: str) -> InstanceStatusPhaseGroup:
    return InstanceStatusPhaseGroup(value=value, indexes=indexes)  # type: ignore[arg-type]


COLUMN_REJECTIONS: list[tuple[str, InstanceStatusColumns, str]] = [
    ("no-members", _good(members=None), "members is missing"),
    ("non-canonical-members", _good(members="0-2,3"), "members: index set '0-2,3'"),
    ("too-many-members", _good(members="0-2147483646", row_order=None), "more than 150000"),
    ("row-order-ascending", _good(row_order=[0, 1, 2, 5]), "rowOrder is the ascending members order"),
    ("row-order-missing-member", _good(row_order=[5, 0, 1]), "rowOrder must list every member"),
    ("row-order-twice", _good(row_order=[5, 0, 1, 1]), "rowOrder must list every member"),
    ("no-phases", _good(phases=None), "phases is missing"),
    ("phase-uncovered", _good(phases=[_phase("Ready", "0-2")]), "members 5 are in no group"),
    ("phase-out-of-order", _good(phases=[_phase("Ready", "0-2"), _phase("Creating", "5")]),
     "not after 'Ready' in canonical value order"),
    ("phase-twice", _good(phases=[_phase("Ready", "0-1"), _phase("Ready", "2,5")]), "canonical value order"),
    ("phase-overlap", _good(phases=[_phase("Creating", "2,5"), _phase("Ready", "0-2")]),
     "index 2 is also in the group of"),
    ("group-larger-than-members", _good(pod_counts=[InstanceStatusCountGroup(value=1, indexes="0-10")]),
     "names 11 indexes, more than 4"),
    ("group-stray", _good(pod_counts=[InstanceStatusCountGroup(value=1, indexes="3")]), "3 are not members"),
    ("group-bad-set", _good(pod_counts=[InstanceStatusCountGroup(value=1, indexes="1,2")]), "adjacent"),
    ("zero-count", _good(pod_counts=[InstanceStatusCountGroup.model_construct(value=0, indexes="1")]),
     "podCounts[0]: value 0 is not allowed"),
    ("counts-numeric-order", _good(pod_counts=[InstanceStatusCountGroup(value=10, indexes="1"),
                                               InstanceStatusCountGroup(value=2, indexes="2")]),
     "value 2 is not after 10"),
    ("zero-incarnation", _good(incarnations=[InstanceStatusIncarnationGroup(value=0, indexes="1")]),
     "zero is the absent default"),
    ("incarnations-signed-order", _good(incarnations=[InstanceStatusIncarnationGroup(value=-1, indexes="1"),
                                                      InstanceStatusIncarnationGroup(value=-5, indexes="2")]),
     "value -5 is not after -1"),
    ("empty-revision", _good(running_revisions=[InstanceStatusRevisionGroup.model_construct(value="", indexes="1")]),
     "the empty revision is never grouped"),
    ("revisions-bytewise", _good(target_revisions=[InstanceStatusRevisionGroup(value="a", indexes="1"),
                                                   InstanceStatusRevisionGroup(value="B", indexes="2")]),
     "'B' is not after 'a'"),
    ("empty-column", _good(pod_counts=[]), "podCounts is an empty list"),
    ("admitted-stray", _good(admitted="7"), "admitted: 7 are not members"),
    ("slot-one-bad-set", _good(active_ordinal_one="01"), "leading zero"),
    ("entries-descending", _good(entries=[InstanceStatusEntry(index=5, ready_since=T0),
                                          InstanceStatusEntry(index=0, ready_since=T0)]), "is not after 5"),
    ("entries-twice", _good(entries=[InstanceStatusEntry(index=0, ready_since=T0),
                                     InstanceStatusEntry(index=0, announced=["a@1"])]), "is not after 0"),
    ("entry-stray", _good(entries=[InstanceStatusEntry(index=3, ready_since=T0)]), "index 3 is not a member"),
    ("entry-empty", _good(entries=[InstanceStatusEntry(index=0)]), "an entry must carry at least one"),
    ("entry-empty-conditions", _good(entries=[InstanceStatusEntry.model_construct(index=0, conditions=[])]),
     "an entry must carry at least one"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("columns", "complaint"), [(c, m) for _, c, m in COLUMN_REJECTIONS],
                         ids=[i for i, _, _ in COLUMN_REJECTIONS])
def test_columns_that_break_the_seed_rules_are_refused(columns: InstanceStatusColumns, complaint: str) -> None:
    with pytest.raises(ColumnsError, match=re.escape(complaint)):
        decode(columns)


# --- the status fields --------------------------------------------------------------------------------


def _typical(count: int, revision: str = "llama-engine-5d8f7c9b6d") -> list[OMENativeInstanceStatus]:
    return [OMENativeInstanceStatus(index=i, phase="Ready", running_revision=revision, target_revision=revision,
                                    pod_count=1, serving_pod_count=1, available_pod_count=1,
                                    ready_since=T0 + dt.timedelta(seconds=i)) for i in range(count)]


@pytest.mark.unit
def test_dense_while_the_rows_fit_the_budget_then_columnar() -> None:
    rows = _typical(50)
    size = json_size(dense_json(rows))
    dense = with_rows(rows, budget_bytes=size)
    assert dense == {DENSE_FIELD: dense_json(rows), ENCODING_FIELD: None, COLUMNS_FIELD: None}
    columnar = with_rows(rows, budget_bytes=size - 1)
    assert columnar == {DENSE_FIELD: None, ENCODING_FIELD: "ColumnarV2", COLUMNS_FIELD: encode(rows).to_api()}
    for fields in (dense, columnar):
        # Both spellings decode to the same rows, and the status model writes the same fields as
        # a merge patch (None removes the other spelling).
        status = InferenceReplicaStatus.model_validate(fields)
        assert status_rows(status) == rows
        assert status.to_merge_patch() == fields
    assert with_rows([]) == {DENSE_FIELD: [], ENCODING_FIELD: None, COLUMNS_FIELD: None}


@pytest.mark.unit
def test_the_default_budget_keeps_typical_replicas_dense_to_a_few_thousand_instances() -> None:
    assert with_rows(_typical(2000))[ENCODING_FIELD] is None
    assert with_rows(_typical(3000))[ENCODING_FIELD] == "ColumnarV2"


@pytest.mark.unit
@pytest.mark.parametrize("seed", SEEDS)
def test_both_spellings_of_a_status_read_as_the_same_rows(seed: int) -> None:
    rows = _rows(random.Random(seed))
    dense = InferenceReplicaStatus.model_validate(with_rows(rows, budget_bytes=10**9))
    columnar = InferenceReplicaStatus.model_validate(with_rows(rows, budget_bytes=0))
    assert dense.instance_status_encoding is None and columnar.instance_status_encoding == "ColumnarV2"
    assert status_rows(dense) == status_rows(columnar) == normalize_rows(rows)
    # A dense row written by someone else with the fields OMENative does not persist reads the same.
    raw = InferenceReplicaStatus(instance_statuses=rows)
    assert status_rows(raw) == status_rows(columnar)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("status", "complaint"),
    [
        (InferenceReplicaStatus.model_validate({"instanceStatusColumns": encode(_typical(2)).to_api()}),
         "instanceStatusColumns requires instanceStatusEncoding"),
        (InferenceReplicaStatus.model_validate({"instanceStatusEncoding": "ColumnarV2"}),
         "requires instanceStatusColumns and forbids instanceStatuses"),
        (InferenceReplicaStatus.model_validate({"instanceStatusEncoding": "ColumnarV2",
                                                "instanceStatusColumns": encode(_typical(2)).to_api(),
                                                "instanceStatuses": dense_json(_typical(2))}),
         "requires instanceStatusColumns and forbids instanceStatuses"),
        (InferenceReplicaStatus(instance_statuses=[*_typical(2), *_typical(1)]), "two rows have index 0"),
    ],
)
def test_mixed_spellings_are_refused_when_read(status: InferenceReplicaStatus, complaint: str) -> None:
    with pytest.raises(ColumnsError, match=re.escape(complaint)):
        status_rows(status)
    assert status_rows(None) == [] and status_rows(InferenceReplicaStatus()) == []


# --- the union rules on the real apiserver -------------------------------------------------------------

UNION_1 = "instanceStatusColumns requires instanceStatusEncoding; an unmarked status carries only instanceStatuses"
UNION_2 = "instanceStatusEncoding: ColumnarV2 requires instanceStatusColumns and forbids instanceStatuses"


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "columns")


def _replica(kube_api: client.ApiClient, ns: str) -> dict[str, Any]:
    return create(kube_api, InferenceReplica, manifest(InferenceReplica, replica_spec()), ns)


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """A whole status (for a replace): the fields that are set."""
    return {key: value for key, value in fields.items() if value is not None}


def _write_status(kube_api: client.ApiClient, ns: str, status: dict[str, Any]) -> dict[str, Any]:
    replica = _replica(kube_api, ns)
    replica["status"] = status
    return replace(kube_api, InferenceReplica, replica, ns, status=True)


def _rows_of(stored: dict[str, Any]) -> list[OMENativeInstanceStatus]:
    return status_rows(InferenceReplica.model_validate(stored).status)


@pytest.mark.integration
def test_the_apiserver_accepts_each_spelling(kube_api: client.ApiClient, ns: str) -> None:
    rows = _rows(random.Random(7))
    for budget in (10**9, 0):
        fields = _present(with_rows(rows, budget_bytes=budget))
        stored = _write_status(kube_api, ns, fields)
        assert stored["status"] == fields
        assert _rows_of(stored) == normalize_rows(rows)


@pytest.mark.integration
def test_the_apiserver_refuses_every_mixed_spelling(kube_api: client.ApiClient, ns: str) -> None:
    rows = _typical(3)
    dense = dense_json(rows)
    columns = encode(rows).to_api()
    for status, complaint in [
        ({COLUMNS_FIELD: columns}, UNION_1),
        ({COLUMNS_FIELD: columns, DENSE_FIELD: dense}, UNION_1),
        ({ENCODING_FIELD: "ColumnarV2", DENSE_FIELD: dense}, UNION_2),
        ({ENCODING_FIELD: "ColumnarV2", COLUMNS_FIELD: columns, DENSE_FIELD: dense}, UNION_2),
        ({ENCODING_FIELD: "ColumnarV2"}, UNION_2),
    ]:
        replica = _replica(kube_api, ns)
        replica["status"] = status
        refused = rejection(lambda body=replica: replace(kube_api, InferenceReplica, body, ns, status=True))
        assert complaint in refused, status


@pytest.mark.integration
def test_a_write_switches_spelling_as_a_merge_patch(kube_api: client.ApiClient, ns: str) -> None:
    """with_rows's None fields remove the previous spelling: without them the merged status would
    hold both, which the CEL rules refuse."""
    info = InferenceReplica.crd
    custom = client.CustomObjectsApi(kube_api)
    rows = _typical(40)
    replica = _replica(kube_api, ns)
    name = replica["metadata"]["name"]

    def patch(fields: dict[str, Any]) -> dict[str, Any]:
        return dict(custom.patch_namespaced_custom_object_status(
            info.group, info.version, ns, info.plural, name, {"status": fields}))

    assert _rows_of(patch(with_rows(rows, budget_bytes=10**9))) == rows
    columnar = with_rows(rows, budget_bytes=0)
    assert UNION_2 in rejection(lambda: patch(_present(columnar)))
    stored = patch(columnar)
    assert DENSE_FIELD not in stored["status"] and stored["status"][ENCODING_FIELD] == "ColumnarV2"
    assert _rows_of(stored) == rows
    dense = with_rows(rows, budget_bytes=10**9)
    # Left in place, the ColumnarV2 marker would now hold DenseV1 rows too.
    assert UNION_2 in rejection(lambda: patch(_present(dense)))
    stored = patch(dense)
    assert COLUMNS_FIELD not in stored["status"] and ENCODING_FIELD not in stored["status"]
    assert _rows_of(stored) == rows


def _rollout_in_flight(count: int, rng: random.Random) -> list[OMENativeInstanceStatus]:
    """A replica mid SurgeThenDrain update: most Instances Ready on the old or new revision, a few
    updating with an operation, some after a failure."""
    old, new = "llama-engine-5d8f7c9b6d", "llama-engine-7c9f5d6b8d"
    rows = []
    for i in range(count):
        done = i < count // 2
        row = OMENativeInstanceStatus(
            index=i, incarnation=rng.choice([0, 0, 0, 1, 2]), phase="Ready",
            running_revision=new if done else old, target_revision=new,
            pod_count=1, serving_pod_count=1, available_pod_count=1, admitted=True,
            active_ordinal=1 if done and i % 2 else 0,
            ready_since=T0 + dt.timedelta(seconds=rng.randrange(100_000)),
        )
        if not done and rng.random() < 0.05:
            row.phase = OMENativeInstancePhase.UPDATING
            row.pod_count, row.serving_pod_count = 2, 1
            row.operation = InstanceOperation(id=f"op-{i}", type=InstanceOperationType.UPDATE, step="WaitReady",
                                              started_at=T0, deadline=T0 + dt.timedelta(minutes=10),
                                              retry_count=0, target_revision=new, strategy="SurgeThenDrain")
        if rng.random() < 0.02:
            row.last_failure = InstanceTermination(pod_name=f"llama-engine-{i}-0", container_name="main",
                                                   reason="OOMKilled", exit_code=137, time=T0)
            row.conditions = [Condition(type="Failed", status="False", reason="Recovered", message="",
                                        last_transition_time=T0)]
        rows.append(row)
    rng.shuffle(rows)
    return rows


@pytest.mark.integration
def test_two_thousand_rows_through_the_status_subresource(kube_api: client.ApiClient, ns: str) -> None:
    rows = _rollout_in_flight(2000, random.Random(2000))
    fields = with_rows(rows, budget_bytes=64 * 1024)
    assert fields[ENCODING_FIELD] == "ColumnarV2" and fields[COLUMNS_FIELD]["rowOrder"]
    stored = _write_status(kube_api, ns, _present(fields))
    assert stored["status"][COLUMNS_FIELD] == fields[COLUMNS_FIELD]
    assert _rows_of(stored) == normalize_rows(rows)
    # Read again: what the apiserver stored, not only what it answered the write with.
    info = InferenceReplica.crd
    again = client.CustomObjectsApi(kube_api).get_namespaced_custom_object_status(
        info.group, info.version, ns, info.plural, stored["metadata"]["name"])
    assert _rows_of(dict(again)) == normalize_rows(rows)
