"""Records the workflow histories that tests/test_replay.py replays.

Each scenario below drives real workflows (the worker's own registry, `workers.registry.workflows()`)
on Temporal's time-skipping test server, against fake activities registered under the real
activity names: testkit/rollout_fakes.py (an in-memory cluster and Prometheus) for the
InferenceService and rollout workflows, tests/histories/model_fakes.py for ModelWorkflow and small
fakes here for RolloutPolicyWorkflow. When a scenario is done, every history it produced is
written to tests/histories/<workflow type>/<scenario>.json: the root workflow, each run of a
continue-as-new chain and each child run (`<scenario>-<n>.json` when a type has several).

Usage (from the repository root):

    .venv/bin/python -m tests.histories.record                  # every scenario
    .venv/bin/python -m tests.histories.record canary-promote   # only some
    .venv/bin/python -m tests.histories.record --list

To record from an older commit (a history "from before" a change), check the commit out in a
worktree, copy this folder into it and run it there with the worktree first on the path:

    git worktree add /tmp/old <commit> && cp -r tests/histories /tmp/old/tests/
    cd /tmp/old && PYTHONPATH=/tmp/old /work/main/.venv/bin/python -m tests.histories.record \\
        --out /work/main/tests/histories before-operator-config

The drivers speak to the workflows only through the wire contract (type names, signal, update and
annotation names, JSON payloads), never through the Python types of the code being recorded, so
the same script records from older and newer code alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.rollout_fakes import NAME, NAMESPACE, FakeCluster, register_search_attributes, until
from tests.histories.accelerator_class_scenarios import SCENARIOS as ACCELERATOR_CLASS_SCENARIOS
from tests.histories.accelerator_quota_scenarios import SCENARIOS as ACCELERATOR_QUOTA_SCENARIOS
from tests.histories.autoscaler_scenarios import SCENARIOS as AUTOSCALER_SCENARIOS
from tests.histories.basemodel_fakes import FakeBaseModelWorld
from tests.histories.benchmark_scenarios import SCENARIOS as BENCHMARK_SCENARIOS
from tests.histories.capacity_scenarios import SCENARIOS as CAPACITY_SCENARIOS
from tests.histories.catalog_scenarios import SCENARIOS as CATALOG_SCENARIOS
from tests.histories.model_fakes import FakeModelWorld
from tests.histories.placement_scenarios import SCENARIOS as PLACEMENT_SCENARIOS
from tests.histories.routing_scenarios import SCENARIOS as ROUTING_SCENARIOS
from tests.histories.workload_cluster_scenarios import SCENARIOS as WORKLOAD_CLUSTER_SCENARIOS

HERE = Path(__file__).parent
ENGINE, DECODER, ROUTER = ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER

# Annotation names the bridge forwards (api_models.contract), spelled as on the object.
PROMOTE = "ome.io/rollout-promote"
ROLLBACK = "ome.io/rollout-rollback"
RESUME = "ome.io/rollout-resume"


# -- the test server and the histories it holds ----------------------------------------------------


async def start_env() -> WorkflowEnvironment:
    server = shutil.which("temporal-test-server") or str(Path(sys.executable).parent / "temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=server,
                                                        data_converter=pydantic_data_converter)
    await register_search_attributes(env)
    return env


_UNFINISHED = (EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)


async def settled_history(client: Client, workflow_id: str, run_id: str) -> WorkflowHistory:
    """The run's history once no workflow task is in flight (a half-done task is not replayable
    evidence of anything)."""
    deadline = time.monotonic() + 30
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        if history.events[-1].event_type not in _UNFINISHED or time.monotonic() > deadline:
            return history
        await asyncio.sleep(0.1)


async def history_tree(client: Client, workflow_id: str, run_id: str) -> list[WorkflowHistory]:
    """This run, its children (each followed through its own runs), then its continued runs."""
    found: list[WorkflowHistory] = []
    next_run: str | None = run_id
    while next_run:
        history = await settled_history(client, workflow_id, next_run)
        found.append(history)
        next_run = None
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                child = event.child_workflow_execution_started_event_attributes.workflow_execution
                found += await history_tree(client, child.workflow_id, child.run_id)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                next_run = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return found


def type_of(history: WorkflowHistory) -> str:
    return str(history.events[0].workflow_execution_started_event_attributes.workflow_type.name)


@dataclass
class Recording:
    """Where one scenario's histories go; `roots` are the workflows whose trees are saved."""

    scenario: str
    out: Path
    env: WorkflowEnvironment
    roots: list[tuple[str, str]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    async def root(self, handle: WorkflowHandle[Any, Any]) -> None:
        """Remember a workflow started by the scenario (its first run)."""
        run_id = handle.first_execution_run_id or handle.result_run_id or handle.run_id
        if run_id is None:
            run_id = (await handle.describe()).run_id
        self.roots.append((handle.id, run_id))

    async def save(self) -> list[Path]:
        histories: list[WorkflowHistory] = []
        for workflow_id, run_id in self.roots:
            histories += await history_tree(self.env.client, workflow_id, run_id)
        by_type: dict[str, list[WorkflowHistory]] = {}
        for history in histories:
            failed = [e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
            # A failed workflow task is a bug in the workflow or the fakes, not a scenario.
            assert not failed, f"{self.scenario}: {history.workflow_id} has failed workflow tasks at {failed}"
            by_type.setdefault(type_of(history), []).append(history)
        for stale in [*self.out.glob(f"*/{self.scenario}.json"), *self.out.glob(f"*/{self.scenario}-[0-9]*.json")]:
            stale.unlink()
        written = []
        for workflow_type, runs in sorted(by_type.items()):
            folder = self.out / workflow_type
            folder.mkdir(parents=True, exist_ok=True)
            for index, history in enumerate(runs, start=1):
                name = self.scenario if len(runs) == 1 else f"{self.scenario}-{index}"
                path = folder / f"{name}.json"
                path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
                written.append(path)
        self.written = written
        return written


# -- driving an InferenceService through the bridge's signals --------------------------------------


@dataclass
class Isvc:
    env: WorkflowEnvironment
    cluster: FakeCluster
    handle: WorkflowHandle[Any, Any]
    annotation_writes: int = 0
    """Annotation changes sent: each one's resourceVersion grows, as an apiserver's does (runs from
    the patch annotation-events-to-runs on act on a change once, by it)."""

    def event(self, **extra: Any) -> dict[str, Any]:
        return {"uid": self.cluster.uid, "generation": self.cluster.generation,
                "resource_version": str(self.cluster.generation), **extra}

    async def changed(self) -> None:
        await self.handle.signal("object-changed", self.event())

    async def bump(self) -> None:
        """A spec edit that changes nothing the workflow reads (a new generation)."""
        self.cluster.generation += 1
        await self.changed()

    async def annotate(self, name: str, value: str | None) -> None:
        if value is None:
            self.cluster.annotations.pop(name, None)
        else:
            self.cluster.annotations[name] = value
        # Above the generation-based resourceVersions of the other events (the apiserver's grows across
        # all of an object's writes); written as a plain dict, so older trees can record with it too.
        self.annotation_writes += 1
        await self.handle.signal("annotation", {**self.event(name=name, value=value),
                                                "resource_version": str(100 + self.annotation_writes)})

    async def delete(self) -> None:
        await self.handle.signal("delete", self.event(deleting=True))

    async def roll_to(self, revision: str, component: ComponentType = ENGINE,
                      rollout: dict[str, Any] | None = None) -> None:
        if rollout is not None:
            self.cluster.spec_rollout = rollout
        self.cluster.set_desired(component, revision, self.cluster.desired[component][1])
        await self.changed()

    def rollout(self, group: str) -> WorkflowHandle[Any, Any]:
        return self.env.client.get_workflow_handle(f"rollout/{NAMESPACE}/{NAME}/{self.cluster.uid}/{group}")

    async def until(self, predicate: Callable[[], bool], *, step: float = 5.0, what: str = "") -> None:
        await until(self.env, predicate, step=step, what=what)

    def canary(self, component: ComponentType = ENGINE) -> dict[str, Any]:
        return self.cluster.canary(component)

    def weights(self, component: ComponentType = ENGINE) -> dict[str, int]:
        return self.cluster.weights(component)

    def phase(self, component: ComponentType = ENGINE) -> str | None:
        value = self.cluster.component(component).get("rolloutPhase")
        return str(value) if value is not None else None

    def coordination(self, key: str) -> dict[str, Any]:
        groups = self.cluster.status.get("rolloutCoordination", {}).get("groups", [])
        return next((g for g in groups if g.get("name") == key), {})

    def at_step(self, step: int, traffic: int, canary: str = "b", stable: str = "a") -> bool:
        status = self.canary()
        expected = {stable: 100 - traffic, canary: traffic} if 0 < traffic < 100 else \
            ({canary: 100} if traffic == 100 else {stable: 100})
        return (status.get("currentStep") == step and status.get("observedTrafficWeight") == traffic
                and status.get("canaryRevisionHash") == canary and self.weights() == expected)

    def rolled_out(self, revision: str) -> bool:
        return self.cluster.component(ENGINE).get("latestRolledoutRevision") == f"llama-engine-rev-{revision}"


@asynccontextmanager
async def served(rec: Recording, *, desired: dict[ComponentType, tuple[str, int]] | None = None,
                 rollout: dict[str, Any] | None = None, ready_delay: float = 10.0,
                 settings: dict[str, Any] | None = None) -> AsyncIterator[Isvc]:
    """An InferenceService whose workflow serves its first revision; the histories are saved when
    the block ends normally."""
    env = rec.env
    cluster = FakeCluster(env, ready_delay=ready_delay)
    for component, (revision, replicas) in (desired or {ENGINE: ("a", 4)}).items():
        cluster.set_desired(component, revision, replicas)
    cluster.spec_rollout = rollout
    queue = f"isvc-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await env.client.start_workflow(
            "InferenceServiceWorkflow", {"ref": cluster.ref, "settings": settings or {}},
            id=f"isvc/{NAMESPACE}/{NAME}/{cluster.uid}", task_queue=queue)
        await rec.root(handle)
        isvc = Isvc(env=env, cluster=cluster, handle=handle)
        await isvc.until(lambda: cluster.conditions.get("Ready", {}).get("status") == "True", what="first Ready")
        yield isvc
        await rec.save()


def canary(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"groups": [{"components": ["engine"], "canary": {"steps": steps, **extra}}]}


def analysis(failure_limit: int = 2, initial_delay: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "interval": "1m", "failureLimit": failure_limit,
        "metrics": [{"name": "error-rate", "operator": "LT", "threshold": "0.05",
                     "query": 'sum(rate(errors{service="{{.CanaryService}}",ns="{{ .Namespace }}"}[1m]))'}]}
    if initial_delay:
        body["initialDelay"] = initial_delay
    return body


# -- InferenceServiceWorkflow and RolloutWorkflow scenarios ----------------------------------------


async def canary_promote(rec: Recording, settings: dict[str, Any] | None = None) -> None:
    """Manual canary steps promoted by annotation (a wrong hash and a duplicate ignored, removal
    re-arming), then by the SDK's `promote` Update, to Stable; the old revision is scaled away."""
    steps = [{"capacity": "25%", "traffic": 10, "pause": {}}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "75%", "traffic": 70, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=30), settings=settings) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(0, 10) and isvc.phase() == "Paused", what="manual hold")
        await isvc.annotate(PROMOTE, "not-the-hash")
        await isvc.env.sleep(600)
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.at_step(1, 40), what="one promote, one step")
        await isvc.annotate(PROMOTE, "b")  # a duplicate of the same promote: inert
        await isvc.env.sleep(300)
        await isvc.annotate(PROMOTE, None)
        await isvc.until(lambda: "promotedThrough" not in isvc.canary(), what="removal re-arms promotion")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.at_step(2, 70), what="second promote")
        await isvc.rollout("0").execute_update("promote", {"revision": "b"}, result_type=dict)
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        await isvc.until(lambda: isvc.rolled_out("b") and isvc.cluster.replicas(ENGINE, "a") is None,
                         what="closed and drained")


