"""The loop two policy kinds share: RolloutPolicy and AutoscalerPolicy.

A policy is a namespaced, reusable body other objects reference by name. Its workflow keeps a
bounded status true: observedGeneration, a portable digest, a Ready condition (False with
reason PolicyInvalid when the stored body breaks an admission rule) and a count of what is
attached to it. A spec change arrives as `object-changed` with a higher generation and is
reconciled whole, once. What references the policy changes without its generation moving: a
consumer sends `refresh-now` when its references change, and the count is re-taken at once;
every ATTACH_RESYNC it is re-taken anyway, as a safety net for a nudge that reached no workflow.
History stays bounded with continue-as-new, carrying the state in the run's single argument. A
policy holds no finalizer and owns nothing, so deletion only ends the workflow.

A kind fills in `_reconcile` (read, judge, write the whole status) and `_recount` (the count
alone, written only when it moved).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow

from servingops.workflows import options
from servingops.workflows.entity import EntityWorkflow, ReconcileState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.kubernetes import EventNote, KubernetesActivities, StatusPatch
    from servingops.api_models.contract import Signal
    from servingops.api_models.refs import ConditionUpdate

ATTACH_RESYNC = timedelta(minutes=5)
"""How often the attachment count is re-taken without a `refresh-now` nudge."""
MAX_REFRESHES_PER_RUN = 500
"""A run continues as new after this many refreshes even if Temporal has not suggested it yet."""


class PolicyState(ReconcileState):
    """What the `state` query answers (a kind adds its attachment count)."""

    phase: str = "Pending"
    """Pending, Ready, Invalid or Deleted."""
    reason: str = "Pending"
    message: str = ""
    portable_digest: str | None = None
    refreshes: int = 0
    """Attachment recounts in this run."""


P = TypeVar("P", bound=PolicyState)


class PolicyEntityWorkflow(EntityWorkflow[P], ABC):
    def __init__(self, state: P) -> None:
        super().__init__(state)
        self._refresh_now = False

    # object-changed, delete and the state query come from EntitySignals.

    @workflow.signal(name=Signal.REFRESH_NOW)
    def refresh_now(self) -> None:
        self._refresh_now = True

    # -- the entity loop's hooks (workflows/entity.py) -------------------------------------------

    async def first_pass(self) -> bool:
        """A new run reconciles at once; a continued one only when a newer generation came."""
        if not self.continued or self.behind():
            return await self._reconcile_now() and not self.state.deleting
        return not self.state.deleting

    async def next_pass(self, timed_out: bool) -> bool:
        """A newer spec is reconciled whole; a nudge or the resync only recounts the attachments."""
        if self.behind():
            return await self._reconcile_now() and not self.state.deleting
        self._refresh_now = False
        self.state.refreshes += 1
        return await self._recount() and not self.state.deleting

    def rest_time(self) -> timedelta:
        return ATTACH_RESYNC

    def woken(self) -> bool:
        return self._refresh_now

    def run_is_full(self) -> bool:
        return self.state.refreshes >= MAX_REFRESHES_PER_RUN

    def reset_run_counts(self) -> None:
        self.state.refreshes = 0

    def gone(self) -> P:
        self.state.reason, self.state.message = "Deleted", "the policy is gone"
        return super().gone()

    # -- what a kind fills in ----------------------------------------------------------------------

    @abstractmethod
    async def _reconcile(self) -> bool:
        """Re-read the policy and write its whole status; False when it is gone or going."""

    @abstractmethod
    async def _recount(self) -> bool:
        """Re-take the attachment count and write it when it moved; False when the policy is gone."""

    # -- shared steps ------------------------------------------------------------------------------

    async def _reconcile_now(self) -> bool:
        self._refresh_now = False
        return await self._reconcile()

    def _judge(self, problem: str | None, valid_message: str) -> None:
        """Ready with `valid_message`, or Invalid (PolicyInvalid) saying the problem."""
        if problem is None:
            self.state.phase, self.state.reason, self.state.message = "Ready", "Valid", valid_message
        else:
            self.state.phase, self.state.reason, self.state.message = "Invalid", "PolicyInvalid", problem

    async def _write_status(self, status: dict[str, Any], generation: int, *, announce: bool) -> None:
        """The whole status with the Ready condition; with `announce`, the Ready reason moved and an
        Event says so (Warning for an invalid policy)."""
        assert self.ref is not None
        ready = "True" if self.state.phase == "Ready" else "False"
        kind = "Normal" if ready == "True" else "Warning"
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status,
            StatusPatch(
                ref=self.ref,
                status=status,
                conditions=[
                    ConditionUpdate(type="Ready", status=ready, reason=self.state.reason, message=self.state.message)
                ],
                observed_generation=generation,
                events=[EventNote(type=kind, reason=self.state.reason, message=self.state.message)] if announce else [],
            ),
            **options.KUBE,
        )

    async def _write_count(self, status: dict[str, Any]) -> None:
        """The attachment count alone."""
        assert self.ref is not None
        await workflow.execute_activity_method(
            KubernetesActivities.patch_status, StatusPatch(ref=self.ref, status=status), **options.KUBE
        )


__all__ = ["ATTACH_RESYNC", "MAX_REFRESHES_PER_RUN", "PolicyEntityWorkflow", "PolicyState"]
