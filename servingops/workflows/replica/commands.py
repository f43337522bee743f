"""What the replica engine's pure planner asks the workflow to do on the cluster, one command per
activity call. The workflow records every operation in status before it runs the commands of a pass
(the seed's "written before the destructive step"), then runs them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from servingops.activities.replica.types import PodView


@dataclass(frozen=True)
class CreatePods:
    index: int
    revision: str
    incarnation: int
    slot: int = 0
    preferred_nodes: tuple[str, ...] = ()
    avoid_node: str | None = None


@dataclass(frozen=True)
class DeletePods:
    index: int
    pods: tuple[str, ...]
    uids: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, index: int, pods: Iterable[PodView]) -> DeletePods:
        """Delete exactly these pods (uid preconditions: a same-named successor is never hit)."""
        listed = list(pods)
        return cls(index=index, pods=tuple(sorted(pod.name for pod in listed)), uids={p.name: p.uid for p in listed})


@dataclass(frozen=True)
class SetServing:
    pods: tuple[str, ...]
    serving: bool
    reason: str


@dataclass(frozen=True)
class PatchInPlace:
    index: int
    pod: str
    revision: str


Command = CreatePods | DeletePods | SetServing | PatchInPlace
