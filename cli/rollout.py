"""`servingops rollout status | promote | rollback <isvc> -n <namespace>`: the SDK on the
command line, equivalent to the ome.io/rollout-* annotations."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    rollout = sub.add_parser("rollout", help="inspect and drive an InferenceService's rollout")
    actions = rollout.add_subparsers(dest="action", required=True)
    for action, text in (("status", "show the rollout: phase, step, revisions, traffic, analysis"),
                         ("promote", "promote the step waiting on a manual gate"),
                         ("rollback", "abandon the canary: traffic back to the stable revision")):
        parser = actions.add_parser(action, help=text)
        parser.add_argument("isvc", help="the InferenceService name")
        parser.add_argument("-n", "--namespace", default="default")
        parser.add_argument("--temporal-address", default=os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
        parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
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

    from runtime.temporal import TemporalSettings, connect
    from sdk.rollouts import NoActiveCanaryError, RolloutClient

    settings = replace(TemporalSettings.from_env(), address=args.temporal_address)
    temporal = await connect(settings)
    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    sdk = RolloutClient(temporal, api)
    try:
        if args.action == "status":
            state = await sdk.status(args.namespace, args.isvc)
            print(json.dumps(state, indent=2, default=str) if args.output == "json" else render_status(state))
            return 0
        if args.action == "promote":
            canary = await sdk.promote(args.namespace, args.isvc, args.revision)
        else:
            canary = await sdk.rollback(args.namespace, args.isvc)
        print(f"{args.action}: {args.namespace}/{args.isvc}")
        print(_render_canary(canary.to_api(), None))
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


# -- rendering ------------------------------------------------------------------------------------


def _row(label: str, value: object, indent: int = 0) -> str:
    return f"{' ' * indent}{label + ':':<{24 - indent}}{'' if value is None else value}"


def _steps_of(run: dict[str, Any] | None) -> int | None:
    if not run:
        return None
    canary = ((run.get("pinned") or {}).get("group") or {}).get("canary") or {}
    steps = canary.get("steps")
    return len(steps) if isinstance(steps, list) else None


def _render_canary(canary: dict[str, Any], total: int | None, indent: int = 2) -> str:
    step = canary.get("currentStep")
    lines = [
        _row("Step", f"{step if step is not None else '-'}/{total if total is not None else '?'}", indent),
        _row("Canary revision", canary.get("canaryRevisionHash"), indent),
        _row("Stable revision", canary.get("stableRevisionHash"), indent),
        _row("Traffic weight", canary.get("observedTrafficWeight"), indent),
    ]
    if canary.get("promotedThrough"):
        lines.append(_row("Promoted through", canary["promotedThrough"], indent))
    if canary.get("rolledBackRevisionHash"):
        lines.append(_row("Rolled back revision", canary["rolledBackRevisionHash"], indent))
    if canary.get("preStepHold"):
        lines.append(_row("Pre-step hold", "true", indent))
    if canary.get("analysisFailedChecks") is not None:
        lines.append(_row("Failed checks", canary["analysisFailedChecks"], indent))
    failed = canary.get("failed")
    if failed:
        lines.append(_row("Failure reason", f"{failed.get('reason')} (since {failed.get('time')})", indent))
    results = canary.get("metricResults") or []
    if results:
        lines.append(f"{' ' * indent}Analysis (last sample at {canary.get('lastEvaluationTime')}):")
        for result in results:
            verdict = {True: "✔ passed", False: "✖ failed"}.get(result.get("passed"), "? inconclusive")
            value = result.get("value") or "-"
            line = (f"{' ' * (indent + 2)}{result.get('name')}: {value} {result.get('operator')} "
                    f"{result.get('threshold')}  {verdict}")
            if result.get("message"):
                line += f"  ({result['message']})"
            lines.append(line)
    return "\n".join(lines)


def render_status(state: dict[str, Any]) -> str:
    """A readable summary, in the manner of `kubectl argo rollouts get rollout`."""
    service = state.get("service") or {}
    lines = [_row("Name", state.get("name")), _row("Namespace", state.get("namespace")),
             _row("Status", service.get("phase")), _row("Workflow", state.get("workflow_id"))]
    for key, reason in (service.get("parked") or {}).items():
        lines.append(_row(f"Parked (group {key})", reason))
    active = service.get("active") or {}
    rollouts = state.get("rollouts") or {}
    if not rollouts:
        lines.append("Rollout:                no rollout in progress")
    for key, run in rollouts.items():
        lines.append("")
        lines.append(f"Rollout group {key} ({run.get('progression', '?')}, run {run.get('run_id', '?')}):")
        if run.get("error"):
            lines.append(_row("Error", run["error"], 2))
            continue
        lines.append(_row("Phase", run.get("phase"), 2))
        lines.append(_row("Waiting on", run.get("gate") or "-", 2))
        if run.get("paused"):
            lines.append(_row("Paused", "true (ome.io/rollout-paused)", 2))
        canary = run.get("canary")
        if canary:
            lines.append(_render_canary(canary, _steps_of(active.get(key))))
        coordination = run.get("coordination")
        if coordination:
            lines.append(_row("Coordination", coordination.get("phase"), 2))
        for target in run.get("targets") or []:
            lines.append(_row(f"Target {target.get('component')}",
                              f"{target.get('stable_revision')} -> {target.get('revision')}", 2))
        if run.get("last_message"):
            lines.append(_row("Message", run["last_message"], 2))
    components = service.get("components") or {}
    if components:
        lines.append("")
        lines.append("Components:")
        for name, view in components.items():
            weights = ", ".join(f"{w.get('revision')} {w.get('weight')}%" for w in view.get("traffic") or [])
            lines.append(_row(name, f"stable {view.get('stable')}  traffic [{weights}]"
                                    + (f"  rolloutPhase {view['rollout_phase']}" if view.get("rollout_phase") else ""),
                              2))
            canary = view.get("canary")
            if canary and not rollouts:
                lines.append(_render_canary(canary, None, 4))
    return "\n".join(lines)
