"""status.components[c].autoscaler for class KEDA: what the service mirrors of a live ScaledObject.

A ScaledObject's status carries no replica counts (KEDA keeps them on the HPA it makes, named in
status.hpaName) and its conditions carry no lastTransitionTime, which metav1.Condition requires: before
this rule every KEDA condition was dropped, so a trigger KEDA refuses (Ready False) never reached the
service, and the counts read 0 while KEDA scaled the component.
"""

from __future__ import annotations

from typing import Any

import pytest

from servingops.activities.serving.autoscaler import autoscaler_status
from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.workflows.inference_service.pacing import keda_unsettled

pytestmark = pytest.mark.unit

KEDA = ComponentAutoscaler.model_validate({"class": "KEDA", "keda": {"triggers": [
    {"type": "prometheus", "metadata": {"serverAddress": "http://p:9090", "query": "up", "threshold": "1"}}]}})
T0, T1 = "2026-12-07T15:00:00Z", "2026-12-07T15:05:00Z"


def _scaled_object(*conditions: dict[str, str]) -> dict[str, Any]:
    """A ScaledObject as KEDA v2.21 writes its status: no counts, conditions without transition times."""
    return {"status": {"hpaName": "keda-hpa-scaledobject-chat-engine", "originalReplicaCount": 1,
                       "conditions": list(conditions)}}


READY = {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ScaledObject is ready"}
ACTIVE = {"type": "Active", "status": "True", "reason": "ScalerActive", "message": "Scaling is performed"}
REFUSED = {"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed",
           "message": "no scaler found for type: no-such-scaler"}
FALLBACK_UNKNOWN = {"type": "Fallback", "status": "Unknown"}  # KEDA's first write: no reason, no message
HPA = {"status": {"currentReplicas": 3, "desiredReplicas": 4, "lastScaleTime": T0}}


def test_counts_come_from_the_hpa_keda_keeps() -> None:
    mirrored = autoscaler_status(KEDA, _scaled_object(READY), counts=HPA, now=T1)
    assert (mirrored["currentReplicas"], mirrored["desiredReplicas"], mirrored["lastScaleTime"]) == (3, 4, T0)
    before_hpa = autoscaler_status(KEDA, _scaled_object(READY), counts=None, now=T1)
    assert (before_hpa["currentReplicas"], before_hpa["desiredReplicas"]) == (0, 0)
    assert "lastScaleTime" not in before_hpa


def test_keda_conditions_are_mirrored_with_a_transition_time() -> None:
    mirrored = autoscaler_status(KEDA, _scaled_object(READY, ACTIVE, FALLBACK_UNKNOWN), counts=HPA, now=T0)
    assert mirrored["conditions"] == [
        {**READY, "lastTransitionTime": T0}, {**ACTIVE, "lastTransitionTime": T0},
        {"type": "Fallback", "status": "Unknown", "reason": "Unknown", "message": "", "lastTransitionTime": T0}]


def test_an_unchanged_condition_keeps_its_time_and_a_changed_one_takes_now() -> None:
    previous = [{**READY, "lastTransitionTime": T0}, {**ACTIVE, "lastTransitionTime": T0}]
    inactive = {**ACTIVE, "status": "False", "reason": "ScalerNotActive", "message": "Scaling is not performed"}
    mirrored = autoscaler_status(KEDA, _scaled_object(READY, inactive), counts=HPA, previous=previous, now=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in mirrored["conditions"]}  # type: ignore[attr-defined]
    assert times == {"Ready": T0, "Active": T1}


def test_a_trigger_keda_refuses_reaches_the_service() -> None:
    previous = [{**READY, "lastTransitionTime": T0}]
    mirrored = autoscaler_status(KEDA, _scaled_object(REFUSED), counts=HPA, previous=previous, now=T1)
    assert mirrored["conditions"] == [{**REFUSED, "lastTransitionTime": T1}]


def test_without_a_time_a_condition_lacking_one_is_left_out() -> None:
    assert "conditions" not in autoscaler_status(KEDA, _scaled_object(READY), counts=HPA)


def test_the_hpas_own_times_are_kept() -> None:
    hpa = ComponentAutoscaler.model_validate({"class": "HPA"})
    live = {"status": {"currentReplicas": 2, "desiredReplicas": 2, "conditions": [
        {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale", "message": "ok",
         "lastTransitionTime": T0}]}}
    mirrored = autoscaler_status(hpa, live, previous=[{"type": "AbleToScale", "status": "False",
                                                       "lastTransitionTime": T1}], now=T1)
    assert mirrored["conditions"][0]["lastTransitionTime"] == T0  # type: ignore[index]
    assert (mirrored["currentReplicas"], mirrored["desiredReplicas"]) == (2, 2)


def test_the_service_looks_again_while_keda_has_not_said_ready() -> None:
    """pacing.keda_unsettled: the service polls (backing off to a minute) a ScaledObject of ours whose
    mirror has no Ready True, since KEDA's verdict reaches no event of the InferenceService."""
    base = {"class": "KEDA", "managedBy": "ome", "specSource": "policy"}
    assert keda_unsettled(base), "KEDA has not judged it yet"
    assert keda_unsettled({**base, "conditions": [{**REFUSED, "lastTransitionTime": T0}]})
    assert not keda_unsettled({**base, "conditions": [{**READY, "lastTransitionTime": T0}]})
    assert not keda_unsettled({"class": "HPA", "managedBy": "ome"})
    assert not keda_unsettled({"class": "KEDA", "managedBy": "none"})
    assert not keda_unsettled(None)
