"""Activities of base model delivery: read the object, fill its spec from an inspection, set the
artifact annotation the node agents act on, read the agents' per-node reports, check a PVC, and
resolve a ModelPack tag to a digest.

Bound at worker start to the Kubernetes client, the controller namespace (where a cluster-scoped
model's token Secret and the agents' report ConfigMaps live) and the registry credentials resolver.
All are plain `def`s (blocking client calls in the worker's thread pool) and idempotent: reads, a
merge of missing spec fields under the read resourceVersion, an annotation set to a value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client
from temporalio import activity

from servingops.activities.basemodels.metadata import spec_changes
from servingops.activities.basemodels.types import (
    AnnotateInput,
    BaseModelView,
    FillSpecInput,
    FillSpecResult,
    NodeEntry,
    NodeReportsInput,
    PvcCheck,
    PvcInput,
    ResolveTagInput,
)
from servingops.activities.oci.activities import CredentialsResolver
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION, STATUS_CONFIGMAP_LABEL, ModelKey, ModelKind
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import get_or_none, list_items
from servingops.clients.kube.custom_objects import CustomObjects
from servingops.clients.oci.registry_client import ModelRegistry, RegistryError

_METADATA_KINDS = frozenset({"BaseModel", "ClusterBaseModel"})


class BaseModelActivities:
    def __init__(self, api_client: client.ApiClient, controller_namespace: str,
                 credentials: CredentialsResolver | None = None, *, reports_namespace: str | None = None) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self._objects = CustomObjects(self.custom)
        self.core = client.CoreV1Api(api_client)
        self.controller_namespace = controller_namespace
        self.reports_namespace = reports_namespace or controller_namespace
        self._credentials = credentials

    def all(self) -> list[Callable[..., Any]]:
        return [self.read, self.fill_spec, self.annotate, self.node_reports, self.check_pvc, self.resolve_tag]

    # -- objects --------------------------------------------------------------------------------

    @activity.defn(name="basemodel.read")
    def read(self, ref: ObjectRef) -> BaseModelView | None:
        """The object's generation, deletion, storage and artifact annotation; None when it is gone."""
        obj = self._objects.get(ref)
        if obj is None:
            return None
        meta = obj["metadata"]
        return BaseModelView(
            generation=int(meta.get("generation", 0)),
            deleting=bool(meta.get("deletionTimestamp")),
            storage=dict((obj.get("spec") or {}).get("storage") or {}),
            artifact=(meta.get("annotations") or {}).get(ARTIFACT_ANNOTATION),
            secret_namespace=ref.namespace or self.controller_namespace,
            fills_metadata=ref.kind in _METADATA_KINDS,
        )

    @activity.defn(name="basemodel.fill_spec")
    def fill_spec(self, req: FillSpecInput) -> FillSpecResult:
        """Set the spec fields the inspection states and the live object leaves empty (decided on
        each read, so a value the user sets meanwhile wins), and return the resulting generation."""
        filled: list[str] = []

        def mutate(obj: dict[str, Any]) -> bool:
            spec = obj.setdefault("spec", {})
            changes = spec_changes(spec, req.derived)
            filled[:] = sorted(changes)
            spec.update(changes)
            return bool(changes)

        obj = self._objects.update(req.ref, mutate)
        if obj is None:
            return FillSpecResult(generation=None)
        return FillSpecResult(generation=int(obj["metadata"].get("generation", 0)), filled=filled)

    @activity.defn(name="basemodel.annotate")
    def annotate(self, req: AnnotateInput) -> bool:
        """Set (or, with None, remove) the artifact annotation; False when the object is gone."""

        def mutate(obj: dict[str, Any]) -> bool:
            annotations = dict(obj["metadata"].get("annotations") or {})
            if annotations.get(ARTIFACT_ANNOTATION) == req.value:
                return False
            if req.value is None:
                annotations.pop(ARTIFACT_ANNOTATION, None)
            else:
                annotations[ARTIFACT_ANNOTATION] = req.value
            obj["metadata"]["annotations"] = annotations
            return True

        return self._objects.update(req.ref, mutate) is not None

    # -- node reports ---------------------------------------------------------------------------

    @activity.defn(name="basemodel.node_reports")
    def node_reports(self, req: NodeReportsInput) -> list[NodeEntry]:
        """This model's entry in every node agent's report ConfigMap, for nodes that still exist
        (a report left by a deleted node does not count, as upstream's controller skips it). The
        entry is found under the model's key (api_models/ome/model_keys.py, upstream's spelling) and
        must name the same kind, namespace and name (a truncated key cannot mix two models up)."""
        key = ModelKey(ModelKind(req.kind), req.namespace or "", req.name).configmap_key
        maps = list_items(self.core.list_namespaced_config_map, self.reports_namespace,
                          label_selector=f"{STATUS_CONFIGMAP_LABEL}=true")
        nodes = {n.metadata.name for n in list_items(self.core.list_node) if n.metadata is not None}
        entries: list[NodeEntry] = []
        for cm in maps:
            node = cm.metadata.name if cm.metadata is not None else None
            if node not in nodes:
                continue
            raw = (cm.data or {}).get(key)
            if raw is None:
                continue
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or (entry.get("kind"), entry.get("namespace") or None,
                                                   entry.get("name")) != (req.kind, req.namespace or None, req.name):
                continue
            entries.append(NodeEntry(node=node, status=str(entry.get("status", "")),
                                     digest=str(entry.get("digest") or ""),
                                     message=str(entry.get("message") or "")[:512]))
        return sorted(entries, key=lambda e: e.node)

    # -- pvc:// and modelpack:// ----------------------------------------------------------------

    @activity.defn(name="basemodel.check_pvc")
    def check_pvc(self, req: PvcInput) -> PvcCheck:
        """Whether the claim exists, and its phase."""
        pvc = get_or_none(self.core.read_namespaced_persistent_volume_claim, req.name, req.namespace)
        if pvc is None:
            return PvcCheck(found=False)
        return PvcCheck(found=True, phase=(pvc.status.phase if pvc.status else None))

    @activity.defn(name="basemodel.resolve_tag")
    def resolve_tag(self, req: ResolveTagInput) -> str:
        """The manifest digest a ModelPack tag names now (a tag moves; the agents pull only digests)."""
        target = req.target
        creds = None
        if target.credentials_secret is not None and self._credentials is not None:
            creds = self._credentials(target.credentials_secret, target.address)
        registry = ModelRegistry(target.address, insecure=target.insecure, tls_verify=target.tls_verify,
                                 credentials=creds)
        where = f"{target.address}/{target.repository}:{req.tag}"
        try:
            found = registry.fetch_manifest(target.repository, req.tag)
        except RegistryError as exc:
            error = ErrorType.REGISTRY_UNAVAILABLE if exc.retryable else ErrorType.REGISTRY_ERROR
            raise application_error(error, f"{where}: {exc}") from exc
        except ValueError as exc:
            raise application_error(ErrorType.INVALID_INPUT, f"{where}: {exc}") from exc
        finally:
            registry.close()
        if found is None:
            raise application_error(ErrorType.SOURCE_NOT_FOUND, f"{where}: no such tag in the registry")
        return found.digest
