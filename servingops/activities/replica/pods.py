"""Pure rendering of one Instance's pods from a revision's runners (no I/O).

create_pods renders with it and so does update_in_place (to know what a revision would give the
pod it compares), so both see exactly the same pod. Names and labels come from
api_models/ome/instance_keys.py; the runner templates are opaque input and are copied, never
edited in place.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.constants import API_VERSION
from servingops.api_models.ome.enums import RunnerName, TopologySpreadPolicy
from servingops.api_models.ome.replica import InferenceReplicaSpec, Runner
from servingops.rendering import kueue
from servingops.rendering.render import drain_before_stop

HOSTNAME_KEY = "kubernetes.io/hostname"
PREFERRED_NODE_WEIGHT = 100
_WHEN_UNSATISFIABLE = {TopologySpreadPolicy.PREFERRED: "ScheduleAnyway", TopologySpreadPolicy.REQUIRED: "DoNotSchedule"}


class RenderError(ValueError):
    """The spec or the revision cannot give pods (an activity raises it as INVALID_SPEC)."""


@dataclass(frozen=True)
class Owner:
    """The replica every pod belongs to (controller ownerReference)."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "InferenceReplica", "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": True}


@dataclass(frozen=True)
class InstancePlacement:
    """Where one Instance's pods go: the replica-wide topology settings and the per-Instance
    migration hints (CreatePodsInput)."""

    topology_key: str | None = None
    topology_spread: TopologySpreadPolicy | None = None
    topology_spread_key: str | None = None
    preferred_nodes: list[str] = field(default_factory=list)
    avoid_node: str | None = None

    @classmethod
    def of(cls, spec: InferenceReplicaSpec, preferred_nodes: list[str] | None = None,
           avoid_node: str | None = None) -> InstancePlacement:
        return cls(topology_key=spec.topology_key, topology_spread=spec.topology_spread,
                   topology_spread_key=spec.topology_spread_key, preferred_nodes=list(preferred_nodes or []),
                   avoid_node=avoid_node)


@dataclass(frozen=True)
class InstanceKey:
    """Which Instance (and which of its lives) the pods are rendered for."""

    index: int
    incarnation: int = 0
    slot: int = 0


@dataclass(frozen=True)
class RevisionData:
    """What a ControllerRevision stores: the runners and the pairing protocol."""

    name: str
    runners: list[Runner]
    pairing_protocol: str | None = None

    def payload(self) -> dict[str, Any]:
        return revision_payload(self.runners, self.pairing_protocol)


def revision_payload(runners: list[Runner], pairing_protocol: str | None) -> dict[str, Any]:
    """The ControllerRevision's `data` (also the hash input, with the collision salt)."""
    return {"runners": [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in runners],
            "pairingProtocol": pairing_protocol}


def parse_revision(name: str, data: dict[str, Any] | None) -> RevisionData:
    data = data or {}
    try:
        runners = [Runner.model_validate(r) for r in data.get("runners") or []]
    except ValueError as exc:
        raise RenderError(f"ControllerRevision {name}: its runners do not parse: {exc}") from exc
    check_runners(runners)
    return RevisionData(name=name, runners=runners, pairing_protocol=data.get("pairingProtocol"))


def check_runners(runners: list[Runner]) -> None:
    """One "default" runner, or one "leader" and one "worker" (the seed's two shapes)."""
    names = sorted(r.name.value for r in runners)
    if names not in (["default"], ["leader", "worker"]):
        raise RenderError(f"runners must be one 'default' or a 'leader' and a 'worker', got {names or 'none'}")


def runner_sizes(runners: list[Runner]) -> dict[str, int]:
    check_runners(runners)
    return {r.name.value: (r.size if r.name is RunnerName.WORKER else 1) for r in runners}


def is_gang(runners: list[Runner]) -> bool:
    return any(r.name is RunnerName.LEADER for r in runners)


def instance_pod_names(base: str, runners: list[Runner], key: InstanceKey) -> list[str]:
    """The Instance's pod names in creation order: the anchor (leader or single pod) first."""
    if not is_gang(runners):
        return [keys.pod_name(base, key.index, slot=key.slot)]
    workers = runner_sizes(runners)[RunnerName.WORKER.value]
    return [keys.pod_name(base, key.index), *(keys.pod_name(base, key.index, worker=k) for k in range(1, workers + 1))]


