"""Traffic benchmark: from promote to half the requests answered by the new revision, servingops beside
Argo Rollouts on the same real data plane, under the same load, in one run.

    .venv/bin/python -m bench.traffic [--trials 10] [--rate 200] [--first-weight 10] [--window 0.1] [--trace]
                                      [--translator traefik|envoyGateway]

What is timed is what a user of the service sees: a canary is promoted from its first step (weight
`--first-weight`) to a step at 50 %, and the clock runs from just before the promote's first request to
the first `--window`-second window of request starts in which at least half of the successful answers
came from the new revision (half rounded down: an odd count cannot split evenly; a window starts at every
request's start, so the time resolves to 1 / `--rate`, not to the window's width). The load is testkit.load's
open loop, `--rate` chat requests a second through Traefik with the service's Host header; every answer
names the revision that served it (the pod server's `x-servingops-revision`, from the pod label
`serving.ome.io/revision`).

One local cluster whose pods answer (devstack/pod_runtime.py), one Traefik process (devstack/traefik.py)
serving both controllers' routing objects on one entry point, and per trial one canary of each side:

- servingops: an InferenceService (one engine pod per revision) whose canary steps are
  `{capacity: 100%, traffic: first-weight, pause: {}}` then `{capacity: 100%, traffic: 50, pause: {}}`;
  its HTTPRoute attaches to Traefik's Gateway (the operator ConfigMap's ingress block, chart installed,
  worker and bridge as the chart's identities). `--translator` is that block's trafficTranslator: with
  `traefik` (the default: the data plane here is Traefik) the weights are written into the component's
  weighted TraefikService, which the route's one backendRef names (docs/routing.md), so the promote
  writes an object of Traefik's kubernetesCRD provider, as Argo's does; with `envoyGateway` they are the
  HTTPRoute's backendRef weights, whose write also makes Traefik's Gateway provider rebuild and write the
  route's status. Promote: the `ome.io/rollout-promote` annotation set to
  the canary revision hash.
- Argo Rollouts v1.10.2 (bench/argo_rollouts.py: built from its Go module on demand, its controller a
  process against the same apiserver) with its Traefik router (`trafficRouting.traefik
  .weightedTraefikServiceName`): it writes the stable and canary Services' weights into a TraefikService
  (traefik.io/v1alpha1, its default in v1.10.2; the flags `--traefik-api-group` and
  `--traefik-api-version` are passed with those values), which an IngressRoute routes the host to. Traefik's
  kubernetesCRD provider serves both, its CRDs from Traefik's Go module (devstack/traefik.py crd_dir()).
  Steps `setCanaryScale {replicas: 1}`, `setWeight first-weight`, `pause {}`, `setWeight 50`, `pause {}`.
  Promote: what `kubectl argo rollouts promote` sends.

Both canaries are at full size (one pod) and answering at the first weight before the load starts, so no
pod start is in the measured path; every canary is prepared before the first trial, then the trials run
in turns (servingops first in even trials, Argo first in odd ones), each with a load of its own that
starts one second before the promote. Also printed, to say where the time went: promote -> the routing
object's weights written (HTTPRoute / TraefikService, through watches; the controller's part), weights
written -> half answered (Traefik's part: its provider's watch, throttle and reload), and the failed and
total requests of each side.

Goals (bench/goals.py, the exit status): servingops / Argo Rollouts <= 1.0 at p50 and at p99 (nearest
rank: with fewer than 100 trials, p99 is the slowest).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client

from bench import argo_rollouts
from bench.goals import Goals
from bench.rollout_promote import GROUP, NEW_IMAGE, OLD_IMAGE, PLURAL, PROMOTE, VERSION, route_weights
from bench.stack import chart_identities, start_servers, wait_for
from bench.watches import ObjectWatch
from devstack.pod_runtime import REVISION_LABEL, UPSTREAM_SERVICE_LABEL
from devstack.product import BridgeLauncher, start_worker
from devstack.traefik import ENTRY_POINT, GATEWAY_NAME, GATEWAY_NAMESPACE, Traefik, crd_dir
from testkit.load import REVISION_HEADER, BackgroundLoad, LoadReport, LoadSpec, Percentiles

INGRESS_DOMAIN = "example.com"
HALF_WEIGHT = 50
TRAEFIK, ENVOY_GATEWAY = "traefik", "envoyGateway"
"""The operator's ingress.trafficTranslator values (servingops/api_models/operator_config.py)."""
TRAEFIK_GROUP, TRAEFIK_VERSION = "traefik.io", "v1alpha1"
ARGO_TRAEFIK_FLAGS = (f"--traefik-api-group={TRAEFIK_GROUP}",
                      f"--traefik-api-version={TRAEFIK_GROUP}/{TRAEFIK_VERSION}")
