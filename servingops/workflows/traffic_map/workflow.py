"""TrafficMapWorkflow: one per placed InferenceService (id trafficmap/<ns>/<isvc>/<uid>), the routing controller
and the publisher of its TrafficMap (seed 004), as one durable process.

A pass:
1. read the service, its placement status, the operator's routing and endpoint blocks and the map
   (`routing.read_source`); a service that is not routed (no spec.placement, the installation's gate off,
   spec.routing.enabled false) has its route withdrawn and its map deleted, and the workflow idles;
2. when due, probe every home's endpoint (`spec.routing.probe` or the operator's) and poll its capacity
   report (`spec.routing.capacity`), each a durable timer at the policy's period; the probe's hysteresis and
   the poll's windows live in this workflow's state (rendering/routing_probe.py, capacity_poll.py);
3. compute the table (workflows/traffic_map/table.py, rendering/traffic_map.py) and write the map when it or
   the controller's conditions moved, or when the stored spec is not what was computed (a hand edit is undone);
4. publish it (activities/routing/publisher.py) when the map's generation is not the one published, when the
   publisher's inputs moved, or every resyncInterval (a route edited by hand is put back);
5. tell placement what the route may send requests to (contract/routing.py, Publication): before a write that
   adds a home, and after every publication, so placement withdraws a home's copy only once no request can
   reach it.

Wake-ups: a new generation or deletion of the service (the bridge), `routing-changed` (placement wrote
status.placement; a routing annotation changed; the map was written), the probe's or the poll's timer, and
the resync. Deletion of the service: the route is removed and the map's finalizer released before placement
may withdraw the copies (it waits for the Publication that routes nothing).

Errors go on the object, not in a log: a malformed drain annotation, a capacity factor that is not positive,
an unrunnable probe or poll policy or a ConfigMap that does not parse keep the last table and say why in a
Warning Event on the InferenceService (once per distinct message); the publisher's failures are its Published
condition on the map.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow
from servingops.workflows.traffic_map import table
from servingops.workflows.traffic_map.state import (
    CapacityMemory,
    CapacityReadingMemory,
    ProbeMemory,
    TrafficMapInput,
    TrafficMapState,
)

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventSpec, KubernetesActivities
    from servingops.activities.placement.activities import PlacementActivities
    from servingops.activities.routing.activities import RoutingActivities
    from servingops.activities.routing.publisher import PublisherActivities
    from servingops.activities.routing.types import (
        CheckTarget,
        GatewayAddresses,
        GatewayAddressesInput,
        MapWritten,
        ProbeAnswer,
        ProbeRequest,
        PublishInput,
        PublishOutcome,
        RoutingSource,
        SourceInput,
        UnpublishInput,
        WriteMapInput,
    )
    from servingops.api_models.contract import Signal, WorkflowType, placement_workflow_id
    from servingops.api_models.contract.routing import GLOBAL_HOST_ANNOTATION, Publication
    from servingops.api_models.durations import parse_duration
    from servingops.api_models.ome.traffic_map import TrafficMapEntry
    from servingops.api_models.refs import ConditionUpdate
    from servingops.rendering import capacity_poll, routing_probe
    from servingops.rendering.global_route import PublishedReason
    from servingops.rendering.traffic_map import InvalidDrains, routing_table

PASSES_PER_RUN = 500
HELD_RECHECK = timedelta(minutes=1)
"""A held service (bad input said as a Warning) reads its inputs again this often, besides every signal."""
IDLE_RECHECK = timedelta(minutes=5)
"""A service that is not routed reads its gate again this often (the operator's ConfigMap moves no generation)."""


@workflow.defn(name=WorkflowType.TRAFFIC_MAP)
class TrafficMapWorkflow(EntityWorkflow[TrafficMapState]):
    def __init__(self) -> None:
        super().__init__(TrafficMapState())
        self._rest: timedelta | None = None
        self._source: RoutingSource | None = None

    @workflow.signal(name=Signal.ROUTING_CHANGED)
    def routing_changed(self, what: str | None = None) -> None:
        """`what` is for a person reading the history (the bridge names the change); any news means a pass."""
        self.state.routing_changed += 1

    @workflow.run
    async def run(self, start: TrafficMapInput) -> TrafficMapState:
        self.begin(start, start.carried)
        return await self.live()

    # -- the entity loop's hooks ----------------------------------------------------------------------

    def woken(self) -> bool:
        return self.state.routing_changed > self.state.acted_changes

    def rest_time(self) -> timedelta | None:
        return self._rest

    def run_is_full(self) -> bool:
        return self.state.passes >= PASSES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.passes = 0

    async def next_pass(self, timed_out: bool) -> bool:
        assert self.ref is not None
        self.state.passes += 1
        self.state.acted_changes = self.state.routing_changed
        source = self._source = await workflow.execute_activity_method(
            RoutingActivities.read_source, SourceInput(isvc=self.ref), **options.KUBE)
        if not source.present or source.deleting:
            return False
        self.state.generation = max(self.state.generation, source.generation)
        self.state.acted_generation = max(self.state.acted_generation, source.generation)
        routed, why = table.routed(source)
        if not routed:
            await self._not_routed(source, why)
            return True
        await self._route(source)
        return True

    async def closing(self) -> None:
        """The service is deleted or gone: the route goes and the map is released, then placement is told
        nothing is routed (it withdraws the copies after that)."""
        assert self.ref is not None
        await workflow.execute_activity_method(PublisherActivities.unpublish, UnpublishInput(
            isvc=self.ref, reason=PublishedReason.UNPUBLISHED,
            message="the InferenceService is being deleted: its route was removed", release=True), **options.KUBE)
        self.state.routed = []
        await self._tell([], None, settled=True)

    # -- not routed ----------------------------------------------------------------------------------

    async def _not_routed(self, source: RoutingSource, why: str) -> None:
        assert self.ref is not None
        mine = source.traffic_map is not None and source.traffic_map.controller_uid == source.uid
        if mine or self.state.routed:
            await workflow.execute_activity_method(PublisherActivities.unpublish, UnpublishInput(
                isvc=self.ref, reason=PublishedReason.UNPUBLISHED, message=f"not routed: {why}", release=True,
                delete_map=True), **options.KUBE)
            self.state.written_spec, self.state.written_conditions = None, []
            self.state.published_generation, self.state.published_digest = 0, ""
        self.state.routed = []
        await self._tell([], None, settled=True)
        self.state.probes, self.state.capacity = {}, {}
        self.state.probe_due = self.state.poll_due = None
        self._rest = IDLE_RECHECK
        self._phase("NotRouted")

    # -- routed ----------------------------------------------------------------------------------------

    async def _route(self, source: RoutingSource) -> None:
        assert self.ref is not None
        now = workflow.now()
        problems: list[str] = []
        if source.config_error:
            await self._hold("RoutingConfigInvalid", source.config_error)
            return
        probe = poll = None
        try:
            probe = routing_probe.effective_policy(source.routing.probe if source.routing else None,
                                                   source.defaults.probe)
        except routing_probe.InvalidProbePolicy as exc:
            problems.append(str(exc))
        try:
            poll = capacity_poll.effective_policy(source.routing.capacity if source.routing else None,
                                                  source.defaults.capacity)
        except capacity_poll.InvalidCapacityPolicy as exc:
            problems.append(str(exc))
        known = table.endpoints(source.placement, self.state.endpoints)
        self.state.endpoints = known
        await self._addresses(source, sorted(known), now)
        port = source.endpoint.backend_port
        connect = {c: f"{ips[0]}:{port}" for c, ips in self.state.addresses.items() if ips and port}
        targets = table.check_targets(source.placement, known, connect)
        await self._probe(probe, targets, now)
        await self._poll(poll, targets, now)
        try:
            inputs = table.inputs(self.ref.name, source, known, self.state.probes, self.state.capacity, probe, poll,
                                  now)
        except (InvalidDrains, ValueError) as exc:
            await self._hold("RoutingInputInvalid", f"{exc}; the TrafficMap keeps its last table")
            return
        computed = routing_table(inputs)
        conditions = [ConditionUpdate(type=v.type, status="True" if v.status else "False", reason=v.reason,
                                      message=v.message) for v in computed.conditions]
        spec = computed.spec.to_api()
        said = [(c.type, c.status, c.reason, c.message) for c in conditions]
        stored = source.traffic_map
        drifted = stored is None or stored.uid != self.state.map_uid or (
            stored.spec.to_api() if stored.spec is not None else None) != spec
        if drifted or spec != self.state.written_spec or said != self.state.written_conditions:
            written: MapWritten = await workflow.execute_activity_method(
                RoutingActivities.write_map, WriteMapInput(isvc=self.ref, spec=computed.spec, conditions=conditions),
                **options.KUBE)
            if not written.written:
                await self._hold(written.reason or "TrafficMapNotWritten", written.message or "")
                return
            self.state.written_spec, self.state.written_conditions = spec, said
            self.state.map_generation, self.state.map_uid = written.generation, written.uid
        elif stored is not None:
            self.state.map_generation = stored.generation
        if problems:
            await self._say("RoutingPolicyInvalid", "; ".join(problems))
        else:
            self.state.held = None
        await self._publish(source, computed.spec.entries or [], inputs.placement_plan_id, now)
        self._rest = self._next_wake(probe, poll, source, now)
        self._phase("Routable" if computed.routable.status else "NotRoutable")

    async def _addresses(self, source: RoutingSource, clusters: list[str], now: datetime) -> None:
        """EndpointSlice fallback: the homes' serving Gateway addresses, read again at the refresh interval or
        when a home is new."""
        assert self.ref is not None
        fallback = source.endpoint.gateway_backend.endpoint_slices
        if not fallback.enabled:
            self.state.addresses, self.state.address_failures, self.state.addresses_due = {}, {}, None
            return
        known = set(self.state.addresses) | set(self.state.address_failures)
        if set(clusters) <= known and self.state.addresses_due is not None and now < self.state.addresses_due:
            return
        read: GatewayAddresses = await workflow.execute_activity_method(
            PlacementActivities.member_gateway_addresses,
            GatewayAddressesInput(isvc=self.ref, clusters=clusters), **options.MEMBER)
        self.state.addresses, self.state.address_failures = read.addresses, read.failures
        self.state.addresses_due = now + parse_duration(fallback.address_refresh_interval)

    async def _probe(self, probe: routing_probe.ProbePolicy | None, targets: list[CheckTarget],
                     now: datetime) -> None:  # fmt: skip
        if probe is None:
            self.state.probes, self.state.probe_due = {}, None
            return
        if not targets or (self.state.probe_due is not None and now < self.state.probe_due):
            return
        answers = await self._check(ProbeRequest(targets=targets, path=probe.path, method=probe.method,
                                                 timeout_s=probe.timeout_s))
        kept = {t.cluster for t in targets}
        self.state.probes = {c: m for c, m in self.state.probes.items() if c in kept}
        for answer in answers:
            previous = table.probe_record(self.state.probes.get(answer.cluster))
            after = routing_probe.advance(probe, previous, routing_probe.Attempt(answer.status, answer.error),
                                          answer.at)
            self.state.probes[answer.cluster] = ProbeMemory(record=after.record, successes=after.consecutive_successes)
        self.state.probe_due = now + timedelta(seconds=probe.period_s)

    async def _poll(self, poll: capacity_poll.CapacityPolicy | None, targets: list[CheckTarget],
                    now: datetime) -> None:  # fmt: skip
        if poll is None:
            self.state.capacity, self.state.poll_due = {}, None
            return
        if not targets or (self.state.poll_due is not None and now < self.state.poll_due):
            return
        answers = await self._check(ProbeRequest(targets=targets, path=poll.path, method=poll.method,
                                                 timeout_s=poll.timeout_s, keep_body=True))
        kept = {t.cluster for t in targets}
        self.state.capacity = {c: m for c, m in self.state.capacity.items() if c in kept}
        for answer in answers:
            outcome = capacity_poll.parse_report(answer.status, answer.body, answer.error, answer.at)
            window = capacity_poll.record(poll, table.capacity_window(self.state.capacity.get(answer.cluster)),
                                          outcome)
            self.state.capacity[answer.cluster] = CapacityMemory(
                policy_digest=window.policy_digest, failure=window.failure,
                readings=[CapacityReadingMemory(servable=r.servable, observed_at=r.observed_at)
                          for r in window.readings])  # fmt: skip
        self.state.poll_due = now + timedelta(seconds=poll.period_s)

    async def _check(self, request: ProbeRequest) -> list[ProbeAnswer]:
        try:
            answers: list[ProbeAnswer] = await workflow.execute_activity_method(
                RoutingActivities.check_homes, request, **options.SAMPLE)
        except ActivityError:
            # The worker could not run the checks at all: an Unknown for every home (no gate moves).
            return []
        return answers

    def _next_wake(self, probe: routing_probe.ProbePolicy | None, poll: capacity_poll.CapacityPolicy | None,
                   source: RoutingSource, now: datetime) -> timedelta:  # fmt: skip
        resync = parse_duration(source.defaults.publisher.resync_interval)
        due = [now + resync if self.state.published_at is None else self.state.published_at + resync]
        due += [d for d in (self.state.probe_due if probe else None, self.state.poll_due if poll else None,
                            self.state.addresses_due) if d]
        return max(timedelta(seconds=1), min(due) - now)

    # -- publication -----------------------------------------------------------------------------------

    async def _publish(self, source: RoutingSource, entries: list[TrafficMapEntry], plan_id: str | None,
                       now: datetime) -> None:  # fmt: skip
        assert self.ref is not None
        digest = _digest({"endpoint": source.endpoint.model_dump(mode="json"),
                          "host": source.annotations.get(GLOBAL_HOST_ANNOTATION), "addresses": self.state.addresses,
                          "failures": sorted(self.state.address_failures),
                          "options": source.routing.publisher.options if source.routing and source.routing.publisher
                          else None})
        resync = parse_duration(source.defaults.publisher.resync_interval)
        due = (self.state.published_generation != self.state.map_generation or digest != self.state.published_digest
               or self.state.published_at is None or now - self.state.published_at >= resync)
        if not due:
            await self._tell(self.state.routed, plan_id, settled=True)
            return
        positive = sorted(e.cluster for e in entries if e.weight)
        if set(positive) - set(self.state.routed):
            # Before the write: from here on the data plane may run the old route or the new one.
            await self._tell(sorted(set(self.state.routed) | set(positive)), None, settled=False)
        outcome: PublishOutcome = await workflow.execute_activity_method(
            PublisherActivities.publish,
            PublishInput(isvc=self.ref, map_uid=self.state.map_uid, generation=self.state.map_generation,
                         observed_isvc_generation=source.generation, annotations=source.annotations, entries=entries,
                         endpoint=source.endpoint, addresses=self.state.addresses,
                         address_failures=self.state.address_failures,
                         options=dict(source.routing.publisher.options or {}) if source.routing and
                         source.routing.publisher else {}), **options.KUBE)
        self.state.published_at = now
        if outcome.published or outcome.withdrawn:
            self.state.routed = outcome.routed
            self.state.published_generation, self.state.published_digest = self.state.map_generation, digest
            await self._tell(self.state.routed, plan_id, settled=True)
            return
        if outcome.partial:
            self.state.routed = sorted(set(self.state.routed) | set(positive))

    async def _tell(self, routed: list[str], plan_id: str | None, *, settled: bool) -> None:
        """Tell placement what the route may send requests to (only when that changed)."""
        assert self.ref is not None
        told = (sorted(routed), plan_id, settled)
        if self.state.told == told:
            return
        self.state.sequence += 1
        self.state.told = told
        handle = workflow.get_external_workflow_handle(
            placement_workflow_id(self.ref.namespace or "", self.ref.name, self.ref.uid or ""))
        try:
            await handle.signal(Signal.PUBLICATION, Publication(sequence=self.state.sequence, routed=sorted(routed),
                                                                plan_id=plan_id, settled=settled))
        except FailureError:
            # No placement workflow runs for the service (placement removed and done): nothing to hold.
            pass

    # -- saying why --------------------------------------------------------------------------------------

    async def _hold(self, reason: str, message: str) -> None:
        await self._say(reason, message)
        self._rest = HELD_RECHECK
        self._phase("Held")

    async def _say(self, reason: str, message: str) -> None:
        """A Warning Event on the InferenceService, once per distinct message."""
        assert self.ref is not None
        said = f"{reason}: {message}"
        if said == self.state.held:
            return
        self.state.held = said
        await workflow.execute_activity_method(KubernetesActivities.emit_event, EventSpec(
            ref=self.ref, type="Warning", reason=reason, message=message), **options.CLEANUP)

    def _phase(self, phase: str) -> None:
        assert self.visibility is not None
        if phase != self.state.phase:
            self.state.phase = phase
            self.visibility.publish(phase)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


__all__ = ["TrafficMapInput", "TrafficMapState", "TrafficMapWorkflow"]
