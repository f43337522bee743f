"""A component's effective spec from its runtime and its InferenceService, and the model wired in:
pure functions on the API's JSON (dicts), no I/O.

Merge (upstream OME's rule: a strategic merge patch of the service's component over the runtime's
`engineConfig` / `decoderConfig` / `routerConfig`):
- maps merge key by key, recursively; an explicit null in the override removes the key;
- lists whose Kubernetes type has a patch merge key merge element by element on that key
  (containers and initContainers by name, env by name, volumes by name, volumeMounts by mountPath,
  ports by containerPort, imagePullSecrets by name, ...), keeping the runtime's order and appending
  the service's new elements; every other list (args, command, tolerations, ...) is replaced whole;
- scalars are replaced.
A component the service does not name is not rendered, whatever the runtime configures (upstream).

The model (upstream's wiring, kept so OME images find their weights where they expect): a hostPath
volume named after the model at `storage.path`, mounted read-only at the same path in the main
container, `MODEL_PATH` set to it unless the container already sets it, and a nodeSelector on the
node label the agent writes when that node's copy is Ready. A model stored on a claim (pvc://) is the
claim itself, mounted read-only with the URI's sub-path as subPath at the same path (no node copy, no
nodeSelector: the scheduler places the pod where the claim can be mounted).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from servingops.api_models.deckhouse.workload import IMAGE_PULL_POLICY, MODEL_PATH_ENV

READY = "Ready"

# Kubernetes' patch merge keys for the list fields that can appear in a component's pod spec.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}


def strategic_merge(base: Any, override: Any, field: str | None = None) -> Any:
    """`override` merged over `base` (neither is modified)."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = copy.deepcopy(base)
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value, key)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(override, list) and field in MERGE_KEYS:
        return _merge_keyed(base, override, MERGE_KEYS[field], field)
    return copy.deepcopy(override)


def _merge_keyed(base: list[Any], override: list[Any], key: str, field: str) -> list[Any]:
    merged = [copy.deepcopy(item) for item in base]
    index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict) and key in item}
    for item in override:
        if isinstance(item, dict) and item.get(key) in index:
            position = index[item[key]]
            merged[position] = strategic_merge(merged[position], item, field)
        else:
            merged.append(copy.deepcopy(item))
    return merged


def merge_component(
    runtime_config: dict[str, Any] | None, isvc_component: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The effective component: None when the service does not name it."""
    if isvc_component is None:
        return None
    if runtime_config is None:
        return copy.deepcopy(isvc_component)
    merged = strategic_merge(runtime_config, isvc_component)
    assert isinstance(merged, dict)
    return merged


@dataclass(frozen=True)
class ModelMount:
    """What a serving pod needs of a model: a node copy the agents keep (hostPath, node label), or
    an OCI artifact the kubelet pulls by digest (an image volume, for a Deckhouse Model)."""

    volume_name: str
    """The model's name (a DNS label, so a valid volume name)."""
    path: str
    """Where the container sees the weights (for a node copy, also where it lives on the node)."""
    node_label: str | None
    """The node label the agent sets to Ready once the node's copy is complete (None: image volume)."""
    image: str | None = None
    """`<registry>/<repository>@sha256:...` of the model's artifact, mounted as an image volume."""
    claim: str | None = None
    """A PersistentVolumeClaim of the pod's namespace holding the model (pvc://): mounted read-only."""
    sub_path: str = ""
    """With `claim`: the model's directory inside it, the mount's subPath ("" for the claim's root)."""


def main_container(pod: dict[str, Any], preferred: str | None = None) -> dict[str, Any] | None:
    """The container serving the model: the one named `preferred` (the runner's), else the first."""
    containers = pod.get("containers") or []
    for container in containers:
        if preferred and container.get("name") == preferred:
            return dict(container)
    return dict(containers[0]) if containers else None


def wire_container(container: dict[str, Any], mount: ModelMount) -> dict[str, Any]:
    """A copy of `container` seeing the model read-only at its path, with MODEL_PATH unless set."""
    result = copy.deepcopy(container)
    mounts = result.setdefault("volumeMounts", [])
    if not any(m.get("mountPath") == mount.path for m in mounts):
        volume_mount: dict[str, Any] = {"name": mount.volume_name, "mountPath": mount.path, "readOnly": True}
        if mount.claim is not None and mount.sub_path:
            volume_mount["subPath"] = mount.sub_path
        mounts.append(volume_mount)
    env = result.setdefault("env", [])
    if not any(e.get("name") == MODEL_PATH_ENV for e in env):
        env.append({"name": MODEL_PATH_ENV, "value": mount.path})
    return result


def wire_pod(pod: dict[str, Any], mount: ModelMount) -> dict[str, Any]:
    """A copy of `pod` with the model's volume (hostPath of the node copy and a nodeSelector on a Ready
    copy, the model's claim, or the artifact's image volume: any node can pull it); no container touched."""
    result = copy.deepcopy(pod)
    volumes = result.setdefault("volumes", [])
    if not any(v.get("name") == mount.volume_name for v in volumes):
        if mount.claim is not None:
            volumes.append({"name": mount.volume_name,
                            "persistentVolumeClaim": {"claimName": mount.claim, "readOnly": True}})
        elif mount.image is not None:
            volumes.append({"name": mount.volume_name, "image": {"reference": mount.image,
                                                                  "pullPolicy": IMAGE_PULL_POLICY}})
        else:
            volumes.append({"name": mount.volume_name, "hostPath": {"path": mount.path, "type": "Directory"}})
    if mount.node_label is not None:
        selector = result.setdefault("nodeSelector", {})
        selector.setdefault(mount.node_label, READY)
    return result


def attach_model(pod: dict[str, Any], mount: ModelMount, container_name: str | None = None) -> dict[str, Any]:
    """A copy of `pod` (a pod spec, or a component spec holding one) with the model wired into the
    pod and its main container (`container_name`, else the first)."""
    result = wire_pod(pod, mount)
    target = main_container(result, container_name)
    if target is not None:
        result["containers"] = [
            wire_container(c, mount) if c.get("name") == target.get("name") else c for c in result["containers"]
        ]
    return result