async def annotation_cleanup(rec: Recording) -> None:
    """Consumed annotations removed (patch `remove-consumed-annotations`): a promote once its step
    advance is on status, the removal coming back as the bridge would send it and re-arming
    promotion, the same value promoting the next step; then a rollback refused for a missing
    stable revision, removed too."""
    steps = [{"capacity": "25%", "traffic": 10, "pause": {}}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=30)) as isvc:
        async def bridge(name: str, value: str | None) -> None:
            await isvc.annotate(name, value)

        isvc.cluster.bridge = bridge
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(0, 10) and isvc.phase() == "Paused", what="manual hold")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.at_step(1, 40) and PROMOTE not in isvc.cluster.annotations
                         and "promotedThrough" not in isvc.canary(), what="promote consumed, removed, re-armed")
        del isvc.cluster.revisions[ENGINE]["a"]  # the stable Deployment deleted behind our back
        await isvc.annotate(ROLLBACK, "true")
        await isvc.until(lambda: ROLLBACK not in isvc.cluster.annotations
                         and (isvc.canary().get("failed") or {}).get("reason") == "StableRevisionMissing",
                         what="rollback refused and removed")


async def before_operator_config(rec: Recording) -> None:
    """canary-promote as recorded at commit 1482aaa, before the InferenceService workflow read
    the operator ConfigMap at run open (666904c) and nudged RolloutPolicies (88c91eb). The
    settings carry that commit's `default_prometheus_address` (ignored by newer code)."""
    await canary_promote(rec, settings={"default_prometheus_address": "http://prometheus.test:9090"})


