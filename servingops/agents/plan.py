"""What the agent should do about one model on its node: a pure decision from the raw object and the Node.

The contract with the delivery workflow (docs/serving.md "Node agent"): the workflow writes
`servingops.io/artifact: <registry>/<repository>@sha256:<digest>` on a (Cluster)BaseModel or
FineTunedWeight whose weights are in the registry; the agent copies that digest (never a tag) to
`<node root>/<storage.path>` on the nodes the storage spec selects. `local://` models have nothing to
copy. Anything else (no annotation yet, an hf:// model still importing) is not the agent's business.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from servingops.agents.matcher import InvalidRequirement, node_matches
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION, ModelKey

REUSE_IF_EXISTS = "ReuseIfExists"

_ARTIFACT = re.compile(
    r"^(?P<registry>[^/@\s]+)/(?P<repository>[a-z0-9][a-z0-9._/-]*)@(?P<digest>sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class ArtifactRef:
    registry: str
    repository: str
    digest: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"


@dataclass(frozen=True)
class Remove:
    """No copy belongs on this node: delete it (if any) and forget the model's label and report."""

    reason: str


@dataclass(frozen=True)
class Copy:
    """Pull `artifact` into `path` (relative to the node root, no leading slash)."""

    artifact: ArtifactRef
    path: str
    reuse: bool


@dataclass(frozen=True)
class Local:
    """A local:// model: Ready when `path` (relative to the node root) exists on the node."""

    path: str


@dataclass(frozen=True)
class Hold:
    """Nothing can be decided (the agent's Node cannot be read): leave the copy and the report as they are.
    A Node missing for a moment (re-registered) must not cost the node every copy it holds."""

    reason: str


@dataclass(frozen=True)
class Invalid:
    """Selected, but the spec cannot be acted on: report Failed with this message."""

    message: str


Decision = Remove | Copy | Local | Invalid | Hold


def parse_artifact(value: str) -> ArtifactRef:
    match = _ARTIFACT.match(value.strip())
    if not match:
        raise ValueError(f"{ARTIFACT_ANNOTATION}={value!r} is not <registry>/<repository>@sha256:<digest>")
    return ArtifactRef(match["registry"], match["repository"], match["digest"])


def node_relative(path: str) -> str:
    """An absolute node path as a path under the node root; refuses anything that climbs out."""
    norm = posixpath.normpath("/" + path)
    if "\x00" in path or norm == "/":
        raise ValueError(f"storage.path {path!r} is not a directory for a model")
    return norm.lstrip("/")


def default_path(key: ModelKey) -> str:
    return key.copy_path(None)


def decide(key: ModelKey, obj: Mapping[str, Any] | None, node: Mapping[str, Any] | None,
           registry: str) -> Decision:
    """The decision for `key` on this node. `registry` is the only registry the agent pulls from."""
    if obj is None:
        return Remove("the object is gone")
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return Remove("the object is being deleted")
    if node is None:
        return Hold("this agent's Node cannot be read")
    storage = (obj.get("spec") or {}).get("storage") or {}
    try:
        if not node_matches(storage, node):
            return Remove("the node is not selected by storage.nodeSelector / nodeAffinity")
    except InvalidRequirement as exc:
        return Invalid(f"storage.nodeAffinity: {exc}")
    uri: str = storage.get("storageUri") or ""
    raw_path: str = storage.get("path") or ""
    if uri.startswith("local://"):
        try:
            return Local(node_relative(raw_path or uri.removeprefix("local://")))
        except ValueError as exc:
            return Invalid(str(exc))
    annotation = (meta.get("annotations") or {}).get(ARTIFACT_ANNOTATION)
    if not annotation:
        return Remove(f"no {ARTIFACT_ANNOTATION} annotation: nothing in the registry to copy yet")
    try:
        artifact = parse_artifact(annotation)
        path = node_relative(raw_path or default_path(key))
    except ValueError as exc:
        return Invalid(str(exc))
    if artifact.registry != registry:
        return Invalid(f"artifact {artifact} is in registry {artifact.registry}, this agent pulls only from {registry}")
    return Copy(artifact, path, storage.get("downloadPolicy") == REUSE_IF_EXISTS)
