"""deploy/crds/ is generated from the models, and what is generated is a structural schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servingops.api_models.base import KubeResource
from servingops.api_models.crdgen import crd_manifest, manifest_path, render
from servingops.api_models.registry import served_kinds

CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"


@pytest.mark.parametrize("kind", served_kinds(), ids=lambda k: k.crd.kind)
def test_committed_crd_matches_the_models(kind: type[KubeResource]) -> None:
    path = manifest_path(CRD_DIR, kind)
    assert path.exists(), f"{path} missing: run `servingops crds`"
    assert path.read_text() == render(kind), f"{path} is stale: run `servingops crds`"


def _walk(node: dict[str, Any], where: str) -> list[str]:
    """Problems that would make the apiserver call the schema non-structural."""
    problems = []
    for key in ("$ref", "$defs", "oneOf", "allOf", "title", "const", "uniqueItems"):
        if key in node:
            problems.append(f"{where}: {key}")
    opaque = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
    if "type" not in node and not opaque:
        problems.append(f"{where}: no type")
    for name, sub in node.get("properties", {}).items():
        problems += _walk(sub, f"{where}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _walk(node["items"], f"{where}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _walk(node["additionalProperties"], f"{where}{{}}")
    return problems


@pytest.mark.parametrize("kind", served_kinds(), ids=lambda k: k.crd.kind)
def test_schema_is_structural(kind: type[KubeResource]) -> None:
    version = crd_manifest(kind)["spec"]["versions"][0]
    assert _walk(version["schema"]["openAPIV3Schema"], kind.crd.kind) == []
    assert "status" in version["subresources"]
