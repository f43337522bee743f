"""The serving activities against the real apiserver (kwok makes the pods Ready), run in Temporal's
activity environment, plus the pure rendering rules they rest on."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from servingops.activities.serving.activities import ServingActivities
from servingops.activities.serving.types import (
    EnsureRevisionInput,
    ObserveInput,
    RevisionKey,
    RevisionObservation,
    ServiceObservation,
    SetTrafficInput,
)
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome import InferenceService
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig
from servingops.api_models.refs import ObjectRef
from servingops.api_models.serving import TrafficWeight
from servingops.rendering import render
from servingops.rendering.names import revision_name, route_name
from tests.crd_helpers import create, manifest, new_namespace
from tests.support.placement_demand import execution, rendering_hash

ENGINE, ROUTER = ComponentType.ENGINE, ComponentType.ROUTER
# Generous: the suite may run on a loaded 2-core machine. Only an upper bound, never asserted.
DEADLINE = 120.0
ROUTE_GROUP, ROUTE_VERSION, ROUTES = "gateway.networking.k8s.io", "v1", "httproutes"

SPEC: dict[str, Any] = {
    "engine": {
        "runner": {"name": "engine", "image": "registry.invalid/engine:v1", "ports": [{"containerPort": 8000}]},
        "minReplicas": 2,
        "labels": {"team": "llm"},
        "annotations": {"example.com/note": "engine"},
    },
    "router": {"runner": {"image": "registry.invalid/router:v1", "ports": [{"containerPort": 9000}]}},
}


def _run(fn: Any, *args: Any) -> Any:
    return ActivityEnvironment().run(fn, *args)


def _refused(fn: Any, arg: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        _run(fn, arg)
    return info.value


def eventually(probe: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not probe():
        if time.monotonic() > end:
            raise AssertionError(f"not reached within {DEADLINE}s: {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "serving")


@pytest.fixture
def acts(kube_api: client.ApiClient) -> ServingActivities:
    return ServingActivities(kube_api)


def _isvc(kube_api: client.ApiClient, ns: str, spec: dict[str, Any] = SPEC) -> ObjectRef:
    obj = create(kube_api, InferenceService, manifest(InferenceService, spec), ns)
    return ObjectRef.of(InferenceService, obj["metadata"]["name"], ns, obj["metadata"]["uid"])


def _set_image(kube_api: client.ApiClient, ref: ObjectRef, image: str) -> None:
    assert ref.namespace
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        ref.group, ref.version, ref.namespace, ref.plural, ref.name,
        {"spec": {"engine": {"runner": {"image": image}}}}, _content_type="application/merge-patch+json")


def _route(kube_api: client.ApiClient, ref: ObjectRef, component: ComponentType) -> dict[str, Any]:
    assert ref.namespace
    obj = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(
        ROUTE_GROUP, ROUTE_VERSION, ref.namespace, ROUTES, route_name(ref.name, component.value))
    return cast(dict[str, Any], obj)


def _backends(route: dict[str, Any]) -> list[tuple[str, int]]:
    return [(b["name"], b["weight"]) for rule in route["spec"]["rules"] for b in rule["backendRefs"]]


def _component(obs: ServiceObservation, component: ComponentType) -> Any:
    return next(c for c in obs.components if c.component == component)


@pytest.mark.integration
def test_revision_lifecycle(kube_api: client.ApiClient, ns: str, acts: ServingActivities) -> None:
    ref = _isvc(kube_api, ns)
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)

    # Nothing serves it yet: the desired revisions are known, nothing exists.
    first: ServiceObservation = _run(acts.observe, ObserveInput(isvc=ref))
    assert first.uid == ref.uid and not first.deleting and first.generation == 1
    assert [c.component for c in first.components] == [ENGINE, ROUTER]
    engine = _component(first, ENGINE)
    assert engine.revisions == [] and engine.traffic == [] and engine.url is None
    assert engine.desired_replicas == 2 and _component(first, ROUTER).desired_replicas == 1
    v1 = engine.desired_revision
    assert len(v1) == render.HASH_LENGTH

    # The first revision: Deployment + Service, pods made Ready by kwok.
    key1 = RevisionKey(isvc=ref, component=ENGINE, revision=v1)
    created: RevisionObservation = _run(acts.ensure_revision, EnsureRevisionInput(key=key1, replicas=2))
    assert created.revision == v1 and created.replicas == 2
    name1 = revision_name(ref.name, "engine", v1)
    dep = apps.read_namespaced_deployment(name1, ns)
    assert dep.metadata and dep.metadata.owner_references
    assert dep.metadata.owner_references[0].uid == ref.uid and dep.metadata.owner_references[0].controller
    assert dep.spec and dep.spec.template.metadata and dep.spec.template.metadata.labels == {
        "app.kubernetes.io/name": ref.name, "app.kubernetes.io/component": "engine",
        "serving.ome.io/revision": v1, "team": "llm", "component": "engine", "ome.io/inferenceservice": ref.name}
    assert dep.spec.template.metadata.annotations == {"example.com/note": "engine"}
    svc = core.read_namespaced_service(name1, ns)
    assert svc.spec and svc.spec.type == "ClusterIP" and svc.spec.ports
    assert (svc.spec.ports[0].port, svc.spec.ports[0].target_port) == (8080, 8000)
    eventually(lambda: _run(acts.revision_status, key1).ready_replicas == 2, "two Ready engine pods")
    again = _run(acts.ensure_revision, EnsureRevisionInput(key=key1, replicas=2))  # idempotent
    assert again.replicas == 2

    # All traffic to it.
    _run(acts.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=[TrafficWeight(revision=v1,
                                                                                              weight=100)]))
    route = _route(kube_api, ref, ENGINE)
    assert _backends(route) == [(name1, 100)]
    assert "parentRefs" not in route["spec"]
    assert route["metadata"]["ownerReferences"][0]["uid"] == ref.uid

    # A new runner image mints a new revision; it comes up beside the old one.
    _set_image(kube_api, ref, "registry.invalid/engine:v2")
    changed: ServiceObservation = _run(acts.observe, ObserveInput(isvc=ref))
    v2 = _component(changed, ENGINE).desired_revision
    assert v2 != v1 and _component(changed, ROUTER).desired_revision == _component(first, ROUTER).desired_revision
    key2 = RevisionKey(isvc=ref, component=ENGINE, revision=v2)
    _run(acts.ensure_revision, EnsureRevisionInput(key=key2, replicas=1))
    eventually(lambda: _run(acts.revision_status, key2).ready_replicas == 1, "one Ready canary pod")

    # 90/10, exactly.
    split = [TrafficWeight(revision=v1, weight=90), TrafficWeight(revision=v2, weight=10)]
    _run(acts.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE, weights=split))
    assert _backends(_route(kube_api, ref, ENGINE)) == [(name1, 90), (revision_name(ref.name, "engine", v2), 10)]
    observed = _component(_run(acts.observe, ObserveInput(isvc=ref)), ENGINE)
    # Listed oldest first, but creation times have one-second resolution: compare as a mapping.
    assert {r.revision: (r.replicas, r.ready_replicas) for r in observed.revisions} == {v1: (2, 2), v2: (1, 1)}
    assert observed.traffic == split
    assert observed.url == f"http://{ref.name}-engine.{ns}.svc.cluster.local"

    # The old revision cannot go while it takes traffic; once shifted off it goes, idempotently.
    assert _refused(acts.delete_revision, key1).type == ErrorType.REVISION_SERVING_TRAFFIC
    _run(acts.set_traffic, SetTrafficInput(isvc=ref, component=ENGINE,
                                           weights=[TrafficWeight(revision=v1, weight=0),
                                                    TrafficWeight(revision=v2, weight=100)]))
    _run(acts.delete_revision, key1)
    _run(acts.delete_revision, key1)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_service(name1, ns)
    assert gone.value.status == 404
    assert _run(acts.revision_status, key1) == RevisionObservation(revision=v1, replicas=0, ready_replicas=0)

    # The deleted revision is no longer what the spec renders: it is not brought back.
    superseded = _refused(acts.ensure_revision, EnsureRevisionInput(key=key1, replicas=1))
    assert superseded.type == ErrorType.REVISION_SUPERSEDED and superseded.non_retryable
    final = _component(_run(acts.observe, ObserveInput(isvc=ref)), ENGINE)
    assert [r.revision for r in final.revisions] == [v2]


@pytest.mark.integration
def test_invalid_traffic_is_refused(kube_api: client.ApiClient, ns: str, acts: ServingActivities) -> None:
    ref = _isvc(kube_api, ns)
    v1 = _component(_run(acts.observe, ObserveInput(isvc=ref)), ROUTER).desired_revision
    _run(acts.ensure_revision, EnsureRevisionInput(key=RevisionKey(isvc=ref, component=ROUTER, revision=v1),
                                                   replicas=1))
    for weights in ([TrafficWeight(revision=v1, weight=90)],
                    [TrafficWeight(revision=v1, weight=60), TrafficWeight(revision=v1, weight=40)],
                    [TrafficWeight(revision=v1, weight=110), TrafficWeight(revision="0123456789", weight=-10)],
                    [TrafficWeight(revision=v1, weight=50), TrafficWeight(revision="0123456789", weight=50)],
                    []):
        error = _refused(acts.set_traffic, SetTrafficInput(isvc=ref, component=ROUTER, weights=weights))
        assert error.type == ErrorType.INVALID_TRAFFIC and error.non_retryable, weights
    with pytest.raises(ApiException) as none:
        _route(kube_api, ref, ROUTER)
    assert none.value.status == 404


@pytest.mark.integration
def test_gateway_parent_and_gone_service(kube_api: client.ApiClient, ns: str) -> None:
    acts = ServingActivities(kube_api, ingress=IngressConfig(ome_ingress_gateway="gateway-system/inference"))
    ref = _isvc(kube_api, ns)
    v1 = _component(_run(acts.observe, ObserveInput(isvc=ref)), ROUTER).desired_revision
    key = RevisionKey(isvc=ref, component=ROUTER, revision=v1)
    _run(acts.ensure_revision, EnsureRevisionInput(key=key, replicas=0))
    # A Service deleted behind our back is recreated from the live Deployment's template.
    client.CoreV1Api(kube_api).delete_namespaced_service(revision_name(ref.name, "router", v1), ns)
    assert _run(acts.ensure_revision, EnsureRevisionInput(key=key, replicas=0)).replicas == 0
    svc = client.CoreV1Api(kube_api).read_namespaced_service(revision_name(ref.name, "router", v1), ns)
    assert svc.spec and svc.spec.ports and svc.spec.ports[0].target_port == 9000
    _run(acts.set_traffic, SetTrafficInput(isvc=ref, component=ROUTER, weights=[TrafficWeight(revision=v1,
                                                                                              weight=100)]))
    spec = _route(kube_api, ref, ROUTER)["spec"]
    assert [(p["name"], p["namespace"]) for p in spec["parentRefs"]] == [("inference", "gateway-system")]
    # The router is the entrypoint: its own host and the service's (the default domain template).
    assert spec["hostnames"] == [f"{ref.name}-router.{ns}.svc.cluster.local", f"{ref.name}.{ns}.svc.cluster.local"]

    # Once the InferenceService is gone: observe says so, writes are refused, deletes are no-ops.
    client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(ref.group, ref.version, ns, ref.plural,
                                                                      ref.name)
    eventually(lambda: _run(acts.observe, ObserveInput(isvc=ref)) is None, "the InferenceService gone")
    assert _refused(acts.ensure_revision, EnsureRevisionInput(key=key, replicas=1)).type == ErrorType.OBJECT_GONE
    # Garbage collection follows the ownerReferences.
    eventually(lambda: _run(acts.revision_status, key).replicas == 0, "the revision collected")


@pytest.mark.integration
def test_unknown_revision_of_a_live_spec_is_superseded(kube_api: client.ApiClient, ns: str,
                                                       acts: ServingActivities) -> None:
    ref = _isvc(kube_api, ns, {"engine": SPEC["engine"]})
    bogus = RevisionKey(isvc=ref, component=ENGINE, revision="0000000000")
    refused = _refused(acts.ensure_revision, EnsureRevisionInput(key=bogus, replicas=1))
    assert refused.type == ErrorType.REVISION_SUPERSEDED
    router = RevisionKey(isvc=ref, component=ROUTER, revision="0000000000")  # not in the spec
    refused = _refused(acts.ensure_revision, EnsureRevisionInput(key=router, replicas=1))
    assert refused.type == ErrorType.REVISION_SUPERSEDED
    assert [c.component for c in _run(acts.observe, ObserveInput(isvc=ref)).components] == [ENGINE]


# Upstream OME's sample InferenceService: the model and the runtime by reference, no containers.
OME_SAMPLE: dict[str, Any] = {"model": {"name": "qwen1-5-7b-chat"}, "runtime": {"name": "srt-qwen"},
                              "engine": {"minReplicas": 1, "maxReplicas": 1}}


@pytest.mark.integration
def test_ome_sample_without_its_model_is_held_not_refused(kube_api: client.ApiClient, ns: str,
                                                         acts: ServingActivities) -> None:
    """Upstream's sample names a model and a runtime that do not exist here: observing says why it
    is held (the model may appear later, so it is not a refusal of the spec), and a revision asked
    for anyway is superseded: nothing is created."""
    ref = _isvc(kube_api, ns, OME_SAMPLE)
    seen = _run(acts.observe, ObserveInput(isvc=ref))
    assert seen.components == [] and seen.by_reference
    assert seen.held is not None and seen.held.reason == "ModelNotFound"
    assert "ClusterBaseModel qwen1-5-7b-chat does not exist" in seen.held.message
    key = RevisionKey(isvc=ref, component=ENGINE, revision="0" * render.HASH_LENGTH)
    refused = _refused(acts.ensure_revision, EnsureRevisionInput(key=key, replicas=1))
    assert refused.type == ErrorType.REVISION_SUPERSEDED and refused.non_retryable
    assert "ModelNotFound" in refused.message
    # Nothing half-made is left behind.
    assert _run(acts.revision_status, key).replicas == 0
    assert not client.CoreV1Api(kube_api).list_namespaced_service(
        ns, label_selector=f"{render.LABEL_REVISION}={key.revision}").items


@pytest.mark.integration
def test_a_placed_copy_whose_rendering_placement_did_not_accept_projects_nothing(
    kube_api: client.ApiClient, ns: str, acts: ServingActivities
) -> None:
    """A derived service in a member (SplitByCapacity) carries the plan's demand contract: observed with
    the rendering placement accepted it renders as any service; with another (a runtime changed in the
    member since placement read it) it is held with PlacementDemandMismatch, and a revision asked for
    anyway is superseded before anything is created. placement_demand.py; pure cases in
    tests/test_placement_demand.py."""
    body = manifest(InferenceService, SPEC)
    name = body["metadata"]["name"]
    accepted = rendering_hash(name, SPEC)
    body["metadata"]["annotations"] = execution({"engine": accepted})
    obj = create(kube_api, InferenceService, body, ns)
    ref = ObjectRef.of(InferenceService, name, ns, obj["metadata"]["uid"])
    seen = _run(acts.observe, ObserveInput(isvc=ref))
    assert seen.held is None and [c.component for c in seen.components] == [ENGINE, ROUTER]

    _set_image(kube_api, ref, "registry.invalid/engine:v2")  # renders other pods than the plan counted
    held = _run(acts.observe, ObserveInput(isvc=ref))
    assert held.held is not None and held.held.reason == "PlacementDemandMismatch", held.held
    assert "plan p1 revision 3 accepted rendering " + accepted[:12] in held.held.message
    key = RevisionKey(isvc=ref, component=ENGINE, revision=seen.components[0].desired_revision)
    refused = _refused(acts.ensure_revision, EnsureRevisionInput(key=key, replicas=1))
    assert refused.type == ErrorType.REVISION_SUPERSEDED and "PlacementDemandMismatch" in refused.message
    assert _run(acts.revision_status, key).replicas == 0, "nothing was projected"


# -- pure rendering ---------------------------------------------------------------------------


@pytest.mark.unit
def test_a_component_without_a_container_is_unservable() -> None:
    from servingops.api_models.ome.inference_service import InferenceServiceSpec

    spec = InferenceServiceSpec.model_validate(OME_SAMPLE)
    assert spec.engine is not None
    with pytest.raises(render.Unservable) as info:
        render.check_servable(spec, ENGINE, spec.engine)
    assert info.value.field == "spec.engine"
    assert "set spec.engine.runner (at least an image) or spec.engine.containers" in str(info.value)
    bare = InferenceServiceSpec.model_validate({"engine": {"minReplicas": 1}})
    assert bare.engine is not None
    with pytest.raises(render.Unservable, match=r"spec\.engine has no runner and no containers: set"):
        render.check_servable(bare, ENGINE, bare.engine)
    served = InferenceServiceSpec.model_validate(SPEC)
    assert served.engine is not None and served.router is not None
    render.check_servable(served, ENGINE, served.engine)
    render.check_servable(served, ROUTER, served.router)

_HASH_SCRIPT = """
from servingops.rendering import render
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType
spec = EngineSpec.model_validate({spec!r})
print(render.render_revision("svc", ComponentType.ENGINE, spec).revision)
"""


@pytest.mark.unit
def test_same_spec_same_hash_across_processes() -> None:
    spec = SPEC["engine"]
    here = render.render_revision("svc", ENGINE, EngineSpec.model_validate(spec)).revision
    for seed in ("0", "1", "random"):
        out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT.format(spec=spec)], check=True, text=True,
                             capture_output=True, env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout.strip()
        assert out == here


@pytest.mark.unit
def test_what_changes_the_hash() -> None:
    base = EngineSpec.model_validate(SPEC["engine"])

    def rev(**update: Any) -> str:
        return render.render_revision("svc", ENGINE, base.model_copy(update=update)).revision

    assert rev() == rev()
    # Only what reaches the pods mints a revision.
    assert rev(min_replicas=7) == rev() and rev(max_replicas=9) == rev()
    assert rev(labels={"team": "other"}) != rev()
    assert rev(annotations={"x": "y"}) != rev()
    assert rev(node_selector={"gpu": "a100"}) != rev()
    assert rev(runner={**SPEC["engine"]["runner"], "args": ["--tp", "2"]}) != rev()
    # The same component of another service, or another component, is another revision.
    assert render.render_revision("other", ENGINE, base).revision != rev()
    assert render.render_revision("svc", ComponentType.DECODER, base).revision != rev()


@pytest.mark.unit
def test_rendering_rules() -> None:
    owner = render.Owner(name="svc", namespace="ns", uid="u-1")
    spec = EngineSpec.model_validate({
        "runner": {"name": "main", "image": "a:1"},
        "containers": [{"name": "sidecar", "image": "s:1"},
                       {"name": "main", "image": "old", "ports": [{"name": "grpc", "containerPort": 7000}]}],
        "servicePortAppProtocols": {"grpc": "kubernetes.io/h2c"},
        "deploymentStrategy": {"type": "Recreate"},
    })
    rendered = render.render_revision("svc", ENGINE, spec)
    containers = rendered.template["spec"]["containers"]
    # The runner overrides the listed container of its name, field by field, in place.
    assert containers == [{"name": "sidecar", "image": "s:1"},
                          {"name": "main", "image": "a:1", "ports": [{"name": "grpc", "containerPort": 7000}]}]
    dep = render.deployment(owner, rendered, spec, 3)
    assert dep["metadata"]["name"] == f"svc-engine-rev-{rendered.revision}"
    assert dep["spec"]["replicas"] == 3 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["spec"]["selector"]["matchLabels"] == render.selector_labels("svc", ENGINE, rendered.revision)
    port = render.service(owner, rendered, spec)["spec"]["ports"][0]
    assert port == {"name": "grpc", "port": 8080, "targetPort": 7000, "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c"}
    # No ports anywhere: 8080 to 8080; an unnamed runner is the main container.
    bare = EngineSpec.model_validate({"runner": {"image": "a:1"}})
    bare_rendered = render.render_revision("svc", ENGINE, bare)
    assert bare_rendered.template["spec"]["containers"] == [{"name": render.MAIN_CONTAINER, "image": "a:1"}]
    assert render.service(owner, bare_rendered, bare)["spec"]["ports"][0]["targetPort"] == 8080
    assert render.desired_replicas(bare) == 1
    assert render.desired_replicas(EngineSpec.model_validate({"minReplicas": 0})) == 0
    weights = [TrafficWeight(revision="a", weight=0), TrafficWeight(revision="b", weight=100)]
    route = render.http_route(owner, ENGINE, weights)
    assert render.route_weights(route, "svc", ENGINE) == weights