"""Argo Rollouts v1.10.2's defaults (utils/defaults: traefik.io, traefik.io/v1alpha1), said aloud: the
group Traefik v3 serves, so a change of Argo's default cannot silently point the router elsewhere."""
PORT = 8000
LEAD_S = 1.0
"""Load before the promote: connections to Traefik are open and the first weight is seen answering."""
SETTLED_S = 1.0
"""A window is judged during the run only once this long has passed after it (its requests answered)."""
HALF_TIMEOUT_S = 30.0
MAX_LOAD_S = 60.0
PREPARE_TIMEOUT_S = 300.0
PROMOTED = "promoted"


def trial_name(trial: int) -> str:
    return f"t{trial:02d}"


# ---------------------------------------------------------------------------------------------------------------
# The two sides: one canary per trial each, prepared up to its first pause, then promoted once


class Side(Protocol):
    label: str

    def host(self, trial: int) -> str: ...
    def create(self, trial: int) -> None: ...
    def serving(self, trial: int) -> str: ...
    def roll(self, trial: int) -> None: ...
    def paused(self, trial: int) -> str: ...
    def routing(self, trial: int) -> Any: ...
    def promote(self, trial: int) -> None: ...
    def routed(self, trial: int, since: float, before: Any) -> float: ...
    def router_key(self, trial: int) -> tuple[str, str]: ...
    def stop(self) -> None: ...


def canary_state(obj: dict[str, Any]) -> tuple[str | None, int | None, str | None, bool]:
    """(rolloutPhase, canary step, canary revision hash, promotedThrough set) of the engine."""
    engine = ((obj.get("status") or {}).get("components") or {}).get("engine") or {}
    canary = engine.get("canary") or {}
    return (engine.get("rolloutPhase"), canary.get("currentStep"), canary.get("canaryRevisionHash"),
            bool(canary.get("promotedThrough")))  # fmt: skip


def isvc_body(name: str, first_weight: int) -> dict[str, Any]:
    steps = [{"capacity": "100%", "traffic": weight, "pause": {}} for weight in (first_weight, HALF_WEIGHT)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
        "spec": {"engine": engine(OLD_IMAGE),
                 "rollout": {"groups": [{"components": ["engine"], "canary": {"steps": steps}}]}},
    }


def engine(image: str) -> dict[str, Any]:
    return {"minReplicas": 1, "runner": {"name": "engine", "image": image, "ports": [{"containerPort": PORT}]}}


