"""Rollouts of an InferenceService as durable workflows.

Workflows:
- `service_workflow.InferenceServiceWorkflow`: the entity workflow the bridge drives; serves the
  first revision, opens one rollout run per unit whose revision changed, writes status and its
  Events, and reports a spec the serving activities refuse.
- `run_workflow.RolloutWorkflow`: one run of one rollout group; its handlers (signals, the SDK's
  updates, the `state` query, the driver surface) are in `handlers`.

The step machines, one module each with the same `run(driver)` entry, in `progressions/`:
`canary` (steps, gates, analysis, promote, rollback, retarget, repin, resume), `bluegreen`,
`rolling`; `progressions/driver` says what they need from the run.

Pure rules: `steps` (gates and gate outcomes, capacity, verdicts, timeouts), `plan` (which
components roll together and which units start now), `policy_pinning` (pinning a group's
progression, portable digests), `templating` (PromQL context), `status` (the status the
rollouts own and the Events that go with it). `analysis` takes one metrics sample.
"""

from servingops.workflows.rollout.run_workflow import RolloutWorkflow
from servingops.workflows.rollout.service_workflow import InferenceServiceWorkflow

WORKFLOWS = (InferenceServiceWorkflow, RolloutWorkflow)

__all__ = ["WORKFLOWS", "InferenceServiceWorkflow", "RolloutWorkflow"]