def render_instance(owner: Owner, component: str, base: str, revision: RevisionData, key: InstanceKey,
                    placement: InstancePlacement) -> list[dict[str, Any]]:
    """Every pod of the Instance, anchor first."""
    by_name = {r.name: r for r in revision.runners}
    check_runners(revision.runners)
    if not is_gang(revision.runners):
        return [render_pod(owner, component, base, revision, key, by_name[RunnerName.DEFAULT], 0, placement)]
    leader, workers = by_name[RunnerName.LEADER], by_name[RunnerName.WORKER]
    rendered = [render_pod(owner, component, base, revision, key, leader, 0, placement),
                *(render_pod(owner, component, base, revision, key, workers, k, placement)
                  for k in range(1, workers.size + 1))]
    _add_group_env(rendered, keys.leader_address(base, key.index))
    return _kueue_group(rendered, [leader.template, workers.template], key)


def _add_group_env(rendered: list[dict[str, Any]], leader_address: str) -> None:
    """The LeaderWorkerSet variables upstream OME's multi-node runtimes read in their commands
    (`$(LWS_LEADER_ADDRESS)`, `$(LWS_GROUP_SIZE)`, `$(LWS_WORKER_INDEX)`): their manifests run
    unchanged on a gang. Values as a LeaderWorkerSet gives them: the group counts the leader, and
    the leader is worker index 0."""
    size = str(len(rendered))
    for index, pod in enumerate(rendered):
        env = {keys.LWS_LEADER_ADDRESS_ENV: leader_address, keys.LWS_GROUP_SIZE_ENV: size,
               keys.LWS_WORKER_INDEX_ENV: str(index)}
        spec = pod["spec"]
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            _set_env(container, env)


def _kueue_group(rendered: list[dict[str, Any]], templates: list[dict[str, Any]],
                 key: InstanceKey) -> list[dict[str, Any]]:
    """A gang whose runners name a Kueue queue is one Kueue pod group (rendering/kueue.py),
    admitted all or nothing; without a queue label nothing is added."""
    queue = kueue.queue_of(templates)
    if queue is None:
        return rendered
    labels, annotations = kueue.group_metadata(queue, rendered[0]["metadata"]["name"], key.incarnation,
                                               len(rendered))
    for pod in rendered:
        pod["metadata"]["labels"].update(labels)
        pod["metadata"]["annotations"].update(annotations)
    return rendered


def render_pod(owner: Owner, component: str, base: str, revision: RevisionData, key: InstanceKey, runner: Runner,
               worker: int, placement: InstancePlacement) -> dict[str, Any]:
    """One pod: the runner's template plus our names, labels, gate, env and scheduling terms."""
    template = copy.deepcopy(runner.template)
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    gang = runner.name is not RunnerName.DEFAULT
    slot = 0 if gang else key.slot
    name = keys.pod_name(base, key.index, slot=slot, worker=worker)
    labels = {**(meta.get("labels") or {}), **pod_labels(owner.name, component, revision, key, runner.name, worker)}
    annotations = {**(meta.get("annotations") or {}), keys.REPLICA_OWNER_ANNOTATION: owner.uid}

    spec["hostname"] = name
    spec["subdomain"] = base
    gates = [g for g in spec.get("readinessGates") or [] if g.get("conditionType") != keys.SERVING_GATE]
    spec["readinessGates"] = [*gates, {"conditionType": keys.SERVING_GATE}]
    env = {keys.RUNNER_ENV: runner.name.value}
    if runner.name is RunnerName.WORKER:
        env[keys.LEADER_ADDRESS_ENV] = keys.leader_address(base, key.index)
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        _set_env(container, env)
    if runner.name is not RunnerName.WORKER:
        # The pod that takes requests keeps answering DRAIN_SECONDS after its deletion, as a Deployment's
        # does: a migration, a scale-down or a restart deletes it once its endpoint has left the
        # EndpointSlice, and the Gateway may still route to it until its own resync (seen under load on
        # the local stack: a surge migration lost 7 of 6,000 requests at the handover without it).
        drain_before_stop(template, None)

    if runner.name is RunnerName.WORKER and placement.topology_key:
        _add_gang_affinity(spec, owner.name, key, placement.topology_key)
    anchor = runner.name is not RunnerName.WORKER
    if anchor and placement.topology_spread is not None:
        _add_spread(spec, owner.name, component, runner.name, placement)
    if placement.preferred_nodes:
        _add_preferred_nodes(spec, placement.preferred_nodes)
    if placement.avoid_node:
        _add_avoided_node(spec, placement.avoid_node)

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**{k: v for k, v in meta.items() if k not in ("name", "namespace", "generateName")},
                     "name": name, "namespace": owner.namespace, "labels": labels, "annotations": annotations,
                     "ownerReferences": [owner.reference()]},
        "spec": spec,
    }


