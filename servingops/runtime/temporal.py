"""One way to connect to Temporal: the pydantic data converter and the tracing interceptor."""

from __future__ import annotations

import os
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

DEFAULT_TASK_QUEUE = "servingops"
ADDRESS_ENV, NAMESPACE_ENV, TASK_QUEUE_ENV = "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "SERVINGOPS_TASK_QUEUE"
"""The variables that name the Temporal frontend, namespace and task queue (the processes' flags default to them)."""


@dataclass(frozen=True)
class TemporalSettings:
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE

    @classmethod
    def from_env(cls) -> TemporalSettings:
        return cls(
            address=os.environ.get(ADDRESS_ENV, cls.address),
            namespace=os.environ.get(NAMESPACE_ENV, cls.namespace),
            task_queue=os.environ.get(TASK_QUEUE_ENV, cls.task_queue),
        )


async def connect(settings: TemporalSettings, *, lazy: bool = False, runtime: Runtime | None = None) -> Client:
    """With lazy=True the connection is made on first use, so a process can start while Temporal
    is still down and retry its calls. `runtime` carries the process's metrics (runtime/metrics.py);
    None is the SDK's default runtime, which exports none."""
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor()],
        lazy=lazy,
        runtime=runtime,
        tls=tls_from_env(),
    )


def tls_from_env() -> TLSConfig | bool:
    """TLS to the Temporal frontend, from the files the Helm chart mounts (the same variables as the
    temporal CLI): TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY (mTLS), TEMPORAL_TLS_CA, TEMPORAL_TLS_SERVER_NAME.
    None of them set: plain gRPC, as the local dev server speaks."""
    env = os.environ.get
    names = ("TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_CA", "TEMPORAL_TLS_SERVER_NAME")
    if not any(env(name) for name in names):
        return False

    def read(name: str) -> bytes | None:
        path = env(name)
        if not path or not os.path.exists(path):  # an optional file the mounted Secret may lack (ca.crt)
            return None
        with open(path, "rb") as fh:
            return fh.read()

    return TLSConfig(client_cert=read("TEMPORAL_TLS_CERT"), client_private_key=read("TEMPORAL_TLS_KEY"),
                     server_root_ca_cert=read("TEMPORAL_TLS_CA"), domain=env("TEMPORAL_TLS_SERVER_NAME") or None)
