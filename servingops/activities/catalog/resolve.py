"""A Model's or ClusterModel's `spec.source.catalog` resolved against this cluster's catalog sources.

Seed 000: `sourceName` selects a ModelCatalogSource; "when omitted, the controller may use the only
Ready ModelCatalogSource in the cluster". The resolution reads the source's stored index (the OCI
artifact `status.catalogRevision` names, activities/catalog/store.py), never the provider: what is
imported is what the catalog listed at that revision, and the model freezes it in
`status.source.catalog` (sourceName, name, version, catalogRevision, remoteDigest) so a later refresh
never changes it.

Each refusal has its own reason (api_models/errors.py): `CatalogSourceNotFound` (the named source does
not exist), `CatalogSourceAmbiguous` (no sourceName and not exactly one Ready source; the message lists
them), `CatalogSourceNotReady` (the named source has no stored index yet: transient, retried),
`CatalogEntryNotFound` (the index has no such name, or not at that version).

A HuggingFace entry is named by its public name (activities/catalog/names.py: `Qwen/Qwen2.5-7B` is
`qwen--qwen2.5-7b`), and imports through the Hugging Face path at the indexed commit (the url
`https://huggingface.co/<repo>/tree/<sha>`, the worker's Hub endpoint applies), with the source's
token Secret from the controller namespace when it names one. A `type: Catalog` source's entry is read
from the stored RemoteIndex (activities/catalog/store.py `catalog.store_remote_index`) by name (and
version; several versions of one name: the greatest) and pinned by its `remote_digest`; the model
workflow copies that artifact by digest (`catalog.copy_artifact`).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from kubernetes import client
from pydantic import BaseModel, ValidationError
from temporalio import activity

from servingops.activities.catalog.artifacts import catalog_repository
from servingops.activities.catalog.index_document import parse_index
from servingops.activities.catalog.names import public_names
from servingops.activities.oci.activities import CredentialsResolver, RegistryTarget, open_registry
from servingops.api_models.deckhouse.model import ResolvedModel
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.refs import ObjectRef
from servingops.clients.catalog_remote import CatalogRemoteError
from servingops.clients.catalog_remote import parse_index as parse_remote_index
from servingops.clients.kube.calls import list_items

GROUP, VERSION, PLURAL = "ai.deckhouse.io", "v1alpha1", "modelcatalogsources"
HF_URL = "https://huggingface.co"


class CatalogResolveInput(BaseModel):
    model: ObjectRef
    name: str
    version: str | None = None
    source_name: str | None = None
    catalog_revision: str | None = None
    """A resolution frozen on the object already: that index, not the source's newest."""


class CatalogResolution(BaseModel):
    """What the model freezes, and how to import it."""

    source_name: str
    source_type: str
    name: str
    version: str | None
    catalog_revision: str
    remote_digest: str | None = None
    """The pinned upstream OCI artifact digest (a Catalog source's entry); None for a HuggingFace one."""
    url: str | None = None
    """HuggingFace: the repository at the indexed commit."""
    token_secret_name: str | None = None
    token_secret_namespace: str | None = None
    remote_url: str | None = None
    """Catalog: the source's spec.url (the remote catalog endpoint the copy asks for its grant)."""
    ca_secret_name: str | None = None
    """Catalog: spec.caSecretName (a Secret of the controller namespace, read by the copy activity)."""
    credentials_secret_name: str | None = None
    """Catalog: spec.credentialsSecretName (likewise)."""
    media_type: str | None = None
    """Catalog: the entry's artifactType, else its manifest media type."""
    size_bytes: int | None = None
    """Catalog: the entry's size as the remote published it."""
    resolved: dict[str, Any] | None = None
    """Catalog: the entry's resolved metadata (status.resolved of the remote model) when it is valid here."""


def _ready(source: dict[str, Any]) -> bool:
    status = source.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and bool(status.get("catalogRevision"))


def choose_source(sources: list[dict[str, Any]], source_name: str | None) -> dict[str, Any]:
    """The source to resolve against, or the refusal with its reason."""
    if source_name:
        named = [s for s in sources if s["metadata"]["name"] == source_name]
        if not named:
            raise application_error(ErrorType.CATALOG_SOURCE_NOT_FOUND,
                                    f"ModelCatalogSource {source_name} does not exist")
        if not (named[0].get("status") or {}).get("catalogRevision"):
            raise application_error(ErrorType.CATALOG_SOURCE_NOT_READY,
                                    f"ModelCatalogSource {source_name} has no stored index yet")
        return named[0]
    ready = sorted((s for s in sources if _ready(s)), key=lambda s: str(s["metadata"]["name"]))
    if len(ready) != 1:
        listed = ", ".join(s["metadata"]["name"] for s in ready) or "none"
        raise application_error(ErrorType.CATALOG_SOURCE_AMBIGUOUS, (
            f"spec.source.catalog.sourceName is omitted and {len(ready)} ModelCatalogSources are Ready "
            f"({listed}); exactly one must be, or name the source"))
    return ready[0]