def pod_labels(replica: str, component: str, revision: RevisionData, key: InstanceKey, runner: RunnerName,
               worker: int) -> dict[str, str]:
    gang = runner is not RunnerName.DEFAULT
    labels = {
        **keys.selector_labels(replica, component),
        keys.INSTANCE_LABEL: str(key.index),
        keys.INCARNATION_LABEL: str(key.incarnation),
        keys.RUNNER_LABEL: runner.value,
        keys.SLOT_LABEL: str(0 if gang else key.slot),
        keys.REVISION_LABEL: revision.name,
    }
    if worker:
        labels[keys.WORKER_LABEL] = str(worker)
    if revision.pairing_protocol:
        labels[keys.PAIRING_LABEL] = revision.pairing_protocol
    return labels


def _set_env(container: dict[str, Any], values: dict[str, str]) -> None:
    """Ours win over a template entry of the same name (the seed: the controller stamps them)."""
    kept = [e for e in container.get("env") or [] if e.get("name") not in values]
    container["env"] = [*kept, *({"name": k, "value": v} for k, v in values.items())]


def _add_gang_affinity(spec: dict[str, Any], replica: str, key: InstanceKey, topology_key: str) -> None:
    """A worker must land in its leader's topology domain (this incarnation's leader only)."""
    pod_affinity = spec.setdefault("affinity", {}).setdefault("podAffinity", {})
    terms = pod_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    terms.append({
        "labelSelector": {"matchLabels": {
            keys.REPLICA_LABEL: replica,
            keys.INSTANCE_LABEL: str(key.index),
            keys.RUNNER_LABEL: RunnerName.LEADER.value,
            keys.INCARNATION_LABEL: str(key.incarnation),
        }},
        "topologyKey": topology_key,
    })


def _add_spread(spec: dict[str, Any], replica: str, component: str, anchor: RunnerName,
                placement: InstancePlacement) -> None:
    assert placement.topology_spread is not None
    topology_key = placement.topology_spread_key or placement.topology_key
    if not topology_key:
        raise RenderError("spec.topologySpread needs spec.topologySpreadKey or spec.topologyKey to spread over")
    constraints = spec.setdefault("topologySpreadConstraints", [])
    constraints.append({
        "maxSkew": 1,
        "topologyKey": topology_key,
        "whenUnsatisfiable": _WHEN_UNSATISFIABLE[placement.topology_spread],
        "labelSelector": {"matchLabels": {**keys.selector_labels(replica, component),
                                          keys.RUNNER_LABEL: anchor.value}},
    })


def _add_preferred_nodes(spec: dict[str, Any], nodes: list[str]) -> None:
    node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append({
        "weight": PREFERRED_NODE_WEIGHT,
        "preference": {"matchExpressions": [{"key": HOSTNAME_KEY, "operator": "In", "values": list(nodes)}]},
    })


def _add_avoided_node(spec: dict[str, Any], node: str) -> None:
    """Node selector terms are ORed, their expressions ANDed: the NotIn goes into every term so no
    term lets the pod back onto that node."""
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    expression = {"key": HOSTNAME_KEY, "operator": "NotIn", "values": [node]}
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({"matchExpressions": []})
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(expression))
