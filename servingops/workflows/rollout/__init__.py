"""Rollouts of an InferenceService as durable workflows.

- `workflow.RolloutWorkflow`: one run of one rollout group, opened by the InferenceService's
  workflow (workflows/inference_service/); its handlers (signals, the SDK's updates, the `state`
  query, the driver surface) are in `handlers`.

The step machines, one module each with the same `run(driver)` entry, in `progressions/`:
`canary` (steps, gates, analysis, promote, rollback, retarget, repin, resume), `bluegreen`,
`rolling`; `progressions/driver` says what they need from the run.

Pure rules: `steps` (gates and gate outcomes, capacity, verdicts, timeouts), `plan` (which
components roll together and which units start now), `policy_pinning` (pinning a group's
progression, portable digests), `templating` (PromQL context), `status` (the status the
rollouts own and the Events that go with it). `analysis` takes one metrics sample. `models` holds
the inputs and results the InferenceService workflow and its runs exchange.

Nothing is imported here: each module imports what it uses, and the worker's registry imports the
workflow modules it registers.
"""
