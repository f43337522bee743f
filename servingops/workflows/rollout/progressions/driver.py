"""What a progression needs from the run that drives it (RolloutWorkflow, through its handlers,
implements both protocols): the targets, interruption by rollback / retarget / resume, a
signal-aware wait, and publishing progress to the InferenceService workflow.

Blue-green and rolling publish a coordination phase (`Driver`); the canary step machine also
reads and writes the run's CanaryStatus, phase, message and promotes (`CanaryDriver`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from servingops.api_models.contract.rollout import ComponentTarget, PinnedGroup, RetargetRequest
from servingops.api_models.ome.enums import ComponentType, CoordinationPhase, RolloutPhase
from servingops.api_models.ome.rollout import RolloutGroupStep
from servingops.api_models.ome.rollout_status import CanaryStatus
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight
from servingops.workflows.rollout.models import AnnotationState, CarriedRun, RolloutSettings


class Driver(Protocol):
    isvc: ObjectRef
    pinned: PinnedGroup | None
    """The group's pinned plan (set before any progression runs; a repin replaces it)."""

    def moving(self) -> list[ComponentTarget]:
        """Targets whose revision differs from their stable one."""
        ...

    def group(self) -> PinnedGroup:
        """The pinned plan, which every running progression has."""
        ...

    def rollback_requested(self) -> bool: ...

    def retarget_requested(self) -> bool: ...

    def ready_timeout(self) -> timedelta: ...

    def scale_down_delay(self) -> timedelta: ...

    def poll_seconds(self, waited: timedelta) -> float:
        """The sleep before re-reading readiness, `waited` into a readiness wait."""
        ...

    async def wait(self, seconds: float | None, until: Callable[[], bool] | None = None) -> None:
        """Sleep (None: until woken), returning early on rollback, retarget, resume or `until`."""
        ...

    def record_traffic(self, component: ComponentType, weights: list[TrafficWeight]) -> None: ...

    def record_ready(self, component: ComponentType, revision: str) -> None: ...

    async def coordinate(self, phase: CoordinationPhase, message: str = "", surge: int | str | None = None) -> None:
        """Publish the group's coordination phase (status.rolloutCoordination)."""
        ...


class CanaryDriver(Driver, Protocol):
    progress: CarriedRun
    """The run's CanaryStatus, phase, programmed traffic and clocks (carried across continue-as-new)."""
    targets: list[ComponentTarget]
    settings: RolloutSettings
    annotations: AnnotationState
    message: str
    """The last thing worth telling the operator (the state query's lastMessage)."""
    gate_name: str | None
    """What the current step waits on (a steps.Gate or steps.StepWait value)."""

    def canary(self) -> CanaryStatus: ...

    def steps(self) -> list[RolloutGroupStep]: ...

    def has_analysis(self) -> bool: ...

    def primary(self) -> ComponentTarget:
        """The target of the group's entrypoint component (its revision names the canary)."""
        ...

    def interrupted(self) -> bool:
        """A rollback, retarget or resume is waiting for the step machine."""
        ...

    def request_rollback(self) -> None: ...

    def clear_rollback(self) -> None: ...

    def take_retarget(self) -> RetargetRequest | None: ...

    def take_resume(self) -> str | None: ...

    def promote_available(self) -> bool: ...

    def take_promote(self) -> bool:
        """Consume one promote (an update or the annotation) if one is available."""
        ...

    def mark_promotes_applied(self) -> None:
        """The consumed promote updates may answer now."""
        ...

    async def enter(self, phase: RolloutPhase, *, force: bool = False) -> None:
        """Move to `phase`, publishing when it changed (or when forced)."""
        ...

    async def publish(self, *, sample: bool = False) -> None: ...

    async def maybe_continue_as_new(self) -> None: ...