async def before_refresh_now(rec: Recording) -> None:
    """A canary whose group takes its progression from a RolloutPolicy (policyRef), recorded at
    commit 1482aaa: the service reads the policy but sends no `refresh-now` (88c91eb) and opens
    its run without `operator.config` (666904c); then the service is deleted."""
    steps = [{"capacity": "50%", "traffic": 40, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    rollout = {"groups": [{"components": ["engine"], "policyRef": {"name": "safe", "progression": "canary"}}]}
    settings = {"default_prometheus_address": "http://prometheus.test:9090"}
    async with served(rec, rollout=rollout, settings=settings) as isvc:
        isvc.cluster.policies["safe"] = policy_object("safe", "0d6c3c1e-policy-safe", {"canary": {"steps": steps}})
        await isvc.bump()
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.weights() == {"a": 60, "b": 40}, what="policy canary at step 0")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")
        await isvc.delete()
        await isvc.handle.result()


async def canary_rollback(rec: Recording) -> None:
    """Rollback by annotation at a manual step ("yes" ignored, "true" rolls back), the canary
    drained after scaleDownDelay, clearing the annotation not retrying, then `rollout-resume`
    re-entering the rejected revision at step 0; finally the SDK's `rollback` Update."""
    steps = [{"capacity": "25%", "traffic": 10}, {"capacity": "50%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=45)) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(1, 50), what="manual step 1")
        await isvc.annotate(ROLLBACK, "yes")
        await isvc.env.sleep(300)
        await isvc.annotate(ROLLBACK, "true")
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="drained")
        await isvc.annotate(ROLLBACK, None)
        await isvc.env.sleep(600)
        await isvc.annotate(RESUME, "b")
        await isvc.until(lambda: isvc.at_step(1, 50) and not isvc.canary().get("rolledBackRevisionHash"),
                         what="resumed from step 0")
        await isvc.rollout("0").execute_update("rollback", result_type=dict)
        await isvc.until(lambda: isvc.phase() == "RolledBack", what="rolled back by update")


async def canary_retarget(rec: Recording) -> None:
    """A new revision mid-canary: the run closes Superseded, the child re-arms on c from step 0
    keeping stable a, the intermediate b is scaled away; c is promoted to Stable."""
    steps = [{"capacity": "25%", "traffic": 10}, {"capacity": "50%", "traffic": 40, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=20)) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(1, 40), what="b at step 1")
        await isvc.roll_to("c")
        await isvc.until(lambda: isvc.at_step(1, 40, canary="c"), what="c re-armed")
        await isvc.annotate(PROMOTE, "c")
        await isvc.until(lambda: isvc.phase() == "Stable", what="c complete")
        await isvc.until(lambda: isvc.rolled_out("c"), what="closed")


async def canary_analysis_rollback(rec: Recording) -> None:
    """Analysis: a failing sample below failureLimit then passes (the step advances after its 3m
    bake), then failures reach the limit at step 1 and the run rolls back on its own; a later
    reconcile of the same spec does not retry the rejected target."""
    steps = [{"capacity": "25%", "traffic": 10, "pause": {"duration": "3m"}, "analysis": analysis(2)},
             {"capacity": "50%", "traffic": 50, "analysis": analysis(2, initial_delay="2m")},
             {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=30)) as isvc:
        isvc.cluster.prometheus.script = ["fail", "pass", "pass", "pass"]
        isvc.cluster.prometheus.default = "fail"
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(1, 50), step=10, what="advance after bake")
        await isvc.until(lambda: isvc.canary().get("rolledBackRevisionHash") == "b", step=10, what="auto rollback")
        await isvc.until(lambda: isvc.phase() == "RolledBack", step=10, what="drained")
        await isvc.bump()
        await isvc.env.sleep(600)


async def blue_green(rec: Recording) -> None:
    """No spec.rollout: the component rolls alone, blue-green; the new revision surges to full
    size, flips at once when all of it is Ready, and the old one goes after the default delay."""
    async with served(rec, desired={ENGINE: ("a", 3)}, ready_delay=60) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.weights() == {"b": 100}, what="flip")
        await isvc.until(lambda: isvc.coordination("engine").get("phase") == "Idle", what="drained")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")


