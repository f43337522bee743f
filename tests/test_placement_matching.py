"""Which WorkloadClusters a PlacementSpec matches (workflows/placement/matching.py): every selector
operator with node-selector semantics, terms ORed and requirements ANDed, matchFields against the real
name, the static Split weights, ComponentAffinity agreement and disagreement, readiness and order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.placement import PlacementSpec
from servingops.api_models.ome.workload_cluster import WorkloadCluster
from servingops.workflows.placement.held import COMPONENT_AFFINITY_MISMATCH
from servingops.workflows.placement.matching import (
    ComponentMatch,
    Registration,
    match_clusters,
)

pytestmark = pytest.mark.unit

Spec = dict[str, Any]

# One fleet for the operator table. "north" carries a label literally named metadata.name, "west" a
# non-integer gpus label, "big" one beyond int64 (Go's ParseInt refuses it, so Gt/Lt cannot match it).
FLEET = [
    Registration(name="west", uid="u-west", labels={"region": "west", "gpus": "x8"}, ready=True),
    Registration(name="east", uid="u-east", labels={"region": "east", "gpus": "8", "tier": "gold"}, ready=True),
    Registration(name="south", uid="u-south", labels={}, ready=False),
    Registration(name="north", uid="u-north", labels={"metadata.name": "east", "gpus": "-2"}, ready=True),
    Registration(name="big", uid="u-big", labels={"gpus": "99999999999999999999"}, ready=True),
]


def _req(operator: str, *values: str, key: str = "gpus") -> Spec:
    return {"key": key, "operator": operator, **({"values": list(values)} if values else {})}


def _term(*expressions: Spec, fields: list[Spec] | None = None, weight: int | None = None) -> Spec:
    term: Spec = {}
    if expressions:
        term["matchExpressions"] = list(expressions)
    if fields:
        term["matchFields"] = fields
    if weight is not None:
        term["weight"] = weight
    return term


def _spec(terms: list[Spec] | None, mode: str = "Single") -> PlacementSpec:
    body: Spec = {"policy": "ClusterAffinity", "mode": mode}
    if terms is not None:
        body["clusterAffinity"] = terms
    return PlacementSpec.model_validate(body)


def _components(mode: str = "Single", **lists: list[Spec]) -> PlacementSpec:
    return PlacementSpec.model_validate({"policy": "ComponentAffinity", "mode": mode, "componentAffinity": lists})


# (id, one term's requirements, the names it matches, sorted)
OPERATORS: list[tuple[str, Spec, list[str]]] = [
    ("in", _term(_req("In", "east", key="region")), ["east"]),
    ("in-two-values", _term(_req("In", "east", "west", key="region")), ["east", "west"]),
    ("notin-missing-label-satisfies", _term(_req("NotIn", "east", key="region")), ["big", "north", "south", "west"]),
    ("exists", _term(_req("Exists", key="tier")), ["east"]),
    ("does-not-exist", _term(_req("DoesNotExist", key="tier")), ["big", "north", "south", "west"]),
    ("gt-skips-missing-non-integer-and-overflow", _term(_req("Gt", "4")), ["east"]),
    ("gt-negative-bound", _term(_req("Gt", "-3")), ["east", "north"]),
    ("gt-is-strict", _term(_req("Gt", "8")), []),
    ("lt", _term(_req("Lt", "0")), ["north"]),
    ("lt-is-strict", _term(_req("Lt", "-2")), []),
    ("lt-large-bound", _term(_req("Lt", "100")), ["east", "north"]),
    # A label called metadata.name is an ordinary label for matchExpressions...
    ("label-named-metadata-name", _term(_req("In", "east", key="metadata.name")), ["north"]),
    # ...and matchFields read only the real name.
    ("fields-in-real-name", _term(fields=[_req("In", "east", key="metadata.name")]), ["east"]),
    ("fields-in-several-names", _term(fields=[_req("In", "west", "big", "nowhere", key="metadata.name")]),
     ["big", "west"]),
    ("fields-notin", _term(fields=[_req("NotIn", "east", "west", key="metadata.name")]), ["big", "north", "south"]),
    # Malformed requirements (admission rejects them) match nothing rather than everything.
    ("fields-other-key", _term(fields=[_req("In", "east", key="metadata.namespace")]), []),
    ("fields-exists", _term(fields=[_req("Exists", key="metadata.name")]), []),
    ("in-without-values", _term(_req("In", key="region")), []),
    ("notin-without-values", _term(_req("NotIn", key="region")), []),
    ("exists-with-values", _term(_req("Exists", "gold", key="tier")), []),
    ("gt-non-integer-value", _term(_req("Gt", "four")), []),
    ("gt-two-values", _term(_req("Gt", "1", "2")), []),
    ("empty-term", _term(), []),
    # AND inside a term.
    ("and-two-expressions", _term(_req("In", "east", "west", key="region"), _req("Gt", "4")), ["east"]),
    ("and-expression-and-field", _term(_req("NotIn", "east", key="region"),
                                       fields=[_req("In", "west", "north", key="metadata.name")]), ["north", "west"]),
    ("and-fails-on-one", _term(_req("Exists", key="tier"), _req("Lt", "0")), []),
]


@pytest.mark.parametrize(("term", "names"), [(t, n) for _, t, n in OPERATORS], ids=[i for i, _, _ in OPERATORS])
def test_selector_operators(term: Spec, names: list[str]) -> None:
    result = match_clusters(_spec([term]), FLEET)
    assert result.names() == tuple(names)
    assert all(c.matching_terms == (0,) for c in result.candidates)
    assert result.held is None


@pytest.mark.parametrize(("label", "matches"), [("9", True), ("+9", True), ("09", True), ("1_0", False),
                                               (" 9", False), ("9.0", False), ("\u0663", False), ("", False)],
                         ids=["plain", "signed", "leading-zero", "underscore", "space", "decimal-point",
                              "unicode-digit", "empty"])
def test_gt_parses_labels_as_go_parseint_does(label: str, matches: bool) -> None:
    # Python's int() would take "1_0", " 9" and Arabic-Indic digits; strconv.ParseInt(s, 10, 64) does not.
    fleet = [Registration(name="m", uid="u", labels={"gpus": label})]
    assert match_clusters(_spec([_term(_req("Gt", "0"))]), fleet).names() == (("m",) if matches else ())


def test_terms_are_ored_and_report_which_matched() -> None:
    terms = [_term(_req("In", "east", key="region")), _term(_req("DoesNotExist")), _term(_req("Exists", key="tier"))]
    result = match_clusters(_spec(terms), FLEET)
    assert {c.cluster: c.matching_terms for c in result.candidates} == {"east": (0, 2), "south": (1,)}


def test_omitted_cluster_affinity_matches_every_registration_without_terms() -> None:
    result = match_clusters(_spec(None), FLEET)
    assert result.names() == ("big", "east", "north", "south", "west")
    assert all(c.matching_terms == () and c.weight is None for c in result.candidates)
    status = result.candidates[0].allocation_status()
    assert status.matched is True and status.matching_terms is None and status.cluster_uid == "u-big"


def test_candidates_are_sorted_by_name_and_the_race_takes_ready_ones() -> None:
    result = match_clusters(_spec([_term(_req("NotIn", "nowhere", key="region"))]), list(reversed(FLEET)))
    assert result.names() == ("big", "east", "north", "south", "west")
    # south is not Ready: still a matched candidate (a plan does not follow the connection), not raced.
    assert [c.cluster for c in result.candidates if not c.ready] == ["south"]
    assert [c.cluster for c in result.race_order()] == ["big", "east", "north", "west"]


def test_duplicate_registration_names_are_refused() -> None:
    with pytest.raises(ValueError, match="east"):
        match_clusters(_spec(None), [*FLEET, Registration(name="east", uid="other")])


# --- weights ---------------------------------------------------------------------------------------

EAST = _req("In", "east", key="region")
HAS_GPUS = _req("Exists")

# (id, terms, mode, {cluster: weight}); only matched clusters appear.
WEIGHTS: list[tuple[str, list[Spec], str, dict[str, int | None]]] = [
    # No explicit weight anywhere: a cluster matching two terms still weighs one.
    ("unweighted-overlap-counts-once", [_term(EAST), _term(HAS_GPUS)], "Split",
     {"big": 1, "east": 1, "north": 1, "west": 1}),
    # One explicit weight: matching weights add and the omitted one contributes one.
    ("explicit-and-omitted-add", [_term(EAST, weight=3), _term(HAS_GPUS)], "Split",
     {"big": 1, "east": 4, "north": 1, "west": 1}),
    ("explicit-weights-add", [_term(EAST, weight=3), _term(HAS_GPUS, weight=2)], "Split",
     {"big": 2, "east": 5, "north": 2, "west": 2}),
    ("explicit-single-match", [_term(EAST, weight=3), _term(_req("In", "west", key="region"))], "Split",
     {"east": 3, "west": 1}),
    ("omitted-affinity-in-split", [], "Split", {"big": 1, "east": 1, "north": 1, "south": 1, "west": 1}),
    # Weights are for static Split only; the other modes carry none.
    ("split-by-capacity-has-no-static-weight", [_term(EAST), _term(HAS_GPUS)], "SplitByCapacity",
     {"big": None, "east": None, "north": None, "west": None}),
    ("all-has-no-weight", [_term(EAST)], "All", {"east": None}),
]


@pytest.mark.parametrize(("terms", "mode", "weights"), [(t, m, w) for _, t, m, w in WEIGHTS],
                         ids=[i for i, _, _, _ in WEIGHTS])
def test_effective_weights(terms: list[Spec], mode: str, weights: dict[str, int | None]) -> None:
    result = match_clusters(_spec(terms or None, mode), FLEET)
    assert {c.cluster: c.weight for c in result.candidates} == weights
    assert {c.cluster: c.allocation_status().weight for c in result.candidates} == weights


# --- ComponentAffinity -----------------------------------------------------------------------------

POOL = [
    Registration(name="b", uid="u-b", labels={"pool": "x", "gpu": "h100"}, ready=True),
    Registration(name="a", uid="u-a", labels={"pool": "x", "gpu": "a100"}, ready=True),
    Registration(name="c", uid="u-c", labels={"pool": "y"}, ready=True),
]
IN_POOL = _term(_req("In", "x", key="pool"))
HAS_GPU = _term(_req("Exists", key="gpu"))


def test_components_that_agree_give_the_primary_match_and_the_others_as_rows() -> None:
    spec = _components(
        "Split",
        engine=[IN_POOL],
        decoder=[_term(_req("In", "a100", key="gpu"), weight=3), HAS_GPU],
        router=[HAS_GPU, _term(fields=[_req("In", "a", "b", key="metadata.name")])],
    )
    result = match_clusters(spec, POOL)
    assert result.held is None and result.primary == ComponentType.ENGINE
    assert result.names() == ("a", "b")
    a, b = result.candidates
    assert (a.matching_terms, a.weight) == ((0,), 1)
    assert a.component_matches == (ComponentMatch(ComponentType.DECODER, (0, 1), 4),
                                   ComponentMatch(ComponentType.ROUTER, (0, 1), 1))
    assert b.component_matches == (ComponentMatch(ComponentType.DECODER, (1,), 1),
                                   ComponentMatch(ComponentType.ROUTER, (0, 1), 1))
    assert a.component_weight(ComponentType.DECODER) == 4 and a.component_weight(ComponentType.ENGINE) == 1
    assert a.allocation_status().to_api() == {
        "clusterUID": "u-a", "matched": True, "matchingTerms": [0], "weight": 1,
        "componentMatches": [{"component": "decoder", "matchingTerms": [0, 1], "weight": 4},
                             {"component": "router", "matchingTerms": [0, 1], "weight": 1}],
    }


def test_components_that_disagree_hold_with_both_cluster_sets() -> None:
    spec = _components("All", engine=[IN_POOL], decoder=[_term(_req("In", "h100", key="gpu"))])
    result = match_clusters(spec, POOL)
    assert result.candidates == ()
    assert result.held is not None and result.held.reason == COMPONENT_AFFINITY_MISMATCH
    assert "engine matches [a, b]" in result.held.message
    assert "decoder matches [b]" in result.held.message
    assert [(s.component, s.clusters) for s in result.component_clusters] == [
        (ComponentType.ENGINE, ("a", "b")), (ComponentType.DECODER, ("b",))]


def test_a_component_matching_nothing_disagrees_too() -> None:
    spec = _components("Single", engine=[IN_POOL], router=[_term(_req("In", "z", key="pool"))])
    result = match_clusters(spec, POOL)
    assert result.held is not None and "router matches []" in result.held.message


def test_component_weights_only_in_split() -> None:
    spec = _components("Single", engine=[IN_POOL], decoder=[HAS_GPU])
    result = match_clusters(spec, POOL)
    assert [c.weight for c in result.candidates] == [None, None]
    assert result.candidates[0].component_matches == (ComponentMatch(ComponentType.DECODER, (0,), None),)


def test_registration_from_a_workload_cluster() -> None:
    def cluster(status: Spec | None) -> WorkloadCluster:
        body: Spec = {"apiVersion": "ome.io/v1beta1", "kind": "WorkloadCluster",
                      "metadata": {"name": "m1", "uid": "u1", "labels": {"region": "east"}},
                      "spec": {"clusterSource": {"clusterProfileRef": {"name": "p"}}}}
        if status is not None:
            body["status"] = status
        return WorkloadCluster.model_validate(body)

    def ready(value: str) -> Spec:
        return {"conditions": [{"type": "Ready", "status": value, "reason": "Checked", "message": "",
                                "lastTransitionTime": datetime(2026, 1, 1, tzinfo=UTC).isoformat()}]}

    registration = Registration.from_cluster(cluster(ready("True")))
    assert (registration.name, registration.uid, registration.labels, registration.ready) == (
        "m1", "u1", {"region": "east"}, True)
    assert Registration.from_cluster(cluster(ready("False"))).ready is False
    assert Registration.from_cluster(cluster(ready("Unknown"))).ready is False
    assert Registration.from_cluster(cluster(None)).ready is False
