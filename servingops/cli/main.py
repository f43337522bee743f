"""`servingops`: crds, worker, bridge, agent, webhook, admission, catalog-endpoint, rollout status / promote /
rollback, migrate.

The local development stack is not part of the installed product: `./dev up | down | status` runs it from
the checkout (`python -m devstack.cli`)."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_CRDS = REPO_ROOT / "deploy" / "crds"
"""Where `servingops crds` writes when run from a checkout; an installed wheel has no such folder."""


def cmd_crds(args: argparse.Namespace) -> int:
    """Write (or, with --check, compare) deploy/crds/ from the pydantic models."""
    from servingops.api_models.crdgen import manifest_path, render, write_crds
    from servingops.api_models.registry import served_kinds

    if args.out == "-":
        if args.check:
            print("error: --check compares with a folder: name it with --out", file=sys.stderr)
            return 2
        sys.stdout.write("---\n".join(render(kind) for kind in served_kinds()))
        return 0
    out = Path(args.out)
    if not args.check:
        for path in write_crds(out, served_kinds()):
            print(path)
        return 0
    stale = 0
    for kind in served_kinds():
        path = manifest_path(out, kind)
        want = render(kind)
        have = path.read_text() if path.exists() else ""
        if want != have:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                                       str(path), "generated"))
    return 1 if stale else 0


def cmd_worker(args: argparse.Namespace) -> int:
    from servingops.workers.main import main as worker_main

    worker_main(args.rest)
    return 0


def cmd_bridge(args: argparse.Namespace) -> int:
    from servingops.crd_bridge.main import main as bridge_main

    bridge_main(args.rest)
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from servingops.agents.main import main as agent_main

    agent_main(args.rest)
    return 0


def cmd_webhook(args: argparse.Namespace) -> int:
    from servingops.ingress.model_webhook import main as webhook_main

    webhook_main(args.rest)
    return 0


def cmd_admission(args: argparse.Namespace) -> int:
    from servingops.admission.main import main as admission_main

    admission_main(args.rest)
    return 0


def cmd_catalog_endpoint(args: argparse.Namespace) -> int:
    from servingops.ingress.catalog_endpoint import main as catalog_endpoint_main

    catalog_endpoint_main(args.rest)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servingops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    crds = sub.add_parser("crds", help="generate deploy/crds/ from the API models")
    crds.add_argument("--out", default=str(CHECKOUT_CRDS) if CHECKOUT_CRDS.is_dir() else "-",
                      help="a folder, or - for stdout (the default outside a checkout: pipe it to kubectl apply -f -)")
    crds.add_argument("--check", action="store_true", help="fail when the committed CRDs are stale")
    crds.set_defaults(func=cmd_crds)

    for name, func, text in (("worker", cmd_worker, "run a worker process"),
                             ("bridge", cmd_bridge, "run the CRD bridge process"),
                             ("agent", cmd_agent, "run the node agent (copies model weights onto one node)"),
                             ("webhook", cmd_webhook, "run the model admission webhook (HTTPS)"),
                             ("admission", cmd_admission, "run the validating admission webhook (HTTPS)"),
                             ("catalog-endpoint", cmd_catalog_endpoint,
                              "run the catalog endpoint: publishes this cluster's Ready ClusterModels (HTTPS)")):
        proc = sub.add_parser(name, help=text, add_help=False)
        proc.add_argument("rest", nargs=argparse.REMAINDER)
        proc.set_defaults(func=func)

    from servingops.cli.migrate import add_parser as add_migrate
    from servingops.cli.rollout import add_parser as add_rollout

    add_rollout(sub)
    add_migrate(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    processes = {"worker": cmd_worker, "bridge": cmd_bridge, "agent": cmd_agent, "webhook": cmd_webhook,
                 "admission": cmd_admission, "catalog-endpoint": cmd_catalog_endpoint}
    if argv and argv[0] in processes:
        # The processes parse their own flags, --help included: argparse's REMAINDER would refuse the first
        # argument that starts with a dash (`servingops bridge --metrics-address ...`, as the Deployment runs it).
        sys.exit(processes[argv[0]](argparse.Namespace(rest=argv[1:])))
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