async def rolling(rec: Recording) -> None:
    """A rolling update with maxSurge 1, maxUnavailable 0 over 4 replicas: pods move one at a
    time and traffic follows the Ready pods until only the new revision is left."""
    rollout = {"groups": [{"components": ["engine"], "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}]}
    async with served(rec, rollout=rollout, ready_delay=20) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.coordination("0").get("phase") == "Idle", what="rolled")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")


def _gateway_verdict(cluster: FakeCluster, resolved: tuple[str, str, str] = ("True", "ResolvedRefs", "")) -> None:
    """Play the Gateway on the engine's route, for its current generation. (Only the fakes of this
    tree have a Gateway: ingress-gateway is not recordable from a tree before the ingress block.)"""
    generation = cluster.route_generation(ENGINE)
    conditions = [{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                   "observedGeneration": generation},
                  {"type": "ResolvedRefs", "status": resolved[0], "reason": resolved[1], "message": resolved[2],
                   "observedGeneration": generation}]
    cluster.gateway_verdict(ENGINE, [{"parentRef": {"name": "inference", "namespace": "servingops-gateway"},
                                      "controllerName": "traefik.io/gateway-controller", "conditions": conditions}])


async def ingress_gateway(rec: Recording) -> None:
    """A Gateway configured after the service was served: the next resync applies the route again
    with its split (parentRefs, hostnames), Ready is held (IngressNotReady) until the Gateway
    accepts it; a blue-green rollout on the attached route, accepted again; the Gateway then
    refuses a backend (IngressReady False BackendNotFound, a Warning, re-read by the poll); the
    Gateway removed from the block detaches the route."""
    async with served(rec, desired={ENGINE: ("a", 2)}) as isvc:
        cluster = isvc.cluster

        def condition(kind: str) -> tuple[Any, Any]:
            found = cluster.conditions.get(kind, {})
            return found.get("status"), found.get("reason")

        cluster.ingress = IngressConfig(ome_ingress_gateway="servingops-gateway/inference",
                                        ingress_domain="example.test")
        await isvc.until(lambda: "parentRefs" in cluster.route_objects[ENGINE]["spec"], step=30, what="attached")
        await isvc.until(lambda: condition("Ready") == ("False", "IngressNotReady"), step=1, what="held")
        _gateway_verdict(cluster)
        await isvc.until(lambda: condition("IngressReady") == ("True", "RouteAccepted"), step=2, what="accepted")
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.weights() == {"b": 100}, what="flip")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")
        _gateway_verdict(cluster)
        await isvc.until(lambda: condition("Ready") == ("True", "ComponentsReady"), step=2, what="accepted again")
        _gateway_verdict(cluster, ("False", "BackendNotFound", "service llama-engine-rev-b not found"))
        await isvc.until(lambda: condition("IngressReady") == ("False", "BackendNotFound"), step=30, what="refused")
        await isvc.env.sleep(120)  # looked at again (60 s polls), said once
        cluster.ingress = IngressConfig()
        await isvc.until(lambda: condition("IngressReady") == ("True", "GatewayNotConfigured"), step=30,
                         what="detached")


def _policy_reason(status: dict[str, Any]) -> Any:
    """status.traffic's BackendPolicyReady reason, or None."""
    traffic = status.get("traffic") or {}
    return next((c.get("reason") for c in traffic.get("conditions") or [] if c.get("type") == "BackendPolicyReady"),
                None)


async def backend_traffic_policy(rec: Recording) -> None:
    """spec.traffic declared on a served service: its BackendTrafficPolicy applied and status.traffic
    written (Pending), the Gateway's verdict seen by the policy poll, a hand-authored policy on the route
    winning (ConflictingPolicy, ours removed), then the intent removed: status.traffic leaves."""
    async with served(rec, desired={ENGINE: ("a", 2)}) as isvc:
        policies = isvc.cluster.backend_policies

        def reason() -> Any:
            return _policy_reason(isvc.cluster.status)

        async def edit(traffic: dict[str, Any] | None) -> None:
            policies.traffic = traffic
            isvc.cluster.generation += 1
            await isvc.changed()

        await edit({"algorithm": "ConsistentHash", "consistentHash": {"type": "SourceIP"}})
        await isvc.until(lambda: reason() == "Pending", step=1, what="applied")
        policies.accept(NAME)
        await isvc.until(lambda: reason() == "AcceptedByGateway", step=10, what="accepted")
        policies.author("team-override", [f"{NAME}-engine"])
        await edit({"algorithm": "RoundRobin"})
        await isvc.until(lambda: reason() == "ConflictingPolicy", step=1, what="deferred")
        del policies.policies["team-override"]
        await edit(None)
        await isvc.until(lambda: "traffic" not in isvc.cluster.status, step=1, what="cleared")


async def traffic_annotation_looks(rec: Recording) -> None:
    """Traffic intent through ome.io/* annotations alone on a served service (no spec.traffic, no new
    generation): each change is a look (patch `traffic-annotation-looks`): the policy applied, accepted,
    changed by a pass-through, then both annotations removed and status.traffic gone."""
    async with served(rec, desired={ENGINE: ("a", 2)}) as isvc:
        policies = isvc.cluster.backend_policies

        def reason() -> Any:
            return _policy_reason(isvc.cluster.status)

        def spec() -> dict[str, Any]:
            return dict((policies.policies.get(NAME) or {}).get("spec") or {})

        await isvc.annotate("ome.io/timeout-idle", "30s")
        await isvc.until(lambda: reason() == "Pending", step=1, what="applied")
        policies.accept(NAME)
        await isvc.until(lambda: reason() == "AcceptedByGateway", step=10, what="accepted")
        await isvc.annotate("ome.io/btp.retry.numRetries", "2")
        await isvc.until(lambda: (spec().get("retry") or {}).get("numRetries") == 2, step=1, what="changed")
        await isvc.annotate("ome.io/timeout-idle", None)
        await isvc.annotate("ome.io/btp.retry.numRetries", None)
        await isvc.until(lambda: "traffic" not in isvc.cluster.status, step=1, what="cleared")


async def service_continue_as_new(rec: Recording) -> None:
    """The InferenceService workflow continues as new past its history budget and keeps its state;
    the continued run then rolls out a new revision (blue-green) and records the previous one."""
    async with served(rec, settings={"history_budget": 60}) as isvc:
        first = (await isvc.handle.describe()).run_id
        for _ in range(40):
            if (await isvc.handle.describe()).run_id != first:
                break
            await isvc.bump()
            await isvc.env.sleep(5)
        assert (await isvc.handle.describe()).run_id != first, "the service never continued as new"
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.weights() == {"b": 100}, what="rolls after continue-as-new")
        await isvc.until(lambda: isvc.cluster.component(ENGINE).get("previousRolledoutRevision")
                         == "llama-engine-rev-a", what="previous recorded")


async def rollout_continue_as_new(rec: Recording) -> None:
    """A long canary (hour-long timed steps) whose RolloutWorkflow continues as new past its
    history budget mid-run, carrying its step, and completes; the idle service continues as new
    afterwards too."""
    steps = [{"capacity": f"{10 * (i + 1)}%", "traffic": 10 * (i + 1), "pause": {"duration": "1h"}}
             for i in range(10)]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=60),
                      settings={"history_budget": 120}) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.phase() == "Stable", step=300, what="completion")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")
        await isvc.bump()
        await isvc.env.sleep(60)


async def reports_in_flight(rec: Recording) -> None:
    """canary-promote recorded with the patches `reports-in-flight` (a report leaves without waiting
    for the parent's acknowledgement, one in flight at a time) and `capacity-from-scale` (a step's
    first capacity check reads the scale's answer): promotes by annotation and Update, capacity
    growing at every step (the first check short, then revision_status polls), Stable, drained."""
    await canary_promote(rec)


async def reports_in_flight_continue_as_new(rec: Recording) -> None:
    """rollout-continue-as-new recorded with the patches `reports-in-flight` and
    `capacity-from-scale`: the run waits for its last report's acknowledgement before it continues
    as new (four times) and before it completes."""
    await rollout_continue_as_new(rec)


async def local_serving_writes(rec: Recording) -> None:
    """canary-promote recorded with the patches `local-serving-writes` (each step's scale,
    `serving.ensure_revision`, and weights, `serving.set_traffic`, are local activities run in the
    workflow task that decides them: markers in the history instead of scheduled activities) and
    `annotation-events-to-runs` (the service forwards each annotation change as its event,
    `run-annotation`, which the run acts on once by resourceVersion)."""
    await canary_promote(rec)


async def scale_then_route(rec: Recording) -> None:
    """A canary whose steps all run at full capacity, recorded with the patch `scale-then-route` (a
    step's scale and weights are one local activity, `serving.scale_then_route`): the first step's
    capacity is not Ready at the scale (the weights wait for the polls, then `serving.set_traffic`),
    the two promotes find it Ready and route in the same call; Stable, drained."""
    steps = [{"capacity": "100%", "traffic": 10, "pause": {}}, {"capacity": "100%", "traffic": 50, "pause": {}},
             {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=0)) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(0, 10) and isvc.phase() == "Paused", what="manual hold")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.at_step(1, 50) and isvc.phase() == "Paused", what="first promote")
        await isvc.annotate(PROMOTE, None)
        await isvc.until(lambda: "promotedThrough" not in isvc.canary(), what="removal re-arms promotion")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        await isvc.until(lambda: isvc.rolled_out("b") and isvc.cluster.replicas(ENGINE, "a") is None,
                         what="closed and drained")


