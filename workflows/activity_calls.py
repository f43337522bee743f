"""Calling an activity by name from workflow code, always with explicit timeouts and a retry
policy. Workflows name activities by string so that they import only their input and output
types, never the activity implementations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar, cast

from temporalio import workflow
from temporalio.common import RetryPolicy

T = TypeVar("T")


@dataclass(frozen=True)
class ActivityOptions:
    start_to_close: timedelta
    retry: RetryPolicy
    heartbeat: timedelta | None = None
    schedule_to_start: timedelta | None = None


# A Kubernetes read or write: quick, idempotent, retried until the apiserver answers.
KUBE = ActivityOptions(timedelta(seconds=30), RetryPolicy(maximum_interval=timedelta(seconds=30)))


async def call_activity(name: str, arg: object, result_type: type[T], options: ActivityOptions,
                        task_queue: str | None = None) -> T:
    """One activity call by name (arg None: the activity takes no argument)."""
    result = await workflow.execute_activity(
        name,
        args=[] if arg is None else [arg],
        result_type=result_type,
        task_queue=task_queue,
        start_to_close_timeout=options.start_to_close,
        retry_policy=options.retry,
        heartbeat_timeout=options.heartbeat,
        schedule_to_start_timeout=options.schedule_to_start,
    )
    return cast(T, result)
