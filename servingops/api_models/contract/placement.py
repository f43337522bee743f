"""What an operator says to placement on a source InferenceService, beyond seed 004's fields."""

from __future__ import annotations

ADOPT_ANNOTATION = "servingops.io/placement-adopt"
"""On a source InferenceService with spec.placement, value "true": a same-named InferenceService already
standing in a matched member (made by hand, or derived from an earlier source of that name) is inventoried
and adopted as a home instead of being left alone as NameInUse. Without it placement never writes or
deletes an object it did not derive: taking a member's object over is the operator's decision, as
Karmada asks for a conflict-resolution opt-in before it overwrites a member's resource."""

ADOPT_VALUE = "true"
