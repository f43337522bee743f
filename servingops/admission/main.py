"""`servingops admission`: the validating admission webhook.

Serves `POST /validate` and `GET /healthz` over HTTPS and answers the AcceleratorQuota tree rules at apply time
(docs/admission.md). It reads the tree as its own ServiceAccount: list on acceleratorquotas, get on Kueue
clusterqueues, nothing else. The controller re-checks every rule at reconcile: this process being down admits
writes (failurePolicy Ignore in the chart), never blocks them.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass
from pathlib import Path

from servingops.admission.reader import KubeTreeReader
from servingops.admission.server import AdmissionServer
from servingops.rendering.accelerator_quota import DEFAULT_MAX_DEPTH
from servingops.runtime.kube import load_api_client
from servingops.runtime.process import Flags, Process, listen_address, run_threaded


@dataclass(frozen=True)
class AdmissionSettings:
    listen: str
    cert_file: Path
    key_file: Path
    kubeconfig: str | None
    max_depth: int

    @property
    def host_port(self) -> tuple[str, int]:
        return listen_address(self.listen)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.https_listener("SERVINGOPS_ADMISSION", "0.0.0.0:9443", "/etc/servingops/admission-tls")
    flags.kubeconfig()
    flags.value("--max-depth", "SERVINGOPS_QUOTA_MAX_DEPTH", DEFAULT_MAX_DEPTH, kind=int,
                help="the deepest an AcceleratorQuota may sit below the root (the controller's own bound)")


def from_arguments(args: argparse.Namespace) -> AdmissionSettings:
    return AdmissionSettings(listen=args.listen, cert_file=Path(args.tls_cert), key_file=Path(args.tls_key),
                             kubeconfig=args.kubeconfig, max_depth=args.max_depth)


def run(settings: AdmissionSettings, stop: threading.Event) -> None:
    """Serve until `stop` is set."""
    api_client = load_api_client(settings.kubeconfig)
    host, port = settings.host_port
    server = AdmissionServer(host, port, settings.cert_file, settings.key_file, KubeTreeReader(api_client),
                             max_depth=settings.max_depth).start()
    try:
        stop.wait()
    finally:
        server.stop()
        api_client.close()  # type: ignore[no-untyped-call]


PROCESS = Process("admission", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_threaded(PROCESS, argv, run)


if __name__ == "__main__":
    main()
