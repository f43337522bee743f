"""The InferenceService workflow keeps the backend traffic policy (serving.ensure_backend_policy) and
writes status.traffic, on the time-skipping server against the fake cluster (testkit/rollout_fakes.py,
its policy side testkit/traffic_policy_fakes.py; held to the real activity by
tests/test_traffic_policy_conformance.py; end to end: tests/test_traffic_policy_e2e.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.api_models.ome.traffic import TrafficReason
from servingops.api_models.ome.traffic_annotations import TrafficAnnotation
from testkit.rollout_fakes import NAME
from testkit.rollout_harness import Isvc, served, start_env

pytestmark = pytest.mark.timeskip

ROUTE = f"{NAME}-engine"
CONSISTENT = {"algorithm": "ConsistentHash", "consistentHash": {"type": "Header", "headers": [{"name": "x-session"}]}}


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    try:
        yield environment
    finally:
        await environment.shutdown()


async def edit_traffic(isvc: Isvc, traffic: dict[str, Any] | None) -> None:
    """A spec edit (a new generation) and the bridge's signal for it."""
    isvc.cluster.backend_policies.traffic = traffic
    isvc.cluster.generation += 1
    await isvc.changed()


async def elapsed_until(isvc: Isvc, predicate: Any, what: str) -> float:
    """Test-clock seconds from now until `predicate` holds, looking every second."""
    start = await isvc.env.get_current_time()
    await isvc.until(predicate, step=1, what=what)
    return (await isvc.env.get_current_time() - start).total_seconds()


def ready(isvc: Isvc) -> dict[str, Any]:
    traffic = isvc.cluster.status.get("traffic") or {}
    return next((c for c in traffic.get("conditions") or [] if c["type"] == "BackendPolicyReady"), {})


async def test_a_service_without_traffic_intent_gets_no_policy_call_and_no_status_traffic(
        env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        await env.sleep(600)
        assert isvc.cluster.backend_policies.calls == 0
        assert "traffic" not in isvc.cluster.status


async def test_spec_traffic_applies_the_policy_reports_it_and_removing_it_cleans_up(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        policies = isvc.cluster.backend_policies
        await edit_traffic(isvc, CONSISTENT)
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.PENDING, what="policy applied")
        status = isvc.cluster.status["traffic"]
        assert status["algorithm"] == "ConsistentHash"
        assert status["backendPolicyResource"]["name"] == NAME
        assert status["targetedHTTPRoutes"] == [ROUTE]
        assert policies.policies[NAME]["spec"]["loadBalancer"]["consistentHash"] == {
            "type": "Header", "header": {"name": "x-session"}}

        polls = policies.calls
        await env.sleep(30)
        assert policies.calls > polls  # while the verdict may come, the policy is looked at again
        policies.accept(NAME)  # Envoy Gateway's verdict: no event of the service says so
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.ACCEPTED_BY_GATEWAY, step=10,
                         what="accepted")

        await edit_traffic(isvc, None)
        await isvc.until(lambda: "traffic" not in isvc.cluster.status, what="status.traffic removed")
        assert NAME not in policies.policies


async def test_a_hand_authored_policy_on_the_route_wins_and_is_reported(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        policies = isvc.cluster.backend_policies
        hand = policies.author("team-override", [ROUTE])
        await edit_traffic(isvc, {"algorithm": "RoundRobin"})
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.CONFLICTING_POLICY, what="conflict")
        assert "team-override" in ready(isvc)["message"]
        assert policies.policies == {"team-override": hand}  # untouched, and ours not written
        assert "backendPolicyResource" not in isvc.cluster.status["traffic"]


async def test_no_envoy_gateway_is_a_condition_not_a_retry_loop(env: WorkflowEnvironment) -> None:
    async with served(env) as isvc:
        policies = isvc.cluster.backend_policies
        policies.served = False
        await isvc.annotate("ome.io/retry-attempts", "0")
        await edit_traffic(isvc, None)  # intent through the annotation alone
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.NO_TRANSLATOR_AVAILABLE,
                         what="NoTranslatorAvailable")
        assert ready(isvc)["status"] == "False"
        calls = policies.calls
        await env.sleep(60)
        assert policies.calls - calls <= 2  # one look per pass, not a retry loop


async def test_a_traffic_annotation_edit_alone_is_looked_at_at_once(env: WorkflowEnvironment) -> None:
    """No generation moves: the bridge's `annotation` signal alone applies the policy, changes it and removes
    it, each within seconds of the edit rather than at the next resync (minutes)."""
    idle = TrafficAnnotation.TIMEOUT_IDLE.value

    def idle_timeout() -> object:
        spec = (isvc.cluster.backend_policies.policies.get(NAME) or {}).get("spec") or {}
        return ((spec.get("timeout") or {}).get("http") or {}).get("connectionIdleTimeout")

    async with served(env) as isvc:
        policies = isvc.cluster.backend_policies
        await env.sleep(30)
        generation = isvc.cluster.generation
        assert policies.calls == 0

        await isvc.annotate(idle, "30s")
        assert await elapsed_until(isvc, lambda: idle_timeout() == "30s", "policy applied") < 10
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.PENDING, step=1, what="status.traffic")
        policies.accept(NAME)  # the verdict: no more looks for it, only the resync (minutes) is left
        await isvc.until(lambda: ready(isvc).get("reason") == TrafficReason.ACCEPTED_BY_GATEWAY, step=10,
                         what="accepted")

        await isvc.annotate(idle, "45s")
        assert await elapsed_until(isvc, lambda: idle_timeout() == "45s", "policy changed") < 10

        await isvc.annotate(idle, None)
        assert await elapsed_until(isvc, lambda: NAME not in policies.policies and "traffic" not in isvc.cluster.status,
                                   "policy and status.traffic removed") < 10
        assert isvc.cluster.generation == generation
