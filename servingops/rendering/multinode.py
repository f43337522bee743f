"""A multi-node (leader/worker) component rendered into the two pod templates of one gang: the
leader's and the workers' (pure, no I/O). An OMENative component projects them as the replica's
`leader` and `worker` runners (activities/serving/omenative.py); a replica rendered from refs does the
same (activities/replica/from_refs.py).

Upstream OME (checked at 17b77eda) renders such a component as a LeaderWorkerSet; what it does is
followed here, mapped onto runners:
- the runtime's `leader` / `worker` and the service's are merged before this module sees them (a
  strategic merge of the whole component, runtime_merge.py, as upstream's MergeEngineSpec);
- the leader pod is the leader's pod fields with its runner laid over its containers; without a
  `leader`, the component's own pod and runner (upstream's fallback). The worker pod likewise from
  `worker`; without one (the seed: "a declared leader gets one worker") the component's own;
- the component's top-level nodeSelector is laid over both roles' (upstream merges the runtime's,
  the accelerator's and the service's selector into the leader and the worker pods);
- both pods carry the component's labels and annotations (upstream's component metadata); the
  workers drop the Prometheus scrape annotations (they expose no endpoint, as upstream);
- `worker.size` counts the workers only (upstream: LeaderWorkerSet size = workers + 1); unset
  means one worker (seed);
- only the leader serves: the revision label the per-revision Service selects on is on the leader
  alone (upstream puts its Service label on the leader template only).

The gang's revision hashes both templates and the worker count, so a worker-only change rolls the
whole gang (seed: "tensor-parallel weights require leader+workers to move together").
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from servingops.api_models.ome.components import DecoderSpec, EngineSpec, LeaderSpec, PodSpec, WorkerSpec
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.rendering import render

WORKERS_ANNOTATION = "servingops.io/gang-workers"
"""On the leader's template: how many workers its gang has, so whoever counts Instances from pods
knows when a gang is whole without reading the revision."""
DEFAULT_WORKERS = 1
SCRAPE_ANNOTATIONS = ("prometheus.io/path", "prometheus.io/port", "prometheus.io/scrape")

_POD_FIELDS = frozenset(PodSpec.model_fields)
_Role = LeaderSpec | WorkerSpec | EngineSpec | DecoderSpec


@dataclass(frozen=True)
class RenderedGang:
    component: ComponentType
    revision: str
    leader: dict[str, Any]
    """The leader's pod template, revision label included."""
    worker: dict[str, Any]
    """The workers' pod template (no revision label: workers take no traffic)."""
    workers: int
    main_container: str | None
    """The leader runner's container name (the serving port is read from it); None: the first."""

    def as_revision(self) -> render.RenderedRevision:
        """The revision as the rollout contract sees it: the serving (leader) template."""
        return render.RenderedRevision(component=self.component, revision=self.revision, template=self.leader)


def is_multinode(cspec: render.ComponentSpec) -> bool:
    return getattr(cspec, "leader", None) is not None or getattr(cspec, "worker", None) is not None


def worker_count(cspec: EngineSpec | DecoderSpec) -> int:
    size = cspec.worker.size if cspec.worker is not None else None
    return DEFAULT_WORKERS if size is None else size


def check_servable(spec: InferenceServiceSpec, component: ComponentType, cspec: render.ComponentSpec) -> None:
    """render.check_servable for a single-pod component; for a gang, each role must have a container
    and there must be at least one worker. Raises render.Unservable."""
    if not isinstance(cspec, EngineSpec | DecoderSpec) or not is_multinode(cspec):
        render.check_servable(spec, component, cspec)
        return
    field = f"spec.{component.value}"
    if worker_count(cspec) < 1:
        raise render.Unservable(f"{field}.worker.size", f"is {worker_count(cspec)}: a gang needs at least one "
                                                        "worker (leave the worker out for a single-pod component)")
    for role in ("leader", "worker"):
        if not _containers(_role(cspec, role)):
            where = f"{field}.{role}" if getattr(cspec, role) is not None else field
            raise render.Unservable(where, f"has no runner and no containers for the {role} pod: set {where}.runner "
                                           f"(at least an image) or {where}.containers")


