"""RolloutClient: status / promote / rollback of an InferenceService's rollout, through the
Temporal `state` queries and the RolloutWorkflow's `promote` / `rollback` updates. Equivalent
to the `ome.io/rollout-promote` and `ome.io/rollout-rollback` annotations, but synchronous: the
update answers with the CanaryStatus once the step machine applied it.

The InferenceService workflow is found from the object's uid (read through kubernetes); the
rollout runs it has open are listed by its `state` query (`active[*].workflow_id`).

Message names and the models the queries answer come from the contract (api_models.contract),
the same declarations the workflows register with, so the SDK never imports the workflow
package and never handles untyped dicts.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kubernetes import client as kube
from pydantic import BaseModel
from temporalio.client import Client

from servingops.api_models import contract
from servingops.api_models.contract import Query, Update
from servingops.api_models.contract.rollout import Progression, PromoteRequest, RolloutState, ServiceView
from servingops.api_models.ome.rollout_status import CanaryStatus


class NoActiveCanaryError(RuntimeError):
    """The InferenceService has no canary run in progress."""


class RunUnavailable(BaseModel):
    """A run the InferenceService workflow listed but whose own query failed (it may have closed
    between the two queries)."""

    key: str
    error: str


class RolloutStatus(BaseModel):
    """What RolloutClient.status answers: the InferenceService workflow's state and the state of
    every run it has open, by unit key."""

    namespace: str
    name: str
    workflow_id: str
    service: ServiceView
    rollouts: dict[str, RolloutState | RunUnavailable] = {}


class RolloutClient:
    def __init__(self, temporal_client: Client, kube_api_client: kube.ApiClient) -> None:
        self.temporal = temporal_client
        self.kube = kube_api_client

    # -- lookups --------------------------------------------------------------------------------

    async def service_workflow_id(self, namespace: str, isvc: str) -> str:
        """The InferenceService workflow's id, from the object's uid."""
        def read() -> dict[str, Any]:
            return cast(dict[str, Any], kube.CustomObjectsApi(self.kube).get_namespaced_custom_object(
                "ome.io", "v1beta1", namespace, "inferenceservices", isvc))

        obj = await asyncio.to_thread(read)
        uid = obj["metadata"]["uid"]
        return contract.inference_service_workflow_id(namespace, isvc, uid)

    async def service_state(self, workflow_id: str) -> ServiceView:
        state: ServiceView = await self.temporal.get_workflow_handle(workflow_id).query(
            Query.STATE, result_type=ServiceView)
        return state

    async def run_state(self, workflow_id: str) -> RolloutState:
        state: RolloutState = await self.temporal.get_workflow_handle(workflow_id).query(
            Query.STATE, result_type=RolloutState)
        return state

    async def status(self, namespace: str, isvc: str) -> RolloutStatus:
        """The InferenceService workflow's state and that of every active run (a run that just
        ended is left out)."""
        workflow_id = await self.service_workflow_id(namespace, isvc)
        service = await self.service_state(workflow_id)
        rollouts: dict[str, RolloutState | RunUnavailable] = {}
        for key, run in service.active.items():
            try:
                rollouts[key] = await self.run_state(run.workflow_id)
            except Exception as error:  # the run may have closed between the two queries
                rollouts[key] = RunUnavailable(key=key, error=str(error))
        return RolloutStatus(namespace=namespace, name=isvc, workflow_id=workflow_id, service=service,
                             rollouts=rollouts)

    async def _active_canary(self, namespace: str, isvc: str) -> tuple[str, CanaryStatus]:
        """(workflow id, canary status) of the canary run in progress."""
        workflow_id = await self.service_workflow_id(namespace, isvc)
        service = await self.service_state(workflow_id)
        for run in service.active.values():
            try:
                state = await self.run_state(run.workflow_id)
            except Exception:
                continue
            if state.progression == Progression.CANARY and state.canary is not None:
                return run.workflow_id, state.canary
        raise NoActiveCanaryError(f"InferenceService {namespace}/{isvc} has no canary in progress")

    # -- actions --------------------------------------------------------------------------------

    async def promote(self, namespace: str, isvc: str, revision_hash: str | None = None) -> CanaryStatus:
        """Promote the step waiting on a manual gate (like ome.io/rollout-promote=<hash>). Without
        a hash, the run's canary revision is named. Answers once the step advanced."""
        workflow_id, canary = await self._active_canary(namespace, isvc)
        revision = revision_hash or canary.canary_revision_hash
        if not revision:
            raise NoActiveCanaryError(f"InferenceService {namespace}/{isvc}: the canary has no revision yet")
        result: CanaryStatus = await self.temporal.get_workflow_handle(workflow_id).execute_update(
            Update.PROMOTE, PromoteRequest(revision=revision), result_type=CanaryStatus)
        return result

    async def rollback(self, namespace: str, isvc: str) -> CanaryStatus:
        """Abandon the canary (like ome.io/rollout-rollback=true). Answers once traffic is back
        on the stable revision."""
        workflow_id, _ = await self._active_canary(namespace, isvc)
        result: CanaryStatus = await self.temporal.get_workflow_handle(workflow_id).execute_update(
            Update.ROLLBACK, result_type=CanaryStatus)
        return result
