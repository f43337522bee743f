"""What the placement workflow keeps between its passes, answers to the `state` query and carries into
a continued run."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

from servingops.workflows.entity import EntityState

with workflow.unsafe.imports_passed_through():
    from servingops.activities.placement.types import MemberInventory
    from servingops.api_models.contract import StartObject
    from servingops.api_models.contract.routing import Publication
    from servingops.api_models.ome.placement_status import PlacementStatus


class PlacementState(EntityState):
    status: PlacementStatus = PlacementStatus()
    """What status.placement says (written after every decision)."""
    why: dict[str, str] = {}
    """Per candidate, the last thing that held it back or why it lost: the race query's answer."""
    applied_generation: dict[str, int] = {}
    """Per candidate, the source generation its derived service was last applied from."""
    held: str | None = None
    """Why nothing races (no candidate, a held match, a mode not served), as said on the object."""
    trouble: dict[str, str] = {}
    """Per member, what its last failed read or write answered (cleared when it answers again)."""
    missing_since: datetime | None = None
    """When the winner's member last answered that the derived service is not there (reachable, but
    gone); unreachable is the winner row's observationFailingSince."""
    move_note: str | None = None
    """What was last said about a Single move that cannot go on (said once per distinct message)."""
    inventory: dict[str, MemberInventory] = {}
    """Adoption: per matched member, what its inventory found (not identified: pending)."""
    last_revision: int = 0
    """The revision of the latest plan accepted for this source (0: none), so revisions only grow."""
    publication: Publication | None = None
    """The latest thing the routing workflow said the global route may send requests to (None: it never
    said anything, so nothing was published for this source): a home it names keeps its copy."""
    awaiting_publication: list[str] = []
    """The homes whose removal waits for the route to stop sending to them (said once on the object)."""
    publication_timed_out: list[str] = []
    """The homes whose withdrawal waited the whole bound for the route once already (not waited again)."""
    passes: int = 0


class PlacementInput(StartObject):
    carried: PlacementState | None = None
