"""The node agent's settings: flags, with environment variables as defaults.

The registry settings are the worker's (workers/settings.py): the same flags and variables name the
registry and whether it speaks plain HTTP. Credentials differ in how they arrive: the worker reads a
Secret through the API, while the agent (a DaemonSet on every GPU node) gets the same Secret mounted as
files, so it needs no right to read Secrets at all.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from servingops.clients.oci.credentials import credentials_from_secret_data
from servingops.clients.oci.registry_client import RegistryCredentials
from servingops.runtime.process import Flags


@dataclass(frozen=True)
class AgentSettings:
    node: str
    root: Path
    state_dir: Path
    namespace: str
    kubeconfig: str | None
    registry: str
    registry_insecure: bool
    registry_credentials_dir: Path | None
    workers: int
    resync_seconds: float
    verify_seconds: float
    bandwidth_mb_per_second: float
    layers_in_flight: int = 3

    def registry_credentials(self) -> RegistryCredentials | None:
        """From the mounted Secret's files (a dockerconfigjson or basic-auth Secret), read on every pull so a
        rotated Secret is picked up without a restart."""
        directory = self.registry_credentials_dir
        if directory is None or not directory.is_dir():
            return None
        data = {path.name: path.read_text() for path in directory.iterdir()
                if path.is_file() and not path.name.startswith(".")}
        return credentials_from_secret_data(data, self.registry)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.value("--node", "NODE_NAME", required=True,
                help="the Node this agent serves (from the downward API in the DaemonSet)")
    flags.value("--root", "SERVINGOPS_AGENT_ROOT", "/",
                help="the node's disk: storage.path is taken relative to it (/ in a pod with the host's paths "
                     "mounted at the same place; a directory per kwok node locally)")
    flags.value("--state-dir", "SERVINGOPS_AGENT_STATE_DIR",
                help="where the agent keeps its records (default <root>/var/lib/servingops-agent)")
    flags.controller_namespace("--namespace", help="where the node's report ConfigMap lives")
    flags.kubeconfig()
    flags.registry(help="host:port of the registry artifacts are pulled from")
    flags.registry_insecure()
    flags.value("--registry-credentials-dir", "SERVINGOPS_REGISTRY_CREDENTIALS_DIR",
                help="the registry credentials Secret mounted as files (.dockerconfigjson, or username and "
                     "password); none: anonymous")
    flags.value("--workers", "SERVINGOPS_AGENT_WORKERS", 2, kind=int, help="models pulled at the same time")
    flags.value("--resync-seconds", "SERVINGOPS_AGENT_RESYNC_SECONDS", 60.0, kind=float,
                help="how often every model is reconciled again")
    flags.value("--verify-seconds", "SERVINGOPS_AGENT_VERIFY_SECONDS", 600.0, kind=float,
                help="how often each complete copy is checked against its digests")
    flags.value("--layers-in-flight", "SERVINGOPS_AGENT_LAYERS_IN_FLIGHT", 3, kind=int,
                help="layers of one model downloaded at once")
    flags.value("--bandwidth-mb-per-second", "SERVINGOPS_AGENT_BANDWIDTH_MBPS", 0.0, kind=float,
                help="cap on the bytes read from the registry, in MiB/s (0: none)")


def from_arguments(args: argparse.Namespace) -> AgentSettings:
    root = Path(args.root).resolve()
    state = Path(args.state_dir) if args.state_dir else root / "var" / "lib" / "servingops-agent"
    return AgentSettings(
        node=args.node, root=root, state_dir=state, namespace=args.namespace, kubeconfig=args.kubeconfig,
        registry=args.registry, registry_insecure=args.registry_insecure,
        registry_credentials_dir=Path(args.registry_credentials_dir) if args.registry_credentials_dir else None,
        workers=args.workers, resync_seconds=args.resync_seconds, verify_seconds=args.verify_seconds,
        bandwidth_mb_per_second=args.bandwidth_mb_per_second, layers_in_flight=args.layers_in_flight)
