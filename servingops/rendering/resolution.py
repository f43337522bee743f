"""An InferenceService that names a model (and a runtime, or none) made concrete: the runtime chosen,
its components merged with the service's, the model's node copy wired in. The serving activities
render the result exactly like an inline spec, so a runtime or model change is a new pod template,
hence a new revision, rolled out by the group's progression like any other template change.

The reads (the model, the runtimes and their ome.io/inherit-from parents) go through a `Reader`,
which the activities implement over an apiserver (activities/reference_reader.py KubeReader; in a
member cluster activities/placement/member.py MemberReader), so this module imports no client;
everything else is pure (runtime_selection, runtime_inheritance, runtime_merge). A spec that cannot
be served yet or at all raises `Unresolvable` with a reason and a message naming what was compared,
which the InferenceService's Ready condition and a Warning Event carry (the operator must not need
logs).
"""

from __future__ import annotations

import copy
import hashlib
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from pydantic import ValidationError

from servingops.api_models.canonical import canonical_json
from servingops.api_models.deckhouse import workload
from servingops.api_models.ome.accelerator_class import AcceleratorClassSpec
from servingops.api_models.ome.enums import LifeCycleState
from servingops.api_models.ome.model_keys import ModelKey, ModelKind
from servingops.api_models.ome.models import BaseModelSpec
from servingops.api_models.ome.runtimes import AcceleratorModelConfig, AcceleratorRequirements, ServingRuntimeSpec
from servingops.rendering import accelerator_overrides, accelerator_selection
from servingops.rendering.model_claim import claim_namespace, claim_refusal, model_claim
from servingops.rendering.render import MAIN_CONTAINER
from servingops.rendering.runtime_inheritance import RuntimeObject, resolve
from servingops.rendering.runtime_merge import (
    ModelMount,
    attach_model,
    merge_component,
    wire_container,
    wire_pod,
)
from servingops.rendering.runtime_selection import (
    RuntimeCandidate,
    RuntimeKind,
    check_runtime,
    judge,
    select_runtime,
)

OME_GROUP = "ome.io"
RUNTIME_SYNC = "ome.io/runtime-sync"
"""On an InferenceService with spec.runtime.autoSync false: a new value re-pins to the live runtime."""
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
    FINE_TUNED_WEIGHT_NOT_FOUND = "FineTunedWeightNotFound"
    FINE_TUNED_WEIGHT_NOT_READY = "FineTunedWeightNotReady"
    RUNTIME_NOT_FOUND = "RuntimeNotFound"
    RUNTIME_INHERITANCE = "RuntimeInheritanceNotReady"
    RUNTIME_NOT_COMPATIBLE = "RuntimeNotCompatible"
    NO_RUNTIME = "NoRuntimeMatches"
    RUNTIME_REVISION_NOT_FOUND = "RuntimeRevisionNotFound"
    ACCELERATOR_CLASS_NOT_FOUND = accelerator_selection.SelectionReason.NOT_FOUND.value
    NO_ACCELERATOR_CLASS = accelerator_selection.SelectionReason.NO_MATCH.value
    MODEL_CLAIM_ELSEWHERE = "ModelClaimInOtherNamespace"


class Unresolvable(Exception):
    def __init__(self, reason: UnresolvableReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Reader(Protocol):
    controller_namespace: str | None
    """Where the controller runs (the chart's release namespace): where a ClusterBaseModel's claim is when
    its storage.parameters names no namespace (rendering/model_claim.py); None when the reader cannot know."""

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None: ...

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]: ...

    def get_snapshot(self, name: str) -> dict[str, Any] | None:
        """A runtime snapshot (a ControllerRevision of the controller namespace): its data."""
        ...

    def save_snapshot(self, name: str, data: dict[str, Any]) -> None:
        """Create the snapshot unless one of that name exists (names are content hashes)."""
        ...