class ServingopsSide:
    """InferenceServices in `namespace`, their HTTPRoutes attached to Traefik's Gateway."""

    label = "servingops"

    def __init__(self, api: client.ApiClient, namespace: str, first_weight: int, translator: str = TRAEFIK) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace, self.first_weight = namespace, first_weight
        # Where the weights are written: the component's weighted TraefikService (named as its route) under
        # ingress.trafficTranslator traefik, the HTTPRoute's backendRefs otherwise.
        self.routes = (ObjectWatch(api, TRAEFIK_GROUP, TRAEFIK_VERSION, namespace, "traefikservices", traefik_weights)
                       if translator == TRAEFIK else
                       ObjectWatch(api, "gateway.networking.k8s.io", "v1", namespace, "httproutes", route_weights))
        self.route_status = ObjectWatch(api, "gateway.networking.k8s.io", "v1", namespace, "httproutes",
                                        route_generations)  # fmt: skip
        self.services = ObjectWatch(api, GROUP, VERSION, namespace, PLURAL, canary_state)
        self.canaries: dict[int, str] = {}

    def host(self, trial: int) -> str:
        return f"{trial_name(trial)}.{self.namespace}.{INGRESS_DOMAIN}"

    def _route(self, trial: int) -> str:
        return f"{trial_name(trial)}-engine"

    def create(self, trial: int) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                    isvc_body(trial_name(trial), self.first_weight))

    def serving(self, trial: int) -> str:
        """Once the first revision has all the route: its revision hash (what its pods answer with)."""
        weights = self.routes.wait(self._route(trial), lambda w: w is not None and list(w.values()) == [100],
                                   PREPARE_TIMEOUT_S)  # fmt: skip
        [backend] = weights
        return str(backend).removeprefix(f"{self._route(trial)}-rev-")

    def roll(self, trial: int) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, trial_name(trial),
                                                   {"spec": {"engine": engine(NEW_IMAGE)}})

    def paused(self, trial: int) -> str:
        """Once the canary waits at its first manual gate (phase Paused: capacity met) with the first weight
        in the route: the canary revision hash."""
        state = self.services.wait(trial_name(trial), lambda s: s is not None and s[0] == "Paused" and s[1] == 0
                                   and bool(s[2]) and not s[3], PREPARE_TIMEOUT_S)  # fmt: skip
        canary = str(state[2])
        backend = f"{self._route(trial)}-rev-{canary}"
        self.routes.wait(self._route(trial), lambda w: w is not None and w.get(backend) == self.first_weight,
                         PREPARE_TIMEOUT_S)  # fmt: skip
        self.canaries[trial] = canary
        return canary

    def routing(self, trial: int) -> Any:
        return self.routes.latest(self._route(trial))

    def promote(self, trial: int) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, trial_name(trial),
                                                   {"metadata": {"annotations": {PROMOTE: self.canaries[trial]}}})

    def routed(self, trial: int, since: float, before: Any) -> float:
        return self.routes.first(self._route(trial), lambda w: w != before, since, HALF_TIMEOUT_S)[0]

    def status_written(self, trial: int, since: float) -> float | None:
        """When the Gateway (Traefik) wrote the route's status for the generation the promote made: the
        status write Traefik's Gateway provider does inside its configuration build."""
        try:
            # The first change after the promote with every parent's observedGeneration caught up (the
            # weights' write itself is recorded as a change whose observedGeneration lags by one).
            return self.route_status.first(self._route(trial), lambda g: g is not None and g[1] == g[0], since,
                                           5.0)[0]  # fmt: skip
        except TimeoutError:
            return None

    def router_key(self, trial: int) -> tuple[str, str]:
        return f"{self.namespace}-{self._route(trial)}", f"-rev-{self.canaries[trial]}"

    def stop(self) -> None:
        self.routes.stop()
        self.route_status.stop()
        self.services.stop()


def route_generations(obj: dict[str, Any]) -> tuple[int, int | None]:
    """(metadata.generation, the oldest observedGeneration among the route's parents' conditions)."""
    observed = [c.get("observedGeneration") for parent in (obj.get("status") or {}).get("parents") or []
                for c in parent.get("conditions") or []]  # fmt: skip
    known = [g for g in observed if isinstance(g, int)]
    return int(obj["metadata"].get("generation") or 0), (min(known) if known else None)


def traefik_weights(obj: dict[str, Any]) -> dict[str, int]:
    """A weighted TraefikService's Services and their weights (Traefik's default weight is 1)."""
    services = ((obj.get("spec") or {}).get("weighted") or {}).get("services") or []
    return {service["name"]: service.get("weight", 1) for service in services}


def argo_template(name: str, image: str, revision: str) -> dict[str, Any]:
    """The Rollout's pod template: the pod runtime answers for pods labelled `ome.io/inferenceservice`,
    and each revision gets a revision label of its own, so every answer says which one served it."""
    return {"metadata": {"labels": {"app": name, UPSTREAM_SERVICE_LABEL: name, REVISION_LABEL: revision}},
            "spec": {"containers": [{"name": "engine", "image": image, "ports": [{"containerPort": PORT}]}]}}


