"""A surge migration judged by requests: an OMENative InferenceService's Instance moves to another node
while a load goes through the real Gateway (Traefik) to its pods that answer, and no request fails.

Seed 004's migration contract: the surge Instance is Ready before the source drains, and the source
leaves rotation before it is deleted. Here that is counted where users see it: at least 5,000 requests
at over 100 a second, every one answered, the surge pod among those answering and the source pod
answering no more once it is gone. The worker and the bridge run as processes; the request annotation
goes through the bridge like a user's.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from servingops.rendering.render import DRAIN_SECONDS
from testkit.load import BackgroundLoad, LoadSpec
from tests.support.migration_stack import Sampler, Service
from tests.support.traffic_stack import TrafficStack, failures, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

RATE = 120.0
REQUESTS = 6000
"""50 s at RATE: the load outlasts the migration, and the count is over the 5,000 the issue asks for."""


def test_a_surge_migration_under_load_loses_no_request(traffic_stack: TrafficStack) -> None:
    stack = traffic_stack
    svc = Service(stack.live.api, stack.namespace, stack.live.worker, 2)
    svc.wait("two Instances Ready", lambda: svc.settled([0, 1]))
    svc.wait("answered through the Gateway",
             lambda: stack.traefik.get("/v1/models", stack.host(svc.name))[0] == 200)
    source_pod = f"{svc.replica}-1"
    source_node = svc.node_of(1)
    target = next(n for n in stack.cluster.node_names if n not in (source_node, svc.node_of(0)))
    # What keeps the handover lossless: the source pod answers DRAIN_SECONDS after its deletion.
    pre_stop = client.CoreV1Api(stack.live.api).read_namespaced_pod(source_pod, svc.ns).spec.containers[0].lifecycle
    assert pre_stop is not None and pre_stop.pre_stop.sleep.seconds == DRAIN_SECONDS, pre_stop

    spec = LoadSpec(url=stack.traefik.url, host=stack.host(svc.name), rate=RATE, max_requests=REQUESTS,
                    max_seconds=REQUESTS / RATE + 30, max_tokens=4)
    with BackgroundLoad(spec) as load, Sampler(svc, {source_pod}) as sampler:
        time.sleep(3)  # answers from both Instances before the request
        load.mark("requested")
        request_uuid = svc.request(1, [target])
        record = svc.wait("Completed", lambda: (r := svc.record(request_uuid)).get("phase") == "Completed" and r)
        svc.wait("Instances 0 and 2", lambda: svc.settled([0, 2]))
        load.mark("settled")
        deadline = time.monotonic() + REQUESTS / RATE + 60
        while load.running and time.monotonic() < deadline:
            time.sleep(0.5)
        report = load.stop()

    source_key, surge_key = f"{svc.ns}/{source_pod}", f"{svc.ns}/{svc.replica}-2"  # how answers name a pod
    assert record["surgeInstance"] == 2 and record["sourceInstance"] == 1, record
    assert report.total >= 5000 and report.achieved_rate >= 100, (report.total, report.achieved_rate)
    assert report.failed == 0, failures(report)
    assert report.window(None, "requested").by_pod[source_key] > 0, "the source answered before the move"
    assert report.window("settled").by_pod[surge_key] > 0, "the surge Instance answered after the move"
    assert source_key not in report.window(report.at("settled") + 1).by_pod, "the gone source still answered"
    assert not sampler.leaks, f"a source pod was deleted while still a Ready endpoint: {sampler.leaks}"
    print(f"surge migration under load: {report.total} requests at {report.achieved_rate:.0f}/s, "
          f"{report.failed} failed; by pod {dict(report.by_pod)}")
