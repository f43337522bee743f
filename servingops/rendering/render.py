"""Pure rendering of an InferenceService component (RawDeployment mode) into the objects that
serve it: one Deployment and one Service per revision, one HTTPRoute per component.

The revision hash is computed from the rendered pod template, not from the component spec, so
fields that do not reach the pods (minReplicas, autoscaler, ...) never mint a revision, and any
change that does reach them always does.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from servingops.api_models.canonical import canonical_json
from servingops.api_models.ome.components import DecoderSpec, EngineSpec, PodSpec, RouterSpec
from servingops.api_models.ome.constants import API_VERSION
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.serving import TrafficWeight
from servingops.rendering.ingress import DETACHED, Attachment
from servingops.rendering.names import revision_name, route_name

ComponentSpec = EngineSpec | DecoderSpec | RouterSpec

LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_REVISION = "serving.ome.io/revision"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "servingops"
LABEL_ISVC_UID = "ome.io/inferenceservice-uid"
"""On a component's scaler (HPA, ScaledObject): the uid of the service it belongs to. KEDA copies a ScaledObject's
labels onto the HPA it keeps, whose owner is the ScaledObject: the bridge finds the service's workflow by this."""

MAIN_CONTAINER = "ome-container"
"""Name given to the runner when it has none (OME's name for the main serving container)."""
SERVICE_PORT = 8080
HASH_LENGTH = 10

GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
TRAEFIK_GROUP, TRAEFIK_SERVICE_KIND = "traefik.io", "TraefikService"
"""A backendRef to the component's weighted TraefikService (rendering/traefik_traffic.py: the Traefik
translation of spec.traffic and the weights between revisions)."""

# Component order is fixed so observations and renders list components deterministically.
COMPONENTS: tuple[ComponentType, ...] = (ComponentType.ENGINE, ComponentType.DECODER, ComponentType.ROUTER)

_POD_FIELDS = frozenset(PodSpec.model_fields)


@dataclass(frozen=True)
class Owner:
    """The InferenceService every rendered object belongs to (garbage collection follows it)."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "InferenceService", "name": self.name, "uid": self.uid,
                "controller": True}


@dataclass(frozen=True)
class RenderedRevision:
    component: ComponentType
    revision: str
    template: dict[str, Any]
    """The pod template, revision label included."""


def component_spec(spec: InferenceServiceSpec, component: ComponentType) -> ComponentSpec | None:
    found: ComponentSpec | None = getattr(spec, component.value)
    return found


def set_components(spec: InferenceServiceSpec) -> list[tuple[ComponentType, ComponentSpec]]:
    """The components the spec declares; unset ones are not rendered."""
    return [(c, s) for c in COMPONENTS if (s := component_spec(spec, c)) is not None]


def desired_replicas(spec: ComponentSpec) -> int:
    return spec.min_replicas if spec.min_replicas is not None else 1


def selector_labels(isvc: str, component: ComponentType, revision: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: isvc, LABEL_COMPONENT: component.value}
    if revision is not None:
        labels[LABEL_REVISION] = revision
    return labels


def _containers(spec: ComponentSpec) -> list[dict[str, Any]]:
    """The runner is the main container: it overrides the listed container of the same name
    (field by field, like OME's runner override) or else comes first."""
    containers = [copy.deepcopy(c) for c in spec.containers or []]
    if spec.runner is None:
        return containers
    runner = copy.deepcopy(spec.runner)
    runner.setdefault("name", MAIN_CONTAINER)
    for index, existing in enumerate(containers):
        if existing.get("name") == runner["name"]:
            containers[index] = {**existing, **runner}
            return containers
    return [runner, *containers]


class Unservable(ValueError):
    """The spec asks for a component this renderer cannot turn into pods; `field` names where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field


def check_servable(spec: InferenceServiceSpec, component: ComponentType, cspec: ComponentSpec) -> None:
    """Raise Unservable unless the component carries a container to run: inline (its runner and
    containers) or, for a spec that names a model, from its runtime's component config (merged in
    by resolution.py before rendering). Refused with a message saying what to set, instead of a
    Deployment the apiserver rejects."""
    if _containers(cspec):
        return
    field = f"spec.{component.value}"
    by_reference = []
    if spec.model is not None:
        by_reference.append(f"spec.model ({spec.model.kind} {spec.model.name})")
    if spec.runtime is not None:
        by_reference.append(f"spec.runtime ({spec.runtime.kind} {spec.runtime.name})")
    advice = f"set {field}.runner (at least an image) or {field}.containers"
    if by_reference:
        raise Unservable(field, f"has no runner and no containers, and neither gives "
                                f"{' and '.join(by_reference)} (the runtime's {component.value}Config): {advice}")
    raise Unservable(field, f"has no runner and no containers: {advice}")


def main_container_name(spec: ComponentSpec) -> str | None:
    """The runner's container name; None when there is no runner (the first container is main)."""
    return str(spec.runner.get("name", MAIN_CONTAINER)) if spec.runner is not None else None