class ArgoSide:
    """Argo Rollouts in `namespace`, routed by its Traefik router through a TraefikService."""

    label = "Argo Rollouts"

    def __init__(self, api: client.ApiClient, namespace: str, first_weight: int) -> None:
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.namespace, self.first_weight = namespace, first_weight
        self.rollouts = ObjectWatch(api, argo_rollouts.GROUP, argo_rollouts.VERSION, namespace, argo_rollouts.PLURAL,
                                    argo_rollouts.rollout_state)  # fmt: skip
        self.services = ObjectWatch(api, TRAEFIK_GROUP, TRAEFIK_VERSION, namespace, "traefikservices",
                                    traefik_weights)  # fmt: skip

    def host(self, trial: int) -> str:
        return f"{trial_name(trial)}.{self.namespace}.{INGRESS_DOMAIN}"

    @staticmethod
    def revision(trial: int, generation: int) -> str:
        return f"{trial_name(trial)}-v{generation}"

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [{"setCanaryScale": {"replicas": 1}}, {"setWeight": self.first_weight}, {"pause": {}},
                {"setWeight": HALF_WEIGHT}, {"pause": {}}]  # fmt: skip

    def create(self, trial: int) -> None:
        name = trial_name(trial)
        for role in ("stable", "canary"):
            self.core.create_namespaced_service(self.namespace, {  # type: ignore[arg-type]
                "metadata": {"name": f"{name}-{role}"},
                "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": PORT}]}})
        # Weights written from the start: without them Traefik would split 1:1 until Argo's first write.
        weighted = [{"name": f"{name}-stable", "port": 80, "weight": 100},
                    {"name": f"{name}-canary", "port": 80, "weight": 0}]
        self._create(TRAEFIK_GROUP, TRAEFIK_VERSION, "traefikservices", {
            "kind": "TraefikService", "metadata": {"name": name}, "spec": {"weighted": {"services": weighted}}})
        self._create(TRAEFIK_GROUP, TRAEFIK_VERSION, "ingressroutes", {
            "kind": "IngressRoute", "metadata": {"name": name},
            "spec": {"entryPoints": [ENTRY_POINT], "routes": [{
                "match": f"Host(`{self.host(trial)}`)", "kind": "Rule",
                "services": [{"name": name, "kind": "TraefikService"}]}]}})
        self._create(argo_rollouts.GROUP, argo_rollouts.VERSION, argo_rollouts.PLURAL, {
            "kind": "Rollout", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": argo_template(name, OLD_IMAGE, self.revision(trial, 1)),
                     "strategy": {"canary": {
                         "stableService": f"{name}-stable", "canaryService": f"{name}-canary",
                         "trafficRouting": {"traefik": {"weightedTraefikServiceName": name}},
                         "steps": self.steps}}}})

    def _create(self, group: str, version: str, plural: str, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(group, version, self.namespace, plural,
                                                    {"apiVersion": f"{group}/{version}", **body})

    def serving(self, trial: int) -> str:
        self.rollouts.wait(trial_name(trial), lambda s: s is not None and s[2], PREPARE_TIMEOUT_S)
        return self.revision(trial, 1)

    def roll(self, trial: int) -> None:
        name = trial_name(trial)
        self.custom.patch_namespaced_custom_object(
            argo_rollouts.GROUP, argo_rollouts.VERSION, self.namespace, argo_rollouts.PLURAL, name,
            {"spec": {"template": argo_template(name, NEW_IMAGE, self.revision(trial, 2))}},
            _content_type=argo_rollouts.MERGE_PATCH)  # fmt: skip

    def paused(self, trial: int) -> str:
        """Once the Rollout waits at its first pause with the first weight in the TraefikService."""
        name = trial_name(trial)
        self.rollouts.wait(name, lambda s: s is not None and s[0] == 2 and s[1], PREPARE_TIMEOUT_S)
        self.services.wait(name, lambda w: w is not None and w.get(f"{name}-canary") == self.first_weight,
                           PREPARE_TIMEOUT_S)  # fmt: skip
        return self.revision(trial, 2)

    def routing(self, trial: int) -> Any:
        return self.services.latest(trial_name(trial))

    def promote(self, trial: int) -> None:
        argo_rollouts.promote(self.custom, self.namespace, trial_name(trial))

    def routed(self, trial: int, since: float, before: Any) -> float:
        return self.services.first(trial_name(trial), lambda w: w != before, since, HALF_TIMEOUT_S)[0]

    def router_key(self, trial: int) -> tuple[str, str]:
        return f"{self.namespace}-{trial_name(trial)}", f"{trial_name(trial)}-canary"

    def stop(self) -> None:
        self.rollouts.stop()
        self.services.stop()


# ---------------------------------------------------------------------------------------------------------------
# Preparing every canary, then one promote under load


def answered_by(traefik: Traefik, host: str, revision: str) -> bool:
    """One request through Traefik for `host` was answered by `revision`."""
    code, headers, _ = traefik.get("/v1/models", host)
    return code == 200 and headers.get(REVISION_HEADER) == revision


def prepare(sides: list[Side], trials: int, traefik: Traefik) -> dict[tuple[str, int], str]:
    """Every trial's canary of each side, waiting at its first pause with the canary answering through
    Traefik at the first weight; the canary revision of each (side, trial)."""
    for side in sides:
        for trial in range(trials):
            side.create(trial)
    for side in sides:
        for trial in range(trials):
            stable = side.serving(trial)
            wait_for(f"{side.label} {trial}: {stable} answering", partial(answered_by, traefik, side.host(trial),
                                                                           stable), PREPARE_TIMEOUT_S)  # fmt: skip
            side.roll(trial)
    canaries = {}
    for side in sides:
        for trial in range(trials):
            canary = side.paused(trial)
            wait_for(f"{side.label} {trial}: canary {canary} answering", partial(
                answered_by, traefik, side.host(trial), canary), PREPARE_TIMEOUT_S)
            canaries[(side.label, trial)] = canary
    return canaries


@dataclass(frozen=True)
class Settings:
    rate: float
    window: float
    trace: bool = False
    """Also time when Traefik's router ran the new weights (its API, polled) and, for the HTTPRoute, when
    Traefik wrote its status: where the data plane's part goes."""


class RouterPoll:
    """Polls Traefik's API from the promote until a weighted service whose name contains `search` gives
    children named with `key` at least half the weight: when the new weights reached the router (the
    provider's watch, its build with the status writes, the providers' throttle), apart from the requests'
    own part. Every 5 ms, so it resolves what matters here (tens to hundreds of ms)."""

    INTERVAL_S = 0.005

    def __init__(self, traefik: Traefik, search: str, key: str) -> None:
        self._traefik, self._search, self._key = traefik, search, key
        self.at: float | None = None
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="router-poll", daemon=True)
        self._thread.start()

    def _half(self) -> bool:
        services = self._traefik.services(self._search)
        self.seen = [str(s.get("name")) for s in services]
        for service in services:
            children = (service.get("weighted") or {}).get("services") or []
            total = sum(int(c.get("weight", 1)) for c in children)
            new = sum(int(c.get("weight", 1)) for c in children if self._key in str(c.get("name")))
            if total and 2 * new >= total:
                return True
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._half():
                    self.at = time.monotonic()
                    return
            except OSError:
                pass
            self._stop.wait(self.INTERVAL_S)

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.at


