"""What the blue-green and rolling progressions need from the run that drives them (the
RolloutWorkflow implements it): the targets, interruption by rollback / retarget, a
signal-aware wait, and publishing the coordination phase."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from api_models.ome.enums import ComponentType, CoordinationPhase
from api_models.refs import ObjectRef
from api_models.serving_io import TrafficWeight
from workflows.rollout.models import ComponentTarget


class Driver(Protocol):
    isvc: ObjectRef

    def moving(self) -> list[ComponentTarget]:
        """Targets whose revision differs from their stable one."""
        ...

    def rollback_requested(self) -> bool: ...

    def retarget_requested(self) -> bool: ...

    def ready_timeout(self) -> timedelta: ...

    def scale_down_delay(self) -> timedelta: ...

    def poll_seconds(self, waited: timedelta) -> float:
        """The sleep before re-reading readiness, `waited` into a readiness wait."""
        ...

    async def wait(self, seconds: float) -> None:
        """Sleep, returning early on rollback or retarget."""
        ...

    def record_traffic(self, component: ComponentType, weights: list[TrafficWeight]) -> None: ...

    def record_ready(self, component: ComponentType, revision: str) -> None: ...

    async def coordinate(self, phase: CoordinationPhase, message: str = "", surge: int | str | None = None) -> None:
        """Publish the group's coordination phase (status.rolloutCoordination)."""
        ...
