"""A fake world for CatalogSourceWorkflow: one ModelCatalogSource in memory, a scripted Hub index, a
recording registry and schedule, under the real activity names (kube.read_object, kube.patch_status,
catalog.index_huggingface, catalog.store_index, catalog.fetch_remote_index,
catalog.store_remote_index, catalog.refresh_remote_index, catalog.ensure_schedule, catalog.delete_schedule).

Used by tests/test_catalog_workflow.py and the recorded scenarios (tests/histories/catalog_scenarios.py):
it speaks the wire contract only (activity names, JSON payloads)."""

from __future__ import annotations

import base64
import copy
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.catalog.artifacts import catalog_repository, sha256_of
from servingops.activities.catalog.huggingface_index import result_of
from servingops.activities.catalog.index_document import index_of
from servingops.activities.catalog.policy import evaluate_policy
from servingops.activities.catalog.store import (
    REMOTE_INDEX_MEDIA_TYPE,
    index_manifest,
    remote_index_digest,
    remote_index_document,
)
from servingops.activities.catalog.types import CatalogEntry, ScanCursor, ScanProgress, ScanState
from servingops.api_models.conditions import merge_conditions
from servingops.api_models.deckhouse.catalog_source import CatalogPolicy
from servingops.api_models.refs import ConditionUpdate
from servingops.clients.catalog_remote import RemoteIndex, index_document

SCOPED = {"allowedOrganizations": ["devstack"], "maxIndexedEntries": 100, "refreshBudget": "5m"}
"""A policy the rule allows."""
REGISTRY = "127.0.0.1:5000"
"""The fake worker's registry address (the stored index's reference names it)."""
OFFLOADED: dict[str, str] = {}
"""The registry's scan bodies (scan_store.py): packed_digest -> the packed (base64) body. `complete(...,
offloaded=True)` puts a body here as the real index activity pushes it; the fake store reads it back."""


EMPTY_RESULT: dict[str, Any] = {"blocked_reason": None, "message": "", "complete": False, "progress": None,
                                "digest": None, "entry_count": 0, "truncated": False, "skipped_oversized": 0,
                                "skipped_inaccessible": 0, "missing": []}


def entries(*names: str, revision: str = "a" * 40) -> list[CatalogEntry]:
    return [CatalogEntry(name=f"devstack/{n}", revision=revision, tags=("text-generation",)) for n in names]


def complete(found: list[CatalogEntry], *, offloaded: bool = False) -> dict[str, Any]:
    """What catalog.index_huggingface returns for a finished scan of `found`; `offloaded`: as a worker with a
    registry returns it, the body replaced by its digest (scan_store.py)."""
    state = ScanState(scope_digest="s" * 64, cursor=None, entries={e.name: e for e in found})
    result = result_of(state).model_dump(mode="json")
    if offloaded:
        result["progress"] = offload(result["progress"])
    return result


def offload(progress: dict[str, Any]) -> dict[str, Any]:
    """`progress` as the index activity returns it from a worker with a registry: the body pushed as a blob (its
    digest that of the zlib bytes, scan_store.offload) and replaced by that digest."""
    body = progress["packed"]
    if not body:
        return progress
    digest = sha256_of(base64.b64decode(body))
    OFFLOADED[digest] = body
    return {**progress, "packed": "", "packed_digest": digest}


def yielded(found: list[CatalogEntry], offset: int) -> dict[str, Any]:
    """What it returns when the refresh budget ran out after `found`, at listing offset `offset`."""
    cursor = ScanCursor(phase="organizations", item=0, listing=0, offset=offset)
    state = ScanState(scope_digest="s" * 64, cursor=cursor, entries={e.name: e for e in found})
    return result_of(state).model_dump(mode="json")


def remote_index(*names: str, repository: str = "servingops/models") -> dict[str, Any]:
    """What catalog.fetch_remote_index returns for a remote publishing `names` (one artifact each)."""
    found = [{"name": n, "digest": "sha256:" + hashlib.sha256(n.encode()).hexdigest(),
              "mediaType": "application/vnd.oci.image.manifest.v1+json", "sizeBytes": 1000} for n in names]
    body, _ = index_document(found, repository)
    return RemoteIndex.model_validate_json(body).model_dump(mode="json", by_alias=True, exclude_none=True)


def failure(reason: str, message: str, *, permanent: bool) -> ApplicationError:
    return ApplicationError(message, type=reason, non_retryable=permanent)


# The failures as the real activities raise them (type, retryability and wording: tests/test_catalog_conformance.py).


def hub_unreachable(org: str = "devstack") -> ApplicationError:
    """catalog.index_huggingface when the Hub does not answer: retryable."""
    return failure("SourceUnavailable", f"listing the models of {org}: ConnectError: [Errno 111] Connection refused",
                   permanent=False)