@dataclass(frozen=True)
class Trial:
    label: str
    trial: int
    half_s: float
    """Promote -> the start of the first window at least half answered by the new revision."""
    routed_s: float
    """Promote -> the routing object's weights changed (watch)."""
    before_share: float
    """The new revision's share of the answers in the second before the promote (the first weight)."""
    total: int
    failures: Counter[str]
    applied_s: float | None = None
    """Promote -> Traefik's router runs the new weights (--trace)."""
    status_s: float | None = None
    """Promote -> Traefik wrote the HTTPRoute's status for the new generation (--trace, servingops)."""


def half_at(report: LoadReport, revision: str, width: float) -> float | None:
    """Seconds from the promote to the first window of `width` seconds half answered by `revision`, None
    if no whole window in the report is. Windows slide: one starts at every request's start after the
    promote, so the time resolves to a request's interval, not to the window's width. Half is rounded
    down (of 21 answers, 10 do): an odd count cannot split evenly."""
    promoted = report.mark_time(PROMOTED)
    after = [r for r in report.records if r.start_s >= promoted]  # the report sorts them by start
    end, answered, new = 0, 0, 0
    for first in after:
        if first.start_s + width > report.end_s:
            return None
        while end < len(after) and after[end].start_s < first.start_s + width:
            answered, new = answered + after[end].ok, new + (after[end].ok and after[end].revision == revision)
            end += 1
        if answered and 2 * new + 1 >= answered:
            return first.start_s - promoted
        answered, new = answered - first.ok, new - (first.ok and first.revision == revision)
    return None