def render_gang(isvc: str, component: ComponentType, cspec: EngineSpec | DecoderSpec) -> RenderedGang:
    workers = worker_count(cspec)
    labels = {**(cspec.labels or {}), **render.selector_labels(isvc, component)}
    annotations = dict(cspec.annotations or {})
    leader = _template(cspec, "leader", labels, {**annotations, WORKERS_ANNOTATION: str(workers)})
    worker = _template(cspec, "worker", labels,
                       {k: v for k, v in annotations.items() if k not in SCRAPE_ANNOTATIONS})
    revision = render.revision_hash({"leader": leader, "worker": worker, "workers": workers})
    leader["metadata"]["labels"][render.LABEL_REVISION] = revision
    runner = _role(cspec, "leader").runner
    main = str(runner.get("name", render.MAIN_CONTAINER)) if runner is not None else None
    return RenderedGang(component=component, revision=revision, leader=leader, worker=worker, workers=workers,
                        main_container=main)


def render_component(isvc: str, component: ComponentType, cspec: render.ComponentSpec) -> render.RenderedRevision:
    """The revision of any component as an OMENative one renders it: a gang's is its leader's."""
    if isinstance(cspec, EngineSpec | DecoderSpec) and is_multinode(cspec):
        return render_gang(isvc, component, cspec).as_revision()
    return render.render_revision(isvc, component, cspec)


def runner_templates(isvc: str, component: ComponentType, cspec: render.ComponentSpec,
                     single: render.RenderedRevision | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """(runner, size, pod template) of the component's Instances as a replica runs them: a gang's
    `leader` (1) and `worker` (its worker count), else one `default` (`single`, when the caller
    rendered it already)."""
    if isinstance(cspec, EngineSpec | DecoderSpec) and is_multinode(cspec):
        gang = render_gang(isvc, component, cspec)
        return [("leader", 1, gang.leader), ("worker", gang.workers, gang.worker)]
    rendered = single if single is not None else render.render_revision(isvc, component, cspec)
    return [("default", 1, rendered.template)]


def serving_spec(cspec: render.ComponentSpec) -> render.ComponentSpec:
    """The component as the revision's Service reads it (its main container names the port): a
    gang's main container is its leader's runner."""
    if not isinstance(cspec, EngineSpec | DecoderSpec) or not is_multinode(cspec):
        return cspec
    return cspec.model_copy(update={"runner": _role(cspec, "leader").runner, "containers": None})


def _role(cspec: EngineSpec | DecoderSpec, role: str) -> _Role:
    found: LeaderSpec | WorkerSpec | None = getattr(cspec, role)
    return found if found is not None else cspec


def _containers(part: _Role) -> list[dict[str, Any]]:
    """The runner is the main container, laid over the listed container of its name key by key, else
    first (the single-pod renderer's rule, render._containers)."""
    containers = [copy.deepcopy(c) for c in part.containers or []]
    if part.runner is None:
        return containers
    runner = copy.deepcopy(part.runner)
    runner.setdefault("name", render.MAIN_CONTAINER)
    for index, existing in enumerate(containers):
        if existing.get("name") == runner["name"]:
            containers[index] = {**existing, **runner}
            return containers
    return [runner, *containers]


def _template(cspec: EngineSpec | DecoderSpec, role: str, labels: dict[str, str],
              annotations: dict[str, str]) -> dict[str, Any]:
    part = _role(cspec, role)
    pod = part.model_dump(include=set(_POD_FIELDS), by_alias=True, exclude_none=True, mode="json")
    containers = _containers(part)
    if containers:
        pod["containers"] = containers
    if part is not cspec and cspec.node_selector:
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **cspec.node_selector}
    metadata: dict[str, Any] = {"labels": dict(labels)}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod}


__all__ = ["DEFAULT_WORKERS", "WORKERS_ANNOTATION", "RenderedGang", "check_servable", "is_multinode",
           "render_component", "render_gang", "serving_spec", "worker_count"]
