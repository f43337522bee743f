"""Placement's hands: the source InferenceService and the fleet's registrations in the control
plane, and the derived InferenceServices in the member clusters."""
