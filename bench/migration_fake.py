"""Migration benchmark on the fake cluster (testkit/replica_fakes.py) and Temporal's time-skipping
test server: the real InferenceReplicaWorkflow and MigrationWorkflow, a simulated apiserver and
kubelet (containers ready `--ready-delay` s after create, pods gone 1 s after delete, EndpointSlices
lagging `--endpoint-lag` s behind the serving gate).

    .venv/bin/python -m bench.migration --fake [--instances 100] [--migrations 50] [--nodes 10]

(1) Surge migration: `--migrations` requests at once (Instances 0..k-1, each off its node, no hint)
    on a replica of `--instances`, maxInFlightMigrations = k. Timed per request from the record's
    startedAt (accepted) to completedAt, on the test server's clock (simulated seconds), and overall
    from the first request to the last Completed.
(2) The same replacement by deleting the pods of k other Instances at once and letting the engine
    recreate them (a PodLost repair), timed until every Instance is Ready again.
Every pod change samples the serving Instance count (the fake's serving_log); the fewest serving
during each part is printed. Exits 1 only when a surge migration took the replica below N.
Wall-clock seconds are printed too: they measure the workflow code and the test server, not a kubelet.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime

from servingops.api_models.operator_config import LifecycleDefaults
from testkit.migration_world import stack
from testkit.rollout_harness import start_env


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def run(instances: int, migrations: int, nodes: int, ready_delay: float, endpoint_lag: float) -> int:
    env = await start_env()
    async with env:
        operator = LifecycleDefaults(max_in_flight_migrations=max(1, migrations),
                                     max_migrations_per_window=max(1, migrations))
        names = [f"node-{i:02d}" for i in range(nodes)]
        async with stack(env, replicas=instances, nodes=names, operator=operator, settle=False) as s:
            s.cluster.ready_delay, s.cluster.endpoint_lag = ready_delay, endpoint_lag
            await s.until(lambda: s.settled(list(range(instances))), what=f"{instances} Ready")

            # (1) surge migrations
            wall = time.monotonic()
            start = await s.cluster.now()
            handles = [await s.migrate(i) for i in range(migrations)]
            uuids = {u for u, _ in handles}
            # Polled on the test server's clock (awaiting many results at once stalls time skipping).
            await s.until(lambda: all(s.records().get(u, {}).get("phase") in ("Completed", "Failed") for u in uuids),
                          what="every migration ended")
            end = await s.cluster.now()
            views = [await s.outcome(h) for _, h in handles]
            migrate_wall = time.monotonic() - wall
            completed = [v for v in views if v.record is not None and v.record.phase == "Completed"]
            records = s.records()
            spans = [(_at(r["completedAt"]) - _at(r["startedAt"])).total_seconds() for r in records.values()
                     if r.get("phase") == "Completed"]
            floor = s.cluster.min_serving(after=start)
            peak = s.cluster.max_pods(after=start)
            survivors = sorted(r["index"] for r in s.rows())

            # (2) delete the pods and let the engine recreate them
            await s.until(lambda: s.settled(survivors), what="settled after the migrations")
            victims = survivors[-migrations:] if migrations else []
            wall = time.monotonic()
            before = await s.cluster.now()
            for pod in [p for p in s.cluster.live() if p.index in victims]:
                pod.deleted = before  # a kubectl delete: gone after delete_delay
            await s.replica.signal("pods-changed")
            await s.until(lambda: s.settled(survivors) and not any(p.deleted for p in s.cluster.pods.values()),
                          what="recreated")
            recreate_s = await s.cluster.now() - before
            recreate_wall = time.monotonic() - wall
            recreate_floor = s.cluster.min_serving(after=before)

    print(f"replica: {instances} Instances on {nodes} nodes; ready delay {ready_delay:g} s, "
          f"endpoint lag {endpoint_lag:g} s (simulated)")
    print(f"(1) {migrations} surge migrations at once: {len(completed)} Completed")
    if spans:
        print(f"    per request accepted -> Completed: p50 {statistics.median(spans):.1f} s, "
              f"max {max(spans):.1f} s (simulated)")
    print(f"    first request -> last Completed: {end - start:.1f} s simulated, {migrate_wall:.1f} s wall")
    print(f"    fewest serving Instances at any pod change: {floor} (N = {instances}); most pods: {peak}")
    print(f"(2) {len(victims)} pods deleted, the engine recreating them: {recreate_s:.1f} s simulated, "
          f"{recreate_wall:.1f} s wall")
    print(f"    fewest serving Instances at any pod change: {recreate_floor} (N = {instances})")
    return 0 if floor >= instances and len(completed) == migrations else 1