def token_rejected() -> ApplicationError:
    """catalog.index_huggingface with a token the Hub does not know: permanent (the workflow retries it later)."""
    return failure("SourceAccessDenied", "checking the source's token: HTTP 401, the token is invalid or lacks access",
                   permanent=True)


def remote_credentials_rejected(source: str, url: str) -> ApplicationError:
    """catalog.refresh_remote_index when the remote refuses the source's credential: permanent."""
    return failure("CatalogCredentialsRejected",
                   f"catalog source {source}: GET {url}/catalog/v1/index: the endpoint rejected the catalog "
                   "credential (HTTP 401); check the source's credentialsSecretName (key token)", permanent=True)


def invalid_input(message: str) -> ApplicationError:
    return failure("InvalidInput", message, permanent=True)


def stored(source: str, document: bytes, digest: str, entry_count: int,
           media_type: str | None = None) -> dict[str, Any]:
    """What catalog.store_index / store_remote_index answer: the manifest digest is a pure function of the document
    (store.index_manifest), so the fake's revision is the real one; only the registry address differs."""
    manifest = (index_manifest(source, digest, len(document), entry_count) if media_type is None
                else index_manifest(source, digest, len(document), entry_count, media_type))
    revision = sha256_of(manifest)
    return {"revision": revision, "document_digest": digest, "entry_count": entry_count,
            "reference": f"{REGISTRY}/{catalog_repository(source)}@{revision}"}


