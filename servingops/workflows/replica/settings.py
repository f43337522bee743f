"""The effective lifecycle of one InferenceReplica: its spec with the seed's fallbacks applied
(runtime values are already folded into a projected replica's spec by the InferenceService
workflow; the operator's ConfigMap `lifecycle` block comes next; then the seed's fixed fallbacks).

Pure: no Temporal, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from servingops.api_models.durations import parse_duration
from servingops.api_models.ome.enums import (
    InstanceReadyPolicy,
    InstanceRestartPolicy,
    PauseMode,
    UpdateStrategyType,
)
from servingops.api_models.ome.replica import InferenceReplicaSpec
from servingops.api_models.operator_config import LifecycleDefaults


@dataclass(frozen=True)
class Lifecycle:
    desired: int
    """Instances wanted: spec.replicas, nil or 0 meaning one (seed)."""
    pods_per_instance: int
    gang: bool
    strategy: UpdateStrategyType
    max_unavailable: int | None
    """None: no cap (the seed's "this layer sets no cap")."""
    max_surge: int | None
    partition: int
    restart_policy: InstanceRestartPolicy
    ready_policy: InstanceReadyPolicy
    ready_timeout: timedelta | None
    """None: operations open with no deadline."""
    min_ready: timedelta
    paused: bool
    pause_mode: PauseMode
    history_limit: int | None
    mark_not_ready: bool
    """InPlace: flip ome.io/serving False before the mutation (default true)."""

    @property
    def frozen(self) -> bool:
        """Every lifecycle operation suspended, repair included (scale-down stays)."""
        return self.paused and self.pause_mode is PauseMode.FREEZE


def scaled(value: int | str | None, replicas: int) -> int | None:
    """An IntOrString budget: an integer as is, "25%" as ceil(replicas * 25 / 100) (seed)."""
    if value is None:
        return None
    if isinstance(value, int):
        return max(0, value)
    text = value.strip()
    if text.endswith("%"):
        return math.ceil(replicas * float(text[:-1]) / 100)
    return max(0, int(text))


def lifecycle(spec: InferenceReplicaSpec, runner_sizes: dict[str, int], defaults: LifecycleDefaults) -> Lifecycle:
    desired = spec.replicas or 1
    pods = sum(runner_sizes.values()) or 1
    gang = pods > 1 or "leader" in runner_sizes
    life = spec.lifecycle
    strategy_spec = life.update_strategy if life else None
    strategy = (strategy_spec.type if strategy_spec and strategy_spec.type else UpdateStrategyType.SURGE_THEN_DRAIN)
    rolling = strategy_spec.rolling_update if strategy_spec else None
    surge_then_drain = strategy is UpdateStrategyType.SURGE_THEN_DRAIN
    max_unavailable = rolling.max_unavailable if rolling and rolling.max_unavailable is not None else (
        None if surge_then_drain else defaults.max_unavailable)
    max_surge = rolling.max_surge if rolling and rolling.max_surge is not None else (
        defaults.max_surge if surge_then_drain else None)
    pacing_partition = spec.pacing.partition if spec.pacing else None
    partition = pacing_partition if pacing_partition is not None else (rolling.partition if rolling else None) or 0
    restart = life.restart_policy if life and life.restart_policy else (
        InstanceRestartPolicy.RECREATE_INSTANCE_ON_POD_RESTART if gang else InstanceRestartPolicy.NONE)
    ready_policy = life.ready_policy if life and life.ready_policy else (
        InstanceReadyPolicy.ALL_POD_READY if gang else InstanceReadyPolicy.NONE)
    timeout_text = life.instance_ready_timeout if life and life.instance_ready_timeout else None
    timeout = parse_duration(timeout_text) if timeout_text else timedelta(0)
    if timeout <= timedelta(0) and defaults.instance_ready_timeout:
        timeout = parse_duration(defaults.instance_ready_timeout)
    in_place = strategy_spec.in_place_update_strategy if strategy_spec else None
    mark = in_place.mark_not_ready_during_lifecycle if in_place else None
    return Lifecycle(
        desired=desired,
        pods_per_instance=pods,
        gang=gang,
        strategy=strategy,
        max_unavailable=scaled(max_unavailable, desired),
        max_surge=scaled(max_surge, desired),
        partition=partition,
        restart_policy=restart,
        ready_policy=ready_policy,
        ready_timeout=timeout if timeout > timedelta(0) else None,
        min_ready=timedelta(seconds=spec.min_ready_seconds or 0),
        paused=bool(spec.paused),
        pause_mode=spec.pause_mode or PauseMode.RECOVER,
        history_limit=spec.revision_history_limit or defaults.revision_history_limit,
        mark_not_ready=True if mark is None else mark,
    )
