"""A fake world for CatalogSourceWorkflow: one ModelCatalogSource in memory, a scripted Hub index, a
recording registry and schedule, under the real activity names (kube.read_object, kube.patch_status,
catalog.index_huggingface, catalog.store_index, catalog.fetch_remote_index,
catalog.store_remote_index, catalog.refresh_remote_index, catalog.ensure_schedule, catalog.delete_schedule).

Used by tests/test_catalog_workflow.py and the recorded scenarios (tests/histories/catalog_scenarios.py):
it speaks the wire contract only (activity names, JSON payloads)."""

from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.activities.catalog.huggingface_index import result_of
from servingops.activities.catalog.remote import RemoteIndex, index_document
from servingops.activities.catalog.store import remote_index_digest
from servingops.activities.catalog.types import CatalogEntry, ScanCursor, ScanState

SCOPED = {"allowedOrganizations": ["devstack"], "maxIndexedEntries": 100, "refreshBudget": "5m"}
"""A policy the rule allows."""


def entries(*names: str, revision: str = "a" * 40) -> list[CatalogEntry]:
    return [CatalogEntry(name=f"devstack/{n}", revision=revision, tags=("text-generation",)) for n in names]


def complete(found: list[CatalogEntry], *, offloaded: bool = False) -> dict[str, Any]:
    """What catalog.index_huggingface returns for a finished scan of `found`; `offloaded`: as a worker with a
    registry returns it, the body replaced by its digest (scan_store.py)."""
    state = ScanState(scope_digest="s" * 64, cursor=None, entries={e.name: e for e in found})
    result = result_of(state).model_dump(mode="json")
    if offloaded:
        body = result["progress"]["packed"]
        result["progress"].update(packed="", packed_digest="sha256:" + hashlib.sha256(body.encode()).hexdigest())
    return result


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
            conditions = {c["type"]: c for c in self.status.get("conditions") or []}
            for update in patch.get("conditions") or []:
                conditions[update["type"]] = {**update, "observedGeneration": self.generation,
                                              "lastTransitionTime": datetime.now(UTC).isoformat()}
            if conditions:
                self.status["conditions"] = list(conditions.values())
            if patch.get("observed_generation") is not None:
                self.status["observedGeneration"] = patch["observed_generation"]
            return True

        @activity.defn(name="catalog.index_huggingface")
        async def index_huggingface(request: dict[str, Any]) -> dict[str, Any]:
            self.index_calls.append(request)
            if self.clock is not None:
                self.index_times.append(self.clock())
            answer = self.answers[min(len(self.index_calls) - 1, len(self.answers) - 1)] if self.answers else \
                complete(entries("a"))
            if isinstance(answer, ApplicationError):
                raise answer
            return answer(request) if callable(answer) else answer

        @activity.defn(name="catalog.store_index")
        async def store_index(request: dict[str, Any]) -> dict[str, Any]:
            self.stores.append(request)
            revision = "sha256:" + hashlib.sha256(f"manifest:{request['digest']}".encode()).hexdigest()
            return {"revision": revision, "document_digest": request["digest"],
                    "entry_count": request["progress"]["entry_count"],
                    "reference": f"127.0.0.1:5000/servingops/catalog/{request['source']}@{revision}"}

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
            self.stores.append(request)
            revision = "sha256:" + hashlib.sha256(f"manifest:{request['digest']}".encode()).hexdigest()
            return {"revision": revision, "document_digest": request["digest"],
                    "entry_count": len(request["index"]["entries"]),
                    "reference": f"127.0.0.1:5000/servingops/catalog/{request['source']}@{revision}"}

        @activity.defn(name="catalog.refresh_remote_index")
        async def refresh_remote_index(request: dict[str, Any]) -> dict[str, Any]:
            # The same scripted answers as fetch_remote_index; stored (recorded in `stores`) as the real
            # activity does: only when the document differs from the known one.
            index = RemoteIndex.model_validate(await fetch_remote_index(request))
            digest = remote_index_digest(index)
            found = {"remote_revision": index.revision, "document_digest": digest, "entry_count": len(index.entries)}
            if digest == request.get("known_document_digest"):
                return found
            self.stores.append({"source": request["remote"]["source"], "digest": digest,
                                "index": index.model_dump(mode="json", by_alias=True, exclude_none=True)})
            revision = "sha256:" + hashlib.sha256(f"manifest:{digest}".encode()).hexdigest()
            return {**found, "stored": {
                "revision": revision, "document_digest": digest, "entry_count": len(index.entries),
                "reference": f"127.0.0.1:5000/servingops/catalog/{request['remote']['source']}@{revision}"}}

        @activity.defn(name="catalog.ensure_schedule")
        async def ensure_schedule(request: dict[str, Any]) -> bool:
            self.schedules.append(request)
            return len(self.schedules) == 1

        @activity.defn(name="catalog.delete_schedule")
        async def delete_schedule(request: dict[str, Any]) -> bool:
            self.deleted_schedules.append(request["schedule_id"])
            return True

        return [read_object, patch_status, index_huggingface, store_index, fetch_remote_index, store_remote_index,
                refresh_remote_index, ensure_schedule, delete_schedule]
