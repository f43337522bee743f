"""What a workflow shows the Temporal UI: search attributes (kind, namespace, name, phase).

Each upsert is a history event, so the phase is written only when it changes.
"""

from __future__ import annotations

from temporalio import workflow

from servingops.api_models.contract import search_attributes


class Visibility:
    """Owned by one workflow instance; call from inside workflow code only."""

    def __init__(self, kind: str, namespace: str | None, name: str) -> None:
        self.kind = kind
        self.namespace = namespace or ""
        self.name = name
        self.phase: str | None = None

    def publish(self, phase: str) -> None:
        """Set all four attributes on first call, then only the phase when it changes."""
        if phase == self.phase:
            return
        updates = [search_attributes.PHASE.value_set(phase)]
        if self.phase is None:
            updates += [
                search_attributes.KIND.value_set(self.kind),
                search_attributes.NAMESPACE.value_set(self.namespace),
                search_attributes.NAME.value_set(self.name),
            ]
        workflow.upsert_search_attributes(updates)
        self.phase = phase
