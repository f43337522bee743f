"""ReplicaActivities: every Kubernetes call of the InferenceReplica engine (names `replica.*`).

Skeleton: the bodies are being written (see activities/replica/types.py for the contract)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from temporalio import activity

from servingops.activities.replica.types import (
    CreatePodsInput,
    CreatePodsResult,
    DeletePodsInput,
    EnsureRevisionInput,
    InPlaceInput,
    InPlaceResult,
    PruneRevisionsInput,
    ReplicaObservation,
    ReplicaRef,
    RevisionResult,
    SetServingInput,
    SetServingResult,
)
from servingops.api_models.refs import ObjectRef


class ReplicaActivities:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._api_client = api_client

    @activity.defn(name="replica.observe")
    def observe(self, ref: ObjectRef) -> ReplicaObservation | None:
        """The replica, its pods and its ControllerRevisions; None when gone (or its name now
        belongs to another uid)."""
        raise NotImplementedError

    @activity.defn(name="replica.ensure_revision")
    def ensure_revision(self, request: EnsureRevisionInput) -> RevisionResult:
        raise NotImplementedError

    @activity.defn(name="replica.ensure_service")
    def ensure_service(self, replica: ReplicaRef) -> None:
        raise NotImplementedError

    @activity.defn(name="replica.create_pods")
    def create_pods(self, request: CreatePodsInput) -> CreatePodsResult:
        raise NotImplementedError

    @activity.defn(name="replica.delete_pods")
    def delete_pods(self, request: DeletePodsInput) -> list[str]:
        raise NotImplementedError

    @activity.defn(name="replica.set_serving")
    def set_serving(self, request: SetServingInput) -> SetServingResult:
        raise NotImplementedError

    @activity.defn(name="replica.update_in_place")
    def update_in_place(self, request: InPlaceInput) -> InPlaceResult:
        raise NotImplementedError

    @activity.defn(name="replica.prune_revisions")
    def prune_revisions(self, request: PruneRevisionsInput) -> list[str]:
        raise NotImplementedError

    def all(self) -> list[Any]:
        return [self.observe, self.ensure_revision, self.ensure_service, self.create_pods, self.delete_pods,
                self.set_serving, self.update_in_place, self.prune_revisions]
