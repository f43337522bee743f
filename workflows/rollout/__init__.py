"""Rollouts of an InferenceService as durable workflows.

- `service.InferenceServiceWorkflow`: the entity workflow the bridge drives; serves the first
  revision, opens one rollout run per unit whose revision changed, and writes status.
- `canary.RolloutWorkflow`: one run of one rollout group: the canary step machine, or the
  blue-green / rolling progressions (`bluegreen`, `rolling`).
- Pure rules: `steps` (gates, capacity, verdicts, timeouts), `templating` (PromQL context),
  `units` (which components roll together), `policy` (pinning and digests), `status` (the
  status the rollouts own).
"""

from workflows.rollout.canary import RolloutWorkflow
from workflows.rollout.service import InferenceServiceWorkflow

WORKFLOWS = (InferenceServiceWorkflow, RolloutWorkflow)

__all__ = ["WORKFLOWS", "InferenceServiceWorkflow", "RolloutWorkflow"]