def half_seen(load: BackgroundLoad, revision: str, width: float) -> bool:
    """Whether a window that ended SETTLED_S ago (its requests answered) was half answered by `revision`:
    the run's report then holds it as well."""
    snapshot = load.snapshot()
    return half_at(snapshot.window(None, snapshot.end_s - SETTLED_S), revision, width) is not None


def measure(side: Side, trial: int, canary: str, traefik: Traefik, settings: Settings) -> Trial:
    """One promote of `side`'s canary under its own load, from LEAD_S before it until the answers were
    half the canary's (plus SETTLED_S, so that window is whole in the report)."""
    spec = LoadSpec(url=traefik.url, host=side.host(trial), rate=settings.rate, max_tokens=4,
                    max_requests=int(settings.rate * MAX_LOAD_S) + 1, max_seconds=MAX_LOAD_S)
    poll: RouterPoll | None = None
    reloads = [traefik.config_reloads()] if settings.trace else []
    with BackgroundLoad(spec) as load:
        time.sleep(LEAD_S)
        if settings.trace:
            reloads.append(traefik.config_reloads())
        before = side.routing(trial)
        sent = time.monotonic()
        if settings.trace:
            poll = RouterPoll(traefik, *side.router_key(trial))
        load.mark(PROMOTED)
        if settings.trace:
            print(f"  {side.label} {trial}: promote at {time.time():.3f} (wall clock)", flush=True)
        side.promote(trial)
        wait_for(f"{side.label} {trial}: half the answers from {canary}",
                 lambda: half_seen(load, canary, settings.window), HALF_TIMEOUT_S, interval=0.1)
        report = load.stop()
    applied = poll.stop() if poll else None
    if settings.trace:
        reloads.append(traefik.config_reloads())
        print(f"  {side.label} {trial}: Traefik's reloads: {reloads[1] - reloads[0]:.0f} in the {LEAD_S:g} s "
              f"before the promote, {reloads[2] - reloads[1]:.0f} after it", flush=True)
    if poll and applied is None:
        print(f"  {side.label} {trial}: the router never showed the weights (services seen: {poll.seen})")
    half = half_at(report, canary, settings.window)
    if half is None:
        raise RuntimeError(f"{side.label} {trial}: half answered during the run, not in its report")
    before_share = report.window(None, PROMOTED).share(canary)
    if not 0 < before_share < 0.5:
        # The canary was not (or no longer) at its first weight: the time would not be the promote's.
        raise RuntimeError(f"{side.label} {trial}: {before_share:.1%} from {canary} before the promote")
    status = side.status_written(trial, sent) if settings.trace and isinstance(side, ServingopsSide) else None
    return Trial(side.label, trial, half, side.routed(trial, sent, before) - sent, before_share, report.total,
                 report.failures, applied - sent if applied else None, status - sent if status else None)


