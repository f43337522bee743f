"""Record the migration histories on the fake cluster: manual-surge.json (a Manual request moved
through Accepted -> SurgePending -> SurgeReady -> Draining -> Completed; the MigrationWorkflow's
history and the InferenceReplicaWorkflow's that executed it) and auto-relocation.json (an Instance
not Ready on its node by its deadline, recreated away from it).

    .venv/bin/python -m tests.histories.record_migration
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from testkit.migration_world import stack
from tests.histories.record import Recording, start_env

HERE = Path(__file__).parent


async def main() -> None:
    env = await start_env()
    async with env:
        rec = Recording(scenario="manual-surge", out=HERE, env=env)
        async with stack(env) as s:
            s.cluster.endpoint_lag = 3.0
            await rec.root(s.replica)
            _, handle = await s.migrate(1, to=["node-d"])
            await rec.root(handle)
            await s.outcome(handle)
            await s.until(lambda: s.settled([0, 2, 3]), what="settled after the migration")
            for path in await rec.save():
                print(path)
        rec = Recording(scenario="auto-relocation", out=HERE, env=env)
        async with stack(env, replicas=1, nodes=["node-a", "node-b"], lifecycle={"instanceReadyTimeout": "1m"},
                         settle=False, sick={"node-a"}) as s:
            await rec.root(s.replica)
            await s.until(lambda: s.settled([0]) and all(r.get("succeeded") for r in s.records().values()),
                          what="relocated and Ready")
            for path in await rec.save():
                print(path)


if __name__ == "__main__":
    asyncio.run(main())
