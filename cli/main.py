"""`servingops`: crds, worker, bridge, dev up / dev down, rollout status / promote / rollback."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cmd_crds(args: argparse.Namespace) -> int:
    """Write (or, with --check, compare) deploy/crds/ from the pydantic models."""
    from api_models.crdgen import manifest_path, render, write_crds
    from api_models.registry import served_kinds

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
    from workers.main import main as worker_main

    worker_main(args.rest)
    return 0


def cmd_bridge(args: argparse.Namespace) -> int:
    from crd_bridge.main import main as bridge_main

    bridge_main(args.rest)
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from devstack import stack

    return stack.command(args.action, Path(args.state_dir))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servingops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    crds = sub.add_parser("crds", help="generate deploy/crds/ from the API models")
    crds.add_argument("--out", default=str(REPO_ROOT / "deploy" / "crds"))
    crds.add_argument("--check", action="store_true", help="fail when the committed CRDs are stale")
    crds.set_defaults(func=cmd_crds)

    for name, func, text in (("worker", cmd_worker, "run a worker process"),
                             ("bridge", cmd_bridge, "run the CRD bridge process")):
        proc = sub.add_parser(name, help=text, add_help=False)
        proc.add_argument("rest", nargs=argparse.REMAINDER)
        proc.set_defaults(func=func)

    dev = sub.add_parser("dev", help="the local stack: up, down, status")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--state-dir", default=str(REPO_ROOT / ".stack"))
    dev.set_defaults(func=cmd_dev)

    from cli.rollout import add_parser as add_rollout

    add_rollout(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