class CatalogResolveActivities:
    def __init__(self, api_client: client.ApiClient, controller_namespace: str, registry: RegistryTarget,
                 credentials: CredentialsResolver | None = None) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.controller_namespace = controller_namespace
        self.registry = registry
        self.credentials = credentials

    def all(self) -> list[Any]:
        return [self.resolve]

    def _index(self, source_name: str, revision: str) -> bytes:
        target = self.registry.model_copy(update={"repository": catalog_repository(source_name)})
        with open_registry(target, self.credentials) as registry:
            manifest = registry.fetch_manifest(target.repository, revision)
            if manifest is None:
                raise application_error(ErrorType.CATALOG_ENTRY_NOT_FOUND, (
                    f"catalog {source_name}: its index {revision} is not in the registry"))
            layers = manifest.json.get("layers") or []
            if len(layers) != 1:
                raise application_error(ErrorType.INVALID_INPUT, f"catalog {source_name}: {revision} is not an index")
            with tempfile.TemporaryDirectory() as work:
                path = Path(work) / "index.json"
                registry.pull_blob_to(target.repository, str(layers[0]["digest"]), path)
                return path.read_bytes()

    def _remote_entry(self, inp: CatalogResolveInput, name: str, spec: dict[str, Any],
                      revision: str) -> CatalogResolution:
        """A type Catalog source's entry, from its stored RemoteIndex: pinned by the remote's digest."""
        try:
            index = parse_remote_index(json.loads(self._index(name, revision)), f"catalog {name} ({revision})")
        except CatalogRemoteError as exc:
            raise application_error(ErrorType.INVALID_INPUT, f"the stored index is unreadable: {exc}") from None
        except ValueError:
            raise application_error(ErrorType.INVALID_INPUT,
                                    f"catalog {name} ({revision}): the stored index is not JSON") from None
        found = sorted(index.find(inp.name, inp.version), key=lambda e: (e.version or "", e.digest))
        if not found:
            at = f" at version {inp.version}" if inp.version else ""
            raise application_error(ErrorType.CATALOG_ENTRY_NOT_FOUND, (
                f"catalog {name} (revision {revision}) lists no {inp.name}{at}"))
        entry = found[-1]
        resolved = None
        if entry.resolved:
            try:
                resolved = ResolvedModel.model_validate(entry.resolved).model_dump(mode="json", by_alias=True,
                                                                                   exclude_none=True)
            except ValidationError:
                activity.logger.warning("catalog %s: the resolved metadata of %s does not validate; left out",
                                        name, inp.name)
        return CatalogResolution(
            source_name=name, source_type="Catalog", name=inp.name, version=entry.version,
            catalog_revision=revision, remote_digest=entry.digest, remote_url=str(spec.get("url") or ""),
            ca_secret_name=spec.get("caSecretName"), credentials_secret_name=spec.get("credentialsSecretName"),
            media_type=entry.artifact_type or entry.media_type, size_bytes=entry.size_bytes, resolved=resolved)

    @activity.defn(name="catalog.resolve")
    def resolve(self, inp: CatalogResolveInput) -> CatalogResolution:
        source = choose_source(list_items(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL),
                               inp.source_name)
        name = str(source["metadata"]["name"])
        spec, status = source.get("spec") or {}, source.get("status") or {}
        source_type = str(spec.get("type") or "Catalog")
        revision = inp.catalog_revision or str(status["catalogRevision"])
        if source_type != "HuggingFace":
            return self._remote_entry(inp, name, spec, revision)
        by_id = {e.name: e for e in parse_index(self._index(name, revision))}
        repo_id = public_names(by_id).get(inp.name)
        entry = by_id.get(repo_id) if repo_id else None
        if entry is None or (inp.version and inp.version != entry.revision):
            at = f" at version {inp.version}" if inp.version else ""
            raise application_error(ErrorType.CATALOG_ENTRY_NOT_FOUND, (
                f"catalog {name} (revision {revision}) lists no {inp.name}{at}"))
        token = (spec.get("huggingFace") or {}).get("tokenSecretName")
        return CatalogResolution(
            source_name=name, source_type=source_type, name=inp.name, version=entry.revision,
            catalog_revision=revision, url=f"{HF_URL}/{entry.name}/tree/{entry.revision}",
            token_secret_name=token, token_secret_namespace=self.controller_namespace if token else None)