def _template_without_revision(isvc: str, component: ComponentType, spec: ComponentSpec) -> dict[str, Any]:
    pod = spec.model_dump(include=set(_POD_FIELDS), by_alias=True, exclude_none=True, mode="json")
    containers = _containers(spec)
    if containers:
        pod["containers"] = containers
    # Ours win over the user's labels: the selector depends on them.
    labels = {**(spec.labels or {}), **selector_labels(isvc, component)}
    metadata: dict[str, Any] = {"labels": labels}
    if spec.annotations:
        metadata["annotations"] = dict(spec.annotations)
    return {"metadata": metadata, "spec": pod}


def revision_hash(template_without_revision: dict[str, Any]) -> str:
    """First HASH_LENGTH hex digits of sha256 over the canonical JSON of the template: stable
    across processes and Python versions (no hash(), no dict order)."""
    return hashlib.sha256(canonical_json(template_without_revision)).hexdigest()[:HASH_LENGTH]


def render_revision(isvc: str, component: ComponentType, spec: ComponentSpec) -> RenderedRevision:
    template = _template_without_revision(isvc, component, spec)
    revision = revision_hash(template)
    template["metadata"]["labels"][LABEL_REVISION] = revision
    return RenderedRevision(component=component, revision=revision, template=template)


def target_port(template: dict[str, Any], main: str | None) -> tuple[int, str]:
    """(containerPort, port name) of the main container's first port, else (8080, "http")."""
    containers: list[dict[str, Any]] = (template.get("spec") or {}).get("containers") or []
    found = next((c for c in containers if c.get("name") == main), None) if main else None
    container = found or (containers[0] if containers else {})
    ports = container.get("ports") or []
    if ports and isinstance(ports[0].get("containerPort"), int):
        return int(ports[0]["containerPort"]), str(ports[0].get("name") or "http")
    return SERVICE_PORT, "http"


def _metadata(owner: Owner, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": owner.namespace, "labels": {**labels, LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner.reference()]}


UPSTREAM_COMPONENT_LABEL = "component"
UPSTREAM_SERVICE_LABEL = "ome.io/inferenceservice"


def upstream_pod_labels(isvc: str, component: ComponentType) -> dict[str, str]:
    """The pod labels upstream OME sets and its runtimes select on (a router's service discovery
    asks for `component=engine ome.io/inferenceservice=<name>`). Added to the Deployment's pods but
    kept out of the revision hash: adding them must not roll every running service."""
    return {UPSTREAM_COMPONENT_LABEL: component.value, UPSTREAM_SERVICE_LABEL: isvc}


DRAIN_SECONDS = 5
"""How long a deleted serving pod keeps answering before its engine is told to stop (a preStop sleep).
A pod's deletion reaches the data plane through the EndpointSlice controller and the Gateway's own
resync; requests the Gateway still sends meanwhile must find the pod up. Measured on the local stack:
Traefik stopped sending within about 0.3 s; 5 s leaves room for a loaded cluster."""


def drain_before_stop(template: dict[str, Any], main: str | None) -> None:
    """Give the main container a preStop sleep of DRAIN_SECONDS unless it has a preStop hook of its own
    (upstream OME's runtimes have none: a scale-down there drops the requests in flight to the gone pod).
    Kept out of the revision hash, as the upstream labels are: adding it must not roll every service."""
    containers: list[dict[str, Any]] = (template.get("spec") or {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == main), None) if main else None
    container = container or (containers[0] if containers else None)
    if container is None or (container.get("lifecycle") or {}).get("preStop"):
        return
    grace = (template.get("spec") or {}).get("terminationGracePeriodSeconds")
    seconds = DRAIN_SECONDS if grace is None else min(DRAIN_SECONDS, max(int(grace) - 1, 0))
    if seconds > 0:
        container.setdefault("lifecycle", {})["preStop"] = {"sleep": {"seconds": seconds}}


def deployment(owner: Owner, rendered: RenderedRevision, spec: ComponentSpec, replicas: int) -> dict[str, Any]:
    labels = selector_labels(owner.name, rendered.component, rendered.revision)
    template = copy.deepcopy(rendered.template)
    template["metadata"]["labels"] = {**upstream_pod_labels(owner.name, rendered.component),
                                      **template["metadata"]["labels"]}
    drain_before_stop(template, main_container_name(spec))
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(owner, revision_name(owner.name, rendered.component.value, rendered.revision),
                              labels),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template,
        },
    }
    if spec.deployment_strategy:
        body["spec"]["strategy"] = copy.deepcopy(spec.deployment_strategy)
    return body


