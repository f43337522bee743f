"""The node agent's pure rules: node selection (every operator, ORed terms, fields), the label and
ConfigMap keys upstream OME spells, and the decision per model. No cluster, no registry."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.agents.matcher import InvalidRequirement, match_expression, match_field, node_matches
from servingops.agents.plan import ARTIFACT_ANNOTATION, Copy, Hold, Invalid, Local, Remove, decide, parse_artifact
from servingops.api_models.ome.model_keys import ModelKey, ModelKind, truncate_with_hash

pytestmark = pytest.mark.unit

DIGEST = "sha256:" + "ab" * 32
NODE = {"metadata": {"name": "gpu-1", "labels": {"pool": "gpu", "zone": "a", "gpus": "8", "tier": "x1"}}}


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


LABELS = NODE["metadata"]["labels"]


@pytest.mark.parametrize(("expr", "expected"), [
    (_expr("pool", "In", "gpu", "cpu"), True),
    (_expr("pool", "In", "cpu"), False),
    (_expr("missing", "In", "gpu"), False),
    (_expr("pool", "NotIn", "cpu"), True),
    (_expr("pool", "NotIn", "gpu"), False),
    (_expr("missing", "NotIn", "gpu"), True),
    (_expr("zone", "Exists"), True),
    (_expr("missing", "Exists"), False),
    (_expr("missing", "DoesNotExist"), True),
    (_expr("zone", "DoesNotExist"), False),
    (_expr("gpus", "Gt", "4"), True),
    (_expr("gpus", "Gt", "8"), False),
    (_expr("gpus", "Lt", "9"), True),
    (_expr("gpus", "Lt", "8"), False),
    (_expr("tier", "Gt", "1"), False),  # not an integer label: no match, as the scheduler has it
    (_expr("missing", "Lt", "100"), False),
])
def test_every_operator(expr: dict[str, Any], expected: bool) -> None:
    assert match_expression(expr, LABELS) is expected


@pytest.mark.parametrize("expr", [_expr("gpus", "Gt"), _expr("gpus", "Gt", "1", "2"), _expr("gpus", "Lt", "x"),
                                  _expr("gpus", "Near", "1")])
def test_malformed_requirements_are_refused(expr: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequirement):
        match_expression(expr, LABELS)


def test_match_fields_name_only() -> None:
    assert match_field(_expr("metadata.name", "In", "gpu-1", "gpu-2"), "gpu-1")
    assert not match_field(_expr("metadata.name", "In", "gpu-2"), "gpu-1")
    assert match_field(_expr("metadata.name", "NotIn", "gpu-2"), "gpu-1")
    with pytest.raises(InvalidRequirement):
        match_field(_expr("metadata.uid", "In", "x"), "gpu-1")
    with pytest.raises(InvalidRequirement):
        match_field(_expr("metadata.name", "Exists"), "gpu-1")


def test_selector_labels_must_all_be_equal() -> None:
    assert node_matches({}, NODE)
    assert node_matches({"nodeSelector": {"pool": "gpu", "zone": "a"}}, NODE)
    assert not node_matches({"nodeSelector": {"pool": "gpu", "zone": "b"}}, NODE)
    assert not node_matches({"nodeSelector": {"other": "gpu"}}, NODE)


def test_terms_are_ored_and_requirements_within_a_term_anded() -> None:
    no = {"matchExpressions": [_expr("pool", "In", "gpu"), _expr("zone", "In", "b")]}  # AND: one fails
    yes = {"matchExpressions": [_expr("pool", "In", "gpu"), _expr("gpus", "Gt", "4")]}
    by_name = {"matchFields": [_expr("metadata.name", "In", "gpu-1")]}
    both = {"matchExpressions": [_expr("pool", "In", "gpu")], "matchFields": [_expr("metadata.name", "In", "other")]}
    assert not node_matches(_affinity(no), NODE)
    assert node_matches(_affinity(no, yes), NODE)
    assert node_matches(_affinity(no, by_name), NODE)
    assert not node_matches(_affinity(both), NODE)
    assert not node_matches(_affinity({}), NODE)  # an empty term matches nothing
    assert not node_matches(_affinity(), NODE)  # no terms: nothing
    assert node_matches({"nodeAffinity": {}}, NODE)  # no required block: every node


def test_selector_and_affinity_both_apply() -> None:
    storage = {"nodeSelector": {"zone": "b"}, **_affinity({"matchExpressions": [_expr("pool", "Exists")]})}
    assert not node_matches(storage, NODE)


# -- keys (upstream OME's constants.GetBaseModelLabel / GetClusterBaseModelLabel / GetModelConfigMapKey) ---


def test_keys_follow_upstream() -> None:
    base = ModelKey(ModelKind.BASE_MODEL, "team-a", "llama")
    cluster = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", "llama-3-2-1b-instruct")
    weight = ModelKey(ModelKind.FINE_TUNED_WEIGHT, "", "adapter")
    assert base.label_key == "models.ome.io/team-a.basemodel.llama"
    assert base.configmap_key == "team-a.basemodel.llama"
    assert cluster.label_key == "models.ome.io/clusterbasemodel.llama-3-2-1b-instruct"
    assert cluster.configmap_key == "clusterbasemodel.llama-3-2-1b-instruct"
    assert weight.label_key == "models.ome.io/finetunedweight.adapter"


def test_long_names_keep_their_tail_behind_a_hash() -> None:
    name = "a-very-long-model-name-that-does-not-fit-in-a-label-at-all"
    key = ModelKey(ModelKind.CLUSTER_BASE_MODEL, "", name)
    label_name = key.label_key.split("/", 1)[1]
    assert len(label_name) == 49
    assert label_name.startswith("clusterbasemodel.") and label_name.endswith(name[-23:])
    assert truncate_with_hash(name, 32)[8] == "-"
    long_ns = ModelKey(ModelKind.BASE_MODEL, "a-rather-long-namespace-name", name)
    ns_part, _, model_part = long_ns.label_key.split("/", 1)[1].partition(".basemodel.")
    assert len(ns_part) == 8 and len(long_ns.label_key.split("/", 1)[1]) <= 49
    assert model_part.endswith(name[-10:])


# -- the decision ------------------------------------------------------------------------------------------


def _model(storage: dict[str, Any], annotation: str | None = f"reg:5000/servingops/models@{DIGEST}",
           **meta: Any) -> dict[str, Any]:
    annotations = {ARTIFACT_ANNOTATION: annotation} if annotation else {}
    return {"metadata": {"name": "m", "namespace": "ns", "annotations": annotations, **meta},
            "spec": {"storage": storage}}


KEY = ModelKey(ModelKind.BASE_MODEL, "ns", "m")


def test_decisions() -> None:
    storage = {"storageUri": "hf://org/repo", "path": "/mnt/models/m", "nodeSelector": {"pool": "gpu"}}
    copy = decide(KEY, _model(storage), NODE, "reg:5000")
    assert copy == Copy(parse_artifact(f"reg:5000/servingops/models@{DIGEST}"), "mnt/models/m", False)
    reuse = decide(KEY, _model({**storage, "downloadPolicy": "ReuseIfExists"}), NODE, "reg:5000")
    assert isinstance(reuse, Copy) and reuse.reuse
    assert isinstance(decide(KEY, _model(storage, annotation=None), NODE, "reg:5000"), Remove)
    assert isinstance(decide(KEY, _model({**storage, "nodeSelector": {"pool": "cpu"}}), NODE, "reg:5000"), Remove)
    assert isinstance(decide(KEY, None, NODE, "reg:5000"), Remove)
    assert isinstance(decide(KEY, _model(storage, deletionTimestamp="2026-01-01T00:00:00Z"), NODE, "reg:5000"),
                      Remove)
    assert isinstance(decide(KEY, _model(storage), None, "reg:5000"), Hold)  # no Node read: keep what is there
    # A tag is never acted on, another registry is refused, a path may not climb out of the node root.
    tagged = decide(KEY, _model(storage, annotation="reg:5000/servingops/models:latest"), NODE, "reg:5000")
    assert isinstance(tagged, Invalid) and "sha256" in tagged.message
    elsewhere = decide(KEY, _model(storage), NODE, "other:5000")
    assert isinstance(elsewhere, Invalid) and "other:5000" in elsewhere.message
    assert decide(KEY, _model({**storage, "path": "/../../etc"}), NODE, "reg:5000") == Copy(
        parse_artifact(f"reg:5000/servingops/models@{DIGEST}"), "etc", False)  # normalised inside the root
    # No path: upstream's models root.
    default = decide(KEY, _model({"storageUri": "hf://org/repo"}), NODE, "reg:5000")
    assert isinstance(default, Copy) and default.path == "mnt/models/ns.basemodel.m"
    bad = decide(KEY, _model({**storage, **_affinity({"matchExpressions": [_expr("gpus", "Gt")]})}), NODE,
                 "reg:5000")
    assert isinstance(bad, Invalid) and "Gt" in bad.message


def test_local_models() -> None:
    assert decide(KEY, _model({"storageUri": "local:///data/m"}, annotation=None), NODE, "r") == Local("data/m")
    assert decide(KEY, _model({"storageUri": "local:///data/m", "path": "/x/y"}, annotation=None), NODE,
                  "r") == Local("x/y")
