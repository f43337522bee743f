"""How long a workflow start takes to reach its first activity, under Temporal's default sandbox
(the baseline) and under the product's runner (workers/sandbox.py: the API models and pydantic
passed through), in the same run.

    .venv/bin/python -m bench.workflow_start [--starts 5] [--rounds 2]

Each start is a PlacementWorkflow over the fake fleet (testkit/placement_fakes.py) on Temporal's
time-skipping test server, timed from `start_workflow` to the first call of its first activity
(`placement.read_source`), then terminated. The rounds alternate the two runners so a warming
machine favours neither. Prints each runner's median and the ratio product / default.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from servingops.api_models import contract
from servingops.workers.registry import workflows as registry_workflows
from servingops.workers.sandbox import workflow_runner
from testkit.placement_fakes import NAME, NAMESPACE, FakeFleet, single, three_members
from testkit.rollout_harness import start_env

FIRST_ACTIVITY = "placement.read_source"


async def _one_start(env: WorkflowEnvironment, runner: SandboxedWorkflowRunner) -> float:
    fleet = FakeFleet(three_members(), single("gpu"))
    reached: list[float] = []
    arrived = asyncio.Event()
    activities = fleet.activities()
    first = next(a for a in activities if activity._Definition.must_from_callable(a).name == FIRST_ACTIVITY)

    @activity.defn(name=FIRST_ACTIVITY)
    async def timed(data: Any) -> Any:
        reached.append(time.perf_counter())
        arrived.set()
        return await first(data)

    queue = f"bench-start-{uuid.uuid4().hex[:8]}"
    async with Worker(env.client, task_queue=queue, workflows=list(registry_workflows()),
                      activities=[timed if a is first else a for a in activities], workflow_runner=runner):
        began = time.perf_counter()
        handle = await env.client.start_workflow(
            "PlacementWorkflow", {"ref": fleet.ref()}, task_queue=queue,
            id=contract.placement_workflow_id(NAMESPACE, NAME, fleet.source_uid))
        await arrived.wait()
        await handle.terminate()
    return reached[0] - began


async def main(starts: int, rounds: int) -> None:
    runners = {"default sandbox": SandboxedWorkflowRunner(), "product runner": workflow_runner()}
    timings: dict[str, list[float]] = {label: [] for label in runners}
    env = await start_env()
    async with env:
        for _ in range(rounds):
            for label, runner in runners.items():
                timings[label] += [await _one_start(env, runner) for _ in range(starts)]
    medians = {label: statistics.median(times) for label, times in timings.items()}
    for label, times in timings.items():
        print(f"{label:16} start -> first activity: median {medians[label] * 1000:6.0f} ms  "
              f"(all: {', '.join(str(round(t * 1000)) for t in times)})")
    print(f"ratio product / default: {medians['product runner'] / medians['default sandbox']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.starts, args.rounds))