def service(owner: Owner, rendered: RenderedRevision, spec: ComponentSpec) -> dict[str, Any]:
    """ClusterIP, port 8080 to the main container's first port. Also used to recreate a lost
    Service from a live Deployment's template (then `rendered` wraps that template)."""
    labels = selector_labels(owner.name, rendered.component, rendered.revision)
    container_port, port_name = target_port(rendered.template, main_container_name(spec))
    port: dict[str, Any] = {"name": port_name, "port": SERVICE_PORT, "targetPort": container_port,
                            "protocol": "TCP"}
    app_protocol = (spec.service_port_app_protocols or {}).get(port_name)
    if app_protocol:
        port["appProtocol"] = app_protocol
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, revision_name(owner.name, rendered.component.value, rendered.revision),
                              labels),
        "spec": {"type": "ClusterIP", "selector": labels, "ports": [port]},
    }


def http_route(owner: Owner, component: ComponentType, weights: list[TrafficWeight],
               attachment: Attachment = DETACHED, weighted: str | None = None) -> dict[str, Any]:
    """One rule whose weighted backendRefs are the revision Services, weights exactly as given;
    parentRefs and hostnames from `attachment` (rendering/ingress.py), none when empty.
    `weighted`: the one backendRef is instead this TraefikService, the component's, which carries the weights
    (ingress.trafficTranslator traefik: rendering/traefik_traffic.py weighted_service).
    Fields left out are not ours under server-side apply: a route applied without them loses the
    ones we applied before and keeps any another manager set."""
    backends = [
        {"group": "", "kind": "Service", "port": SERVICE_PORT,
         "name": revision_name(owner.name, component.value, w.revision), "weight": w.weight}
        for w in weights
    ]
    if weighted is not None:
        backends = [{"group": TRAEFIK_GROUP, "kind": TRAEFIK_SERVICE_KIND, "name": weighted}]
    spec: dict[str, Any] = {"rules": [{"backendRefs": backends}]}
    if attachment.parent_refs:
        spec["parentRefs"] = [dict(ref) for ref in attachment.parent_refs]
    if attachment.hostnames:
        spec["hostnames"] = list(attachment.hostnames)
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata(owner, route_name(owner.name, component.value), selector_labels(owner.name, component)),
        "spec": spec,
    }


def route_weights(route: dict[str, Any], isvc: str, component: ComponentType) -> list[TrafficWeight]:
    """The split an HTTPRoute carries, read back as revisions (backends we did not render are
    skipped; an absent weight is Gateway API's default of 1)."""
    prefix = revision_name(isvc, component.value, "")
    weights: list[TrafficWeight] = []
    for rule in (route.get("spec") or {}).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            name = str(ref.get("name", ""))
            kind = (str(ref.get("group") or ""), str(ref.get("kind", "Service")))
            if kind == ("", "Service") and name.startswith(prefix):
                weights.append(TrafficWeight(revision=name[len(prefix):], weight=int(ref.get("weight", 1))))
    return weights


def component_url(owner: Owner, component: ComponentType) -> str:
    """The component's cluster-local address, named after its HTTPRoute (`<isvc>-<component>`): its
    url when no Gateway is configured, and status.address / the "cluster-local" entry of
    status.addresses for the entrypoint."""
    return f"http://{route_name(owner.name, component.value)}.{owner.namespace}.svc.cluster.local"
