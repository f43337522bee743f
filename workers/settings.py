"""The worker process's settings: flags, with environment variables as defaults."""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from dataclasses import dataclass

from servingops.api_models.operator_config import DEFAULT_CONFIGMAP
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
    env = os.environ.get
    defaults = TemporalSettings.from_env()
    parser.add_argument("--temporal-address", default=defaults.address, help="env TEMPORAL_ADDRESS")
    parser.add_argument("--namespace", default=defaults.namespace, help="env TEMPORAL_NAMESPACE")
    parser.add_argument("--task-queue", default=defaults.task_queue, help="env SERVINGOPS_TASK_QUEUE")
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="env KUBECONFIG")
    parser.add_argument("--upload-kubeconfig", default=env("SERVINGOPS_UPLOAD_KUBECONFIG"),
                        help="the identity the upload endpoint talks to the apiserver as, apart from the worker's "
                             "(env SERVINGOPS_UPLOAD_KUBECONFIG; default: the worker's own)")
    parser.add_argument("--host-id", default=env("SERVINGOPS_HOST_ID", socket.gethostname()),
                        help="env SERVINGOPS_HOST_ID (a StatefulSet pod name in a cluster)")
    parser.add_argument("--spool-dir", default=env("SERVINGOPS_SPOOL_DIR",
                                                   os.path.join(tempfile.gettempdir(), "servingops-spool")))
    parser.add_argument("--registry", default=env("SERVINGOPS_REGISTRY", "127.0.0.1:5000"),
                        help="host:port of the registry models are published to (env SERVINGOPS_REGISTRY)")
    parser.add_argument("--registry-repository", default=env("SERVINGOPS_REGISTRY_REPOSITORY", "servingops/models"))
    parser.add_argument("--registry-insecure", action=argparse.BooleanOptionalAction,
                        default=env("SERVINGOPS_REGISTRY_INSECURE", "true") == "true", help="plain HTTP")
    parser.add_argument("--registry-credentials-secret", default=env("SERVINGOPS_REGISTRY_CREDENTIALS_SECRET"),
                        help="a dockerconfigjson or basic-auth Secret in the controller namespace "
                             "(env SERVINGOPS_REGISTRY_CREDENTIALS_SECRET)")
    parser.add_argument("--hf-endpoint", default=env("HF_ENDPOINT", "https://huggingface.co"))
    parser.add_argument("--ollama-registry", default=env("SERVINGOPS_OLLAMA_REGISTRY", "https://registry.ollama.ai"))
    parser.add_argument("--upload-listen", default=env("SERVINGOPS_UPLOAD_LISTEN", "127.0.0.1:0"),
                        help="host:port of the upload endpoint")
    parser.add_argument("--upload-public-url", default=env("SERVINGOPS_UPLOAD_PUBLIC_URL"),
                        help="the URL clients reach the upload endpoint at (default: http://<listen>)")
    parser.add_argument("--controller-namespace", default=env("SERVINGOPS_NAMESPACE", "servingops-system"))
    parser.add_argument("--operator-config", default=env("SERVINGOPS_OPERATOR_CONFIG", DEFAULT_CONFIGMAP),
                        help="the operator ConfigMap in the controller namespace (env SERVINGOPS_OPERATOR_CONFIG)")
    parser.add_argument("--max-activity-threads", type=int,
                        default=int(env("SERVINGOPS_MAX_ACTIVITY_THREADS", "32")))
    parser.add_argument("--metrics-address", default=env("SERVINGOPS_WORKER_METRICS", ""),
                        help="host:port of the Prometheus /metrics endpoint, e.g. 0.0.0.0:9103; empty serves none "
                             "(env SERVINGOPS_WORKER_METRICS)")
    parser.add_argument("--metrics-poll-seconds", type=float,
                        default=float(env("SERVINGOPS_METRICS_POLL_SECONDS", "15")),
                        help="how often the state gauges re-read Temporal visibility")


def from_arguments(args: argparse.Namespace) -> WorkerSettings:
    return WorkerSettings(
        temporal=TemporalSettings(args.temporal_address, args.namespace, args.task_queue),
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