def run_trials(sides: list[Side], trials: int, canaries: dict[tuple[str, int], str], traefik: Traefik,
               settings: Settings) -> list[Trial]:
    """Every trial, the sides taking turns (reversed in odd trials, so neither always goes first)."""
    results = []
    for trial in range(trials):
        for side in sides if trial % 2 == 0 else reversed(sides):
            result = measure(side, trial, canaries[(side.label, trial)], traefik, settings)
            results.append(result)
            print(f"trial {trial:2d}  {side.label:<13}  half answered {result.half_s * 1000:5.0f} ms  "
                  f"(weights written {result.routed_s * 1000:4.0f} ms; before: {result.before_share:5.1%} new; "
                  f"{result.total} requests, {sum(result.failures.values())} failed)"
                  + (f"  router {ms(result.applied_s)}" if result.applied_s is not None else "")
                  + (f"  route status {ms(result.status_s)}" if result.status_s is not None else ""), flush=True)
    return results


# ---------------------------------------------------------------------------------------------------------------
# The report and the goals


def ms(seconds: float) -> str:
    return f"{seconds * 1000:4.0f} ms"


def percentiles(values: Iterable[float]) -> Percentiles:
    found = Percentiles.of(values)
    assert found is not None, "no trial"
    return found


def print_report(results: list[Trial], ours: str, peer: str, goals: Goals) -> None:
    """Both sides' figures, the ratios, and the goals on the ratios."""
    width = max(len(ours), len(peer))
    halves = {label: percentiles(r.half_s for r in results if r.label == label) for label in (ours, peer)}
    routed = {label: percentiles(r.routed_s for r in results if r.label == label) for label in (ours, peer)}
    plane = {label: percentiles(r.half_s - r.routed_s for r in results if r.label == label) for label in (ours, peer)}
    print(f"\npromote -> half the answers from the new revision ({halves[ours].count} trials each):", flush=True)
    for label in (ours, peer):
        print(f"  {label:<{width}}  p50 {ms(halves[label].p50)}  p99 {ms(halves[label].p99)}   (promote -> weights "
              f"written: p50 {ms(routed[label].p50)}, p99 {ms(routed[label].p99)}; weights written -> half "
              f"answered: p50 {ms(plane[label].p50)}, p99 {ms(plane[label].p99)})", flush=True)
    p50, p99 = halves[ours].p50 / halves[peer].p50, halves[ours].p99 / halves[peer].p99
    print(f"  ratio {ours} / {peer}: p50 {p50:.2f}, p99 {p99:.2f}", flush=True)
    for label in (ours, peer):
        mine = [r for r in results if r.label == label]
        failures = sum((r.failures for r in mine), Counter[str]())
        print(f"  {label:<{width}}  requests {sum(r.total for r in mine)}, failed {sum(failures.values())}"
              + (f" {dict(failures)}" if failures else ""), flush=True)
    traced = [r for r in results if r.applied_s is not None]
    if traced:
        print("  traced (--trace): weights written -> the router runs them -> half answered", flush=True)
        for label in (ours, peer):
            mine = [r for r in traced if r.label == label]
            if not mine:
                continue
            to_router = percentiles(r.applied_s - r.routed_s for r in mine if r.applied_s is not None)
            to_half = percentiles(r.half_s - r.applied_s for r in mine if r.applied_s is not None)
            print(f"  {label:<{width}}  written -> router p50 {ms(to_router.p50)} p99 {ms(to_router.p99)}; "
                  f"router -> half p50 {ms(to_half.p50)} p99 {ms(to_half.p99)}", flush=True)
        statuses = [r for r in traced if r.status_s is not None]
        if statuses:
            to_status = percentiles(r.status_s - r.routed_s for r in statuses if r.status_s is not None)
            print(f"  {ours:<{width}}  written -> route status p50 {ms(to_status.p50)} p99 {ms(to_status.p99)}",
                  flush=True)
    goals.check(f"promote -> half answered, {ours} / {peer}, p50", p50, "<=", 1.0)
    goals.check(f"promote -> half answered, {ours} / {peer}, p99", p99, "<=", 1.0)


# ---------------------------------------------------------------------------------------------------------------


