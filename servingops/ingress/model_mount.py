"""What the model webhook does to an object, as pure rules (no I/O): which model an object asks for, whether
that model may be used, and the JSONPatch that mounts its weights.

A workload names a model by annotation, on the Pod or on a workload's own metadata or its pod template:
`ai.deckhouse.io/model: <name>` (a Model of the object's namespace) or `ai.deckhouse.io/clustermodel: <name>`.
The weights arrive as a Kubernetes image volume (KEP-4639): the kubelet pulls the ModelPack artifact by digest
from the registry and mounts it read-only; nothing is copied by us. Every container and init container gets
the volume at `/models/<name>` and `MODEL_PATH` pointing there, except those named in
`ai.deckhouse.io/model-skip-containers` (comma-separated). Applying the rules to an object they already
mutated yields no patch: the apiserver re-invokes webhooks, and an unchanged object must stay unchanged.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servingops.api_models.deckhouse import workload
from servingops.api_models.deckhouse.enums import ModelPhase
from servingops.api_models.deckhouse.model import ClusterModel, Model
from servingops.api_models.deckhouse.workload import IMAGE_PULL_POLICY, MODEL_PATH_ENV, mount_path

MODEL_ANNOTATION = "ai.deckhouse.io/model"
CLUSTER_MODEL_ANNOTATION = "ai.deckhouse.io/clustermodel"
SKIP_ANNOTATION = "ai.deckhouse.io/model-skip-containers"
"""Comma-separated container names that get neither the mount nor MODEL_PATH (e.g. a proxy sidecar)."""
VOLUME_NAME = "deckhouse-model"
"""One model per pod, so one volume name, reserved: a volume of that name that is not ours is refused."""
ENV_NAME = MODEL_PATH_ENV
PULL_POLICY = IMAGE_PULL_POLICY

POD_SPEC_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
"""Where each admitted kind keeps the pod spec to mutate; its metadata is the path's parent's `metadata`."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONTAINER_LISTS = ("initContainers", "containers")


