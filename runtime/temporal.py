"""One way to connect to Temporal: the pydantic data converter and the tracing interceptor."""

from __future__ import annotations

import os
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter

DEFAULT_TASK_QUEUE = "servingops"


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE

    @classmethod
    def from_env(cls) -> TemporalSettings:
        return cls(
            address=os.environ.get("TEMPORAL_ADDRESS", cls.address),
            namespace=os.environ.get("TEMPORAL_NAMESPACE", cls.namespace),
            task_queue=os.environ.get("SERVINGOPS_TASK_QUEUE", cls.task_queue),
        )


async def connect(settings: TemporalSettings, *, lazy: bool = False) -> Client:
    """With lazy=True the connection is made on first use, so a process can start while Temporal
    is still down and retry its calls."""
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor()],
        lazy=lazy,
    )
