"""metav1.Condition bookkeeping, as controller-runtime's meta.SetStatusCondition does it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from servingops.api_models.refs import ConditionUpdate


def merge_conditions(
    current: list[dict[str, Any]] | None,
    updates: list[ConditionUpdate],
    *,
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    """Apply `updates` to `current`.

    lastTransitionTime changes only when a condition's status changes, so an operator can tell
    how long something has been true; reason, message and observedGeneration always follow.
    """
    by_type = {c["type"]: dict(c) for c in current or []}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for update in updates:
        previous = by_type.get(update.type)
        entry = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message,
            "observedGeneration": generation,
            "lastTransitionTime": stamp,
        }
        if previous and previous.get("status") == update.status and previous.get("lastTransitionTime"):
            entry["lastTransitionTime"] = previous["lastTransitionTime"]
        by_type[update.type] = entry
    return list(by_type.values())
