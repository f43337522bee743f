"""deploy/manifests/ is accepted by the real apiserver (server-side dry run: schema, RBAC rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, utils

MANIFESTS = Path(__file__).resolve().parent.parent / "deploy" / "manifests"


def _docs() -> list[dict[str, object]]:
    return [doc for path in sorted(MANIFESTS.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_manifests_are_accepted(kube_api: client.ApiClient) -> None:
    docs = _docs()
    namespace = next(d for d in docs if d["kind"] == "Namespace")
    try:
        utils.create_from_dict(kube_api, namespace)
    except utils.FailToCreateError as exc:
        if not all(e.status == 409 for e in exc.api_exceptions):
            raise
    kinds = set()
    for doc in docs:
        if doc["kind"] == "Namespace":
            continue
        utils.create_from_dict(kube_api, doc, dry_run="All")
        kinds.add(doc["kind"])
    assert {"StatefulSet", "Deployment", "ClusterRole", "ServiceAccount"} <= kinds


@pytest.mark.parametrize("process", ["worker", "bridge"])
def test_each_process_runs_as_its_own_service_account(process: str) -> None:
    workloads = [d for d in _docs() if d["kind"] in ("StatefulSet", "Deployment")]
    [workload] = [w for w in workloads if w["metadata"]["name"] == f"servingops-{process}"]  # type: ignore[index]
    assert workload["spec"]["template"]["spec"]["serviceAccountName"] == f"servingops-{process}"  # type: ignore[index]
