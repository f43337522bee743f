"""Inputs and outputs of the migration activities (`MigrationActivities`, names `migration.*`)."""

from __future__ import annotations

from pydantic import BaseModel

from servingops.api_models.ome.migration import MigrationStatus
from servingops.api_models.refs import ObjectRef


class ResolveInput(BaseModel):
    isvc: ObjectRef
    component: str


class Resolved(BaseModel):
    """The InferenceReplica serving one component of an InferenceService, or why there is none."""

    replica: str | None = None
    replica_uid: str | None = None
    refused: str | None = None
    """A reason token (InferenceServiceNotFound, ComponentNotFound, NotOMENative) when unresolved."""
    message: str = ""


class RequestRemoval(BaseModel):
    isvc: ObjectRef
    annotation: str
    """`ome.io/migration-request-v1-<uuid>`."""


class EndpointQuery(BaseModel):
    namespace: str
    pods: list[str]


class LedgerWrite(BaseModel):
    """Terminal records of one InferenceReplica to keep in its audit ledger (activities/migration/ledger.py)."""

    replica: ObjectRef
    """The replica whose records these are (its namespace and name prefix the ledger's keys)."""
    records: list[MigrationStatus]


class LedgerWritten(BaseModel):
    changed: bool
    """False when every record was already there as given (a repeated write changes nothing)."""
    dropped: int = 0
    """Entries the bound dropped by this write."""


__all__ = ["EndpointQuery", "LedgerWrite", "LedgerWritten", "RequestRemoval", "ResolveInput", "Resolved"]
