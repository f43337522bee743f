"""The worker process's settings: flags, with environment variables as defaults."""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from dataclasses import dataclass

from servingops.api_models.operator_config import DEFAULT_CONFIGMAP
from servingops.runtime.process import Flags, temporal_settings
from servingops.runtime.temporal import TemporalSettings


@dataclass(frozen=True)
class WorkerSettings:
    temporal: TemporalSettings
    kubeconfig: str | None
    upload_kubeconfig: str | None
    """The upload endpoint's own identity (a kubeconfig); None: the worker's."""
    host_id: str
    """Stable across restarts of the same host: names the host's own task queue."""
    spool_dir: str
    registry: str
    registry_repository: str
    registry_insecure: bool
    registry_credentials_secret: str | None
    """A Secret in controller_namespace with the registry's credentials; None: anonymous."""
    hf_endpoint: str
    ollama_registry: str
    upload_listen: str
    upload_public_url: str | None
    controller_namespace: str
    operator_config: str
    """The operator's ConfigMap (in controller_namespace): rollout defaults and metric providers."""
    max_activity_threads: int
    metrics_address: str = ""
    """host:port of the Prometheus /metrics endpoint (the SDK's runtime metrics and ours); "" serves none."""
    metrics_poll_seconds: float = 15.0
    """How often the state gauges (open rollout runs by phase, imports in flight) re-read visibility."""

    @property
    def host_task_queue(self) -> str:
        return f"{self.temporal.task_queue}@{self.host_id}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.temporal()
    flags.kubeconfig()
    flags.value("--upload-kubeconfig", "SERVINGOPS_UPLOAD_KUBECONFIG",
                help="the identity the upload endpoint talks to the apiserver as, apart from the worker's "
                     "(default: the worker's own)")
    flags.value("--host-id", "SERVINGOPS_HOST_ID", socket.gethostname(),
                help="names this host's own task queue (a StatefulSet pod name in a cluster)")
    flags.value("--spool-dir", "SERVINGOPS_SPOOL_DIR", os.path.join(tempfile.gettempdir(), "servingops-spool"),
                help="where fetched and uploaded bytes wait for their push")
    flags.registry()
    flags.registry_repository()
    flags.registry_insecure()
    flags.value("--registry-credentials-secret", "SERVINGOPS_REGISTRY_CREDENTIALS_SECRET",
                help="a dockerconfigjson or basic-auth Secret in the controller namespace; none: anonymous")
    flags.value("--hf-endpoint", "HF_ENDPOINT", "https://huggingface.co", help="the Hugging Face Hub")
    flags.value("--ollama-registry", "SERVINGOPS_OLLAMA_REGISTRY", "https://registry.ollama.ai",
                help="the Ollama registry")
    flags.value("--upload-listen", "SERVINGOPS_UPLOAD_LISTEN", "127.0.0.1:0", help="host:port of the upload endpoint")
    flags.value("--upload-public-url", "SERVINGOPS_UPLOAD_PUBLIC_URL",
                help="the URL clients reach the upload endpoint at (default: http://<listen>)")
    flags.controller_namespace(help="where the operator ConfigMap and the registry Secret live")
    flags.value("--operator-config", "SERVINGOPS_OPERATOR_CONFIG", DEFAULT_CONFIGMAP,
                help="the operator ConfigMap in the controller namespace")
    flags.value("--max-activity-threads", "SERVINGOPS_MAX_ACTIVITY_THREADS", 32, kind=int,
                help="activities run at once")
    flags.value("--metrics-address", "SERVINGOPS_WORKER_METRICS", "",
                help="host:port of the Prometheus /metrics endpoint, e.g. 0.0.0.0:9103; empty serves none")
    flags.value("--metrics-poll-seconds", "SERVINGOPS_METRICS_POLL_SECONDS", 15.0, kind=float,
                help="how often the state gauges re-read Temporal visibility")


def from_arguments(args: argparse.Namespace) -> WorkerSettings:
    return WorkerSettings(
        temporal=temporal_settings(args),
        kubeconfig=args.kubeconfig, upload_kubeconfig=args.upload_kubeconfig, host_id=args.host_id,
        spool_dir=args.spool_dir, registry=args.registry,
        registry_repository=args.registry_repository, registry_insecure=args.registry_insecure,
        registry_credentials_secret=args.registry_credentials_secret,
        hf_endpoint=args.hf_endpoint, ollama_registry=args.ollama_registry, upload_listen=args.upload_listen,
        upload_public_url=args.upload_public_url, controller_namespace=args.controller_namespace,
        operator_config=args.operator_config,
        max_activity_threads=args.max_activity_threads,
        metrics_address=args.metrics_address, metrics_poll_seconds=args.metrics_poll_seconds,
    )