Answer = dict[str, Any] | ApplicationError | Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class FakeCatalogWorld:
    name: str = "hub"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    spec: dict[str, Any] = field(default_factory=lambda: {"type": "HuggingFace", "policy": dict(SCOPED),
                                                          "refreshInterval": "10m"})
    generation: int = 1
    present: bool = True
    status: dict[str, Any] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    """Scripted index answers, one per attempt; the last one repeats."""
    clock: Callable[[], float] | None = None
    remote_answers: list[Answer] = field(default_factory=list)
    """Scripted catalog.fetch_remote_index answers (a type Catalog source), one per attempt; the last repeats."""
    remote_calls: list[dict[str, Any]] = field(default_factory=list)
    index_calls: list[dict[str, Any]] = field(default_factory=list)
    index_times: list[float] = field(default_factory=list)
    stores: list[dict[str, Any]] = field(default_factory=list)
    patches: list[dict[str, Any]] = field(default_factory=list)
    schedules: list[dict[str, Any]] = field(default_factory=list)
    deleted_schedules: list[str] = field(default_factory=list)
    live_schedules: set[str] = field(default_factory=set)
    """The schedule ids that exist (the Temporal server's)."""

    # -- the object ---------------------------------------------------------------------------------

    def ref(self) -> dict[str, Any]:
        return {"group": "ai.deckhouse.io", "version": "v1alpha1", "plural": "modelcatalogsources",
                "kind": "ModelCatalogSource", "name": self.name, "uid": self.uid}

    def workflow_id(self) -> str:
        return f"catalog/{self.name}/{self.uid}"

    def event(self, **extra: Any) -> dict[str, Any]:
        return {"uid": self.uid, "generation": self.generation, "resource_version": str(self.generation), **extra}

    def change_spec(self, **spec: Any) -> None:
        self.spec = {**self.spec, **spec}
        self.generation += 1

    def ready(self) -> tuple[str, str] | None:
        found = next((c for c in self.status.get("conditions") or [] if c["type"] == "Ready"), None)
        return (found["status"], found["reason"]) if found else None

    def ready_message(self) -> str:
        found = next((c for c in self.status.get("conditions") or [] if c["type"] == "Ready"), None)
        return str(found["message"]) if found else ""

    @property
    def events(self) -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for p in self.patches for e in p.get("events") or []]

    # -- the activities -----------------------------------------------------------------------------

    def activities(self) -> list[Any]:
        @activity.defn(name="kube.read_object")
        async def read_object(ref: dict[str, Any]) -> dict[str, Any] | None:
            if not self.present:
                return None
            return {"apiVersion": "ai.deckhouse.io/v1alpha1", "kind": "ModelCatalogSource",
                    "metadata": {"name": self.name, "uid": self.uid, "generation": self.generation},
                    "spec": copy.deepcopy(self.spec), "status": copy.deepcopy(self.status)}

        @activity.defn(name="kube.patch_status")
        async def patch_status(patch: dict[str, Any]) -> bool:
            if not self.present:
                return False
            self.patches.append(patch)
            for key, value in (patch.get("status") or {}).items():
                if value is None:
                    self.status.pop(key, None)
                else:
                    self.status[key] = value
            if patch.get("conditions"):
                # As the real one: lastTransitionTime moves only with a condition's status.
                self.status["conditions"] = merge_conditions(
                    self.status.get("conditions"), [ConditionUpdate.model_validate(c) for c in patch["conditions"]],
                    generation=self.generation, now=datetime.now(UTC))
            if patch.get("observed_generation") is not None:
                self.status["observedGeneration"] = patch["observed_generation"]
            return True

        @activity.defn(name="catalog.index_huggingface")
        async def index_huggingface(request: dict[str, Any]) -> dict[str, Any]:
            self.index_calls.append(request)
            if self.clock is not None:
                self.index_times.append(self.clock())
            policy = request.get("policy")
            verdict = evaluate_policy(CatalogPolicy.model_validate(policy) if policy is not None else None)
            if not verdict.allowed:  # as the real one: blocked, nothing asked of the Hub
                return {**EMPTY_RESULT, "blocked_reason": verdict.reason.value, "message": verdict.message}
            answer = self.answers[min(len(self.index_calls) - 1, len(self.answers) - 1)] if self.answers else \
                complete(entries("a"))
            if isinstance(answer, ApplicationError):
                raise answer
            return answer(request) if callable(answer) else answer

        @activity.defn(name="catalog.store_index")
        async def store_index(request: dict[str, Any]) -> dict[str, Any]:
            source, progress = request["source"], ScanProgress.model_validate(request["progress"])
            # The real one's refusals (store.py): nothing partial, nothing lost, nothing that hashes otherwise.
            if progress.cursor is not None:
                raise invalid_input(f"catalog {source}: the scan is not complete, nothing is stored")
            if not progress.packed and progress.packed_digest is not None:
                body = OFFLOADED.get(progress.packed_digest)
                if body is None:
                    raise invalid_input(f"catalog {source}: the scan body {progress.packed_digest} is gone from the "
                                        "registry; nothing is stored (the next refresh scans again)")
                progress = progress.model_copy(update={"packed": body, "packed_digest": None})
            document = index_of(progress.unpack())
            if document.digest != request["digest"]:
                raise invalid_input(f"catalog {source}: the index rebuilt from the scan hashes to {document.digest}, "
                                    f"not the reported {request['digest']}; nothing is stored")
            self.stores.append(request)
            return stored(source, document.content, document.digest, document.entry_count)

        @activity.defn(name="catalog.fetch_remote_index")
        async def fetch_remote_index(request: dict[str, Any]) -> dict[str, Any]:
            self.remote_calls.append(request)
            answer = (self.remote_answers[min(len(self.remote_calls) - 1, len(self.remote_answers) - 1)]
                      if self.remote_answers else remote_index("a"))
            if isinstance(answer, ApplicationError):
                raise answer
            return answer(request) if callable(answer) else answer

        @activity.defn(name="catalog.store_remote_index")
        async def store_remote_index(request: dict[str, Any]) -> dict[str, Any]:
            index = RemoteIndex.model_validate(request["index"])
            content = remote_index_document(index)
            digest = sha256_of(content)
            if digest != request["digest"]:
                raise invalid_input(f"catalog {request['source']}: the remote index document hashes to {digest}, not "
                                    f"the reported {request['digest']}; nothing is stored")
            self.stores.append(request)
            return stored(request["source"], content, digest, len(index.entries), REMOTE_INDEX_MEDIA_TYPE)

        @activity.defn(name="catalog.refresh_remote_index")
        async def refresh_remote_index(request: dict[str, Any]) -> dict[str, Any]:
            # The same scripted answers as fetch_remote_index; stored (recorded in `stores`) as the real
            # activity does: only when the document differs from the known one.
            index = RemoteIndex.model_validate(await fetch_remote_index(request))
            digest = remote_index_digest(index)
            found = {"remote_revision": index.revision, "document_digest": digest, "entry_count": len(index.entries)}
            if digest == request.get("known_document_digest"):
                return {**found, "stored": None}
            source = request["remote"]["source"]
            self.stores.append({"source": source, "digest": digest,
                                "index": index.model_dump(mode="json", by_alias=True, exclude_none=True)})
            return {**found, "stored": stored(source, remote_index_document(index), digest, len(index.entries),
                                              REMOTE_INDEX_MEDIA_TYPE)}

        @activity.defn(name="catalog.ensure_schedule")
        async def ensure_schedule(request: dict[str, Any]) -> bool:
            self.schedules.append(request)
            created = request["schedule_id"] not in self.live_schedules
            self.live_schedules.add(request["schedule_id"])
            return created  # as the real one: True when created, False when an existing one was updated

        @activity.defn(name="catalog.delete_schedule")
        async def delete_schedule(request: dict[str, Any]) -> bool:
            self.deleted_schedules.append(request["schedule_id"])
            if request["schedule_id"] not in self.live_schedules:
                return False  # as the real one: already gone
            self.live_schedules.discard(request["schedule_id"])
            return True

        return [read_object, patch_status, index_huggingface, store_index, fetch_remote_index, store_remote_index,
                refresh_remote_index, ensure_schedule, delete_schedule]
