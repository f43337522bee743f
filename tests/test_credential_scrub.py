"""Credentials in a `prometheus` block of an object stored before admission refused them never reach a
workflow payload: what read_object and observe return passes through credential_headers.scrubbed."""

from __future__ import annotations

from typing import Any

import pytest

from servingops.activities.kubernetes import KubernetesActivities
from servingops.api_models.credential_headers import scrubbed, without_userinfo
from servingops.api_models.refs import ObjectRef

pytestmark = pytest.mark.unit

LEGACY = {
    "apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy", "metadata": {"name": "old", "uid": "u"},
    "spec": {"canary": {"steps": [{"capacity": "50%", "traffic": 50}],
                        "prometheus": {"serverAddress": "https://admin:hunter2@prom.example:9090/api",
                                       "headers": {"Authorization": "Bearer s3cr3t", "X-Scope-OrgID": "team-a",
                                                   "X-Custom": "Basic dXNlcjpwdw=="}}}},
}


def test_credentials_leave_every_prometheus_block_and_nothing_else_changes() -> None:
    clean = scrubbed(LEGACY)
    prometheus = clean["spec"]["canary"]["prometheus"]
    assert prometheus == {"serverAddress": "https://prom.example:9090/api", "headers": {"X-Scope-OrgID": "team-a"}}
    assert clean["spec"]["canary"]["steps"] == LEGACY["spec"]["canary"]["steps"]
    assert "hunter2" in str(LEGACY) and "hunter2" not in str(clean) and "s3cr3t" not in str(clean)
    nested = {"rollout": {"groups": [{"canary": {"prometheus": {"headers": {"Cookie": "a=b"}}}}]}}
    assert scrubbed(nested) == {"rollout": {"groups": [{"canary": {"prometheus": {"headers": {}}}}]}}
    assert without_userinfo("http://prom:9090") == "http://prom:9090"


def test_read_object_returns_the_scrubbed_object() -> None:
    activities = KubernetesActivities.__new__(KubernetesActivities)

    class Stored:
        def get(self, ref: ObjectRef) -> dict[str, Any]:
            return LEGACY

    activities._objects = Stored()  # type: ignore[assignment]
    ref = ObjectRef(group="ome.io", version="v1beta1", plural="rolloutpolicies", kind="RolloutPolicy", name="old",
                    namespace="team", uid="u")
    answer = activities.read_object(ref)
    assert answer is not None and "s3cr3t" not in str(answer) and "hunter2" not in str(answer)
