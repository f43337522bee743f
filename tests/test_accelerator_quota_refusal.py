"""acceleratorquota.apply answers a 403 on a Kueue object as a refusal the node reports (Materialized False
MaterializationFailed, a Warning), like a 422, instead of an exception the worker's interceptor would make a
permanent failure of the whole workflow. Only the apiserver's answer is stood in for (a 403 needs an identity
without the rule; the real writes are tests/test_accelerator_quota_conformance.py's)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.activities.capacity.accelerator_quota import AcceleratorQuotaActivities
from servingops.activities.capacity.quota_types import QuotaApplyInput, QuotaReapInput
from servingops.api_models.ome.accelerator_quota import AcceleratorQuota
from servingops.api_models.refs import ObjectRef

pytestmark = pytest.mark.unit


def _acts(status: int) -> AcceleratorQuotaActivities:
    acts = AcceleratorQuotaActivities(client.ApiClient())

    def refuse(*_: Any) -> None:
        raise ApiException(status=status, reason="Forbidden" if status == 403 else "Conflict")

    acts._ensure_finalizer = lambda _request: True  # type: ignore[method-assign]
    acts._get = lambda *_: None  # type: ignore[method-assign]
    acts._apply = refuse  # type: ignore[method-assign]
    return acts


QUEUE = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a"}, "spec": {}}


def test_a_forbidden_write_is_a_refusal_the_node_reports() -> None:
    out = _acts(403).apply(QuotaApplyInput(quota=ObjectRef.of(AcceleratorQuota, "team-a"), objects=[QUEUE]))
    assert out.present and out.applied == [] and out.refused.startswith("ClusterQueue team-a: Forbidden")


def test_other_answers_still_raise_and_are_retried() -> None:
    with pytest.raises(ApiException):
        _acts(409).apply(QuotaApplyInput(quota=ObjectRef.of(AcceleratorQuota, "team-a"), objects=[QUEUE]))


def test_a_forbidden_reap_is_a_refusal_the_workflow_reports() -> None:
    acts = AcceleratorQuotaActivities(client.ApiClient())

    def refuse(*_: Any) -> None:
        raise ApiException(status=403, reason="Forbidden")

    acts._get = lambda *_: {"metadata": {"labels": {"ome.io/quota-managed-by": "servingops",  # type: ignore[method-assign]
                                                    "ome.io/accelerator-quota": "team-a"}}}
    acts._delete = refuse  # type: ignore[method-assign]
    out = acts.reap(QuotaReapInput(quota=ObjectRef.of(AcceleratorQuota, "team-a")))
    assert out.refused.startswith("Forbidden") and not out.released
