"""IngressReady on the InferenceService: the pure rule (workflows/rollout/status.py) from the
Gateway's verdict on each component route, Ready held while it is False, status.url / address /
addresses, the Warning Event; then the InferenceService workflow on the time-skipping server with
the fake cluster playing the Gateway (testkit/rollout_fakes.py gateway_verdict)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models import contract
from servingops.api_models.contract.rollout import ComponentView, ServiceState
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError
from servingops.api_models.refs import ConditionUpdate
from servingops.api_models.serving import IngressObservation, RouteStatus
from servingops.workers.sandbox import workflow_runner
from servingops.workflows.inference_service.workflow import ServiceInput
from servingops.workflows.rollout import status
from servingops.workflows.rollout.models import RolloutSettings
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster
from testkit.rollout_harness import ENGINE, ROUTER, WORKFLOWS, Isvc, roll_to, start_env

DECODER = ComponentType.DECODER
GATEWAY = "servingops-gateway/inference"
EXTERNAL = IngressObservation(gateway=GATEWAY, url="http://llama.team-a.example.test")


def _accepted(route: str, generation: int = 1) -> RouteStatus:
    return RouteStatus(route=route, generation=generation, reported=True, accepted=True, resolved_refs=True,
                       reason="Accepted", observed_generation=generation, current=True)


def _views(**routes: RouteStatus | None) -> dict[ComponentType, ComponentView]:
    return {ComponentType(c): ComponentView(url=f"http://llama-{c}.team-a.example.test",
                                            address=f"http://llama-{c}.team-a.svc.cluster.local",
                                            route_status=r, serving_ready=True, stable="a")
            for c, r in routes.items()}


def _pair(condition: ConditionUpdate | None) -> tuple[str, str] | None:
    return (condition.status, condition.reason) if condition is not None else None


# -- the rule --------------------------------------------------------------------------------------


@pytest.mark.unit
def test_no_condition_before_the_ingress_block_was_observed_and_true_without_a_gateway() -> None:
    assert status.ingress_condition(None, _views(engine=None)) is None, "a history from before the ingress block"
    assert status.ingress_condition(EXTERNAL, {}) is None, "nothing served here (placed, or not yet)"
    plain = status.ingress_condition(IngressObservation(), _views(engine=None))
    assert _pair(plain) == ("True", "GatewayNotConfigured")


@pytest.mark.unit
def test_true_only_when_every_route_is_accepted_and_resolved_for_its_current_generation() -> None:
    ready = status.ingress_condition(EXTERNAL, _views(engine=_accepted("llama-engine"),
                                                      router=_accepted("llama-router", 3)))
    assert ready == ConditionUpdate(type="IngressReady", status="True", reason="RouteAccepted",
                                    message=f"Gateway {GATEWAY} accepted llama-engine, llama-router")
    cases: list[tuple[RouteStatus | None, str, str]] = [
        (None, "RouteNotCreated", "engine has no HTTPRoute yet"),
        (RouteStatus(route="llama-engine", generation=1), "ParentStatusNotAvailable",
         f"Gateway {GATEWAY} has not reported on HTTPRoute llama-engine yet"),
        (_accepted("llama-engine").model_copy(update={"generation": 2, "current": False}),
         "RouteGenerationNotObserved",
         f"Gateway {GATEWAY} reported on generation 1 of HTTPRoute llama-engine, not on generation 2 yet"),
        (RouteStatus(route="llama-engine", generation=1, reported=True, reason="Pending"), "ParentStatusNotAvailable",
         f"Gateway {GATEWAY} has not decided Accepted and ResolvedRefs of HTTPRoute llama-engine yet (Pending)"),
        (RouteStatus(route="llama-engine", generation=1, reported=True, accepted=False, resolved_refs=True,
                     reason="NoMatchingParent", message="no listener matches", observed_generation=1, current=True),
         "NoMatchingParent", "HTTPRoute llama-engine: Accepted False: no listener matches"),
        (RouteStatus(route="llama-engine", generation=1, reported=True, accepted=True, resolved_refs=False,
                     reason="BackendNotFound", message="llama-engine-rev-b not found", observed_generation=1,
                     current=True),
         "BackendNotFound", "HTTPRoute llama-engine: ResolvedRefs False: llama-engine-rev-b not found"),
        # A refusal with no ResolvedRefs beside it is still a refusal.
        (RouteStatus(route="llama-engine", generation=1, reported=True, accepted=False, reason="NotAllowedByListeners",
                     observed_generation=1, current=True),
         "NotAllowedByListeners", "HTTPRoute llama-engine: Accepted False"),
        # A refusal of an older spec is a wait for the verdict on this one.
        (RouteStatus(route="llama-engine", generation=2, reported=True, accepted=True, resolved_refs=False,
                     reason="BackendNotFound", observed_generation=1, current=False),
         "RouteGenerationNotObserved",
         f"Gateway {GATEWAY} reported on generation 1 of HTTPRoute llama-engine, not on generation 2 yet"),
    ]
    for route, reason, message in cases:
        condition = status.ingress_condition(EXTERNAL, _views(engine=route, router=_accepted("llama-router")))
        assert condition == ConditionUpdate(type="IngressReady", status="False", reason=reason, message=message)


@pytest.mark.unit
def test_a_refusal_outranks_a_wait_and_a_config_problem_outranks_both() -> None:
    refused = RouteStatus(route="llama-router", generation=1, reported=True, accepted=True, resolved_refs=False,
                          reason="BackendNotFound", observed_generation=1, current=True)
    condition = status.ingress_condition(EXTERNAL, _views(engine=None, router=refused))
    assert _pair(condition) == ("False", "BackendNotFound")
    problem = "ConfigMap x/y: ingress.urlSheme: Extra inputs are not permitted"
    broken = IngressObservation(problem_reason="IngressConfigInvalid", problem=problem)
    assert status.ingress_condition(broken, _views(engine=_accepted("llama-engine"))) == ConditionUpdate(
        type="IngressReady", status="False", reason="IngressConfigInvalid", message=problem)


@pytest.mark.unit
def test_ready_is_never_true_while_ingress_is_false() -> None:
    def ready(state: ServiceState) -> tuple[str, str]:
        [condition] = [c for c in status.conditions(state) if c.type == "Ready"]
        return condition.status, condition.reason

    waiting = ServiceState(ingress=EXTERNAL, components=_views(engine=RouteStatus(route="llama-engine")))
    assert ready(waiting) == ("False", "IngressNotReady")
    [ingress] = [c for c in status.conditions(waiting) if c.type == "IngressReady"]
    assert ingress.reason == "ParentStatusNotAvailable"
    assert ready(ServiceState(ingress=EXTERNAL, components=_views(engine=_accepted("llama-engine")))) == \
        ("True", "ComponentsReady")
    assert ready(ServiceState(ingress=IngressObservation(), components=_views(engine=None))) == \
        ("True", "ComponentsReady")
    assert ready(ServiceState(components=_views(engine=None))) == ("True", "ComponentsReady"), "before the block"
    # Pods not serving: the components' reason, not ingress's.
    unready = _views(engine=RouteStatus(route="llama-engine"))
    unready[ENGINE].serving_ready = False
    assert ready(ServiceState(ingress=EXTERNAL, components=unready)) == ("False", "ComponentsNotReady")


@pytest.mark.unit
def test_addresses_project_the_gateway_and_the_cluster_local_entry() -> None:
    entry = _views(router=None)[ROUTER]

    def addresses(ingress: IngressObservation | None, view: ComponentView) -> dict[str, Any]:
        """The status fields written for them."""
        return status.addresses(ingress, view).to_merge_patch(whole_values=True)

    assert addresses(EXTERNAL, entry) == {
        "url": "http://llama.team-a.example.test",
        "address": {"url": "http://llama-router.team-a.svc.cluster.local"},
        "addresses": [{"name": "external", "url": "http://llama.team-a.example.test"},
                      {"name": "cluster-local", "url": "http://llama-router.team-a.svc.cluster.local"}]}
    local = "http://llama-router.team-a.svc.cluster.local"
    assert addresses(IngressObservation(), entry.model_copy(update={"url": local})) == {
        "url": local, "address": {"url": local}, "addresses": [{"name": "cluster-local", "url": local}]}
    assert addresses(None, entry) == {"url": entry.url}, "a history from before: status.url as then"
    assert addresses(EXTERNAL, ComponentView()) == {}, "no route yet"
    assert addresses(IngressObservation(problem_reason="InvalidHost", problem="..."), entry) == {}, \
        "a configuration that cannot be read changes nothing written"


@pytest.mark.unit
def test_a_warning_once_per_refusal_and_none_for_waits() -> None:
    def condition(state: str, reason: str) -> ConditionUpdate:
        return ConditionUpdate(type="IngressReady", status=state, reason=reason, message=f"{reason}!")

    verdict: str | None = None
    warnings = []
    for state, reason in [("False", "ParentStatusNotAvailable"), ("True", "RouteAccepted"),
                          ("False", "RouteGenerationNotObserved"), ("False", "BackendNotFound"),
                          ("False", "RouteGenerationNotObserved"), ("False", "BackendNotFound"),
                          ("True", "RouteAccepted"), ("False", "BackendNotFound"), ("False", "NoMatchingParent"),
                          ("False", "IngressConfigInvalid"), ("True", "GatewayNotConfigured")]:
        update = condition(state, reason)
        note = status.ingress_note(update, verdict)
        if note is not None:
            assert note.type == "Warning" and note.message == f"{reason}!"
            warnings.append(note.reason)
        verdict = status.ingress_verdict(update, verdict)
    assert warnings == ["BackendNotFound", "BackendNotFound", "NoMatchingParent", "IngressConfigInvalid"]
    assert status.ingress_note(None, "True:RouteAccepted") is None


# -- the workflow ------------------------------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    environment = await start_env()
    async with environment:
        yield environment


@asynccontextmanager
async def started(env: WorkflowEnvironment, ingress: IngressConfig | OperatorConfigError,
                  desired: dict[ComponentType, tuple[str, int]]) -> AsyncIterator[Isvc]:
    """An InferenceService workflow on a fake cluster whose ingress block is `ingress` (the harness's
    `served` waits for a Ready that a Gateway holds back here)."""
    cluster = FakeCluster(env, ready_delay=10.0)
    cluster.ingress = ingress
    for component, (revision, replicas) in desired.items():
        cluster.set_desired(component, revision, replicas)
    queue = f"ingress-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(WORKFLOWS), activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", ServiceInput(ref=cluster.ref, settings=RolloutSettings()),
            id=contract.inference_service_workflow_id(NAMESPACE, NAME, cluster.uid), task_queue=queue)
        try:
            yield Isvc(env=env, cluster=cluster, handle=handle)
            assert not cluster.violations, f"calls the real activities refuse: {cluster.violations}"
        finally:
            with contextlib.suppress(RPCError):
                await handle.terminate()
            for key in ("0", "engine", "router"):
                with contextlib.suppress(RPCError):
                    await env.client.get_workflow_handle(
                        contract.rollout_workflow_id(NAMESPACE, NAME, cluster.uid, key)).terminate()


def _condition(isvc: Isvc, kind: str) -> tuple[Any, Any]:
    condition = isvc.cluster.conditions.get(kind, {})
    return condition.get("status"), condition.get("reason")


def _verdict(isvc: Isvc, component: ComponentType, accepted: tuple[str, str] = ("True", "Accepted"),
             resolved: tuple[str, str, str] = ("True", "ResolvedRefs", ""),
             generation: int | None = None) -> None:
    """Play the Gateway for the component's route (its current generation unless told)."""
    seen = generation if generation is not None else isvc.cluster.route_generation(component)
    conditions = [{"type": "Accepted", "status": accepted[0], "reason": accepted[1], "message": "",
                   "observedGeneration": seen},
                  {"type": "ResolvedRefs", "status": resolved[0], "reason": resolved[1], "message": resolved[2],
                   "observedGeneration": seen}]
    isvc.cluster.gateway_verdict(component, [{"parentRef": {"name": "inference", "namespace": "servingops-gateway"},
                                              "controllerName": "traefik.io/gateway-controller",
                                              "conditions": conditions}])


