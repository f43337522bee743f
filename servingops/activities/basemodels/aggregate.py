"""The node agents' reports of one model, folded into status (pure, no I/O).

As upstream OME's basemodel controller (calculateLifecycleState and the ConfigMap walk): a node whose
entry says Ready goes to nodesReady, Failed to nodesFailed, Updating to neither; both lists sorted.
State: Ready when at least one node is Ready, Failed when none is and at least one failed, In_Transit
otherwise (copies being made, or no node reported yet).

Beyond upstream: an entry counts only for the artifact the model names now. A Ready copy of the
previous digest (the agent has not started on the new one) is a node in transit, not a ready node.
"""

from __future__ import annotations

from pydantic import BaseModel

from servingops.activities.basemodels.types import NodeEntry
from servingops.api_models.ome.enums import LifeCycleState

READY, UPDATING, FAILED = "Ready", "Updating", "Failed"


class NodesSummary(BaseModel):
    nodes_ready: list[str] = []
    nodes_failed: list[str] = []
    nodes_updating: list[str] = []
    state: LifeCycleState = LifeCycleState.IN_TRANSIT
    failures: dict[str, str] = {}
    """Node -> the agent's message, for the failed nodes."""

    @property
    def settled(self) -> bool:
        """Every reporting node has a final answer for the current artifact (and one did report)."""
        return bool(self.nodes_ready or self.nodes_failed) and not self.nodes_updating


def summarise(entries: list[NodeEntry], digest: str | None) -> NodesSummary:
    """`digest`: the manifest digest the model's annotation names (None for local://, which has none)."""
    summary = NodesSummary()
    for entry in entries:
        current = digest is None or entry.digest == digest
        if entry.status == READY and current:
            summary.nodes_ready.append(entry.node)
        elif entry.status == FAILED and current:
            summary.nodes_failed.append(entry.node)
            summary.failures[entry.node] = entry.message
        elif entry.status in (READY, UPDATING, FAILED):
            summary.nodes_updating.append(entry.node)
    summary.nodes_ready.sort()
    summary.nodes_failed.sort()
    summary.nodes_updating.sort()
    if summary.nodes_ready:
        summary.state = LifeCycleState.READY
    elif summary.nodes_failed:
        summary.state = LifeCycleState.FAILED
    return summary
