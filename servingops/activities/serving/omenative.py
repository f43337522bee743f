"""OMENative components: an InferenceService component whose deployment mode resolves to OMENative
is served by a projected InferenceReplica named `<isvc>-<component>` (seed 004), not by Deployments.

The rollout contract stays the one every other component has (workflows/rollout/): a revision is
the hash of the rendered pod template, its capacity is how many Instances run it, its traffic is its
HTTPRoute weight to the per-revision Service `<isvc>-<component>-rev-<hash>`. What differs is how
capacity is moved: the replica's pods carry the template's labels (the revision label included),
so a per-revision Service selects the replica's pods of that revision, and

- the replica's runners are the template of the revision the service's spec renders now;
- that revision's capacity k is `pacing.partition = replicas - k` (the seed's partition holds the
  lowest-indexed Instances on the revision they run, so k Instances move), the replica engine
  moving them by its own strategy (SurgeThenDrain by default) within its budgets;
- capacity given back to an older revision after the new one had some (a rollback) is
  `pacing.rollbackToRevision`: the replica's ControllerRevision of that template.

A multi-node component (leader / worker) projects a gang per Instance: runners `leader` (size 1) and
`worker` (its worker count), rendered by rendering/multinode.py; its revision is the gang's, its
per-revision Service selects the leaders only, and an Instance counts as ready once its leader and
every worker are Ready and in rotation.

The mode: a per-component `ome.io/deploymentMode` annotation wins, then spec.deploymentMode, then the
InferenceService's own `ome.io/deploymentMode` annotation; anything else is RawDeployment.
"""

from __future__ import annotations

import copy
import json
from typing import Any, cast

from kubernetes import client
from pydantic import ValidationError

from servingops.activities.serving.types import RevisionObservation
from servingops.api_models.ome.autoscaling import ComponentAutoscaler
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.instance_keys import (
    INCARNATION_LABEL,
    INSTANCE_LABEL,
    REPLICA_LABEL,
    RUNNER_LABEL,
    SERVING_GATE,
)
from servingops.api_models.ome.lifecycle import LifecycleStatus
from servingops.clients.kube.calls import call, create_unless_exists, get_or_none, list_items
from servingops.rendering import multinode, render
from servingops.rendering.scaling import owns_replicas, projected_count, replacing

OMENATIVE = "OMENative"
MODE_ANNOTATION = "ome.io/deploymentMode"
GROUP, VERSION, PLURAL = "ome.io", "v1beta1", "inferencereplicas"
CAPACITY_ANNOTATION = "servingops.io/revision-capacity"
"""On a projected replica: `<revision>=<capacity>` of the revision last given capacity, so a later call
for another revision knows whether capacity is moving back (a rollback)."""
_PAIRED = (ComponentType.ENGINE, ComponentType.DECODER)
_LIFECYCLE_FIELDS = frozenset(
    field.alias or name for name, field in LifecycleStatus.model_fields.items())


def deployment_mode(spec: InferenceServiceSpec, cspec: render.ComponentSpec, annotations: dict[str, str]) -> str:
    per_component = (cspec.annotations or {}).get(MODE_ANNOTATION)
    return per_component or spec.deployment_mode or annotations.get(MODE_ANNOTATION) or "RawDeployment"


def replica_name(isvc: str, component: ComponentType) -> str:
    return f"{isvc}-{component.value}"


def replica_spec(spec: InferenceServiceSpec, component: ComponentType, cspec: render.ComponentSpec,
                 rendered: render.RenderedRevision, *, isvc: str, replicas: int) -> dict[str, Any]:
    """The fields of the replica the InferenceService controller writes (seed: user fields, and the
    parentRef at create); pacing is set per capacity call. A gang's `rendered` is its leader's
    (multinode.render_component); its runners are rendered here from the same spec."""
    runners = [{"name": runner, "size": size, "template": _runner_template(isvc, component, template, runner)}
               for runner, size, template in multinode.runner_templates(isvc, component, cspec, rendered)]
    body: dict[str, Any] = {
        "component": component.value,
        "parentRef": {"name": isvc},
        "runners": runners,
        "replicas": max(1, replicas),
    }
    lifecycle = getattr(cspec, "lifecycle", None)
    if lifecycle is not None:
        life = lifecycle.model_dump(by_alias=True, exclude_none=True, mode="json")
        if "minReadySeconds" in life:
            body["minReadySeconds"] = life.pop("minReadySeconds")
        if life:
            body["lifecycle"] = life
    for field in ("topology_key", "topology_spread", "topology_spread_key"):
        value = getattr(cspec, field, None)
        if value is not None:
            body[_camel(field)] = value.value if hasattr(value, "value") else value
    pairing = spec.rollout.pairing_protocol if spec.rollout is not None else None
    if pairing and component in _PAIRED:
        body["pairingProtocol"] = pairing
    autoscaler = getattr(cspec, "autoscaler", None)
    if autoscaler is not None:  # seed: the resolved per-component autoscaler, the whole block
        body["autoscaler"] = autoscaler.model_dump(by_alias=True, exclude_none=True, mode="json")
    return body