def _warnings(isvc: Isvc) -> list[str]:
    return [e.reason for e in isvc.cluster.events if e.type == "Warning"]


@pytest.mark.timeskip
async def test_ready_waits_for_the_gateway_and_a_refusal_is_said_once(env: WorkflowEnvironment) -> None:
    config = IngressConfig(ome_ingress_gateway=GATEWAY, ingress_domain="example.test")
    async with started(env, config, {ENGINE: ("a", 2), ROUTER: ("r", 1)}) as isvc:
        cluster = isvc.cluster
        # The pods serve; the Gateway has said nothing: not Ready, and why.
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("False", "ParentStatusNotAvailable")
                         and cluster.conditions.get("EngineReady", {}).get("status") == "True"
                         and cluster.conditions.get("RouterReady", {}).get("status") == "True",
                         step=1, what="served, not yet accepted")
        assert _condition(isvc, "Ready") == ("False", "IngressNotReady")
        assert "ParentStatusNotAvailable" in str(cluster.conditions["Ready"]["message"])
        engine, router = cluster.route_objects[ENGINE]["spec"], cluster.route_objects[ROUTER]["spec"]
        parent = [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "servingops-gateway",
                   "name": "inference"}]
        assert engine["parentRefs"] == router["parentRefs"] == parent
        assert engine["hostnames"] == ["llama-engine.team-a.example.test"]
        assert router["hostnames"] == ["llama-router.team-a.example.test", "llama.team-a.example.test"]
        assert _warnings(isvc) == [], "waiting for the Gateway is no warning"

        # A verdict on an older generation of the router's route says nothing about the current one.
        _verdict(isvc, ENGINE)
        _verdict(isvc, ROUTER, generation=0)
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("False", "RouteGenerationNotObserved"),
                         step=1, what="a stale verdict")
        _verdict(isvc, ROUTER)
        await isvc.until(lambda: _condition(isvc, "Ready") == ("True", "ComponentsReady"), step=2, what="Ready")
        assert _condition(isvc, "IngressReady") == ("True", "RouteAccepted")
        assert cluster.status["url"] == "http://llama.team-a.example.test"
        assert cluster.status["address"] == {"url": "http://llama-router.team-a.svc.cluster.local"}
        assert cluster.status["addresses"] == [
            {"name": "external", "url": "http://llama.team-a.example.test"},
            {"name": "cluster-local", "url": "http://llama-router.team-a.svc.cluster.local"}]
        components = cluster.status["components"]
        assert components["engine"]["url"] == "http://llama-engine.team-a.example.test"
        assert components["router"]["url"] == "http://llama-router.team-a.example.test"

        # The Gateway later refuses a backend: seen within the resync, Ready drops, one Warning.
        _verdict(isvc, ENGINE, resolved=("False", "BackendNotFound", "service llama-engine-rev-a not found"))
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("False", "BackendNotFound"), step=30,
                         what="the refusal read back")
        assert _condition(isvc, "Ready") == ("False", "IngressNotReady")
        assert "service llama-engine-rev-a not found" in str(cluster.conditions["IngressReady"]["message"])
        await env.sleep(1800)
        assert _warnings(isvc) == ["BackendNotFound"], "said once, not on every look"


