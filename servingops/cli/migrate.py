"""`servingops migrate`: surge migration of an OMENative Instance from the command line (the SDK's
MigrationClient; equivalent to an ome.io/migration-request-v1-<uuid> annotation).

    servingops migrate <isvc> -n <ns> --component engine --instance 3 [--to node-a,node-b] [--reason ..]
    servingops migrate status <isvc> -n <ns> [--component engine] [-o json]
    servingops migrate cancel <isvc> <uuid> -n <ns> [--component engine]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from servingops.runtime.process import Flags

USAGE = ("servingops migrate <isvc> --instance N [--component C] [--to a,b] [--reason R] | "
         "migrate status <isvc> | migrate cancel <isvc> <uuid>")


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("migrate", help="move an OMENative Instance off its node (surge, then drain)",
                            usage=USAGE)
    parser.add_argument("words", nargs="+", help="<isvc> | status <isvc> | cancel <isvc> <uuid>")
    parser.add_argument("-n", "--namespace", default="default")
    parser.add_argument("--component", default="engine")
    parser.add_argument("--instance", type=int, default=None)
    parser.add_argument("--to", default="", help="preferred target nodes, comma-separated (soft affinity)")
    parser.add_argument("--reason", default="")
    parser.add_argument("--from-node", default=None, help="default: the node the Instance runs on")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    Flags(parser).temporal_address()
    Flags(parser).kubeconfig()
    parser.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words[0] == "status" and len(words) == 2:
        action, isvc, request_uuid = "status", words[1], None
    elif words[0] == "cancel" and len(words) == 3:
        action, isvc, request_uuid = "cancel", words[1], words[2]
    elif len(words) == 1 and words[0] not in ("status", "cancel"):
        action, isvc, request_uuid = "request", words[0], None
        if args.instance is None:
            print("error: --instance is required", file=sys.stderr)
            return 2
    else:
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args, action, isvc, request_uuid))


def render_records(records: list[Any]) -> str:
    if not records:
        return "no migration records"
    lines = [f"{'UUID':36}  {'TRIGGER':7}  {'FROM':>4}  {'SURGE':>5}  {'PHASE':12}  {'FROM-NODE':16}  MESSAGE"]
    for r in records:
        surge = "" if r.surge_instance is None else str(r.surge_instance)
        lines.append(f"{r.request_uuid or '':36}  {r.trigger or '':7}  {r.source_instance!s:>4}  {surge:>5}  "
                     f"{r.phase or '':12}  {r.from_node or '':16}  {r.message or ''}")
    return "\n".join(lines)


async def _run(args: argparse.Namespace, action: str, isvc: str, request_uuid: str | None) -> int:
    from dataclasses import replace

    from kubernetes import config

    from servingops.runtime.temporal import TemporalSettings, connect
    from servingops.sdk.migrations import MigrationClient, MigrationRefused

    settings = replace(TemporalSettings.from_env(), address=args.temporal_address)
    temporal = await connect(settings)
    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    sdk = MigrationClient(temporal, api, settings.task_queue)
    try:
        if action == "request":
            to = [n.strip() for n in args.to.split(",") if n.strip()]
            made = await sdk.migrate(args.namespace, isvc, component=args.component, instance=args.instance,
                                     to=to, reason=args.reason, requested_by=os.environ.get("USER"),
                                     from_node=args.from_node)
            print(made)
            return 0
        if action == "cancel":
            assert request_uuid is not None
            await sdk.cancel(args.namespace, isvc, args.component, request_uuid)
            print(f"cancel requested: {request_uuid}")
            return 0
        records = await sdk.records(args.namespace, isvc, args.component)
        print(json.dumps([r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in records], indent=2)
              if args.output == "json" else render_records(records))
        return 0
    except MigrationRefused as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # a missing object, Temporal unreachable, ...
        print(f"error: {getattr(error, 'message', None) or error}", file=sys.stderr)
        return 1
    finally:
        api.close()
