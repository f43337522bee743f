"""The quota projection's activities (placement.project_quota / .unproject_quota) answer a 403 of this plane's
own apiserver (the worker's role may not read the WorkloadCluster, or its kubeconfig Secret) as a refusal the
node's row reports, like an unreachable member, instead of an ApiException the worker's interceptor would make a
permanent failure of the node's workflow. Only the apiserver's answer is stood in for (a 403 needs an identity
without the rule); the member's own 403 was an answer already (tests/test_quota_projection_conformance.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.placement.activities import PlacementActivities
from servingops.activities.placement.quota_types import QuotaProjectInput, QuotaUnprojectInput

pytestmark = pytest.mark.unit

REGISTRATION = {"metadata": {"name": "east", "uid": "u1", "resourceVersion": "1",
                             "finalizers": ["ome.io/quota-projection"]},
                "spec": {"clusterSource": {"kubeConfig": {"secretRef": {"name": "east-kubeconfig",
                                                                        "namespace": "servingops-system"}}}}}


def _acts(registration: int | None, secret: int) -> PlacementActivities:
    acts = PlacementActivities(client.ApiClient(), "servingops-system")

    def get_registration(*_: Any, **__: Any) -> dict[str, Any]:
        if registration is not None:
            raise ApiException(status=registration, reason="Forbidden")
        return REGISTRATION

    def read_secret(*_: Any, **__: Any) -> None:
        raise ApiException(status=secret, reason="Forbidden")

    acts.custom.get_cluster_custom_object = get_registration  # type: ignore[method-assign]
    acts.custom.replace_cluster_custom_object = lambda *_, **__: None  # type: ignore[method-assign]
    acts.core.read_namespaced_secret = read_secret  # type: ignore[method-assign]
    return acts


@pytest.mark.parametrize(("registration", "secret", "what"), [
    (403, 403, "may not read WorkloadCluster east (403"),
    (None, 403, "may not read WorkloadCluster east's kubeconfig Secret (403"),
])
def test_a_forbidden_read_on_this_plane_is_the_clusters_answer(registration: int | None, secret: int,
                                                                what: str) -> None:
    acts = _acts(registration, secret)
    projected = acts.project_quota(QuotaProjectInput(cluster="east", name="team", body={"spec": {}}))
    assert what in projected.error and not projected.wrote
    unprojected = acts.unproject_quota(QuotaUnprojectInput(cluster="east", name="team", origin="uid-1"))
    assert what in unprojected.error and not unprojected.wrote


def test_other_answers_still_raise_and_are_retried() -> None:
    with pytest.raises(ApiException):
        _acts(500, 403).project_quota(QuotaProjectInput(cluster="east", name="team"))
    with pytest.raises(ApiException):
        _acts(None, 500).project_quota(QuotaProjectInput(cluster="east", name="team"))