def arguments() -> tuple[int, int, Settings, bool, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="promotes per side (one canary each)")
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second, open loop, per promote")
    parser.add_argument("--first-weight", type=int, default=10, help="the canary's weight before the promote (%%)")
    parser.add_argument("--window", type=float, default=0.1, help="seconds of request starts judged together")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    parser.add_argument("--trace", action="store_true",
                        help="also time when Traefik's router ran the weights (its API, polled every 5 ms)")
    parser.add_argument("--translator", choices=(TRAEFIK, ENVOY_GATEWAY), default=TRAEFIK,
                        help="servingops' ingress.trafficTranslator: traefik (the weights in a weighted "
                             "TraefikService per component, as Argo's; the default: the data plane is Traefik) "
                             "or envoyGateway (the weights on the HTTPRoute)")
    args = parser.parse_args()
    if args.trials < 1 or not 0 < args.first_weight < HALF_WEIGHT or args.rate <= 0 or args.window <= 0:
        parser.error("--trials >= 1, 0 < --first-weight < 50, --rate and --window above 0")
    return args.trials, args.first_weight, Settings(args.rate, args.window, args.trace), args.keep, args.translator


def main() -> None:
    trials, first_weight, settings, keep, translator = arguments()
    goals = Goals("bench.traffic")
    began = time.monotonic()
    argo_binary, argo_crds = argo_rollouts.ensure_built()
    traefik_crds = crd_dir()
    print(f"Argo Rollouts {argo_rollouts.pinned_version()}: {argo_binary}; Traefik's CRDs: {traefik_crds} "
          f"(ready in {time.monotonic() - began:.0f} s)", flush=True)

    work = Path(tempfile.mkdtemp(prefix="bench-traffic-"))
    logs = work / "logs"
    with contextlib.ExitStack() as cleanup:
        if keep:
            print(f"work directory (kept): {work}", flush=True)
        else:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        servers = start_servers(cleanup, work, nodes=3, extra_crds=(argo_crds, traefik_crds), answering=True)
        cluster, api = servers.cluster, servers.api
        ids = chart_identities(cluster, work / "identities", {
            "canaryAnalysis": {"bundledPrometheusAddress": ""},
            "ingress": {"omeIngressGateway": f"{GATEWAY_NAMESPACE}/{GATEWAY_NAME}", "ingressDomain": INGRESS_DOMAIN,
                        "trafficTranslator": translator},
        })  # fmt: skip
        traefik = Traefik(work / "traefik", logs, cluster.kubeconfig_path, kubernetes_crd=True,
                          api=settings.trace).start(api)
        cleanup.callback(traefik.stop)
        namespace, argo_namespace = "bench", "bench-argo"
        for ns in (namespace, argo_namespace):
            client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        task_queue = f"bench-{uuid.uuid4().hex[:6]}"
        worker = start_worker(cluster, servers.temporal, servers.registry, servers.hub, task_queue, work / "spool",
                              logs, host_id="bench-traffic", identities=ids)
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(ids, servers.temporal.address, logs)
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue=task_queue, kinds="InferenceService")
        argo = argo_rollouts.start_controller(cluster, argo_binary, logs, ARGO_TRAEFIK_FLAGS)
        cleanup.callback(argo.stop)
        print(f"stack up in {time.monotonic() - began:.1f} s (Temporal, local cluster whose pods answer, chart "
              f"identities, Traefik with its Gateway and kubernetesCRD providers, worker, bridge, Argo Rollouts)",
              flush=True)

        print(f"servingops: ingress.trafficTranslator {translator}", flush=True)
        ours = ServingopsSide(api, namespace, first_weight, translator)
        cleanup.callback(ours.stop)
        peer = ArgoSide(api, argo_namespace, first_weight)
        cleanup.callback(peer.stop)
        sides: list[Side] = [ours, peer]
        began = time.monotonic()
        canaries = prepare(sides, trials, traefik)
        print(f"{trials} canaries per side paused at {first_weight}% with the canary answering, in "
              f"{time.monotonic() - began:.1f} s; load {settings.rate:g} requests/s, windows of "
              f"{settings.window:g} s", flush=True)
        results = run_trials(sides, trials, canaries, traefik, settings)
        print_report(results, ours.label, peer.label, goals)
    goals.finish()


if __name__ == "__main__":
    main()
