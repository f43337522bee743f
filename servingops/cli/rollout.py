"""`servingops rollout status | promote | rollback <isvc> -n <namespace>`: the SDK on the
command line, equivalent to the ome.io/rollout-* annotations."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from servingops.runtime.process import Flags


def add_parser(sub: Any) -> None:
    rollout = sub.add_parser("rollout", help="inspect and drive an InferenceService's rollout")
    actions = rollout.add_subparsers(dest="action", required=True)
    for action, text in (("status", "show the rollout: phase, step, revisions, traffic, analysis"),
                         ("promote", "promote the step waiting on a manual gate"),
                         ("rollback", "abandon the canary: traffic back to the stable revision")):
        parser = actions.add_parser(action, help=text)
        parser.add_argument("isvc", help="the InferenceService name")
        parser.add_argument("-n", "--namespace", default="default")
        Flags(parser).temporal_address()
        Flags(parser).kubeconfig()
        if action == "status":
            parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
        if action == "promote":
            parser.add_argument("--revision", default=None,
                                help="the canary revision hash (default: the running canary's)")
        parser.set_defaults(func=cmd_rollout)


def cmd_rollout(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from kubernetes import config

    from servingops.cli.rollout_view import render_canary, render_status
    from servingops.runtime.temporal import TemporalSettings, connect
    from servingops.sdk.rollouts import NoActiveCanaryError, RolloutClient

    settings = replace(TemporalSettings.from_env(), address=args.temporal_address)
    temporal = await connect(settings)
    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    sdk = RolloutClient(temporal, api)
    try:
        if args.action == "status":
            state = await sdk.status(args.namespace, args.isvc)
            print(json.dumps(state.model_dump(mode="json", by_alias=True), indent=2) if args.output == "json"
                  else render_status(state))
            return 0
        if args.action == "promote":
            canary = await sdk.promote(args.namespace, args.isvc, args.revision)
        else:
            canary = await sdk.rollback(args.namespace, args.isvc)
        print(f"{args.action}: {args.namespace}/{args.isvc}")
        print(render_canary(canary, None))
        return 0
    except NoActiveCanaryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # an update refused by its validator, a missing object, ...
        print(f"error: {_explain(error)}", file=sys.stderr)
        return 1
    finally:
        api.close()


def _explain(error: BaseException) -> str:
    """The message of an error and of its causes (an update refused by its validator arrives as
    "Workflow update failed" caused by the validator's ApplicationError)."""
    parts: list[str] = []
    current: BaseException | None = error
    while current is not None and len(parts) < 5:
        text = getattr(current, "message", None) or str(current)
        if text and text not in parts:
            parts.append(text)
        current = getattr(current, "cause", None) or current.__cause__
    return ": ".join(parts)
