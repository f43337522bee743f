"""The node agent's settings: flags, with environment variables as defaults.

The registry settings are the worker's (workers/settings.py): the same flags and variables name the
registry and whether it speaks plain HTTP. Credentials differ in how they arrive: the worker reads a
Secret through the API, while the agent (a DaemonSet on every GPU node) gets the same Secret mounted as
files, so it needs no right to read Secrets at all.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from servingops.clients.oci.credentials import credentials_from_secret_data
from servingops.clients.oci.registry_client import RegistryCredentials


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
    env = os.environ.get
    parser.add_argument("--node", default=env("NODE_NAME"), required=env("NODE_NAME") is None,
                        help="the Node this agent serves (env NODE_NAME, from the downward API in the DaemonSet)")
    parser.add_argument("--root", default=env("SERVINGOPS_AGENT_ROOT", "/"),
                        help="the node's disk: storage.path is taken relative to it (/ in a pod with the host's "
                             "paths mounted at the same place; a directory per kwok node locally)")
    parser.add_argument("--state-dir", default=env("SERVINGOPS_AGENT_STATE_DIR"),
                        help="where the agent keeps its records (default <root>/var/lib/servingops-agent)")
    parser.add_argument("--namespace", default=env("SERVINGOPS_NAMESPACE", "servingops-system"),
                        help="where the node's report ConfigMap lives (env SERVINGOPS_NAMESPACE)")
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="env KUBECONFIG; none: in-cluster")
    parser.add_argument("--registry", default=env("SERVINGOPS_REGISTRY", "127.0.0.1:5000"),
                        help="host:port of the registry artifacts are pulled from (env SERVINGOPS_REGISTRY)")
    parser.add_argument("--registry-insecure", action=argparse.BooleanOptionalAction,
                        default=env("SERVINGOPS_REGISTRY_INSECURE", "true") == "true", help="plain HTTP")
    parser.add_argument("--registry-credentials-dir", default=env("SERVINGOPS_REGISTRY_CREDENTIALS_DIR"),
                        help="the registry credentials Secret mounted as files (.dockerconfigjson, or "
                             "username and password); none: anonymous (env SERVINGOPS_REGISTRY_CREDENTIALS_DIR)")
    parser.add_argument("--workers", type=int, default=int(env("SERVINGOPS_AGENT_WORKERS", "2")),
                        help="models pulled at the same time")
    parser.add_argument("--resync-seconds", type=float, default=float(env("SERVINGOPS_AGENT_RESYNC_SECONDS", "60")))
    parser.add_argument("--verify-seconds", type=float, default=float(env("SERVINGOPS_AGENT_VERIFY_SECONDS", "600")),
                        help="how often each complete copy is checked against its digests")
    parser.add_argument("--layers-in-flight", type=int, default=int(env("SERVINGOPS_AGENT_LAYERS_IN_FLIGHT", "3")),
                        help="layers of one model downloaded at once")
    parser.add_argument("--bandwidth-mb-per-second", type=float,
                        default=float(env("SERVINGOPS_AGENT_BANDWIDTH_MBPS", "0")),
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