def _runner_template(isvc: str, component: ComponentType, rendered: dict[str, Any], runner: str) -> dict[str, Any]:
    template = copy.deepcopy(rendered)
    template["metadata"]["labels"] = {**render.upstream_pod_labels(isvc, component), **template["metadata"]["labels"],
                                      RUNNER_LABEL: runner}
    return template


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class ProjectedReplicas:
    """Reads and writes of projected InferenceReplicas, for ServingActivities."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return cast(dict[str, Any] | None, get_or_none(self.custom.get_namespaced_custom_object,
                                                       GROUP, VERSION, namespace, PLURAL, name))

    def ensure(self, owner: render.Owner, component: ComponentType, spec: InferenceServiceSpec,
               cspec: render.ComponentSpec, desired: render.RenderedRevision, *, revision: str,
               capacity: int, count: int | None = None) -> RevisionObservation:
        """Give `revision` `capacity` Instances: the desired revision through the partition; an older
        one asked for more Instances than run it (capacity moving back: a rollback) through
        rollbackToRevision. Answers the revision as observe would. `count`: the replica's count when
        spec.scalingPolicy derives it from the anchor's (a follower, which has no scaler of its own);
        None: minReplicas."""
        name = replica_name(owner.name, component)
        body = replica_spec(spec, component, cspec, desired, isvc=owner.name,
                            replicas=render.desired_replicas(cspec) if count is None else count)
        live = self.get(owner.namespace, name)
        counted = self._counted(owner, component)  # the pods move only once the engine acts: read once
        asked = self._asked(live)
        asked[revision] = capacity
        live_spec = (live or {}).get("spec") or {}
        pacing = dict(live_spec.get("pacing") or {})
        replicas, moved = body["replicas"], capacity
        block = getattr(cspec, "autoscaler", None)
        stored = live_spec.get("autoscaler")
        if block is None and getattr(cspec, "autoscaler_policy_ref", None) is not None and isinstance(stored, dict):
            # An AutoscalerPolicy renders this component's block, and serving.ensure_autoscaler writes it
            # here (seed: while the policy fails to render, the stored block is the last known good one):
            # the projection keeps it rather than clearing it.
            try:
                block = ComponentAutoscaler.model_validate(stored)
                body["autoscaler"] = stored
            except ValidationError:
                block = None
        if owns_replicas(block):
            # The scaler writes spec.replicas (seed): the count is written only while the stored one
            # is nil or 0, and the partition is taken against the count the scaler chose.
            replicas, moved = projected_count(live_spec.get("replicas"), body["replicas"], capacity)
            if live_spec.get("replicas"):
                del body["replicas"]
        body["autoscaler"] = replacing(live_spec.get("autoscaler"), body.get("autoscaler"))
        if revision == desired.revision:
            pacing = {"partition": max(0, replicas - moved), "rollbackToRevision": None}
        elif capacity > 0:
            running = next((r.replicas for r in counted if r.revision == revision), 0)
            back = self._revision_of(owner.namespace, name, revision) if capacity > running else None
            if back is not None:
                pacing = {"partition": 0, "rollbackToRevision": back}
        body["pacing"] = pacing or None
        annotations = {CAPACITY_ANNOTATION: json.dumps(asked, sort_keys=True)}
        if live is None:
            manifest = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceReplica",
                        "metadata": {"name": name, "namespace": owner.namespace, "annotations": annotations,
                                     "labels": render.selector_labels(owner.name, component),
                                     "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}",
                                                          "kind": "InferenceService", "name": owner.name,
                                                          "uid": owner.uid, "controller": True,
                                                          "blockOwnerDeletion": True}]},
                        "spec": body}
            if create_unless_exists(self.custom.create_namespaced_custom_object,
                                    GROUP, VERSION, owner.namespace, PLURAL, manifest) is None:
                live = self.get(owner.namespace, name)  # created meanwhile: patch it as below
        if live is not None:
            body.pop("parentRef", None)  # immutable after create
            call(self.custom.patch_namespaced_custom_object, GROUP, VERSION, owner.namespace, PLURAL, name,
                 {"metadata": {"annotations": annotations}, "spec": body})
        return next((r for r in self.revisions(owner, component, asked, counted) if r.revision == revision),
                    RevisionObservation(revision=revision, replicas=capacity, ready_replicas=0))

    @staticmethod
    def _asked(live: dict[str, Any] | None) -> dict[str, int]:
        text = (((live or {}).get("metadata") or {}).get("annotations") or {}).get(CAPACITY_ANNOTATION) or "{}"
        try:
            value = json.loads(text)
        except ValueError:
            return {}
        return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def lifecycle(self, owner: render.Owner, component: ComponentType) -> dict[str, object] | None:
        """The projected replica's status, the fields of the LifecycleStatus shape (seed: the
        component's status is the verbatim projection of the replica's)."""
        return self.observed(owner, component)[0]

    def observed(self, owner: render.Owner, component: ComponentType) -> tuple[dict[str, object] | None, int | None]:
        """One read of the projected replica: its lifecycle (as lifecycle()) and its spec.replicas (the
        /scale count its scaler set; None before it exists)."""
        live = self.get(owner.namespace, replica_name(owner.name, component))
        count = ((live or {}).get("spec") or {}).get("replicas")
        status = (live or {}).get("status")
        lifecycle = {key: value for key, value in status.items() if key in _LIFECYCLE_FIELDS} if status else None
        return lifecycle, int(count) if isinstance(count, int) else None

    def _revision_of(self, namespace: str, replica: str, revision: str) -> str | None:
        """The replica's ControllerRevision whose runners carry the template of `revision`."""
        listed = list_items(self.apps.list_namespaced_controller_revision, namespace,
                            label_selector=f"{REPLICA_LABEL}={replica}")
        for item in listed:
            data = item.data or {}
            for runner in data.get("runners") or []:
                labels = ((runner.get("template") or {}).get("metadata") or {}).get("labels") or {}
                if labels.get(render.LABEL_REVISION) == revision and item.metadata is not None:
                    return str(item.metadata.name)
        return None

    def revisions(self, owner: render.Owner, component: ComponentType, asked: dict[str, int] | None = None,
                  counted_pods: list[RevisionObservation] | None = None) -> list[RevisionObservation]:
        """Per template revision, as a Deployment would report it: replicas = the capacity last asked
        for it (the pods running it when never asked), ready = its pods Ready and in rotation."""
        if asked is None:
            asked = self._asked(self.get(owner.namespace, replica_name(owner.name, component)))
        pods = counted_pods if counted_pods is not None else self._counted(owner, component)
        counted = {r.revision: r for r in pods}
        out = []
        for revision in sorted(set(counted) | set(asked)):
            seen = counted.get(revision)
            ready = seen.ready_replicas if seen else 0
            replicas = asked.get(revision, seen.replicas if seen else 0)
            out.append(RevisionObservation(revision=revision, replicas=replicas, ready_replicas=min(ready, replicas)
                                           if revision in asked else ready, updated_replicas=replicas))
        return out

    def _counted(self, owner: render.Owner, component: ComponentType) -> list[RevisionObservation]:
        pods = list_items(self.core.list_namespaced_pod, owner.namespace,
                          label_selector=f"{REPLICA_LABEL}={replica_name(owner.name, component)}")
        return count_instances(pods)