async def zero_drain_delay(rec: Recording) -> None:
    """A canary with `scaleDownDelaySeconds: 0`: held at a manual step, promoted by annotation to
    Stable, the old revision deleted right after the traffic moved (patch
    `no-timer-for-zero-delay`: no zero-length timer, which the server fires about a second later)."""
    steps = [{"capacity": "50%", "traffic": 50, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    async with served(rec, rollout=canary(steps, scaleDownDelaySeconds=0)) as isvc:
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.at_step(0, 50) and isvc.phase() == "Paused", what="manual hold")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        await isvc.until(lambda: isvc.rolled_out("b") and isvc.cluster.replicas(ENGINE, "a") is None,
                         what="closed and drained")


async def zero_drain_delay_before(rec: Recording) -> None:
    """zero-drain-delay as recorded before the patch `no-timer-for-zero-delay`: the drain waits on a
    zero-length timer."""
    await zero_drain_delay(rec)


def policy_object(name: str, uid: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {"apiVersion": "ome.io/v1beta1", "kind": "RolloutPolicy",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": generation},
            "spec": spec}


# -- RolloutPolicyWorkflow ---------------------------------------------------------------------------


@dataclass
class FakePolicy:
    """One RolloutPolicy object and the count of groups referencing it."""

    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    name: str = "steady"
    obj: dict[str, Any] | None = None
    attached: Callable[[], int] = lambda: 0
    status: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    patches: int = 0

    def ref(self) -> dict[str, Any]:
        return {"group": "ome.io", "version": "v1beta1", "plural": "rolloutpolicies", "kind": "RolloutPolicy",
                "name": self.name, "namespace": NAMESPACE, "uid": self.uid}

    def workflow_id(self) -> str:
        return f"rolloutpolicy/{NAMESPACE}/{self.name}/{self.uid}"

    def bump(self, spec: dict[str, Any]) -> dict[str, Any]:
        assert self.obj is not None
        self.obj["spec"] = copy.deepcopy(spec)
        self.obj["metadata"]["generation"] += 1
        return {"uid": self.uid, "generation": self.obj["metadata"]["generation"], "resource_version": "2"}

    def activities(self) -> list[Callable[..., Any]]:
        @activity.defn(name="kube.read_object")
        async def read_object(ref: dict[str, Any]) -> dict[str, Any] | None:
            return copy.deepcopy(self.obj)

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            self.patches += 1
            self.status.update(patch.get("status") or {})
            for condition in patch.get("conditions") or []:
                self.conditions[condition["type"]] = condition
            return self.obj is not None

        @activity.defn(name="kube.list_policy_attachments")
        async def list_policy_attachments(query: dict[str, Any]) -> int:
            return self.attached()

        return [read_object, patch_status, list_policy_attachments]


@asynccontextmanager
async def policy_served(rec: Recording, policy: FakePolicy) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"policy-{uuid.uuid4().hex[:8]}"
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=policy.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow("RolloutPolicyWorkflow", {"ref": policy.ref()},
                                                     id=policy.workflow_id(), task_queue=queue)
        await rec.root(handle)
        await until(rec.env, lambda: "portableDigest" in policy.status, step=1, what="first policy status")
        yield handle


CANARY_POLICY = {"canary": {"steps": [{"capacity": "10%", "traffic": 10, "pause": {}},
                                      {"capacity": "50%", "traffic": 50, "pause": {"duration": "5m"}}]}}


async def policy_lifecycle(rec: Recording) -> None:
    """A RolloutPolicy's digest, an unchanged spec at a new generation, a stale event ignored, a
    changed spec, a periodic recount that finds attached groups, an unchanged recount writing
    nothing, a `refresh-now` recount, an invalid body (PolicyInvalid) and deletion."""
    attached = [0]
    policy = FakePolicy(obj=None, attached=lambda: attached[0])
    policy.obj = policy_object(policy.name, policy.uid, copy.deepcopy(CANARY_POLICY))
    env = rec.env
    async with policy_served(rec, policy) as handle:
        await handle.signal("object-changed", policy.bump(CANARY_POLICY))
        await until(env, lambda: policy.status.get("attachedGroups") == 0 and policy.patches >= 2, step=1,
                    what="generation 2")
        await handle.signal("object-changed", {"uid": policy.uid, "generation": 1, "resource_version": "1"})
        changed = copy.deepcopy(CANARY_POLICY)
        changed["canary"]["steps"][1]["traffic"] = 60
        await handle.signal("object-changed", policy.bump(changed))
        await until(env, lambda: policy.patches >= 3, step=1, what="generation 3")
        attached[0] = 2
        await until(env, lambda: policy.status.get("attachedGroups") == 2, step=300, what="periodic recount")
        await env.sleep(900)
        attached[0] = 1
        await handle.signal("refresh-now")
        await until(env, lambda: policy.status.get("attachedGroups") == 1, step=1, what="refresh-now recount")
        await handle.signal("object-changed", policy.bump({"canary": {"steps": [{"capacity": 2, "traffic": 10}]}}))
        await until(env, lambda: policy.conditions.get("Ready", {}).get("status") == "False", step=1, what="invalid")
        await handle.signal("delete", {"uid": policy.uid, "generation": 4, "resource_version": "9", "deleting": True})
        await handle.result()
        await rec.save()


async def policy_continue_as_new(rec: Recording) -> None:
    """A RolloutPolicy workflow continues as new after its bounded number of periodic recounts;
    the continued run neither re-reads the unchanged policy nor rewrites status, and ends on delete."""
    policy = FakePolicy()
    policy.obj = policy_object(policy.name, policy.uid, copy.deepcopy(CANARY_POLICY))
    env = rec.env
    async with policy_served(rec, policy) as handle:
        first = (await handle.describe()).run_id
        for _ in range(100):
            if (await env.client.get_workflow_handle(handle.id).describe()).run_id != first:
                break
            await env.sleep(100 * 300)
        latest = env.client.get_workflow_handle(handle.id)
        assert (await latest.describe()).run_id != first, "the policy workflow never continued as new"
        await env.sleep(600)
        await latest.signal("delete", {"uid": policy.uid, "generation": 1, "resource_version": "9", "deleting": True})
        await latest.result()
        await rec.save()


async def policy_ref(rec: Recording) -> None:
    """Together: an InferenceService whose group pins its canary from a RolloutPolicy, and that
    policy's workflow. The service nudges the policy (`refresh-now`) when its references appear,
    change and go (on delete); the policy recounts at once each time. The canary runs from the
    policy's plan to Stable before the service is deleted."""
    steps = [{"capacity": "50%", "traffic": 40, "pause": {}}, {"capacity": "100%", "traffic": 100}]
    rollout = {"groups": [{"components": ["engine"], "policyRef": {"name": "safe", "progression": "canary"}},
                          {"components": ["decoder"], "policyRef": {"name": "safe", "progression": "canary"}}]}
    holder: list[Isvc] = []

    def attached() -> int:
        if not holder or holder[0].cluster.deleting:
            return 0
        groups = (holder[0].cluster.spec_rollout or {}).get("groups", [])
        return sum(1 for g in groups if (g.get("policyRef") or {}).get("name") == "safe")

    policy = FakePolicy(name="safe", attached=attached)
    policy.obj = policy_object("safe", policy.uid, {"canary": {"steps": steps}})
    async with policy_served(rec, policy), \
            served(rec, desired={ENGINE: ("a", 2), DECODER: ("d1", 2)}, rollout=rollout) as isvc:
        holder.append(isvc)
        isvc.cluster.policies["safe"] = policy.obj
        await isvc.bump()  # the policy is known now: two groups reference it
        await until(isvc.env, lambda: policy.status.get("attachedGroups") == 2, step=1, what="first nudge")
        isvc.cluster.spec_rollout = {"groups": rollout["groups"][:1]}
        await isvc.bump()  # one group left
        await until(isvc.env, lambda: policy.status.get("attachedGroups") == 1, step=1, what="second nudge")
        await isvc.roll_to("b")
        await isvc.until(lambda: isvc.weights() == {"a": 60, "b": 40}, what="policy canary at step 0")
        await isvc.annotate(PROMOTE, "b")
        await isvc.until(lambda: isvc.phase() == "Stable", what="complete")
        await isvc.until(lambda: isvc.rolled_out("b"), what="closed")
        isvc.cluster.deleting = True
        await isvc.delete()
        await isvc.handle.result()
        await until(isvc.env, lambda: policy.status.get("attachedGroups") == 0, step=1, what="nudge on delete")


# -- ModelWorkflow --------------------------------------------------------------------------------


@asynccontextmanager
async def model_served(rec: Recording, world: FakeModelWorld) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    queue = f"model-{uuid.uuid4().hex[:8]}"
    world.task_queue = queue
    ref = {"group": "ai.deckhouse.io", "version": "v1alpha1", "plural": "models", "kind": "Model",
           "name": world.name, "namespace": world.namespace, "uid": world.uid}
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=world.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow(
            "ModelWorkflow", {"ref": ref}, id=f"model/{world.namespace}/{world.name}/{world.uid}", task_queue=queue)
        await rec.root(handle)
        yield handle
        await rec.save()


def sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


async def model_import_ready(rec: Recording) -> None:
    """A Hugging Face import to Ready: three files, the weight already in the registry (header-only
    fetch, no push), the others fetched while the previous one is pushed; inspected, manifest
    pushed, spool cleaned; the workflow then waits for deletion."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), in_registry={sha256("model.safetensors")})
    async with model_served(rec, world):
        await until(rec.env, lambda: world.phase == "Ready" and "source.clean_spool" in world.calls, step=1,
                    what="Ready")


async def model_import_failed(rec: Recording) -> None:
    """Inspection rejects the files (InvalidModel, reason TruncatedSafetensors): the blobs this
    import uploaded are deleted and the model ends Failed with that reason."""
    world = FakeModelWorld(uid=str(uuid.uuid4()))
    # The shape workers raised before the one error enumeration (type InvalidModel, the reason as
    # a detail), kept on purpose: the stored history also covers ModelWorkflow's legacy branch.
    # Today's activities raise application_error(ErrorType.TRUNCATED_SAFETENSORS, message).
    world.inspect_error = ApplicationError(
        "model.safetensors: the header declares 2200000000 bytes of tensor data, the file holds 1048576",
        "TruncatedSafetensors", type="InvalidModel", non_retryable=True)
    async with model_served(rec, world):
        await until(rec.env, lambda: world.phase == "Failed", step=1, what="Failed")


async def model_source_not_found(rec: Recording) -> None:
    """The source does not resolve (SourceNotFound, permanent): Failed at once with that reason."""
    world = FakeModelWorld(uid=str(uuid.uuid4()))
    world.resolve_error = ApplicationError("acme/tiny-llama: no such repository on huggingface.co",
                                           type="SourceNotFound", non_retryable=True)
    async with model_served(rec, world):
        await until(rec.env, lambda: world.phase == "Failed", step=1, what="Failed")


async def model_upload(rec: Recording) -> None:
    """An upload source: a session is opened (WaitForUpload), the upload server's `upload-complete`
    signal arrives, the archive is unpacked, each file pushed, inspected, published: Ready."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), source={"upload": {}})
    async with model_served(rec, world) as handle:
        await until(rec.env, lambda: world.phase == "WaitForUpload", step=1, what="WaitForUpload")
        await rec.env.sleep(1800)
        await handle.signal("upload-complete", {
            "filename": "tiny-llama.tar", "size": 48_002_048, "sha256": sha256("tiny-llama.tar"),
            "path": f"/var/lib/servingops/spool/uploads/{world.uid}/tiny-llama.tar", "kind": "tar",
            "worker_task_queue": world.task_queue})
        await until(rec.env, lambda: world.phase == "Ready" and "source.clean_spool" in world.calls, step=1,
                    what="Ready")


async def model_delete(rec: Recording) -> None:
    """Ready, then deleted: Deleting, the artifact (referenced by no other model) is deleted from
    the registry, the spool cleaned, the finalizer removed; the workflow completes."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), in_registry={sha256("model.safetensors")})
    async with model_served(rec, world) as handle:
        await until(rec.env, lambda: world.phase == "Ready" and "source.clean_spool" in world.calls, step=1,
                    what="Ready")
        await rec.env.sleep(3600)
        await handle.signal("delete", {"uid": world.uid, "generation": 1, "resource_version": "9",
                                       "deleting": True})
        await handle.result()


async def model_delete_mid_import(rec: Recording) -> None:
    """Deleted while the second file is fetched (the first already pushed): the fetch is cancelled,
    the model goes Deleting (patch delete-cancels-import), the pushed blob is deleted, the
    finalizer removed."""
    world = FakeModelWorld(uid=str(uuid.uuid4()), held={"source.fetch_file": 2})
    async with model_served(rec, world) as handle:
        await until(rec.env, lambda: world.calls.count("source.fetch_file") == 2 and "oci.push_file" in world.calls,
                    step=1, what="the second fetch")
        await handle.signal("delete", {"uid": world.uid, "generation": 1, "resource_version": "9",
                                       "deleting": True})
        await handle.result()


# -- ServingRuntimeWorkflow -------------------------------------------------------------------------


async def runtime_inheritance(rec: Recording) -> None:
    """A ServingRuntime that inherits from a parent that does not exist yet (ParentNotFound, a
    Warning), then resolves on the 2-minute resync once it does, re-walks on the watched annotation
    (a cycle), then on a spec change (a new generation); deleted."""
    uid = str(uuid.uuid4())
    answers = [
        {"generation": 1, "chain": ["team-llama"], "ready": False, "reason": "ParentNotFound",
         "message": "ServingRuntime team-llama inherits from 'srt-base', which does not exist"},
        {"generation": 1, "chain": ["srt-base", "team-llama"], "ready": True, "reason": "Resolved",
         "message": "resolved srt-base -> team-llama"},
        {"generation": 1, "chain": ["team-llama"], "ready": False, "reason": "InheritanceCycle",
         "message": "ome.io/inherit-from forms a cycle: team-llama -> srt-base -> team-llama"},
        {"generation": 2, "chain": ["srt-base", "team-llama"], "ready": True, "reason": "Resolved",
         "message": "resolved srt-base -> team-llama"},
    ]
    step = [0]
    statuses: list[dict[str, Any]] = []

    @activity.defn(name="serving.resolve_runtime")
    async def resolve_runtime(ref: dict[str, Any]) -> dict[str, Any] | None:
        return answers[min(step[0], len(answers) - 1)]

    @activity.defn(name="kube.patch_status")
    async def patch_status(patch: dict[str, Any]) -> bool:
        statuses.append(patch)
        return True

    queue = f"runtime-{uuid.uuid4().hex[:8]}"
    ref = {"group": "ome.io", "version": "v1beta1", "plural": "servingruntimes", "kind": "ServingRuntime",
           "name": "team-llama", "namespace": "team-a", "uid": uid}
    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=[resolve_runtime, patch_status],
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow(
            "ServingRuntimeWorkflow", {"ref": ref}, id=f"runtime/team-a/team-llama/{uid}", task_queue=queue)
        await rec.root(handle)
        await until(rec.env, lambda: len(statuses) == 1, step=1, what="ParentNotFound written")
        step[0] = 1
        await until(rec.env, lambda: len(statuses) == 2, step=30, what="resolved on the resync")
        step[0] = 2
        await handle.signal("annotation", {"uid": uid, "generation": 1, "resource_version": "7",
                                           "name": "ome.io/inherit-from", "value": "srt-base"})
        await until(rec.env, lambda: len(statuses) == 3, step=1, what="the cycle")
        step[0] = 3
        await handle.signal("object-changed", {"uid": uid, "generation": 2, "resource_version": "8"})
        await until(rec.env, lambda: len(statuses) == 4, step=1, what="generation 2")
        await handle.signal("delete", {"uid": uid, "generation": 2, "resource_version": "9", "deleting": True})
        await handle.result()
        await rec.save()


# -- BaseModelWorkflow ---------------------------------------------------------------------------


@asynccontextmanager
async def basemodel_served(rec: Recording, world: FakeBaseModelWorld) -> AsyncIterator[WorkflowHandle[Any, Any]]:
    world.task_queue = f"basemodel-{uuid.uuid4().hex[:8]}"
    async with Worker(rec.env.client, task_queue=world.task_queue, workflows=list(registry_workflows()),
                      activities=world.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow(
            "BaseModelWorkflow", {"ref": world.ref}, id=f"basemodel/_cluster/{world.name}/{world.uid}",
            task_queue=world.task_queue)
        await rec.root(handle)
        yield handle
        await rec.save()


async def basemodel_delete(handle: WorkflowHandle[Any, Any], world: FakeBaseModelWorld) -> None:
    world.deleting = True
    await handle.signal("delete", {"uid": world.uid, "generation": world.generation, "resource_version": "99",
                                   "deleting": True})
    await handle.result()


async def basemodel_hf(rec: Recording) -> None:
    """An hf:// ClusterBaseModel: imported by the shared import steps (the weight already in the
    registry), spec fields filled (generation 2, echoed by the bridge and ignored), annotated,
    In_Transit while a node pulls (a node-report signal, then fast polls), Ready; a spec edit that
    keeps the storage (observedGeneration only); deleted: the artifact leaves the registry and the
    finalizer goes."""
    world = FakeBaseModelWorld(uid=str(uuid.uuid4()), in_registry={sha256("model.safetensors")})
    manifest = f"sha256:{sha256('manifest')}"
    async with basemodel_served(rec, world) as handle:
        await until(rec.env, lambda: "servingops.io/artifact" in world.annotations, step=1, what="annotated")
        await handle.signal("object-changed", {"uid": world.uid, "generation": world.generation,
                                               "resource_version": "5"})
        world.reports = [{"node": "kwok-node-0", "status": "Updating", "digest": manifest, "message": "pulling"}]
        await handle.signal("node-report")
        await until(rec.env, lambda: world.state == "In_Transit", step=1, what="In_Transit")
        world.reports = [{"node": "kwok-node-0", "status": "Ready", "digest": manifest, "message": ""}]
        await until(rec.env, lambda: world.state == "Ready", step=5, what="Ready")
        world.set_spec(displayName="Tiny Llama")  # a user's edit that leaves the storage alone
        await handle.signal("object-changed", {"uid": world.uid, "generation": world.generation,
                                               "resource_version": "7"})
        await until(rec.env, lambda: world.statuses[-1].get("observedGeneration") == world.generation, step=1,
                    what="observedGeneration 3")
        await basemodel_delete(handle, world)


async def basemodel_refused_then_modelpack(rec: Recording) -> None:
    """An s3:// ClusterBaseModel: Failed, UnsupportedStorage; the storage edited to a modelpack:// tag:
    resolved to a digest, annotated, Ready from a node's report; deleted, the user's artifact kept."""
    world = FakeBaseModelWorld(uid=str(uuid.uuid4()), storage_uri="s3://bucket/llama",
                               tags={"v1": f"sha256:{sha256('manifest')}"})
    async with basemodel_served(rec, world) as handle:
        await until(rec.env, lambda: world.state == "Failed", step=1, what="Failed")
        world.set_spec(storage={"storageUri": "modelpack://registry.test:5000/models/llama:v1"})
        world.reports = [{"node": "kwok-node-0", "status": "Ready", "digest": f"sha256:{sha256('manifest')}",
                          "message": ""}]
        await handle.signal("object-changed", {"uid": world.uid, "generation": world.generation,
                                               "resource_version": "6"})
        await until(rec.env, lambda: world.state == "Ready", step=1, what="Ready")
        await rec.env.sleep(180)  # settled: slow polls
        await basemodel_delete(handle, world)


async def basemodel_continue_as_new(rec: Recording) -> None:
    """An hf:// ClusterBaseModel Ready on one node, then settled past the run's poll budget (400
    slow polls): it continues as new with what it delivered and owns, and the next run deletes the
    imported artifact and the finalizer on delete."""
    manifest = f"sha256:{sha256('manifest')}"
    world = FakeBaseModelWorld(uid=str(uuid.uuid4()),
                               reports=[{"node": "kwok-node-0", "status": "Ready", "digest": manifest, "message": ""}])
    async with basemodel_served(rec, world) as handle:
        await until(rec.env, lambda: world.state == "Ready", step=1, what="Ready")
        first = (await handle.describe()).run_id
        latest = rec.env.client.get_workflow_handle(handle.id)
        for _ in range(200):
            await rec.env.sleep(1800)
            if (await latest.describe()).run_id != first:
                break
        await basemodel_delete(latest, world)


# -- InferenceReplicaWorkflow ----------------------------------------------------------------------


async def replica_lifecycle(rec: Recording) -> None:
    """An InferenceReplica of 2 Instances created, rolled SurgeThenDrain to a new image, a pod failure
    repaired (Restart), scaled to 1, then deleted (testkit/replica_fakes.py answers as the cluster)."""
    from testkit.replica_fakes import FakeReplicaCluster, runner

    cluster = FakeReplicaCluster(rec.env)
    cluster.spec.update(replicas=2)
    ref = cluster.ref.model_dump()
    queue = f"replica-{uuid.uuid4().hex[:8]}"

    def settled(replicas: int) -> bool:
        rows = cluster.status.get("instanceStatuses") or []
        return (cluster.status.get("observedGeneration") == cluster.generation and len(rows) == replicas
                and cluster.status.get("availableReplicas") == replicas and all("operation" not in r for r in rows))

    async def changed() -> None:
        await handle.signal("object-changed", {"uid": cluster.uid, "generation": cluster.generation,
                                               "resource_version": str(cluster.generation)})

    async with Worker(rec.env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=cluster.activities(),
                      workflow_runner=workflow_runner()):
        handle = await rec.env.client.start_workflow(
            "InferenceReplicaWorkflow", {"ref": ref}, id=f"replica/team-a/{cluster.ref.name}/{cluster.uid}",
            task_queue=queue)
        await rec.root(handle)
        await until(rec.env, lambda: settled(2), step=1, what="two Instances")
        cluster.edit(runners=[runner(image="vllm:2")])
        await changed()
        await until(rec.env, lambda: settled(2) and cluster.status.get("currentRevision")
                    == cluster.status.get("updateRevision"), step=1, what="rolled")
        failing = sorted(p.name for p in cluster.live())[0]
        cluster.fail_pod(failing)
        await handle.signal("pods-changed")
        await until(rec.env, lambda: settled(2) and any(r.get("incarnation") for r in
                                                        cluster.status.get("instanceStatuses") or []),
                    step=1, what="repaired")
        cluster.edit(replicas=1)
        await changed()
        await until(rec.env, lambda: settled(1), step=1, what="scaled down")
        await handle.signal("delete", {"uid": cluster.uid, "generation": cluster.generation,
                                       "resource_version": "99", "deleting": True})
        await handle.result()
        await rec.save()


# -- the catalogue ----------------------------------------------------------------------------------

Scenario = Callable[[Recording], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {
    "import-ready": model_import_ready,
    "import-failed": model_import_failed,
    "import-source-not-found": model_source_not_found,
    "upload": model_upload,
    "delete": model_delete,
    "delete-mid-import": model_delete_mid_import,
    "runtime-inheritance": runtime_inheritance,
    "replica-lifecycle": replica_lifecycle,
    "basemodel-hf": basemodel_hf,
    "basemodel-refused-then-modelpack": basemodel_refused_then_modelpack,
    "basemodel-continue-as-new": basemodel_continue_as_new,
    "canary-promote": canary_promote,
    "annotation-cleanup": annotation_cleanup,
    "canary-rollback": canary_rollback,
    "canary-retarget": canary_retarget,
    "canary-analysis-rollback": canary_analysis_rollback,
    "blue-green": blue_green,
    "rolling": rolling,
    "service-continue-as-new": service_continue_as_new,
    "rollout-continue-as-new": rollout_continue_as_new,
    "reports-in-flight": reports_in_flight,
    "reports-in-flight-continue-as-new": reports_in_flight_continue_as_new,
    "zero-drain-delay": zero_drain_delay,
    "local-serving-writes": local_serving_writes,
    "scale-then-route": scale_then_route,
    "ingress-gateway": ingress_gateway,
    "backend-traffic-policy": backend_traffic_policy,
    "traffic-annotation-looks": traffic_annotation_looks,
    "policy-ref": policy_ref,
    "policy-lifecycle": policy_lifecycle,
    "policy-continue-as-new": policy_continue_as_new,
    **WORKLOAD_CLUSTER_SCENARIOS,
    **AUTOSCALER_SCENARIOS,
    **PLACEMENT_SCENARIOS,
    **CAPACITY_SCENARIOS,
    **ACCELERATOR_CLASS_SCENARIOS,
    **ACCELERATOR_QUOTA_SCENARIOS,
    **BENCHMARK_SCENARIOS,
    **ROUTING_SCENARIOS,
    **CATALOG_SCENARIOS,
}
LEGACY: dict[str, Scenario] = {
    # Only meaningful when run from commit 1482aaa (see the module docstring): not in the default set.
    "before-operator-config": before_operator_config,
    "before-refresh-now": before_refresh_now,
    # Only meaningful before the patch no-timer-for-zero-delay (recorded with that tree).
    "zero-drain-delay-before": zero_drain_delay_before,
}


async def record(names: list[str], out: Path) -> None:
    for name in names:
        scenario = {**SCENARIOS, **LEGACY}[name]
        started = time.monotonic()
        env = await start_env()
        async with env:
            rec = Recording(scenario=name, out=out, env=env)
            try:
                await scenario(rec)
            finally:
                for workflow_id, _ in rec.roots:
                    with contextlib.suppress(RPCError):
                        await env.client.get_workflow_handle(workflow_id).terminate()
        files = sorted(str(p.relative_to(out)) for p in rec.written)
        print(f"{name}: {', '.join(files)} ({time.monotonic() - started:.0f}s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: every non-legacy scenario)")
    parser.add_argument("--out", type=Path, default=HERE, help="where the <type>/<scenario>.json files go")
    parser.add_argument("--list", action="store_true", help="list the scenarios and what each records")
    args = parser.parse_args()
    if args.list:
        for name, scenario in {**SCENARIOS, **LEGACY}.items():
            print(f"{name}: {' '.join((scenario.__doc__ or '').split())}")
        return
    unknown = [n for n in args.scenarios if n not in SCENARIOS and n not in LEGACY]
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(unknown)}")
    asyncio.run(record(args.scenarios or list(SCENARIOS), args.out))


if __name__ == "__main__":
    main()