@dataclass(frozen=True)
class ResolvedService:
    spec: dict[str, Any]
    """The service's spec with each component concrete (merged, model wired); model and runtime kept."""
    runtime: str | None
    """"<kind>/<name>" of the runtime used; None for an inline spec."""
    model: str | None
    overlays: list[dict[str, Any]] = field(default_factory=list)
    """status.mountedOverlays: the overlays wired into the pods (MountedOverlay JSON)."""
    skipped_overlays: list[str] = field(default_factory=list)
    """Overlays left out, each with why (disabled, not Ready, not found): the OverlaysReady condition."""
    pinned_revision: str | None = None
    """autoSync false: the ControllerRevision whose runtime snapshot rendered the pods."""
    sync_token: str | None = None
    """autoSync false: the ome.io/runtime-sync value the pin was taken (or kept) at."""
    accelerators: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per component (engine, decoder), the AcceleratorClass chosen and rendered (AcceleratorSelection JSON:
    status.components.<c>.selectedAccelerator)."""


# -- the model -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServedModel:
    description: str
    """"ClusterBaseModel llama", "Model team/llama": for messages and the observation."""
    spec: BaseModelSpec
    """What selection compares (a Deckhouse model's status.resolved, put in these terms)."""
    mount: ModelMount
    versionless: bool = False
    """The model states no format / framework versions (a Deckhouse model): not compared."""


def _model(reader: Reader, namespace: str, ref: dict[str, Any], artifacts: str | None = None) -> ServedModel:
    kind = str(ref.get("kind") or ModelKind.CLUSTER_BASE_MODEL.value)
    group = str(ref.get("apiGroup") or OME_GROUP)
    name = str(ref["name"])
    if group == DECKHOUSE_GROUP and kind in ("Model", "ClusterModel"):
        return _deckhouse_model(reader, namespace, kind, name, artifacts)
    if group != OME_GROUP or kind not in (ModelKind.BASE_MODEL.value, ModelKind.CLUSTER_BASE_MODEL.value):
        raise Unresolvable(UnresolvableReason.MODEL_KIND_UNSUPPORTED,
                           f"spec.model names {kind}.{group} {name}: a model by reference is a BaseModel or "
                           "ClusterBaseModel (ome.io), or a Model or ClusterModel (ai.deckhouse.io)")
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
    claim = model_claim(spec.storage.storage_uri)
    if claim is not None:
        # pvc://: the pods mount the claim itself (no node copy, no node label), so it must be in their
        # namespace; said before readiness, since the model becoming Ready would not change it. Every reader
        # says the controller namespace (the direct, OMENative replica and member paths alike).
        claim_ns = claim_namespace(scoped, spec.storage.parameters, reader.controller_namespace)
        refusal = claim_refusal(where, claim, claim_ns, namespace)
        if refusal is not None:
            raise Unresolvable(UnresolvableReason.MODEL_CLAIM_ELSEWHERE, refusal)
    status = obj.get("status") or {}
    ready_nodes = status.get("nodesReady") or []
    if status.get("state") != LifeCycleState.READY.value and not ready_nodes:
        state = status.get("state") or "not reported yet"
        raise Unresolvable(UnresolvableReason.MODEL_NOT_READY,
                           f"{where} is not Ready (state {state}; no node holds a Ready copy): the rollout "
                           "waits for it")
    key = ModelKey(ModelKind(kind), scoped or "", name)
    path = key.copy_path(spec.storage.path)
    if claim is not None:
        return ServedModel(description=str(key), spec=spec,
                           mount=ModelMount(volume_name=_volume_name(name), path=path, node_label=None,
                                            claim=claim.claim, sub_path=claim.sub_path))
    return ServedModel(description=str(key), spec=spec, mount=ModelMount(volume_name=_volume_name(name), path=path,
                                                                         node_label=key.label_key))


DECKHOUSE_GROUP = "ai.deckhouse.io"
_FORMAT_NAMES = {"Safetensors": ("safetensors", "transformers"), "GGUF": ("gguf", None),
                 "Diffusers": ("diffusers", "diffusers")}
"""Deckhouse's resolved format -> the (modelFormat, modelFramework) names upstream runtimes declare."""


_PLAIN_DTYPES = {"bf16", "fp16", "fp32", "f16", "f32", "bfloat16", "float16", "float32"}
"""Deckhouse reports the weights' dtype as quantization; upstream's quantization names a scheme
(fp8, int4, ...): an unquantized dtype is no quantization, or no runtime would fit it."""


def parameter_size(count: int | None) -> str | None:
    """1_235_814_400 -> "1.24B" (the form BaseModelSpec.modelParameterSize takes)."""
    if not count:
        return None
    for suffix, unit in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if count >= unit:
            return f"{count / unit:.3g}{suffix}"
    return str(count)


def _deckhouse_model(reader: Reader, namespace: str, kind: str, name: str, artifacts: str | None) -> ServedModel:
    """A Deckhouse Model (this namespace) or ClusterModel, Ready: compared through status.resolved,
    served from its artifact in the registry as an image volume (no node copy)."""
    scoped = namespace if kind == "Model" else None
    where = f"{kind} {scoped}/{name}" if scoped else f"{kind} {name}"
    obj = reader.get(DECKHOUSE_GROUP, kind, name, scoped)
    if obj is None:
        raise Unresolvable(UnresolvableReason.MODEL_NOT_FOUND, f"{where} does not exist")
    status = obj.get("status") or {}
    if status.get("phase") != "Ready":
        ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        raise Unresolvable(UnresolvableReason.MODEL_NOT_READY,
                           f"{where} is not Ready (phase {status.get('phase') or 'none yet'}, reason "
                           f"{ready.get('reason') or 'none'}): the rollout waits for it")
    digest = (status.get("artifact") or {}).get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or artifacts is None:
        raise Unresolvable(UnresolvableReason.MODEL_NOT_READY, f"{where} reports no artifact in the registry")
    resolved = status.get("resolved") or {}
    format_name, framework = _FORMAT_NAMES.get(str(resolved.get("format")), (None, None))
    body: dict[str, Any] = {"storage": {"storageUri": f"oci://{artifacts}@{digest}"}}
    if format_name:
        body["modelFormat"] = {"name": format_name}
    if framework:
        body["modelFramework"] = {"name": framework}
    if resolved.get("architecture"):
        body["modelArchitecture"] = resolved["architecture"]
    quantization = str(resolved.get("quantization") or "").lower()
    if quantization and quantization not in _PLAIN_DTYPES:
        body["quantization"] = quantization
    if size := parameter_size(resolved.get("parameterCount")):
        body["modelParameterSize"] = size
    # The same path and volume the model webhook gives an annotated workload (api_models/deckhouse/workload.py).
    mount = ModelMount(volume_name=_volume_name(name), path=workload.mount_path(name), node_label=None,
                       image=workload.artifact_reference(artifacts, digest))
    return ServedModel(description=where, spec=BaseModelSpec.model_validate(body), mount=mount, versionless=True)


FINE_TUNED_WEIGHT_PATHS = "FINE_TUNED_WEIGHT_PATHS"
"""Set on the main container when the service names fine-tuned weights: their paths, comma-separated,
in the order spec.model.fineTunedWeights lists them (seed 004 fixes no variable; the runtime's
command can pass them to the engine, e.g. as LoRA adapters)."""


def _fine_tuned(reader: Reader, name: str) -> ModelMount:
    """A FineTunedWeight (cluster-scoped) whose copy is Ready on some node: mounted beside the model."""
    obj = reader.get(OME_GROUP, ModelKind.FINE_TUNED_WEIGHT.value, name, None)
    if obj is None:
        raise Unresolvable(UnresolvableReason.FINE_TUNED_WEIGHT_NOT_FOUND, f"FineTunedWeight {name} does not exist")
    status = obj.get("status") or {}
    if status.get("state") != LifeCycleState.READY.value and not status.get("nodesReady"):
        raise Unresolvable(UnresolvableReason.FINE_TUNED_WEIGHT_NOT_READY,
                           f"FineTunedWeight {name} is not Ready (state {status.get('state') or 'not reported yet'}; "
                           "no node holds a Ready copy): the rollout waits for it")
    key = ModelKey(ModelKind.FINE_TUNED_WEIGHT, "", name)
    path = key.copy_path(((obj.get("spec") or {}).get("storage") or {}).get("path"))
    return ModelMount(volume_name=_volume_name(f"ftw-{name}"), path=path, node_label=key.label_key)


def _mount_read_only(container: dict[str, Any], volume: str, mount_path: str) -> dict[str, Any]:
    """A copy of `container` with `volume` read-only at `mount_path` (unless something is there)."""
    result = copy.deepcopy(container)
    mounts = result.setdefault("volumeMounts", [])
    if not any(m.get("mountPath") == mount_path for m in mounts):
        mounts.append({"name": volume, "mountPath": mount_path, "readOnly": True})
    result.setdefault("env", [])
    return result


def _wire_weight(component: dict[str, Any], weight: ModelMount) -> dict[str, Any]:
    """The weight's copy read-only at its path in the runner (or main container), listed in
    FINE_TUNED_WEIGHT_PATHS, and its node label required like the model's."""

    def add(container: dict[str, Any]) -> dict[str, Any]:
        result = _mount_read_only(container, weight.volume_name, weight.path)
        listed = next((e for e in result["env"] if e.get("name") == FINE_TUNED_WEIGHT_PATHS), None)
        if listed is None:
            result["env"].append({"name": FINE_TUNED_WEIGHT_PATHS, "value": weight.path})
        elif weight.path not in str(listed.get("value", "")).split(","):
            listed["value"] = f"{listed['value']},{weight.path}"
        return result

    return _on_main_container(wire_pod(component, weight), add)


def _accelerator_tuning(isvc: dict[str, Any], runtime: RuntimeCandidate, model: ServedModel,
                        choices: dict[str, accelerator_selection.Choice]) -> AcceleratorModelConfig | None:
    """The acceleratorConfig entry of the supported format that serves the model, for the one
    accelerator class the service asks for, or else the one its components' policies chose (none, or
    several: no tuning)."""
    classes = _accelerator_classes(isvc) or frozenset(c.name for c in choices.values())
    if len(classes) != 1:
        return None
    named = bool((isvc.get("spec") or {}).get("runtime"))
    chosen = judge(runtime, model.spec, classes, auto_select=not named, versionless=model.versionless).format
    if chosen is None or not chosen.accelerator_config:
        return None
    return chosen.accelerator_config.get(next(iter(classes)))


def _on_main_container(component: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """`change` applied to the runner (the main container when there is one), else the first container."""
    result = copy.deepcopy(component)
    runner = result.get("runner")
    if isinstance(runner, dict):
        # The renderer lays the runner over the listed container of its name: change what will run.
        name = runner.get("name") or MAIN_CONTAINER
        listed: dict[str, Any] = next((c for c in result.get("containers") or [] if c.get("name") == name), {})
        result["runner"] = change({**listed, **runner, "name": name})
    elif result.get("containers"):
        result["containers"] = [change(result["containers"][0]), *result["containers"][1:]]
    return result


OVERLAY_ROOT = "/opt/ml/model-overlays"


@dataclass(frozen=True)
class Overlay:
    name: str
    copy: ModelMount
    """The overlay's node copy (its path on the node) and the label of a Ready copy."""
    mount_path: str
    env_var: str


def overlay_env_var(name: str) -> str:
    """OVERLAY_<UPPERCASED_NAME>_MODEL_PATH, the name's other characters as underscores."""
    return f"OVERLAY_{re.sub(r'[^A-Z0-9]', '_', name.upper())}_MODEL_PATH"


def _overlays(reader: Reader, namespace: str, refs: list[dict[str, Any]]) -> tuple[list[Overlay], list[str]]:
    """The overlays to wire, and those left out with why (seed 004: a disabled or not Ready overlay
    is omitted, not held for: the runner picks among what it finds at request time)."""
    found: list[Overlay] = []
    skipped: list[str] = []
    for ref in refs:
        name = str(ref.get("name"))
        kind = str(ref.get("kind") or ModelKind.CLUSTER_BASE_MODEL.value)
        if str(ref.get("apiGroup") or OME_GROUP) != OME_GROUP or kind not in (ModelKind.BASE_MODEL.value,
                                                                             ModelKind.CLUSTER_BASE_MODEL.value):
            skipped.append(f"{name}: {kind} is not a BaseModel or ClusterBaseModel")
            continue
        try:
            served = _model(reader, namespace, ref)
        except Unresolvable as exc:
            skipped.append(f"{name}: {exc.message}")
            continue
        found.append(Overlay(name=name, copy=served.mount, mount_path=posixpath.join(OVERLAY_ROOT, name),
                             env_var=overlay_env_var(name)))
    return found, skipped


def _wire_overlay(component: dict[str, Any], overlay: Overlay) -> dict[str, Any]:
    """The overlay's node copy at /opt/ml/model-overlays/<name>, read-only, its variable set, and a
    node with a Ready copy required (a hostPath must exist where the pod runs)."""
    volume = ModelMount(volume_name=_volume_name(f"overlay-{overlay.name}"), path=overlay.copy.path,
                        node_label=overlay.copy.node_label)

    def add(container: dict[str, Any]) -> dict[str, Any]:
        result = _mount_read_only(container, volume.volume_name, overlay.mount_path)
        if not any(e.get("name") == overlay.env_var for e in result["env"]):
            result["env"].append({"name": overlay.env_var, "value": overlay.mount_path})
        return result

    return _on_main_container(wire_pod(component, volume), add)


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


def _effective(lookup: Callable[[str, str, str | None], RuntimeObject | None],
               runtime: RuntimeObject) -> tuple[RuntimeCandidate | None, str]:
    """The runtime with its inheritance chain applied, or (None, why not)."""
    resolution = resolve(runtime, lookup)
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
        candidate, problem = _effective(_lookup(reader), _runtime_object(obj, kind))
        if candidate is None:
            raise Unresolvable(UnresolvableReason.RUNTIME_INHERITANCE, f"{where}: {problem}")
        verdict = check_runtime(candidate, model.spec, classes, versionless=model.versionless)
        if not verdict.compatible:
            raise Unresolvable(UnresolvableReason.RUNTIME_NOT_COMPATIBLE,
                               f"{where} cannot serve {model.description}: {'; '.join(verdict.reasons)}")
        return candidate, obj
    candidates: list[RuntimeCandidate] = []
    bodies: dict[tuple[str, str], dict[str, Any]] = {}
    skipped: list[str] = []
    # Every parent a candidate's ome.io/inherit-from can name is in these two lists: chains are
    # walked over them, with no read per parent.
    listed = [_runtime_object(obj, kind)
              for kind, scoped in ((RuntimeKind.NAMESPACED.value, namespace), (RuntimeKind.CLUSTER.value, None))
              for obj in reader.list(OME_GROUP, kind, scoped)]
    by_key = {(r.kind, r.name, r.namespace): r for r in listed}

    def lookup(kind: str, name: str, scope: str | None) -> RuntimeObject | None:
        return by_key.get((kind, name, scope))

    for runtime in listed:
        candidate, problem = _effective(lookup, runtime)
        if candidate is None:
            skipped.append(f"{runtime.kind} {runtime.name}: {problem}")
            continue
        candidates.append(candidate)
        bodies[(runtime.kind, candidate.name)] = runtime.body
    selection = select_runtime(model.spec, candidates, classes, versionless=model.versionless)
    if selection.chosen is None:
        compared = "; ".join([selection.explain(), *skipped]) if candidates or skipped else selection.explain()
        raise Unresolvable(UnresolvableReason.NO_RUNTIME,
                           f"no runtime can serve {model.description} ({_describe(model.spec)}): {compared}")
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


def runtime_piece(reader: Reader, kind: str, name: str, namespace: str | None, component: str) -> dict[str, Any]:
    """A runtime's piece for one component, its inheritance chain applied, as it renders without a
    model (an InferenceReplica naming only a runtimeRef). Raises Unresolvable when the runtime is
    missing, its chain does not resolve, or it declares no such piece."""
    scoped = namespace if kind == "ServingRuntime" else None
    obj = reader.get(OME_GROUP, kind, name, scoped)
    where = f"{kind} {scoped}/{name}" if scoped else f"{kind} {name}"
    if obj is None:
        raise Unresolvable(UnresolvableReason.RUNTIME_NOT_FOUND, f"{where} does not exist")
    candidate, why = _effective(_lookup(reader), _runtime_object(obj, kind))
    if candidate is None:
        raise Unresolvable(UnresolvableReason.RUNTIME_INHERITANCE, f"{where}: {why}")
    piece = _runtime_component(candidate.spec, component)
    if piece is None:
        raise Unresolvable(UnresolvableReason.RUNTIME_NOT_COMPATIBLE, f"{where} declares no {component} piece")
    return piece


def resolve_service(reader: Reader, isvc: dict[str, Any], artifacts: str | None = None) -> ResolvedService:
    """The concrete spec of `isvc` (the object as the apiserver returns it). `artifacts`:
    `<registry>/<repository>` of the in-cluster registry, where a Deckhouse model's artifact is."""
    spec = copy.deepcopy(isvc.get("spec") or {})
    model_ref = spec.get("model")
    if not model_ref:
        spec, chosen = apply_accelerators(spec, choose_accelerators(reader, isvc, spec, None))
        return ResolvedService(spec=spec, runtime=None, model=None, accelerators=chosen)
    namespace = str(isvc["metadata"]["namespace"])
    model = _model(reader, namespace, model_ref, artifacts)
    pin = _pinned(reader, isvc, model)
    pinned: str | None
    token: str | None
    if pin is not None:
        runtime, pinned, token = pin
    else:
        runtime, _ = _choose_runtime(reader, isvc, model)
        pinned = token = None
        if (spec.get("runtime") or {}).get("autoSync") is False:
            pinned, token = _snapshot(reader, isvc, runtime)
    weights = [_fine_tuned(reader, str(name)) for name in model_ref.get("fineTunedWeights") or []]
    overlays, skipped = _overlays(reader, namespace, model_ref.get("overlays") or [])
    merged_components = {c: m for c in COMPONENT_CONFIG
                         if (m := merge_component(_runtime_component(runtime.spec, c), spec.get(c))) is not None}
    # The classes first: a class a policy chose picks the runtime's per-class tuning like a named one.
    choices = choose_accelerators(reader, isvc, merged_components, runtime.spec.accelerator_requirements)
    tuning = _accelerator_tuning(isvc, runtime, model, choices)
    for component, merged in merged_components.items():
        if component in MODEL_COMPONENTS:
            merged = _each_part(merged, lambda part: _wire_part(part, model.mount, tuning, weights, overlays))
        spec[component] = merged
    spec, chosen = apply_accelerators(spec, choices)
    if spec.get("scalingPolicy") is None and runtime.spec.scaling_policy is not None:
        # Seed: the runtime's scalingPolicy is the default for services binding it, replaced wholesale by
        # the service's own when set.
        spec["scalingPolicy"] = runtime.spec.scaling_policy.model_dump(by_alias=True, exclude_none=True,
                                                                       mode="json")
    mounted = [{"name": o.name, "envVar": o.env_var, "mountPath": o.mount_path, "distribution": "PerNode"}
               for o in overlays]
    return ResolvedService(spec=spec, runtime=f"{runtime.kind.value}/{runtime.name}", model=model.description,
                           overlays=mounted, skipped_overlays=skipped, pinned_revision=pinned, sync_token=token,
                           accelerators=chosen)


def asks_for_accelerators(isvc: dict[str, Any]) -> bool:
    """The service (or one of its Engine / Decoder) names an AcceleratorClass or a selection policy."""
    return any(accelerator_selection.request_for(isvc, c) is not None
               for c in accelerator_selection.SELECTED_COMPONENTS)


# -- accelerators ------------------------------------------------------------------------------------


def _class_spec(obj: dict[str, Any] | None) -> AcceleratorClassSpec | None:
    """A class's spec, or None when it is absent or unreadable (then it is as good as absent)."""
    if obj is None:
        return None
    try:
        return AcceleratorClassSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        return None


def _classes(reader: Reader, requests: list[accelerator_selection.AcceleratorRequest],
             runtime: AcceleratorRequirements | None) -> dict[str, AcceleratorClassSpec]:
    """The classes the requests can choose among: those named (each by name), the runtime's list (each by
    name), or every class (one list) when a policy has no runtime list to choose from."""
    if any(r.named is None for r in requests) and not (runtime and runtime.accelerator_classes):
        listed = {str(o["metadata"]["name"]): _class_spec(o) for o in reader.list(OME_GROUP, "AcceleratorClass", None)}
        return {name: spec for name, spec in listed.items() if spec is not None}
    names = {r.named for r in requests if r.named is not None}
    if any(r.named is None for r in requests) and runtime and runtime.accelerator_classes:
        names.update(runtime.accelerator_classes)
    found = {name: _class_spec(reader.get(OME_GROUP, "AcceleratorClass", name, None)) for name in sorted(names)}
    return {name: spec for name, spec in found.items() if spec is not None}


def choose_accelerators(reader: Reader, isvc: dict[str, Any], spec: dict[str, Any],
                        runtime: AcceleratorRequirements | None) -> dict[str, accelerator_selection.Choice]:
    """The class each Engine / Decoder of `spec` that asks for an accelerator is served by
    (rendering/accelerator_selection.py). Raises Unresolvable (AcceleratorClassNotFound,
    NoAcceleratorClassMatches) for a request no class satisfies."""
    requests = [r for c in accelerator_selection.SELECTED_COMPONENTS
                if isinstance(spec.get(c), dict) and (r := accelerator_selection.request_for(isvc, c)) is not None]
    if not requests:
        return {}
    classes = _classes(reader, requests, runtime)
    choices = {}
    for request in requests:
        try:
            choices[request.component] = accelerator_selection.choose(request, classes, runtime)
        except accelerator_selection.NoAcceleratorClass as exc:
            raise Unresolvable(UnresolvableReason(exc.reason.value), exc.message) from exc
    return choices


def apply_accelerators(spec: dict[str, Any], choices: dict[str, accelerator_selection.Choice]
                       ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """`spec` with each chosen component rendered for its class, and the selections by component
    (AcceleratorSelection JSON)."""
    result, chosen = dict(spec), {}
    for component, choice in choices.items():
        result[component] = accelerator_selection.apply(result[component], choice)
        chosen[component] = accelerator_selection.selection(choice, result[component]).to_api()
    return result, chosen


# -- autoSync: false -------------------------------------------------------------------------------


def snapshot_name(runtime: RuntimeCandidate) -> str:
    """`<runtime>-<10 hex of the snapshot's content>`: the same effective spec, the same snapshot."""
    digest = hashlib.sha256(canonical_json(_snapshot_data(runtime))).hexdigest()[:10]
    return f"{runtime.name[:242]}-{digest}"


def _snapshot_data(runtime: RuntimeCandidate) -> dict[str, Any]:
    return {"kind": runtime.kind.value, "name": runtime.name, "spec": runtime.spec.to_api()}


def _sync_token(isvc: dict[str, Any]) -> str:
    return str(((isvc.get("metadata") or {}).get("annotations") or {}).get(RUNTIME_SYNC, ""))


def _snapshot(reader: Reader, isvc: dict[str, Any], runtime: RuntimeCandidate) -> tuple[str, str]:
    """Take a snapshot of the runtime as it is now: the new pin, at the current sync token."""
    name = snapshot_name(runtime)
    reader.save_snapshot(name, _snapshot_data(runtime))
    return name, _sync_token(isvc)


def _pinned(reader: Reader, isvc: dict[str, Any],
            model: ServedModel) -> tuple[RuntimeCandidate, str, str | None] | None:
    """autoSync false and a pin to keep: (the snapshot's runtime, its name, the sync token); None when
    the live runtime is to be used (autoSync true, no pin yet, or ome.io/runtime-sync moved on)."""
    ref = (isvc.get("spec") or {}).get("runtime") or {}
    if ref.get("autoSync") is not False:
        return None
    status = isvc.get("status") or {}
    name = ref.get("revision")
    token: str | None = None
    if not name:
        current, last = status.get("pinnedRevisionName"), status.get("lastRuntimeSyncToken") or ""
        token = _sync_token(isvc)
        if not current or token != last:
            return None  # first pin, or a sync asked for: snapshot the live runtime
        name = current
    data = reader.get_snapshot(str(name))
    if data is None:
        if ref.get("revision"):
            raise Unresolvable(UnresolvableReason.RUNTIME_REVISION_NOT_FOUND,
                               f"spec.runtime.revision {name} names no ControllerRevision in the controller "
                               "namespace")
        return None  # the pinned snapshot is gone: take a new one
    try:
        candidate = RuntimeCandidate(name=str(data["name"]), kind=RuntimeKind(data["kind"]),
                                     spec=ServingRuntimeSpec.model_validate(data.get("spec") or {}))
    except (KeyError, ValueError, ValidationError) as exc:
        raise Unresolvable(UnresolvableReason.RUNTIME_REVISION_NOT_FOUND,
                           f"ControllerRevision {name} holds no runtime snapshot: {exc}") from exc
    verdict = check_runtime(candidate, model.spec, _accelerator_classes(isvc), versionless=model.versionless)
    if not verdict.compatible:
        raise Unresolvable(UnresolvableReason.RUNTIME_NOT_COMPATIBLE,
                           f"pinned {candidate.kind.value} {candidate.name} ({name}) cannot serve {model.description}: "
                           f"{'; '.join(verdict.reasons)}")
    return candidate, str(name), token


def _each_part(component: dict[str, Any], wire: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """`wire` applied to the component and to its leader / worker pieces: a gang's pods render from
    those (multinode.py), so the model, weights, overlays and tuning go into each (upstream wires
    the leader's and the worker's runner alike)."""
    wired = wire(component)
    for role in ("leader", "worker"):
        if isinstance(component.get(role), dict):
            wired[role] = wire(component[role])
    return wired


def _wire_part(part: dict[str, Any], mount: ModelMount, tuning: AcceleratorModelConfig | None,
               weights: list[ModelMount], overlays: list[Overlay]) -> dict[str, Any]:
    if tuning is not None:
        part = _on_main_container(part, lambda c: accelerator_overrides.apply(c, tuning))
    part = _wire_model(part, mount)
    for weight in weights:
        part = _wire_weight(part, weight)
    for overlay in overlays:
        part = _wire_overlay(part, overlay)
    return part


def _wire_model(component: dict[str, Any], mount: ModelMount) -> dict[str, Any]:
    """The model into the component's (or a leader / worker piece's) pod and main container. With a
    runner, the runner is the main container and the renderer lays it over the listed container of
    its name key by key: so the runner itself carries the wiring, built on that container's env and
    mounts, or it would hide them."""
    runner = component.get("runner")
    if isinstance(runner, dict):
        name = runner.get("name") or MAIN_CONTAINER
        listed: dict[str, Any] = next((c for c in component.get("containers") or [] if c.get("name") == name), {})
        wired = wire_pod(component, mount)
        wired["runner"] = wire_container({**listed, **runner, "name": name}, mount)
    else:
        wired = attach_model(component, mount)
    return wired
