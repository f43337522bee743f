"""An InferenceService that names a model (and a runtime, or none) made concrete: the runtime chosen,
its components merged with the service's, the model's node copy wired in. The serving activities
render the result exactly like an inline spec, so a runtime or model change is a new pod template,
hence a new revision, rolled out by the group's progression like any other template change.

The reads (the model, the runtimes and their ome.io/inherit-from parents) go through a `Reader`;
everything else is pure (runtime_selection, runtime_inheritance, runtime_merge). A spec that cannot
be served yet or at all raises `Unresolvable` with a reason and a message naming what was compared,
which the InferenceService's Ready condition and a Warning Event carry (the operator must not need
logs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from pydantic import ValidationError

from servingops.activities.serving.render import MAIN_CONTAINER
from servingops.activities.serving.runtime_inheritance import RuntimeObject, resolve
from servingops.activities.serving.runtime_merge import (
    ModelMount,
    attach_model,
    merge_component,
    wire_container,
    wire_pod,
)
from servingops.activities.serving.runtime_selection import (
    RuntimeCandidate,
    RuntimeKind,
    check_runtime,
    select_runtime,
)
from servingops.api_models.ome.enums import LifeCycleState
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.api_models.ome.models import BaseModelSpec
from servingops.api_models.ome.runtimes import ServingRuntimeSpec

OME_GROUP = "ome.io"
COMPONENT_CONFIG = {"engine": "engineConfig", "decoder": "decoderConfig", "router": "routerConfig"}
MODEL_COMPONENTS = ("engine", "decoder")
"""Components that load the weights (the router does not)."""
RUNTIME_POD_FIELDS = ("containers", "volumes", "nodeSelector", "affinity", "tolerations", "imagePullSecrets",
                      "schedulerName", "hostIPC", "dnsPolicy", "hostNetwork")
"""ServingRuntimePodSpec's fields: a runtime without engineConfig renders its engine from these."""


class UnresolvableReason(StrEnum):
    MODEL_NOT_FOUND = "ModelNotFound"
    MODEL_DISABLED = "ModelDisabled"
    MODEL_NOT_READY = "ModelNotReady"
    MODEL_KIND_UNSUPPORTED = "ModelKindUnsupported"
    RUNTIME_NOT_FOUND = "RuntimeNotFound"
    RUNTIME_INHERITANCE = "RuntimeInheritanceNotReady"
    RUNTIME_NOT_COMPATIBLE = "RuntimeNotCompatible"
    NO_RUNTIME = "NoRuntimeMatches"