@pytest.mark.timeskip
async def test_services_follow_a_gateway_configured_after_they_were_served(env: WorkflowEnvironment) -> None:
    async with started(env, IngressConfig(), {ENGINE: ("a", 1)}) as isvc:
        cluster = isvc.cluster
        await isvc.until(lambda: _condition(isvc, "Ready") == ("True", "ComponentsReady"), step=2, what="Ready")
        assert _condition(isvc, "IngressReady") == ("True", "GatewayNotConfigured")
        assert cluster.status["url"] == "http://llama-engine.team-a.svc.cluster.local"
        assert "parentRefs" not in cluster.route_objects[ENGINE]["spec"]

        # The operator names a Gateway: the route is applied again, with the split it carries.
        cluster.ingress = IngressConfig(ome_ingress_gateway=GATEWAY, ingress_domain="example.test")
        await isvc.until(lambda: "parentRefs" in cluster.route_objects[ENGINE]["spec"], step=30,
                         what="the route attached")
        assert cluster.route_objects[ENGINE]["spec"]["hostnames"] == [
            "llama-engine.team-a.example.test", "llama.team-a.example.test"]
        assert cluster.weights(ENGINE) == {"a": 100}
        await isvc.until(lambda: _condition(isvc, "Ready") == ("False", "IngressNotReady"), step=1,
                         what="not Ready until the Gateway accepts")
        _verdict(isvc, ENGINE)
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("True", "RouteAccepted"), step=2,
                         what="accepted")
        assert cluster.status["url"] == "http://llama.team-a.example.test"

        # A typo in the block: the route keeps its attachment and the condition says why.
        cluster.ingress = OperatorConfigError("ConfigMap servingops-system/servingops-config: ingress.urlSheme: "
                                              "Extra inputs are not permitted")
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("False", "IngressConfigInvalid"), step=30,
                         what="the bad block reported")
        assert "urlSheme" in str(cluster.conditions["IngressReady"]["message"])
        assert cluster.status["url"] == "http://llama.team-a.example.test", "what was written stays"
        await roll_to(isvc, "b")  # a rollout meanwhile keeps the route on its Gateway
        await isvc.until(lambda: cluster.weights(ENGINE) == {"b": 100}, step=5, what="rolled out")
        assert cluster.route_objects[ENGINE]["spec"]["parentRefs"][0]["name"] == "inference"
        assert _warnings(isvc) == ["IngressConfigInvalid"]

        # The Gateway removed from the block: the route is detached again.
        cluster.ingress = IngressConfig()
        await isvc.until(lambda: "parentRefs" not in cluster.route_objects[ENGINE]["spec"], step=30,
                         what="detached")
        await isvc.until(lambda: _condition(isvc, "IngressReady") == ("True", "GatewayNotConfigured"), step=5,
                         what="no Gateway")
        assert cluster.status["url"] == "http://llama-engine.team-a.svc.cluster.local"
        assert cluster.status["addresses"] == [{"name": "cluster-local",
                                                "url": "http://llama-engine.team-a.svc.cluster.local"}]


