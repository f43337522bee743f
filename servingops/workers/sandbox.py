"""The workflow sandbox every worker of this product runs its workflows in.

Temporal's Python sandbox re-imports a workflow's module, and every module that module imports and
that is not passed through, at each workflow start and each continue-as-new: that keeps workflow
code from sharing mutable module state between runs. Our API models (`servingops.api_models`) and
pydantic hold no state a workflow could change, and they are the bulk of that import: a cold import
of the placement workflow's module costs ~0.5 s here, 0.2 s of it the OME models. Passing them
through (as Temporal's docs advise for data models) takes a PlacementWorkflow's start to its first
activity from ~0.35-0.4 s to ~0.04 s (`python -m bench.workflow_start`).

It also makes a model built inside a workflow the same class the activities and the data converter
know: without it, a `ConditionUpdate` made in the sandbox is another class than the one an
activity's input declares, and pydantic refuses it as a field value.

Tests that run the product's workflows build their workers with this runner too, so what they prove
is what ships.
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

# Side-effect-free at import, no module state a workflow mutates. Submodules pass through with them.
PASSTHROUGH_MODULES = ("servingops.api_models", "pydantic", "pydantic_core", "annotated_types")


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandboxed runner with the product's data models passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))
