"""The operator ConfigMap's defaults as the rollout workflows use them (time-skipping server, fake
cluster): read at run open and pinned for the run; an unbound providerRef or an invalid ConfigMap
parks the group at open (fail-closed) until the operator fixes it; a bound provider supplies the
address, auth Secret and default headers of every sample; the stall and ready timeouts come from
the rollout block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from temporalio.testing import WorkflowEnvironment

from servingops.api_models.operator_config import OperatorDefaults, PrometheusSource
from servingops.api_models.refs import ObjectRef
from testkit.rollout_harness import ENGINE, analysis, canary_group, roll_to, served, start_env

pytestmark = pytest.mark.timeskip


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


def _rollout_ready(conditions: dict[str, dict[str, object]]) -> tuple[object, object]:
    condition = conditions.get("RolloutReady", {})
    return condition.get("status"), condition.get("reason")


def _secret(name: str, namespace: str) -> ObjectRef:
    return ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name=name, namespace=namespace)


async def test_unbound_provider_parks_until_the_operator_binds_it(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 20, "analysis": analysis(interval="1m")},
             {"capacity": "100%", "traffic": 100}]
    prometheus = {"providerRef": {"name": "tenant-a"}, "headers": {"X-Scope-OrgID": "from-spec"},
                  "authRef": {"name": "reader", "key": "bearer"}}
    async with served(env, rollout=canary_group(steps, prometheus=prometheus)) as isvc:
        await roll_to(isvc, "b")
        await isvc.until(lambda: _rollout_ready(isvc.cluster.conditions) == ("False", "MetricProviderUnbound"),
                         what="park on the unbound provider")
        message = str(isvc.cluster.conditions["RolloutReady"]["message"])
        assert "'tenant-a'" in message and "metricProviders" in message
        # Fail-closed: no canary revision exists, stable keeps all traffic.
        assert isvc.weights() == {"a": 100} and isvc.cluster.replicas(ENGINE, "b") is None

        provider = PrometheusSource(address="http://mimir.monitoring:9009/prometheus",
                                    auth_secret=_secret("mimir-reader", "servingops-system"), auth_key="token",
                                    headers={"X-Scope-OrgID": "tenant-a", "X-Provider": "mimir"})
        isvc.cluster.operator = OperatorDefaults(metric_providers={"tenant-a": provider})
        # The parked group re-resolves on its own (every minute) and opens with the binding.
        isvc.cluster.prometheus.default = "down"  # keep the run at step 0 (Hold) while we look
        await isvc.until(lambda: bool(isvc.cluster.prometheus.samples), step=10, what="run opens and samples")
        assert isvc.weights() == {"a": 80, "b": 20}
        assert _rollout_ready(isvc.cluster.conditions) == ("True", "RolloutPlanResolved")
        source = isvc.cluster.prometheus.samples[-1].source
        assert source.address == provider.address
        # The spec's header wins over the provider's default; the provider's other headers stay.
        assert source.headers == {"X-Scope-OrgID": "from-spec", "X-Provider": "mimir"}
        # authRef (the InferenceService's namespace, its own key) refines the provider's Secret.
        assert source.auth_secret == _secret("reader", isvc.cluster.ref.namespace or "")
        assert source.auth_key == "bearer"


async def test_default_source_and_operator_timeouts(env: WorkflowEnvironment) -> None:
    # A 2h minimum bake, so the first (passing) sample does not advance the step.
    steps = [{"capacity": "50%", "traffic": 30, "pause": {"duration": "2h"},
              "analysis": analysis(interval="1m", on_inconclusive="Hold")},
             {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        isvc.cluster.operator = OperatorDefaults(
            stall_timeout="4m", ready_timeout="3m", default_source=PrometheusSource(address="http://bundled:9090"))
        isvc.cluster.prometheus.script = ["pass"]
        isvc.cluster.prometheus.default = "down"
        await roll_to(isvc, "b")
        # No prometheus block in the spec: the operator's bundled source is queried.
        await isvc.until(lambda: bool(isvc.cluster.prometheus.samples), step=30, what="a sample")
        assert isvc.cluster.prometheus.samples[0].source == PrometheusSource(address="http://bundled:9090")
        # Inconclusive from the second sample on: Hold parks once the operator's 4m stall is out.
        await isvc.until(lambda: bool(isvc.canary().get("failed")), step=30, what="stall park")
        failed = isvc.canary()
        assert failed["failed"]["reason"] == "AnalysisStalled"
        conclusive = failed["lastConclusiveEvaluationTime"]
        parked_at = failed["failed"]["time"]
        stalled = datetime.fromisoformat(parked_at) - datetime.fromisoformat(conclusive)
        assert 240 <= stalled.total_seconds() < 300, stalled  # 4m, sampled each minute
        assert isvc.weights() == {"a": 70, "b": 30}


async def test_operator_ready_timeout_and_a_run_keeps_what_it_read(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "50%", "traffic": 30}, {"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        isvc.cluster.operator = OperatorDefaults(ready_timeout="3m")
        isvc.cluster.delay_for[(ENGINE, "b")] = float("inf")
        await roll_to(isvc, "b")
        await isvc.until(lambda: bool(isvc.canary().get("capacityWaitSince")), step=10, what="capacity wait")
        # Changed mid-run: the open run keeps the 3m it read.
        isvc.cluster.operator = OperatorDefaults(ready_timeout="1h")
        await isvc.until(lambda: bool(isvc.canary().get("failed")), step=30, what="capacity park")
        canary = isvc.canary()
        assert canary["failed"]["reason"] == "CapacityTimeout"
        waited = datetime.fromisoformat(canary["failed"]["time"]) - datetime.fromisoformat(canary["capacityWaitSince"])
        assert 180 <= waited.total_seconds() < 200, waited
        assert isvc.weights() == {"a": 100}


async def test_invalid_operator_config_parks_with_its_message(env: WorkflowEnvironment) -> None:
    steps = [{"capacity": "100%", "traffic": 100}]
    async with served(env, rollout=canary_group(steps)) as isvc:
        isvc.cluster.operator = OperatorDefaults(source="servingops-system/servingops-config",
                                                 error="ConfigMap servingops-system/servingops-config: "
                                                       "rollout.stallTimeout: 'soon' is not a duration")
        await roll_to(isvc, "b")
        await isvc.until(lambda: _rollout_ready(isvc.cluster.conditions) == ("False", "OperatorConfigInvalid"),
                         what="park on the invalid config")
        assert "stallTimeout" in str(isvc.cluster.conditions["RolloutReady"]["message"])
        assert isvc.weights() == {"a": 100}
        isvc.cluster.operator = OperatorDefaults()
        await isvc.until(lambda: isvc.weights() == {"b": 100}, step=30, what="opens once fixed")
