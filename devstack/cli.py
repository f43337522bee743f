"""`python -m devstack.cli up [--members N] | down | status [--state-dir DIR]`: the local stack, run from the checkout.

`./dev up | down | status` calls this. It is not a `servingops` subcommand because devstack/ is not
installed with the product: the stack it starts needs the checkout (deploy/, the examples) anyway.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devstack import stack
from devstack.kube import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--state-dir", default=str(REPO_ROOT / ".stack"))
    parser.add_argument("--members", type=int, default=0,
                        help="up: also start N member clusters registered as WorkloadClusters (placement)")
    args = parser.parse_args(argv)
    if args.action == "up":
        return stack.up(Path(args.state_dir), members=args.members)
    return stack.command(args.action, Path(args.state_dir))


if __name__ == "__main__":
    sys.exit(main())
