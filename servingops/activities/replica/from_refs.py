"""The runners of an InferenceReplica that names a model and/or a runtime instead of spec.runners
(seed: "the controller renders the runners from the refs and never stores them"): rendered the way an
InferenceService component is (rendering/resolution.py: the model's mount, the selected or
named runtime's piece, fine-tuned weights, overlays, accelerator tuning; rendering/render.py: the pod
template), stored only in the replica's ControllerRevision.

A runtimeRef's pin (autoSync false, revision) is not honoured: the live runtime renders (seed; the
validating webhook rejects a pinned reference). A component with a leader/worker shape (the runtime's
`engineConfig` / `decoderConfig` leader and worker, merged with nothing or with the model's wiring)
renders as a gang, runners `leader` (size 1) and `worker` (the worker count), the way an OMENative
service's component does (rendering/multinode.py); otherwise one "default" runner.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.instance_keys import RUNNER_LABEL
from servingops.api_models.ome.replica import InferenceReplicaSpec, Runner
from servingops.rendering import multinode, render
from servingops.rendering.resolution import Reader, Unresolvable, resolve_service, runtime_piece
from servingops.rendering.runtime_merge import merge_component


class NotRenderable(ValueError):
    """The refs name something that renders no pod (the message says what)."""


def render_runners(reader: Reader, spec: InferenceReplicaSpec, *, name: str, namespace: str,
                   artifacts: str | None) -> list[Runner]:
    """Raises Unresolvable (a model or runtime not there or not ready: worth trying again) or
    NotRenderable (the refs can never render)."""
    component = spec.component.value
    body: dict[str, Any] = {component: {}}
    if spec.runtime_ref is not None:
        body["runtime"] = {"name": spec.runtime_ref.name, "kind": spec.runtime_ref.kind,
                           "apiGroup": spec.runtime_ref.api_group}
    if spec.model_ref is not None:
        body["model"] = spec.model_ref.model_dump(by_alias=True, exclude_none=True, mode="json")
        isvc = {"metadata": {"name": name, "namespace": namespace, "annotations": {}}, "spec": body}
        rendered_spec = resolve_service(reader, isvc, artifacts).spec
    else:
        assert spec.runtime_ref is not None
        piece = runtime_piece(reader, spec.runtime_ref.kind, spec.runtime_ref.name, namespace, component)
        rendered_spec = {component: merge_component(piece, {})}
    try:
        service = InferenceServiceSpec.model_validate(rendered_spec)
    except ValidationError as exc:
        raise NotRenderable(f"the rendered {component} is not a valid component: {exc}") from exc
    cspec = render.component_spec(service, ComponentType(component))
    if cspec is None:
        raise NotRenderable(f"the refs render no {component}")
    try:
        multinode.check_servable(service, ComponentType(component), cspec)
    except render.Unservable as exc:
        raise NotRenderable(str(exc)) from exc
    return [Runner(name=runner, size=size, template=_with_runner(template, runner))
            for runner, size, template in multinode.runner_templates(name, ComponentType(component), cspec)]


def _with_runner(template: dict[str, Any], runner: str) -> dict[str, Any]:
    labeled = dict(template)
    metadata = dict(labeled.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), RUNNER_LABEL: runner}
    labeled["metadata"] = metadata
    return labeled


__all__ = ["NotRenderable", "Unresolvable", "render_runners"]