@pytest.mark.timeskip
async def test_a_route_that_cannot_be_reattached_refuses_no_spec(env: WorkflowEnvironment) -> None:
    async with started(env, IngressConfig(), {ENGINE: ("a", 1)}) as isvc:
        cluster = isvc.cluster
        await isvc.until(lambda: _condition(isvc, "Ready") == ("True", "ComponentsReady"), step=2, what="Ready")
        # The revision's Service gone behind our back: its split cannot be programmed again.
        revision = cluster.revisions[ENGINE].pop("a")
        cluster.ingress = IngressConfig(ome_ingress_gateway=GATEWAY, ingress_domain="example.test")
        await isvc.until(lambda: any("InvalidTraffic" in v for v in cluster.violations), step=30,
                         what="the re-attach refused")
        await env.sleep(60)
        assert _condition(isvc, "Ready")[1] != "InvalidTraffic", "housekeeping is no refusal of the spec"
        assert "parentRefs" not in cluster.route_objects[ENGINE]["spec"]
        # Back: the next look attaches it.
        cluster.revisions[ENGINE]["a"] = revision
        await isvc.until(lambda: "parentRefs" in cluster.route_objects[ENGINE]["spec"], step=30, what="attached")
        cluster.violations.clear()  # the refusal above was the point of this test