class Unresolvable(Exception):
    def __init__(self, reason: UnresolvableReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Reader(Protocol):
    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None: ...

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class ResolvedService:
    spec: dict[str, Any]
    """The service's spec with each component concrete (merged, model wired); model and runtime kept."""
    runtime: str | None
    """"<kind>/<name>" of the runtime used; None for an inline spec."""
    model: str | None


# -- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedModel:
    key: ModelKey
    spec: BaseModelSpec
    mount: ModelMount


def _model(reader: Reader, namespace: str, ref: dict[str, Any]) -> ServedModel:
    kind = str(ref.get("kind") or ModelKind.CLUSTER_BASE_MODEL.value)
    group = str(ref.get("apiGroup") or OME_GROUP)
    name = str(ref["name"])
    if group != OME_GROUP or kind not in (ModelKind.BASE_MODEL.value, ModelKind.CLUSTER_BASE_MODEL.value):
        raise Unresolvable(UnresolvableReason.MODEL_KIND_UNSUPPORTED,
                           f"spec.model names {kind}.{group} {name}: this release serves BaseModel and "
                           "ClusterBaseModel (ome.io) by reference")
    scoped = namespace if kind == ModelKind.BASE_MODEL.value else None
    obj = reader.get(OME_GROUP, kind, name, scoped)
    where = f"{kind} {scoped}/{name}" if scoped else f"{kind} {name}"
    if obj is None:
        raise Unresolvable(UnresolvableReason.MODEL_NOT_FOUND, f"{where} does not exist")
    try:
        spec = BaseModelSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        raise Unresolvable(UnresolvableReason.MODEL_NOT_FOUND, f"{where} has an unreadable spec: {exc}") from exc
    if spec.disabled:
        raise Unresolvable(UnresolvableReason.MODEL_DISABLED, f"{where} is disabled")
    status = obj.get("status") or {}
    ready_nodes = status.get("nodesReady") or []
    if status.get("state") != LifeCycleState.READY.value and not ready_nodes:
        state = status.get("state") or "not reported yet"
        raise Unresolvable(UnresolvableReason.MODEL_NOT_READY,
                           f"{where} is not Ready (state {state}; no node holds a Ready copy): the rollout "
                           "waits for it")
    key = ModelKey(ModelKind(kind), scoped or "", name)
    path = key.copy_path(spec.storage.path)
    return ServedModel(key=key, spec=spec, mount=ModelMount(volume_name=_volume_name(name), path=path,
                                                            node_label=key.label_key))


def _volume_name(model: str) -> str:
    """A DNS-1123 label: model names are DNS subdomains (dots allowed), volume names are not."""
    return model.replace(".", "-")[:63].rstrip("-") or "model"


# -- the runtime ---------------------------------------------------------------------------------


def _runtime_object(obj: dict[str, Any], kind: str) -> RuntimeObject:
    meta = obj.get("metadata") or {}
    return RuntimeObject(kind=kind, name=str(meta.get("name")), namespace=meta.get("namespace"), body=obj)


def _lookup(reader: Reader) -> Callable[[str, str, str | None], RuntimeObject | None]:
    def lookup(kind: str, name: str, namespace: str | None) -> RuntimeObject | None:
        obj = reader.get(OME_GROUP, kind, name, namespace)
        return None if obj is None else _runtime_object(obj, kind)

    return lookup


def _effective(reader: Reader, runtime: RuntimeObject) -> tuple[RuntimeCandidate | None, str]:
    """The runtime with its inheritance chain applied, or (None, why not)."""
    resolution = resolve(runtime, _lookup(reader))
    if not resolution.ready or resolution.spec is None:
        return None, resolution.message
    kind = RuntimeKind(runtime.kind)
    try:
        spec = ServingRuntimeSpec.model_validate(resolution.spec)
    except ValidationError as exc:
        return None, f"unreadable spec: {exc}"
    return RuntimeCandidate(name=runtime.name, kind=kind, spec=spec, namespace=runtime.namespace), ""


def _accelerator_classes(isvc: dict[str, Any]) -> frozenset[str]:
    """Accelerator classes the service requires (annotation, selector, engine/decoder overrides)."""
    spec = isvc.get("spec") or {}
    found = {((isvc.get("metadata") or {}).get("annotations") or {}).get("ome.io/accelerator-class")}
    found.add((spec.get("acceleratorSelector") or {}).get("acceleratorClass"))
    for component in ("engine", "decoder"):
        found.add(((spec.get(component) or {}).get("acceleratorOverride") or {}).get("acceleratorClass"))
    return frozenset(c for c in found if isinstance(c, str) and c)


def _choose_runtime(
    reader: Reader, isvc: dict[str, Any], model: ServedModel
) -> tuple[RuntimeCandidate, dict[str, Any]]:
    namespace = str(isvc["metadata"]["namespace"])
    named = (isvc.get("spec") or {}).get("runtime")
    classes = _accelerator_classes(isvc)
    if named:
        kind = str(named.get("kind") or RuntimeKind.CLUSTER.value)
        scoped = namespace if kind == RuntimeKind.NAMESPACED.value else None
        obj = reader.get(OME_GROUP, kind, str(named["name"]), scoped)
        where = f"{kind} {named['name']}"
        if obj is None:
            raise Unresolvable(UnresolvableReason.RUNTIME_NOT_FOUND, f"{where} does not exist")
        candidate, problem = _effective(reader, _runtime_object(obj, kind))
        if candidate is None:
            raise Unresolvable(UnresolvableReason.RUNTIME_INHERITANCE, f"{where}: {problem}")
        verdict = check_runtime(candidate, model.spec, classes)
        if not verdict.compatible:
            raise Unresolvable(UnresolvableReason.RUNTIME_NOT_COMPATIBLE,
                               f"{where} cannot serve {model.key}: {'; '.join(verdict.reasons)}")
        return candidate, obj
    candidates: list[RuntimeCandidate] = []
    bodies: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: list[str] = []
    for kind, scoped in ((RuntimeKind.NAMESPACED.value, namespace), (RuntimeKind.CLUSTER.value, None)):
        for obj in reader.list(OME_GROUP, kind, scoped):
            candidate, problem = _effective(reader, _runtime_object(obj, kind))
            if candidate is None:
                skipped.append(f"{kind} {obj['metadata']['name']}: {problem}")
                continue
            candidates.append(candidate)
            bodies[(kind, candidate.name)] = obj
    selection = select_runtime(model.spec, candidates, classes)
    if selection.chosen is None:
        compared = "; ".join([selection.explain(), *skipped]) if candidates or skipped else selection.explain()
        raise Unresolvable(UnresolvableReason.NO_RUNTIME,
                           f"no runtime can serve {model.key} ({_describe(model.spec)}): {compared}")
    chosen = selection.chosen.candidate
    return chosen, bodies[(chosen.kind.value, chosen.name)]


def _describe(spec: BaseModelSpec) -> str:
    parts = []
    if spec.model_format is not None:
        version = f" {spec.model_format.version}" if spec.model_format.version else ""
        parts.append(f"format {spec.model_format.name}{version}")
    if spec.model_framework is not None:
        parts.append(f"framework {spec.model_framework.name}")
    if spec.model_architecture:
        parts.append(f"architecture {spec.model_architecture}")
    if spec.quantization:
        parts.append(f"quantization {spec.quantization}")
    if spec.model_parameter_size:
        parts.append(f"size {spec.model_parameter_size}")
    return ", ".join(parts) or "no format stated"


# -- the service ---------------------------------------------------------------------------------


def _runtime_component(spec: ServingRuntimeSpec, component: str) -> dict[str, Any] | None:
    body = spec.to_api()
    config = body.get(COMPONENT_CONFIG[component])
    if config is not None:
        return dict(config)
    if component == "engine" and body.get("containers"):
        return {k: copy.deepcopy(body[k]) for k in RUNTIME_POD_FIELDS if k in body}
    return None


def resolve_service(reader: Reader, isvc: dict[str, Any]) -> ResolvedService:
    """The concrete spec of `isvc` (the object as the apiserver returns it)."""
    spec = copy.deepcopy(isvc.get("spec") or {})
    model_ref = spec.get("model")
    if not model_ref:
        return ResolvedService(spec=spec, runtime=None, model=None)
    namespace = str(isvc["metadata"]["namespace"])
    model = _model(reader, namespace, model_ref)
    runtime, _ = _choose_runtime(reader, isvc, model)
    for component in COMPONENT_CONFIG:
        merged = merge_component(_runtime_component(runtime.spec, component), spec.get(component))
        if merged is None:
            continue
        if component in MODEL_COMPONENTS:
            merged = _wire_model(merged, model.mount)
        spec[component] = merged
    return ResolvedService(spec=spec, runtime=f"{runtime.kind.value}/{runtime.name}", model=str(model.key))


def _wire_model(component: dict[str, Any], mount: ModelMount) -> dict[str, Any]:
    """The model into the component's pod and main container; for a leader/worker gang, into each
    role's pod too. With a runner, the runner is the main container and the renderer lays it over
    the listed container of its name key by key: so the runner itself carries the wiring, built on
    that container's env and mounts, or it would hide them."""
    runner = component.get("runner")
    if isinstance(runner, dict):
        name = runner.get("name") or MAIN_CONTAINER
        listed: dict[str, Any] = next((c for c in component.get("containers") or [] if c.get("name") == name), {})
        wired = wire_pod(component, mount)
        wired["runner"] = wire_container({**listed, **runner, "name": name}, mount)
    else:
        wired = attach_model(component, mount)
    for role in ("leader", "worker"):
        if isinstance(component.get(role), dict):
            wired[role] = attach_model(component[role], mount)
    return wired
