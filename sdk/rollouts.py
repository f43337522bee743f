"""RolloutClient: status / promote / rollback of an InferenceService's rollout, through the
Temporal `state` queries and the RolloutWorkflow's `promote` / `rollback` updates. Equivalent
to the `ome.io/rollout-promote` and `ome.io/rollout-rollback` annotations, but synchronous: the
update answers with the CanaryStatus once the step machine applied it.

The InferenceService workflow is found from the object's uid (read through kubernetes); the
rollout runs it has open are listed by its `state` query (`active[*].workflow_id`).

The signal / update / query names are the strings the workflows register (see
workflows/rollout/models.py); they are repeated here so the SDK does not import the workflow
package (and, through it, activity signatures).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kubernetes import client as kube
from temporalio.client import Client

from api_models import contract
from api_models.ome.rollout_status import CanaryStatus

PROMOTE = "promote"
ROLLBACK = "rollback"
STATE = "state"
CANARY = "canary"


class NoActiveCanaryError(RuntimeError):
    """The InferenceService has no canary run in progress."""


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

    async def status(self, namespace: str, isvc: str) -> dict[str, Any]:
        """{"workflow_id", "service": the InferenceService workflow's state, "rollouts": {unit key:
        that run's state}} for every active run (a run that just ended is left out)."""
        workflow_id = await self.service_workflow_id(namespace, isvc)
        service: dict[str, Any] = await self.temporal.get_workflow_handle(workflow_id).query(
            STATE, result_type=dict)
        rollouts: dict[str, dict[str, Any]] = {}
        for key, run in (service.get("active") or {}).items():
            try:
                rollouts[key] = await self.temporal.get_workflow_handle(run["workflow_id"]).query(
                    STATE, result_type=dict)
            except Exception as error:  # the run may have closed between the two queries
                rollouts[key] = {"key": key, "error": str(error)}
        return {"namespace": namespace, "name": isvc, "workflow_id": workflow_id, "service": service,
                "rollouts": rollouts}

    async def _active_canary(self, namespace: str, isvc: str) -> tuple[str, dict[str, Any]]:
        """(workflow id, state) of the canary run in progress."""
        workflow_id = await self.service_workflow_id(namespace, isvc)
        service: dict[str, Any] = await self.temporal.get_workflow_handle(workflow_id).query(
            STATE, result_type=dict)
        for run in (service.get("active") or {}).values():
            try:
                state: dict[str, Any] = await self.temporal.get_workflow_handle(run["workflow_id"]).query(
                    STATE, result_type=dict)
            except Exception:
                continue
            if state.get("progression") == CANARY and state.get("canary"):
                return run["workflow_id"], state
        raise NoActiveCanaryError(f"InferenceService {namespace}/{isvc} has no canary in progress")

    # -- actions --------------------------------------------------------------------------------

    async def promote(self, namespace: str, isvc: str, revision_hash: str | None = None) -> CanaryStatus:
        """Promote the step waiting on a manual gate (like ome.io/rollout-promote=<hash>). Without
        a hash, the run's canary revision is named. Answers once the step advanced."""
        workflow_id, state = await self._active_canary(namespace, isvc)
        canary = CanaryStatus.model_validate(state["canary"])
        revision = revision_hash or canary.canary_revision_hash
        if not revision:
            raise NoActiveCanaryError(f"InferenceService {namespace}/{isvc}: the canary has no revision yet")
        result: CanaryStatus = await self.temporal.get_workflow_handle(workflow_id).execute_update(
            PROMOTE, {"revision": revision}, result_type=CanaryStatus)
        return result

    async def rollback(self, namespace: str, isvc: str) -> CanaryStatus:
        """Abandon the canary (like ome.io/rollout-rollback=true). Answers once traffic is back
        on the stable revision."""
        workflow_id, _ = await self._active_canary(namespace, isvc)
        result: CanaryStatus = await self.temporal.get_workflow_handle(workflow_id).execute_update(
            ROLLBACK, result_type=CanaryStatus)
        return result
