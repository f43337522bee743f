"""Canary analysis judged on the requests themselves: a canary revision made failing (5xx) or slow (time to
first token) is rolled back by its analysis step, which reads the pods' own request metrics (vLLM's names,
scraped per pod by the stack's Prometheus) through the operator's bundled Prometheus source.

The load runs through the real Gateway (Traefik) to pods that answer (devstack/pod_runtime.py); a fault is
set on the new revision by its runner's env (SERVINGOPS_POD_ERROR_RATE, SERVINGOPS_POD_TTFT_MS), as a bad
image would behave. Each test says what the users saw: how many requests the bad revision answered, from
the first to the last one (the fault's reach, until weight 0 took effect at the data plane), and that no
request to the stable revision failed. The figures are printed; the p99 goal is the bench's, never a timed
assertion here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from testkit.load import BackgroundLoad, LoadReport, LoadSpec
from tests.rollout_live import NEW_IMAGE, OLD_IMAGE, LiveIsvc, canary, component
from tests.support.traffic_stack import TrafficStack, traffic_stack

pytestmark = pytest.mark.e2e

__all__ = ["traffic_stack"]  # the fixture, reused

RATE = 150.0
"""Requests started per second through the Gateway: 30 a second reach a 20% canary."""
CANARY_WEIGHT = 20
WINDOW = "15s"
"""The rate window of the analysis queries: with Prometheus scraping every second, wide enough that a
sample always spans several scrapes of a pod that started seconds ago."""


def _selector(extra: str = "") -> str:
    return '{namespace="{{.Namespace}}",revision="{{.CanaryRevision}}"' + extra + "}"


# The canary's share of 5xx answers, as vLLM's API server counts them (http_requests_total by status
# class). No 5xx series yet reads 0; no request yet reads no data (inconclusive: the step holds).
FIVE_XX = ',status="5xx"'
ERROR_RATIO = (f"(sum(rate(http_requests_total{_selector(FIVE_XX)}[{WINDOW}])) or vector(0))"
               f" / sum(rate(http_requests_total{_selector()}[{WINDOW}]))")
# The canary's 90th percentile time to first token (vLLM's histogram), in seconds.
TTFT_P90 = (f"histogram_quantile(0.9, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{_selector()}[{WINDOW}])))")


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def _analysed_canary(metric: dict[str, str]) -> dict[str, Any]:
    """One analysis step at CANARY_WEIGHT (sampled every second, the first failing sample rolls back,
    a minute's bake if it passes), then all traffic: spec.rollout."""
    step = {"capacity": "100%", "traffic": CANARY_WEIGHT, "pause": {"duration": "60s"},
            "analysis": {"interval": "1s", "failureLimit": 1, "metrics": [metric]}}
    return canary([step, {"capacity": "100%", "traffic": 100}])


def _faulty(env: dict[str, str]) -> dict[str, Any]:
    spec = component(NEW_IMAGE, 2)
    spec["runner"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return spec


@dataclass(frozen=True)
class Reach:
    """What the bad revision's users saw."""

    requests: int
    failed: int
    seconds: float
    """From the first request it answered to the last: how long the fault reached users."""


def _reach(report: LoadReport, revision: str) -> Reach:
    answered = [r for r in report.records if r.revision == revision]
    assert answered, f"no request reached {revision}: {dict(report.by_revision)}"
    first, last = min(r.start_s for r in answered), max(r.start_s for r in answered)
    return Reach(len(answered), sum(1 for r in answered if not r.ok), round(last - first, 2))


def _rolled_back_under_load(stack: TrafficStack, isvc: LiveIsvc, metric: dict[str, str],
                            env: dict[str, str]) -> tuple[LoadReport, str, str, dict[str, Any]]:
    """Serve a good revision, roll to a faulty one under load, wait for the analysis to send every
    request back to the good one; the load's report, both revisions' backends and the engine's status."""
    isvc.create({"engine": component(OLD_IMAGE, 2), "rollout": _analysed_canary(metric)})
    stable = isvc.first_revision()
    isvc.wait("answered through the Gateway",
              lambda: stack.traefik.get("/v1/models", stack.host(isvc.name))[0] == 200)

    spec = LoadSpec(url=stack.traefik.url, host=stack.host(isvc.name), rate=RATE, max_requests=int(RATE * 120),
                    max_seconds=120, max_tokens=4)
    with BackgroundLoad(spec) as load:
        isvc.set_component("engine", _faulty(env))
        bad = isvc.canary_at(stable, CANARY_WEIGHT)
        load.mark("canary routed")
        engine = isvc.wait("rolled back by the analysis", lambda: (
            (e := isvc.component()).get("rolloutPhase") == "RolledBack" and e))
        isvc.wait("every request back on the stable revision", lambda: isvc.serving() == {stable: 100})
        load.mark("route back on stable")
        isvc.hold("the stable revision alone serving", lambda: isvc.serving() == {stable: 100}, 3)
        report = load.stop()
    return report, stable, bad, engine


def _check(isvc: LiveIsvc, report: LoadReport, stable_backend: str, bad_backend: str, engine: dict[str, Any],
           metric: str) -> Reach:
    stable, bad = isvc.revision(stable_backend), isvc.revision(bad_backend)
    canary_status = engine["canary"]
    assert canary_status["rolledBackRevisionHash"] == bad, canary_status
    assert engine["latestRolledoutRevision"] == stable_backend, engine
    failing = [r for r in canary_status.get("metricResults") or [] if r.get("passed") is False]
    assert [r["name"] for r in failing] == [metric], canary_status
    # Nobody but the bad revision's users saw a failure: no request failed on the way or at the stable one.
    elsewhere = [r for r in report.records if not r.ok and r.revision != bad]
    assert not elsewhere, [(r.reason, r.revision) for r in elsewhere[:10]]
    after = report.window("route back on stable")
    assert after.succeeded > 0 and set(after.by_revision) == {stable}, dict(after.by_revision)
    return _reach(report, bad)


def test_a_failing_canary_is_rolled_back_by_its_error_ratio(traffic_stack: TrafficStack) -> None:
    isvc = traffic_stack.live.isvc(_unique("failing"))
    metric = {"name": "error-ratio", "query": ERROR_RATIO, "operator": "LT", "threshold": "0.05"}
    report, stable, bad, engine = _rolled_back_under_load(
        traffic_stack, isvc, metric, {"SERVINGOPS_POD_ERROR_RATE": "0.5"})
    reach = _check(isvc, report, stable, bad, engine, "error-ratio")
    assert reach.failed > 0, "the fault was never seen by a user: nothing was tested"
    print(f"failing canary: {reach.requests} requests reached it ({reach.failed} failed) over {reach.seconds} s "
          f"from its first answer to weight 0 at the Gateway; {report.succeeded} answered, by revision "
          f"{dict(report.by_revision)}; metric {engine['canary'].get('metricResults')}")


def test_a_slow_canary_is_rolled_back_by_its_time_to_first_token(traffic_stack: TrafficStack) -> None:
    isvc = traffic_stack.live.isvc(_unique("slow"))
    metric = {"name": "ttft-p90", "query": TTFT_P90, "operator": "LT", "threshold": "0.5"}
    report, stable, bad, engine = _rolled_back_under_load(
        traffic_stack, isvc, metric, {"SERVINGOPS_POD_TTFT_MS": "1500"})
    reach = _check(isvc, report, stable, bad, engine, "ttft-p90")
    assert reach.failed == 0, "slow is not failing: every request to the slow revision still answered"
    slow = [r.latency_s for r in report.records if r.revision == isvc.revision(bad)]
    assert min(slow) >= 1.5, "the slow revision answered faster than its time to first token"
    print(f"slow canary: {reach.requests} requests reached it over {reach.seconds} s from its first answer to "
          f"weight 0 at the Gateway; {report.succeeded} answered, by revision {dict(report.by_revision)}; "
          f"metric {engine['canary'].get('metricResults')}")
