"""CatalogRefreshTickWorkflow: what a catalog source's Temporal Schedule starts at each interval.

It only signals `refresh-now` to the source's workflow and ends; the source workflow decides whether a
refresh is due (not while blocked, not before a pending nextRetryTime). A tick for a source whose workflow
has ended (the source was deleted and the schedule not yet) does nothing and ends successfully.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from servingops.api_models.contract import Signal, WorkflowType


@workflow.defn(name=WorkflowType.CATALOG_REFRESH_TICK)
class CatalogRefreshTickWorkflow:
    @workflow.run
    async def run(self, source_workflow_id: str) -> bool:
        """True when the source's workflow got the signal."""
        try:
            await workflow.get_external_workflow_handle(source_workflow_id).signal(Signal.REFRESH_NOW)
        except FailureError as exc:
            workflow.logger.info("catalog tick: %s did not take refresh-now: %s", source_workflow_id, exc)
            return False
        return True


__all__ = ["CatalogRefreshTickWorkflow"]