def count_instances(pods: list[client.V1Pod]) -> list[RevisionObservation]:
    """Instances per template revision and those Ready and in rotation. A pod carrying the revision
    label is one Instance (a single pod, or a gang's leader: workers carry no revision label); a
    gang is ready once its leader and as many workers of the same incarnation as the leader's
    template names are ContainersReady and in rotation."""
    live = [(p, p.metadata) for p in pods if p.metadata is not None and p.metadata.deletion_timestamp is None]
    ready_workers: dict[tuple[str, str], int] = {}
    for pod, meta in live:
        labels = meta.labels or {}
        if labels.get(RUNNER_LABEL) == "worker" and _in_rotation(pod):
            key = (labels.get(INSTANCE_LABEL, ""), labels.get(INCARNATION_LABEL, ""))
            ready_workers[key] = ready_workers.get(key, 0) + 1
    counts: dict[str, list[int]] = {}
    for pod, meta in live:
        labels = meta.labels or {}
        revision = labels.get(render.LABEL_REVISION)
        if not revision:
            continue
        entry = counts.setdefault(revision, [0, 0])
        entry[0] += 1
        ready = _in_rotation(pod)
        if ready and labels.get(RUNNER_LABEL) == "leader":
            wanted = (meta.annotations or {}).get(multinode.WORKERS_ANNOTATION, "")
            have = ready_workers.get((labels.get(INSTANCE_LABEL, ""), labels.get(INCARNATION_LABEL, "")), 0)
            ready = have >= (int(wanted) if wanted.isdigit() else multinode.DEFAULT_WORKERS)
        if ready:
            entry[1] += 1
    return [RevisionObservation(revision=r, replicas=n, ready_replicas=ready)
            for r, (n, ready) in sorted(counts.items())]


def _in_rotation(pod: client.V1Pod) -> bool:
    conditions = {c.type: c.status for c in (pod.status.conditions or [])} if pod.status else {}
    return conditions.get("ContainersReady") == "True" and conditions.get(SERVING_GATE) == "True"


__all__ = ["MODE_ANNOTATION", "OMENATIVE", "ProjectedReplicas", "count_instances", "deployment_mode", "replica_name",
           "replica_spec"]
