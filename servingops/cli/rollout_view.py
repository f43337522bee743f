"""What `servingops rollout` prints, rendered from the SDK's typed models (kept apart from the
argument parsing so `servingops --help` does not import the SDK)."""

from __future__ import annotations

from datetime import datetime

from pydantic_core import to_jsonable_python

from servingops.api_models.contract.rollout import ActiveRun, RolloutState
from servingops.api_models.ome.rollout_status import CanaryStatus
from servingops.sdk.rollouts import RolloutStatus, RunUnavailable


def _row(label: str, value: object, indent: int = 0) -> str:
    return f"{' ' * indent}{label + ':':<{24 - indent}}{'' if value is None else value}"


def _when(moment: datetime | None) -> object:
    """A time as the API writes it (RFC 3339, as `-o json` and kubectl show it)."""
    return None if moment is None else to_jsonable_python(moment)


def _steps_of(run: ActiveRun | None) -> int | None:
    canary = run.pinned.group.canary if run else None
    return len(canary.steps) if canary is not None and canary.steps is not None else None


def render_canary(canary: CanaryStatus, total: int | None, indent: int = 2) -> str:
    step = canary.current_step
    lines = [
        _row("Step", f"{step if step is not None else '-'}/{total if total is not None else '?'}", indent),
        _row("Canary revision", canary.canary_revision_hash, indent),
        _row("Stable revision", canary.stable_revision_hash, indent),
        _row("Traffic weight", canary.observed_traffic_weight, indent),
    ]
    if canary.promoted_through:
        lines.append(_row("Promoted through", canary.promoted_through, indent))
    if canary.rolled_back_revision_hash:
        lines.append(_row("Rolled back revision", canary.rolled_back_revision_hash, indent))
    if canary.pre_step_hold:
        lines.append(_row("Pre-step hold", "true", indent))
    if canary.analysis_failed_checks is not None:
        lines.append(_row("Failed checks", canary.analysis_failed_checks, indent))
    failed = canary.failed
    if failed:
        lines.append(_row("Failure reason", f"{failed.reason} (since {_when(failed.time)})", indent))
    results = canary.metric_results or []
    if results:
        lines.append(f"{' ' * indent}Analysis (last sample at {_when(canary.last_evaluation_time)}):")
        for result in results:
            verdict = "? inconclusive" if result.passed is None else "✔ passed" if result.passed else "✖ failed"
            value = result.value or "-"
            line = f"{' ' * (indent + 2)}{result.name}: {value} {result.operator} {result.threshold}  {verdict}"
            if result.message:
                line += f"  ({result.message})"
            lines.append(line)
    return "\n".join(lines)


def _render_run(key: str, run: RolloutState | RunUnavailable, active: ActiveRun | None) -> list[str]:
    if isinstance(run, RunUnavailable):
        return [f"Rollout group {key} (?, run ?):", _row("Error", run.error, 2)]
    lines = [f"Rollout group {key} ({run.progression}, run {run.run_id}):",
             _row("Phase", run.phase, 2), _row("Waiting on", run.gate or "-", 2)]
    if run.paused:
        lines.append(_row("Paused", "true (ome.io/rollout-paused)", 2))
    if run.canary is not None:
        lines.append(render_canary(run.canary, _steps_of(active)))
    if run.coordination is not None:
        lines.append(_row("Coordination", run.coordination.phase, 2))
    for target in run.targets:
        lines.append(_row(f"Target {target.component}", f"{target.stable_revision} -> {target.revision}", 2))
    if run.last_message:
        lines.append(_row("Message", run.last_message, 2))
    return lines


def render_status(state: RolloutStatus) -> str:
    """A readable summary, in the manner of `kubectl argo rollouts get rollout`."""
    service = state.service
    lines = [_row("Name", state.name), _row("Namespace", state.namespace),
             _row("Status", service.phase), _row("Workflow", state.workflow_id)]
    for key, reason in service.parked.items():
        lines.append(_row(f"Parked (group {key})", reason))
    if not state.rollouts:
        lines.append("Rollout:                no rollout in progress")
    for key, run in state.rollouts.items():
        lines.append("")
        lines.extend(_render_run(key, run, service.active.get(key)))
    if service.components:
        lines.append("")
        lines.append("Components:")
        for name, view in service.components.items():
            weights = ", ".join(f"{w.revision} {w.weight}%" for w in view.traffic)
            lines.append(_row(name, f"stable {view.stable}  traffic [{weights}]"
                                    + (f"  rolloutPhase {view.rollout_phase}" if view.rollout_phase else ""), 2))
            if view.canary is not None and not state.rollouts:
                lines.append(render_canary(view.canary, None, 4))
    return "\n".join(lines)
