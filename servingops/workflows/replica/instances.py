"""What one Instance looks like on the cluster right now: its pods grouped by index, counted the
way the seed counts them (podCount, servingPodCount, availablePodCount, admitted), and the health
facts the restart policy reads. Pure."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from servingops.activities.replica.types import PodView
from servingops.api_models.ome.instance_status import InstanceTermination


@dataclass
class InstanceView:
    index: int
    pods: list[PodView] = field(default_factory=list)

    @property
    def live(self) -> list[PodView]:
        """Pods not being deleted."""
        return [pod for pod in self.pods if not pod.deleting]

    def slot_pods(self, slot: int) -> list[PodView]:
        return [pod for pod in self.live if pod.slot == slot]

    def incarnation_pods(self, incarnation: int) -> list[PodView]:
        return [pod for pod in self.live if pod.incarnation == incarnation]

    @property
    def gated(self) -> bool:
        return any(pod.gated for pod in self.live)

    @property
    def admission_message(self) -> str | None:
        """Why Kueue holds the Instance, in Kueue's words (a gated pod's), once it has said."""
        return next((pod.admission for pod in self.live if pod.gated and pod.admission), None)

    @property
    def admitted(self) -> bool:
        """Seed: the Instance has pods and none are admission-gated."""
        return bool(self.live) and not self.gated


def group_pods(pods: list[PodView]) -> dict[int, InstanceView]:
    grouped: dict[int, InstanceView] = defaultdict(lambda: InstanceView(index=-1))
    for pod in pods:
        view = grouped[pod.index]
        view.index = pod.index
        view.pods.append(pod)
    return dict(grouped)


def serving(pod: PodView) -> bool:
    """In the load balancer rotation: ContainersReady and the engine's gate True (seed)."""
    return pod.containers_ready and pod.serving is True and not pod.deleting


def available(pod: PodView, now: datetime, min_ready: timedelta) -> bool:
    """Serving, and Ready for at least minReadySeconds (the Deployment rule, per pod)."""
    if not serving(pod) or not pod.ready:
        return False
    return min_ready <= timedelta(0) or (pod.ready_since is not None and pod.ready_since + min_ready <= now)


def available_at(pod: PodView, min_ready: timedelta) -> datetime | None:
    """When a serving pod that is not yet Available becomes so (a timer to wake for)."""
    if not serving(pod) or not pod.ready or pod.ready_since is None or min_ready <= timedelta(0):
        return None
    return pod.ready_since + min_ready


@dataclass(frozen=True)
class Health:
    """Why the restart policy would repair an Instance, if it would."""

    reason: str
    message: str
    failure: InstanceTermination | None = None


def complete(pods: list[PodView], pods_per_instance: int) -> bool:
    return len(pods) >= pods_per_instance


def all_ready(pods: list[PodView], pods_per_instance: int) -> bool:
    return complete(pods, pods_per_instance) and all(pod.containers_ready for pod in pods)


def health(pods: list[PodView], pods_per_instance: int, ready_since: datetime | None, *,
           repair_restarts: bool) -> Health | None:
    """Whether the Instance's current pods need it recreated: a pod gone or Failed, or (with
    RecreateInstanceOnPodRestart) a container that terminated after the Instance last became Ready
    (a restart that finished before readySince belongs to boot and never counts: seed)."""
    failed = [pod for pod in pods if pod.phase == "Failed"]
    if failed:
        pod = failed[0]
        termination = pod.last_termination or InstanceTermination(pod_name=pod.name, reason="Failed")
        return Health("PodFailed", f"pod {pod.name} failed", termination.model_copy(update={"pod_name": pod.name}))
    if len(pods) < pods_per_instance:
        return Health("PodLost", f"{pods_per_instance - len(pods)} of {pods_per_instance} pods are gone")
    if repair_restarts and ready_since is not None:
        for pod in pods:
            ended = pod.last_termination.time if pod.last_termination else None
            if pod.restart_count > 0 and ended is not None and ended > ready_since:
                restarted: InstanceTermination | None = (
                    pod.last_termination.model_copy(update={"pod_name": pod.name}) if pod.last_termination else None)
                return Health("ContainerRestarted", f"a container of pod {pod.name} restarted after the Instance "
                              "became Ready", restarted)
    return None
