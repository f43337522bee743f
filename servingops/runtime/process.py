"""How every long-running process of the project starts: one way to read settings, log, and stop.

The five processes (worker, bridge, node agent, model webhook, catalog endpoint) differ in what they
run, not in how they start. Each declares a `Process`: its name, its flags and how they become its
settings; `run_threaded` or `run_async` then does the rest the same way for all of them:

- settings from flags, each flag's default from one environment variable, and `--help` naming it
  (`Flags`); the flags several processes share (Kubernetes, Temporal, the registry, the controller
  namespace) are declared once here, so the Helm chart sets the same variable for the same thing;
- logging to stderr in one format;
- SIGTERM (the kubelet stopping the pod) and SIGINT set one stop event; the process finishes its
  work in hand and returns.

A process's metrics and readiness stay its own, because they are different things: the worker's
`/metrics` is the Temporal SDK's endpoint (runtime/metrics.py), the bridge serves `/metrics` and
`/healthz` beside its watches, and the HTTPS endpoints answer their own health path.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, Generic, TypeVar

from servingops.api_models.operator_config import DEFAULT_CONTROLLER_NAMESPACE
from servingops.runtime.temporal import ADDRESS_ENV, NAMESPACE_ENV, TASK_QUEUE_ENV, TemporalSettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
DEFAULT_REGISTRY = "127.0.0.1:5000"
DEFAULT_REPOSITORY = "servingops/models"

SettingsT = TypeVar("SettingsT")


def start_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


class Flags:
    """Flags whose defaults come from the environment: `--registry` defaults to $SERVINGOPS_REGISTRY,
    and its help says so. One flag, one variable."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def value(self, flag: str, env: str, default: Any = None, *, kind: Callable[[str], Any] = str,
              help: str = "", required: bool = False) -> None:
        """A flag taking a value; `required`: no default unless the variable is set."""
        raw = os.environ.get(env)
        self.parser.add_argument(flag, type=kind, default=kind(raw) if raw is not None else default,
                                 required=required and raw is None, help=_with_env(help, env))

    def switch(self, flag: str, env: str, default: bool, *, help: str = "") -> None:
        """--flag / --no-flag; the variable says "true" or "false"."""
        raw = os.environ.get(env)
        self.parser.add_argument(flag, action=argparse.BooleanOptionalAction,
                                 default=(raw == "true") if raw is not None else default, help=_with_env(help, env))

    # -- the flags several processes share ------------------------------------------------------------

    def kubeconfig(self) -> None:
        self.value("--kubeconfig", "KUBECONFIG", help="the kubeconfig to use; none: in-cluster")

    def temporal(self) -> None:
        """--temporal-address, --namespace (Temporal's) and --task-queue: read back with temporal_settings."""
        defaults = TemporalSettings()
        self.temporal_address()
        self.value("--namespace", NAMESPACE_ENV, defaults.namespace, help="the Temporal namespace")
        self.value("--task-queue", TASK_QUEUE_ENV, defaults.task_queue, help="the workers' task queue")

    def temporal_address(self) -> None:
        self.value("--temporal-address", ADDRESS_ENV, TemporalSettings().address,
                   help="host:port of Temporal's frontend")

    def registry(self, *, help: str = "host:port of the registry models are published to") -> None:
        self.value("--registry", "SERVINGOPS_REGISTRY", DEFAULT_REGISTRY, help=help)

    def registry_repository(self) -> None:
        self.value("--registry-repository", "SERVINGOPS_REGISTRY_REPOSITORY", DEFAULT_REPOSITORY,
                   help="the repository models are published to")

    def registry_insecure(self) -> None:
        self.switch("--registry-insecure", "SERVINGOPS_REGISTRY_INSECURE", True, help="plain HTTP")

    def https_listener(self, env_prefix: str, listen: str, tls_dir: str) -> None:
        """--listen, --tls-cert and --tls-key of an HTTPS endpoint: <env_prefix>_LISTEN, _TLS_CERT and
        _TLS_KEY; the certificate and key default to tls.crt and tls.key in `tls_dir` (a mounted Secret)."""
        self.value("--listen", f"{env_prefix}_LISTEN", listen, help="host:port of the HTTPS endpoint")
        self.value("--tls-cert", f"{env_prefix}_TLS_CERT", f"{tls_dir}/tls.crt", help="the serving certificate, PEM")
        self.value("--tls-key", f"{env_prefix}_TLS_KEY", f"{tls_dir}/tls.key", help="its private key, PEM")

    def controller_namespace(self, flag: str = "--controller-namespace", *, help: str) -> None:
        self.value(flag, "SERVINGOPS_NAMESPACE", DEFAULT_CONTROLLER_NAMESPACE, help=help)


def listen_address(listen: str) -> tuple[str, int]:
    """A --listen value (`host:port`, `[v6]:port`, or `:port` for every address) as (host, port)."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def _with_env(text: str, env: str) -> str:
    return f"{text} (env {env})" if text else f"env {env}"


def temporal_settings(args: argparse.Namespace) -> TemporalSettings:
    """What Flags.temporal declared, as the settings runtime/temporal.py connects with."""
    return TemporalSettings(args.temporal_address, args.namespace, args.task_queue)


@dataclass(frozen=True)
class Process(Generic[SettingsT]):
    """A process as `servingops <name>` runs it: its flags and how they become its settings."""

    name: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    settings: Callable[[argparse.Namespace], SettingsT]

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=f"servingops {self.name}", description=self.description,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        self.add_arguments(parser)
        return parser

    def parse(self, argv: Sequence[str] | None) -> SettingsT:
        return self.settings(self.parser().parse_args(argv))


def stop_on_signals() -> threading.Event:
    """An Event that SIGTERM or SIGINT sets; a threaded process stops on it."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def run_threaded(process: Process[SettingsT], argv: Sequence[str] | None,
                 run: Callable[[SettingsT, threading.Event], object]) -> None:
    """Parse, log, and run `run(settings, stop)` on this thread until it returns (after `stop` is set)."""
    settings = process.parse(argv)
    start_logging()
    run(settings, stop_on_signals())


def run_async(process: Process[SettingsT], argv: Sequence[str] | None,
              run: Callable[[SettingsT, asyncio.Event], Awaitable[None]]) -> None:
    """Parse, log, and run the coroutine `run(settings, stop)` in a new event loop; SIGTERM and SIGINT set
    `stop` through the loop, so the coroutine sees it between its awaits."""
    settings = process.parse(argv)
    start_logging()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(settings, stop)

    asyncio.run(main())