class Refused(Exception):
    """The object may not be admitted; the message is what the user reads."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class ModelRequest:
    """The model an object asks for: a Model of `namespace`, or a ClusterModel (namespace None)."""

    name: str
    namespace: str | None

    @property
    def kind(self) -> str:
        return Model.crd.kind if self.namespace is not None else ClusterModel.crd.kind

    @property
    def mount_path(self) -> str:
        return mount_path(self.name)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace is not None else f"{self.kind} {self.name}"


def annotation_sources(kind: str, obj: Mapping[str, Any]) -> list[Mapping[str, str]]:
    """The annotation maps that may name the model: the object's own, and its pod template's."""
    sources = [_annotations(obj)]
    path = POD_SPEC_PATHS[kind]
    if len(path) > 1:
        template = _get(obj, path[:-1])
        if isinstance(template, Mapping):
            sources.append(_annotations(template))
    return sources


def own_annotations(sources: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """Only the annotations these rules read, per source: what an update must change to concern them (a
    controller's own annotations, such as the Deployment's revision, do not)."""
    keys = (MODEL_ANNOTATION, CLUSTER_MODEL_ANNOTATION, SKIP_ANNOTATION)
    return [{k: source[k] for k in keys if k in source} for source in sources]


def requested(sources: Sequence[Mapping[str, str]], namespace: str) -> ModelRequest | None:
    """The model the annotations ask for, None when none does; Refused when they ask for it wrongly."""
    found: dict[str, set[str]] = {}
    for source in sources:
        for key in (MODEL_ANNOTATION, CLUSTER_MODEL_ANNOTATION):
            if key in source:
                found.setdefault(key, set()).add(source[key])
    if not found:
        return None
    if len(found) > 1:
        raise Refused(f"{MODEL_ANNOTATION} and {CLUSTER_MODEL_ANNOTATION} are both set: a workload uses one model; "
                      "remove one of them")
    [(key, values)] = found.items()
    if len(values) > 1:
        raise Refused(f"{key} is set to different models on the object and on its pod template "
                      f"({', '.join(sorted(repr(v) for v in values))}): set it once")
    [name] = values
    name = name.strip()
    if not name:
        raise Refused(f"{key} is empty: name the {'Model' if key == MODEL_ANNOTATION else 'ClusterModel'} to use")
    if key == MODEL_ANNOTATION and "/" in name:
        raise Refused(f"{key}: {name!r} names another namespace; a workload may use a Model of its own namespace "
                      f"({namespace}) only, by its name, or a ClusterModel through {CLUSTER_MODEL_ANNOTATION}")
    if len(name) > 253 or not _NAME.match(name):
        raise Refused(f"{key}: {name!r} is not a valid object name (lowercase DNS subdomain)")
    return ModelRequest(name, namespace if key == MODEL_ANNOTATION else None)


def artifact_reference(request: ModelRequest, model: Mapping[str, Any] | None, registry: str,
                       repository: str) -> str:
    """`<registry>/<repository>@<digest>` of a Ready model; Refused when it is missing or not Ready."""
    if model is None:
        where = f" in namespace {request.namespace}" if request.namespace is not None else ""
        raise Refused(f"{request} does not exist{where}: create it, or fix the annotation "
                      f"{MODEL_ANNOTATION if request.namespace is not None else CLUSTER_MODEL_ANNOTATION}")
    status = model.get("status") or {}
    phase = status.get("phase")
    if phase != ModelPhase.READY:
        ready: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        reason = ready.get("reason") or "none"
        message = f": {ready['message']}" if ready.get("message") else ""
        raise Refused(f"{request} is not Ready (phase {phase or 'none yet'}, reason {reason}{message}); "
                      "a workload can use it once status.phase is Ready")
    digest = (status.get("artifact") or {}).get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise Refused(f"{request} is Ready but reports no artifact digest (status.artifact.digest)")
    return workload.artifact_reference(f"{registry}/{repository}", digest)


def pod_spec_path(kind: str) -> tuple[str, ...]:
    return POD_SPEC_PATHS[kind]


def skipped_containers(sources: Iterable[Mapping[str, str]]) -> frozenset[str]:
    names: set[str] = set()
    for source in sources:
        names |= {n.strip() for n in source.get(SKIP_ANNOTATION, "").split(",") if n.strip()}
    return frozenset(names)


def mounted_spec(spec: Mapping[str, Any], request: ModelRequest, reference: str,
                 skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`spec` with the model's image volume, and its mount and MODEL_PATH in every container not skipped.

    A volume of ours naming another artifact (the model was re-created, or the annotation now names another
    model) is replaced, and MODEL_PATH follows the mount when it still points where our mount was; a
    MODEL_PATH the user set to anything else is theirs and is left alone (e.g. a subdirectory of the mount).
    """
    new = copy.deepcopy(dict(spec))
    volume = {"name": VOLUME_NAME, "image": {"reference": reference, "pullPolicy": PULL_POLICY}}
    volumes = list(new.get("volumes") or [])
    for index, existing in enumerate(volumes):
        if existing.get("name") == VOLUME_NAME:
            if "image" not in existing:
                raise Refused(f"the volume name {VOLUME_NAME!r} is reserved for the model's weights; rename that "
                              "volume")
            volumes[index] = volume
            break
    else:
        volumes.append(volume)
    new["volumes"] = volumes
    for field in _CONTAINER_LISTS:
        if field not in new:
            continue
        new[field] = [c if c.get("name") in skip else _mounted_container(c, request.mount_path)
                      for c in new[field] or []]
    return new


def _mounted_container(container: Mapping[str, Any], path: str) -> dict[str, Any]:
    new = dict(container)
    mounts = [dict(m) for m in container.get("volumeMounts") or []]
    previous: str | None = None
    for mount in mounts:
        if mount.get("mountPath") == path and mount.get("name") != VOLUME_NAME:
            raise Refused(f"container {container.get('name')!r} already mounts volume {mount.get('name')!r} at "
                          f"{path}, where the model's weights go")
    ours = {"name": VOLUME_NAME, "mountPath": path, "readOnly": True}
    for index, mount in enumerate(mounts):
        if mount.get("name") == VOLUME_NAME:
            previous = mount.get("mountPath")
            mounts[index] = ours
            break
    else:
        mounts.append(ours)
    new["volumeMounts"] = mounts
    env = [dict(e) for e in container.get("env") or []]
    for index, variable in enumerate(env):
        if variable.get("name") == ENV_NAME:
            if previous is not None and variable.get("value") == previous and "valueFrom" not in variable:
                env[index] = {"name": ENV_NAME, "value": path}
            break
    else:
        env.append({"name": ENV_NAME, "value": path})
    new["env"] = env
    return new


def spec_patch(spec_path: Sequence[str], old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch operations turning pod spec `old` into `new` at `spec_path`: one `add` (which replaces a
    member that exists) per top-level field that changed, none when nothing did."""
    base = "/" + "/".join(_escape(p) for p in spec_path)
    return [{"op": "add", "path": f"{base}/{_escape(field)}", "value": new[field]}
            for field in ("volumes", *_CONTAINER_LISTS) if field in new and old.get(field) != new[field]]


def pod_spec(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = _get(obj, POD_SPEC_PATHS[kind])
    if not isinstance(spec, Mapping):
        raise Refused(f"{kind} has no pod {'template ' if kind != 'Pod' else ''}spec to mount the model into")
    return spec


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _get(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")
