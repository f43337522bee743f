"""deploy/crds/ is generated from the models, and the apiserver takes what the models generate as a
structural schema and serves exactly that schema.

`servingops crds --check` (run by ./dev before pytest) compares the files' text; these compare
meaning, so a hand edit that keeps the text tidy, or a schema the apiserver would rewrite or
refuse, is caught here with the field that differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.base import KubeResource
from servingops.api_models.crdgen import crd_manifest, manifest_path
from servingops.api_models.registry import served_kinds

CRD_DIR = Path(__file__).resolve().parent.parent / "deploy" / "crds"
FIELD_MANAGER = "servingops-crd-test"


def _differences(want: Any, have: Any, where: str = "") -> list[str]:
    """Paths at which two parsed documents differ (first few), to name the stale field."""
    if isinstance(want, dict) and isinstance(have, dict):
        out = []
        for key in sorted(want.keys() | have.keys()):
            if key not in have:
                out.append(f"{where}.{key}: missing")
            elif key not in want:
                out.append(f"{where}.{key}: not generated")
            else:
                out += _differences(want[key], have[key], f"{where}.{key}")
        return out
    if isinstance(want, list) and isinstance(have, list) and len(want) == len(have):
        return [d for i, (w, h) in enumerate(zip(want, have, strict=True)) for d in _differences(w, h, f"{where}[{i}]")]
    return [] if want == have else [f"{where}: {have!r} != {want!r}"]


@pytest.mark.unit
@pytest.mark.parametrize("kind", served_kinds(), ids=lambda k: k.crd.kind)
def test_committed_crd_matches_the_models(kind: type[KubeResource]) -> None:
    path = manifest_path(CRD_DIR, kind)
    assert path.exists(), f"{path} missing: run `servingops crds`"
    committed = yaml.safe_load(path.read_text())
    assert _differences(crd_manifest(kind), committed)[:5] == [], f"{path} is stale: run `servingops crds`"


def _apply(api: client.ApiClient, body: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    result = client.ApiextensionsV1Api(api).patch_custom_resource_definition(
        body["metadata"]["name"], body, field_manager=FIELD_MANAGER, force=True,
        dry_run="All" if dry_run else None, _content_type="application/apply-patch+yaml")
    return dict(api.sanitize_for_serialization(result))


def apiserver_refusal(api: client.ApiClient, body: dict[str, Any]) -> str | None:
    """What the apiserver says about this CRD (a server-side dry-run apply): None when accepted."""
    try:
        _apply(api, body, dry_run=True)
    except ApiException as exc:
        return f"{exc.status}: {exc.body}"
    return None


@pytest.mark.integration
@pytest.mark.parametrize("kind", served_kinds(), ids=lambda k: k.crd.kind)
def test_the_apiserver_accepts_the_schema_as_structural(kube_api: client.ApiClient,
                                                        kind: type[KubeResource]) -> None:
    """apiextensions.k8s.io/v1 refuses a non-structural schema (and a bad CEL rule, a bad default)
    at admission; the dry run asks it about the schema the models generate now, not the file."""
    body = crd_manifest(kind)
    assert apiserver_refusal(kube_api, body) is None
    version = body["spec"]["versions"][0]
    assert "status" in version["subresources"]


@pytest.mark.integration
@pytest.mark.parametrize("kind", served_kinds(), ids=lambda k: k.crd.kind)
def test_the_apiserver_serves_the_generated_schema(kube_api: client.ApiClient, kind: type[KubeResource]) -> None:
    """The CRD on the cluster (applied from deploy/crds by the kube fixture) is Established, not
    flagged NonStructuralSchema, and holds the generated schema unchanged: nothing was pruned or
    rewritten on the way in."""
    live = dict(kube_api.sanitize_for_serialization(
        client.ApiextensionsV1Api(kube_api).read_custom_resource_definition(crd_manifest(kind)["metadata"]["name"])))
    conditions = {c["type"]: c["status"] for c in live["status"].get("conditions", [])}
    assert conditions.get("Established") == "True" and "NonStructuralSchema" not in conditions, conditions
    generated = {v["name"]: _drop_empty_properties(v["schema"]["openAPIV3Schema"])
                 for v in crd_manifest(kind)["spec"]["versions"]}
    served = {v["name"]: v["schema"]["openAPIV3Schema"] for v in live["spec"]["versions"]}
    assert _differences(generated, served)[:5] == []


def _drop_empty_properties(node: Any) -> Any:
    """The apiserver stores `properties: {}` (an object with no fields, e.g. `blueGreen: {}`) as
    absent: the same schema (both prune every field), serialized with omitempty."""
    if isinstance(node, list):
        return [_drop_empty_properties(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key: _drop_empty_properties(value) for key, value in node.items() if not (key == "properties"
                                                                                    and value == {})}
