"""ome.io/inherit-from resolution (rendering/runtime_inheritance.py), pure."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.rendering.runtime_inheritance import (
    InheritanceReason,
    RuntimeObject,
    resolve,
)

pytestmark = pytest.mark.unit


def rt(kind: str, name: str, parent: str | None = None, namespace: str | None = None,
       **spec: Any) -> RuntimeObject:
    metadata: dict[str, Any] = {"name": name}
    if parent is not None:
        metadata["annotations"] = {"ome.io/inherit-from": parent}
    return RuntimeObject(kind=kind, name=name, namespace=namespace, body={"metadata": metadata, "spec": spec})


class Store:
    def __init__(self, *items: RuntimeObject) -> None:
        self.items = {(i.kind, i.name, i.namespace): i for i in items}

    def __call__(self, kind: str, name: str, namespace: str | None) -> RuntimeObject | None:
        return self.items.get((kind, name, namespace))


BASE = rt("ClusterServingRuntime", "srt-base",
          engineConfig={"containers": [{"name": "ome-container", "image": "sglang:1",
                                        "env": [{"name": "A", "value": "1"}]}]},
          modelSizeRange={"min": "1B", "max": "10B"})


def test_no_inheritance_is_a_chain_of_one() -> None:
    result = resolve(BASE, Store(BASE))
    assert result.ready and result.chain == ["srt-base"] and result.spec == BASE.body["spec"]


def test_a_chain_resolves_root_first_and_merges_each_child_over_its_parent() -> None:
    mid = rt("ClusterServingRuntime", "srt-llama", "srt-base",
             engineConfig={"containers": [{"name": "ome-container", "env": [{"name": "B", "value": "2"}]}]})
    leaf = rt("ServingRuntime", "team-llama", "srt-llama", namespace="team", disabled=False,
              modelSizeRange={"max": "8B"})
    result = resolve(leaf, Store(BASE, mid, leaf))
    assert result.ready
    assert result.chain == ["srt-base", "srt-llama", "team-llama"]
    assert result.message == "resolved srt-base -> srt-llama -> team-llama"
    assert result.spec is not None
    container = result.spec["engineConfig"]["containers"][0]
    assert container["image"] == "sglang:1"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    assert result.spec["modelSizeRange"] == {"min": "1B", "max": "8B"}


def test_a_namespaced_parent_outranks_a_cluster_one_of_the_same_name() -> None:
    local = rt("ServingRuntime", "srt-base", namespace="team", disabled=True)
    leaf = rt("ServingRuntime", "child", "srt-base", namespace="team")
    result = resolve(leaf, Store(BASE, local, leaf))
    assert result.spec == {"disabled": True}


def test_a_cluster_runtime_never_inherits_from_a_namespaced_one() -> None:
    local = rt("ServingRuntime", "only-local", namespace="team")
    leaf = rt("ClusterServingRuntime", "child", "only-local")
    result = resolve(leaf, Store(local, leaf))
    assert result.reason is InheritanceReason.PARENT_NOT_FOUND
    assert "as a ClusterServingRuntime" in result.message


def test_missing_parent_and_cycles_are_not_resolved() -> None:
    orphan = rt("ClusterServingRuntime", "orphan", "gone")
    missing = resolve(orphan, Store(orphan))
    assert (missing.ready, missing.reason, missing.chain) == (False, InheritanceReason.PARENT_NOT_FOUND, ["orphan"])
    assert "'gone', which does not exist" in missing.message
    a = rt("ClusterServingRuntime", "a", "b")
    b = rt("ClusterServingRuntime", "b", "a")
    cycle = resolve(a, Store(a, b))
    assert cycle.reason is InheritanceReason.CYCLE and cycle.message.endswith("a -> b -> a")
    assert cycle.spec is None


def test_depth_is_bounded() -> None:
    chain = [rt("ClusterServingRuntime", f"r{i}", f"r{i + 1}") for i in range(20)]
    result = resolve(chain[0], Store(*chain))
    assert result.reason is InheritanceReason.TOO_DEEP
