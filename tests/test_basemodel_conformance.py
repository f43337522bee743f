"""The fake activities behind the time-skipping base model tests (tests/histories/basemodel_fakes.py,
FakeBaseModelWorld, used by tests/test_basemodel_workflow.py and the history recorder) answer as the
real ones do: one suite, run against both.

Each case drives a backend through the activities BaseModelWorkflow calls by their names
(basemodel.read, basemodel.fill_spec, basemodel.annotate, basemodel.node_reports,
basemodel.check_pvc, basemodel.resolve_tag, kube.patch_status, kube.artifact_referenced) and
checks what they answer and refuse. The real backend is BaseModelActivities and KubernetesActivities
as the chart's worker identity on the session's apiserver (node reports as the agents write them,
PVCs bound by the real PV controller) and the session's OCI registry; the fake is one
FakeBaseModelWorld per model, its activities called with the payloads as the data converter puts
them on the wire. A case that passes on one and fails on the other is a difference the
time-skipping tests would hide.

Where they differed before this suite (the fake was changed to match the real activities):
- node_reports: the fake answered its reports in the order they were set and whole; the real one
  answers them by node name, each message cut at 512 characters.
- a deleted object: the fake had none. The real read answers None, fill_spec generation None,
  annotate and kube.patch_status False; the fake now does the same once `gone` is set.
- resolve_tag of a missing tag: SourceNotFound (permanent) on both, but the fake's message named the
  registry only; the real one names `<address>/<repository>:<tag>`.

Left as they are (not asserted here; docs/testing.md):
- the import activities the world inherits (tests/histories/model_fakes.py: source.*, oci.*,
  model.inspect, host.claim) are the model import world's, not this suite's.
- node_reports skips a report left by a node that no longer exists; the fake's reports are by
  definition those of live nodes (it has no Nodes).
- resolve_tag of a registry that does not answer (RegistryUnavailable, retryable) and check_pvc's
  namespace: the fake has no registry address or namespaces to get wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from servingops.activities.basemodels.activities import BaseModelActivities
from servingops.activities.basemodels.metadata import derive
from servingops.activities.basemodels.types import (
    AnnotateInput,
    BaseModelView,
    FillSpecInput,
    FillSpecResult,
    NodeEntry,
    NodeReportsInput,
    PvcCheck,
    PvcInput,
    ResolveTagInput,
)
from servingops.activities.kubernetes import ArtifactReferences, EventNote, KubernetesActivities, StatusPatch
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.errors import ErrorType
from servingops.api_models.ome.model_keys import ARTIFACT_ANNOTATION, STATUS_CONFIGMAP_LABEL, ModelKey, ModelKind
from servingops.api_models.refs import ConditionUpdate, ObjectRef
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.workers.kubernetes_errors import classify
from testkit.node_agent import (
    REPOSITORY,
    delete_node,
    make_node,
    model_crds,
    push_artifact,
    unique,
    write_content,
)
from testkit.waiting import wait_until_async
from tests.crd_helpers import new_namespace
from tests.fixtures.kube import api_as
from tests.histories.basemodel_fakes import FakeBaseModelWorld
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

GROUP, VERSION = "ome.io", "v1beta1"
CONTROLLER_NS = "servingops-system"
"""Where a cluster-scoped model's token Secret is read (the fake's fixed answer; the real one is bound to it)."""
DEADLINE = 60.0
RESULTS: dict[str, Any] = {
    "basemodel.read": BaseModelView | None, "basemodel.fill_spec": FillSpecResult, "basemodel.annotate": bool,
    "basemodel.node_reports": list[NodeEntry], "basemodel.check_pvc": PvcCheck, "basemodel.resolve_tag": str,
    "kube.patch_status": bool, "kube.artifact_referenced": bool,
}
"""Each activity's answer type: the fake's plain dicts are read back into it as a workflow would."""


class Backend(Protocol):
    """Models, node reports, claims and tags, and the activities that read and write them."""

    async def new_model(self, kind: ModelKind, storage_uri: str, spec: dict[str, Any] | None = None) -> ObjectRef:
        ...

    async def call(self, model: ObjectRef, activity: str, arg: Any) -> Any:
        """Run the named activity on behalf of `model` (the fake: that model's world)."""
        ...

    async def start_deleting(self, model: ObjectRef) -> None:
        """A delete held by a finalizer: the object is still there, deleting."""
        ...

    async def gone(self, model: ObjectRef) -> None:
        """The object is deleted for good."""
        ...

    async def report(self, model: ObjectRef, node: str, entry: dict[str, Any]) -> None:
        """A node agent's report of this model on `node` (a node that exists)."""
        ...

    async def claim(self, model: ObjectRef, name: str, *, bound: bool) -> None:
        """A PersistentVolumeClaim in the model's namespace, Bound to a volume or left Pending."""
        ...

    async def tag(self, model: ObjectRef, tag: str) -> tuple[RegistryTarget, str]:
        """A ModelPack artifact tagged `tag`: the registry target and the manifest digest."""
        ...

    async def hold(self, model: ObjectRef, digest: str) -> None:
        """Another model is annotated with an artifact of this digest."""
        ...

    async def status(self, model: ObjectRef) -> dict[str, Any]:
        """The status as last written."""
        ...

    def node(self) -> str:
        """A node name for a report."""
        ...



# -- the fake ------------------------------------------------------------------------------------------


class FakeBackend:
    def __init__(self) -> None:
        self.worlds: dict[str, FakeBaseModelWorld] = {}

    def _world(self, model: ObjectRef) -> FakeBaseModelWorld:
        return self.worlds[model.uid or ""]

    async def new_model(self, kind: ModelKind, storage_uri: str, spec: dict[str, Any] | None = None) -> ObjectRef:
        world = FakeBaseModelWorld(uid=str(uuid.uuid4()), name=unique("bm"), kind=kind.value, storage_uri=storage_uri,
                                   spec=copy.deepcopy(spec or {}))
        if not kind.namespaced:
            world.namespace = ""
        self.worlds[world.uid] = world
        return ObjectRef.model_validate(world.ref)

    async def call(self, model: ObjectRef, activity: str, arg: Any) -> Any:
        fns = {activity_name(fn): fn for fn in self._world(model).activities()}
        answer = await ActivityEnvironment().run(fns[activity], wire(arg, dict))
        return wire(answer, RESULTS[activity])

    async def start_deleting(self, model: ObjectRef) -> None:
        self._world(model).start_deleting()

    async def gone(self, model: ObjectRef) -> None:
        self._world(model).gone = True

    async def report(self, model: ObjectRef, node: str, entry: dict[str, Any]) -> None:
        self._world(model).reports.append({"node": node, **{k: v for k, v in entry.items()
                                                            if k in ("status", "digest", "message")}})

    async def claim(self, model: ObjectRef, name: str, *, bound: bool) -> None:
        self._world(model).pvcs[name] = "Bound" if bound else "Pending"

    async def tag(self, model: ObjectRef, tag: str) -> tuple[RegistryTarget, str]:
        digest = f"sha256:{uuid.uuid4().hex * 2}"
        self._world(model).tags[tag] = digest
        return RegistryTarget(address="registry.test:5000", repository="models", insecure=True), digest

    async def hold(self, model: ObjectRef, digest: str) -> None:
        self._world(model).shared_digests.add(digest)

    async def status(self, model: ObjectRef) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for status in self._world(model).statuses:
            merged.update(status)
        return merged

    def node(self) -> str:
        return unique("node")


# -- the local cluster and registry --------------------------------------------------------------------


class RealBackend:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, reports_ns: str, registry: str,
                 spool: Path) -> None:
        self.admin, self.reports_ns, self.registry, self.spool = admin, reports_ns, registry, spool
        self.custom = client.CustomObjectsApi(admin)
        self.core = client.CoreV1Api(admin)
        self.namespace = new_namespace(admin, "bm-conformance")
        acts = BaseModelActivities(worker, CONTROLLER_NS, reports_namespace=reports_ns)
        kube = KubernetesActivities(worker)
        self.activities: dict[str, Callable[..., Any]] = {
            activity_name(fn): fn
            for fn in [*acts.all(), kube.patch_status, kube.artifact_referenced]}
        self.models: list[ObjectRef] = []
        self.nodes: list[str] = []
        self.volumes: list[str] = []

    def _body(self, kind: ModelKind, name: str, storage_uri: str, spec: dict[str, Any] | None,
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, **({"namespace": self.namespace} if kind.namespaced else {})}
        if annotations:
            meta["annotations"] = annotations
        body_spec: dict[str, Any] = {"storage": {"storageUri": storage_uri}, **copy.deepcopy(spec or {})}
        if kind is ModelKind.FINE_TUNED_WEIGHT:
            body_spec.setdefault("baseModelRef", {"name": "base"})
            body_spec.setdefault("modelType", "Adapter")
            body_spec.setdefault("hyperParameters", {})
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind.value, "metadata": meta, "spec": body_spec}

    def _create(self, body: dict[str, Any]) -> ObjectRef:
        kind = ModelKind(body["kind"])
        if kind.namespaced:
            obj = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, kind.plural, body)
        else:
            obj = self.custom.create_cluster_custom_object(GROUP, VERSION, kind.plural, body)
        ref = ObjectRef(group=GROUP, version=VERSION, plural=kind.plural, kind=kind.value,
                        name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                        uid=obj["metadata"]["uid"])
        self.models.append(ref)
        return ref

    async def new_model(self, kind: ModelKind, storage_uri: str, spec: dict[str, Any] | None = None) -> ObjectRef:
        return self._create(self._body(kind, unique("bm"), storage_uri, spec))

    async def call(self, model: ObjectRef, activity: str, arg: Any) -> Any:
        try:
            return await asyncio.to_thread(ActivityEnvironment().run, self.activities[activity], arg)
        except ApiException as exc:  # what the worker's interceptor makes of it (workers/kubernetes_errors.py)
            permanent = classify(exc)
            if permanent is None:
                raise
            raise permanent from exc

    def _patch(self, model: ObjectRef, body: dict[str, Any]) -> None:
        if model.namespace:
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, model.namespace, model.plural, model.name, body,
                                                       _content_type="application/merge-patch+json")
        else:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, model.plural, model.name, body,
                                                    _content_type="application/merge-patch+json")

    def _delete(self, model: ObjectRef) -> None:
        with contextlib.suppress(ApiException):
            if model.namespace:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, model.namespace, model.plural, model.name)
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, model.plural, model.name)

    def _get(self, model: ObjectRef) -> dict[str, Any] | None:
        try:
            if model.namespace:
                return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, model.namespace, model.plural,
                                                                     model.name))
            return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, model.plural, model.name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def start_deleting(self, model: ObjectRef) -> None:
        self._patch(model, {"metadata": {"finalizers": ["test.servingops.io/hold"]}})
        self._delete(model)

    async def gone(self, model: ObjectRef) -> None:
        self._patch(model, {"metadata": {"finalizers": None}})
        self._delete(model)
        await wait_until_async("the model gone", lambda: self._get(model) is None, DEADLINE)

    async def report(self, model: ObjectRef, node: str, entry: dict[str, Any]) -> None:
        if node not in self.nodes:
            make_node(self.admin, node, {})
            self.nodes.append(node)
        key = ModelKey(ModelKind(model.kind), model.namespace or "", model.name).configmap_key
        value = {"name": model.name, "kind": model.kind, "namespace": model.namespace or "",
                 "time": "2026-01-01T00:00:00Z", **entry}
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=node, namespace=self.reports_ns,
                                                               labels={STATUS_CONFIGMAP_LABEL: "true"}),
                                  data={key: json.dumps(value)})
        try:
            self.core.create_namespaced_config_map(self.reports_ns, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespaced_config_map(node, self.reports_ns, {"data": {key: json.dumps(value)}})

    async def claim(self, model: ObjectRef, name: str, *, bound: bool) -> None:
        namespace = model.namespace or self.namespace
        spec = client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadOnlyMany"], storage_class_name="conformance-manual",
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))
        if bound:
            volume = unique("bm-pv")
            self.volumes.append(volume)
            spec.volume_name = volume
            self.core.create_persistent_volume(client.V1PersistentVolume(
                metadata=client.V1ObjectMeta(name=volume),
                spec=client.V1PersistentVolumeSpec(
                    capacity={"storage": "1Gi"}, access_modes=["ReadOnlyMany"],
                    storage_class_name="conformance-manual", host_path=client.V1HostPathVolumeSource(path="/tmp/w"),
                    claim_ref=client.V1ObjectReference(namespace=namespace, name=name))))
        self.core.create_namespaced_persistent_volume_claim(namespace, client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=name), spec=spec))
        if bound:
            def phase() -> bool:
                pvc = self.core.read_namespaced_persistent_volume_claim(name, namespace)
                return pvc.status is not None and pvc.status.phase == "Bound"

            await wait_until_async("the claim Bound by the PV controller", phase, DEADLINE)

    async def tag(self, model: ObjectRef, tag: str) -> tuple[RegistryTarget, str]:
        files = {"config.json": write_content(self.spool / unique("c"), 64, 7)}
        reference = await asyncio.to_thread(push_artifact, self.registry, files, name=unique("bm-tag"))
        digest = reference.rsplit("@", 1)[1]
        with ModelRegistry(self.registry, insecure=True) as registry:
            document = registry.fetch_manifest(REPOSITORY, digest)
            assert document is not None
            registry.put_manifest(REPOSITORY, tag, document.raw, media_type=document.media_type)
        return RegistryTarget(address=self.registry, repository=REPOSITORY, insecure=True), digest

    async def hold(self, model: ObjectRef, digest: str) -> None:
        self._create(self._body(ModelKind.CLUSTER_BASE_MODEL, unique("holder"), "hf://acme/other", None,
                                {ARTIFACT_ANNOTATION: f"{self.registry}/{REPOSITORY}@{digest}"}))

    async def status(self, model: ObjectRef) -> dict[str, Any]:
        obj = self._get(model)
        assert obj is not None
        return dict(obj.get("status") or {})

    def node(self) -> str:
        return unique("bm-node")

    def close(self) -> None:
        for model in self.models:
            with contextlib.suppress(ApiException):
                self._patch(model, {"metadata": {"finalizers": None}})
            self._delete(model)
        for node in self.nodes:
            delete_node(self.admin, node)
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_config_map(node, self.reports_ns)
        for volume in self.volumes:
            with contextlib.suppress(ApiException):
                self.core.delete_persistent_volume(volume)
        self.core.delete_namespace(self.namespace)


@pytest.fixture(scope="module")
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, oci_registry: Any,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    with model_crds(kube_api), api_as(chart_identities.worker) as worker:
        backend = RealBackend(kube_api, worker, chart_identities.namespace, oci_registry.address,
                              tmp_path_factory.mktemp("bm-conformance"))
        try:
            yield backend
        finally:
            backend.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, FakeBackend)


# -- helpers -------------------------------------------------------------------------------------------


async def read(backend: Backend, model: ObjectRef) -> BaseModelView | None:
    result: BaseModelView | None = await backend.call(model, "basemodel.read", model)
    return result


async def annotate(backend: Backend, model: ObjectRef, value: str | None) -> bool:
    result: bool = await backend.call(model, "basemodel.annotate", AnnotateInput(ref=model, value=value))
    return result


async def refused(call: Awaitable[Any]) -> ApplicationError:
    """The permanent error a call is refused with (never a retryable failure)."""
    with pytest.raises(ApplicationError) as info:
        await call
    assert info.value.non_retryable, f"refused but retryable: {info.value}"
    return info.value


DERIVED = derive("Safetensors", {"architecture": "LlamaForCausalLM", "family": "llama",
                                 "parameterCount": 7_000_000_000, "contextWindowTokens": 4096})


# -- the cases -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [ModelKind.CLUSTER_BASE_MODEL, ModelKind.BASE_MODEL, ModelKind.FINE_TUNED_WEIGHT])
async def test_read_answers_the_object_then_deleting_then_none(backend: Backend, kind: ModelKind) -> None:
    model = await backend.new_model(kind, "hf://acme/tiny-llama@main")
    view = await read(backend, model)
    assert view is not None
    assert (view.generation, view.deleting, view.storage, view.artifact) == (
        1, False, {"storageUri": "hf://acme/tiny-llama@main"}, None)
    assert view.secret_namespace == (model.namespace or CONTROLLER_NS)
    assert view.fills_metadata is (kind is not ModelKind.FINE_TUNED_WEIGHT)

    await backend.start_deleting(model)
    deleting = await read(backend, model)
    assert deleting is not None and deleting.deleting
    assert deleting.generation == 2, "a deletionTimestamp moves a custom object's generation"
    await backend.gone(model)
    assert await read(backend, model) is None


async def test_fill_spec_sets_only_what_the_user_left_empty(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.CLUSTER_BASE_MODEL, "hf://acme/tiny-llama",
                                    {"modelArchitecture": "Mine", "modelFormat": {"name": "safetensors"}})
    filled: FillSpecResult = await backend.call(model, "basemodel.fill_spec", FillSpecInput(ref=model, derived=DERIVED))
    assert filled.generation == 2
    assert filled.filled == ["maxTokens", "modelFormat", "modelFramework", "modelParameterSize", "modelType"]
    again: FillSpecResult = await backend.call(model, "basemodel.fill_spec", FillSpecInput(ref=model, derived=DERIVED))
    assert (again.generation, again.filled) == (2, []), "nothing left to fill: no write, no new generation"
    view = await read(backend, model)
    assert view is not None and view.generation == 2

    await backend.gone(model)
    gone: FillSpecResult = await backend.call(model, "basemodel.fill_spec", FillSpecInput(ref=model, derived=DERIVED))
    assert (gone.generation, gone.filled) == (None, [])


async def test_annotate_sets_and_removes_and_answers_false_once_gone(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.BASE_MODEL, "hf://acme/tiny-llama")
    artifact = f"registry.test:5000/models@sha256:{'a' * 64}"
    assert await annotate(backend, model, artifact) is True
    view = await read(backend, model)
    assert view is not None and view.artifact == artifact and view.generation == 1, "no new generation"
    assert await annotate(backend, model, artifact) is True, "already so: still True"
    assert await annotate(backend, model, None) is True
    view = await read(backend, model)
    assert view is not None and view.artifact is None
    assert await annotate(backend, model, None) is True, "already absent: still True"
    await backend.gone(model)
    assert await annotate(backend, model, artifact) is False


async def test_node_reports_come_by_node_name_with_short_messages(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.BASE_MODEL, "modelpack://registry.test:5000/models/llama:v1")
    digest = f"sha256:{'b' * 64}"
    nodes = sorted(backend.node() for _ in range(3))
    await backend.report(model, nodes[2], {"status": "Failed", "digest": digest, "message": "x" * 600})
    await backend.report(model, nodes[0], {"status": "Ready", "digest": digest, "message": ""})
    await backend.report(model, nodes[1], {"status": "Updating"})
    entries: list[NodeEntry] = await backend.call(model, "basemodel.node_reports", NodeReportsInput(
        kind=model.kind, namespace=model.namespace, name=model.name))
    assert [(e.node, e.status, e.digest) for e in entries] == [
        (nodes[0], "Ready", digest), (nodes[1], "Updating", ""), (nodes[2], "Failed", digest)]
    assert entries[2].message == "x" * 512 and entries[0].message == entries[1].message == ""


async def test_check_pvc_finds_a_claim_and_its_phase(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.BASE_MODEL, "pvc://weights/llama")
    namespace = model.namespace or ""
    missing: PvcCheck = await backend.call(model, "basemodel.check_pvc", PvcInput(namespace=namespace, name="weights"))
    assert (missing.found, missing.phase) == (False, None)
    await backend.claim(model, "weights", bound=False)
    await backend.claim(model, "bound-weights", bound=True)
    pending: PvcCheck = await backend.call(model, "basemodel.check_pvc", PvcInput(namespace=namespace, name="weights"))
    assert (pending.found, pending.phase) == (True, "Pending")
    bound: PvcCheck = await backend.call(model, "basemodel.check_pvc",
                                         PvcInput(namespace=namespace, name="bound-weights"))
    assert (bound.found, bound.phase) == (True, "Bound")


async def test_resolve_tag_answers_the_digest_or_source_not_found(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.CLUSTER_BASE_MODEL, "modelpack://registry.test:5000/models/llama:v1")
    tag = unique("v")
    target, digest = await backend.tag(model, tag)
    assert await backend.call(model, "basemodel.resolve_tag", ResolveTagInput(target=target, tag=tag)) == digest
    absent = unique("absent")
    error = await refused(backend.call(model, "basemodel.resolve_tag", ResolveTagInput(target=target, tag=absent)))
    assert error.type == ErrorType.SOURCE_NOT_FOUND.value
    assert error.message == f"{target.address}/{target.repository}:{absent}: no such tag in the registry"


async def test_an_artifact_is_referenced_only_by_another_model(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.CLUSTER_BASE_MODEL, "hf://acme/tiny-llama")
    own, shared = f"sha256:{uuid.uuid4().hex * 2}", f"sha256:{uuid.uuid4().hex * 2}"
    await annotate(backend, model, f"registry.test:5000/models@{own}")
    await backend.hold(model, shared)

    async def referenced(digest: str) -> bool:
        result: bool = await backend.call(model, "kube.artifact_referenced",
                                          ArtifactReferences(digest=digest, except_uid=model.uid or ""))
        return result

    assert await referenced(shared) is True
    assert await referenced(own) is False, "its own annotation does not count"
    assert await referenced(f"sha256:{uuid.uuid4().hex * 2}") is False


async def test_patch_status_takes_the_workflows_status_and_answers_false_once_gone(backend: Backend) -> None:
    model = await backend.new_model(ModelKind.BASE_MODEL, "pvc://weights/llama")
    patch = StatusPatch(ref=model, status={"state": "In_Transit", "nodesReady": ["node-a"], "nodesFailed": [],
                                           "observedGeneration": 1, "lastReconcileTime": "2026-01-01T00:00:00Z"},
                        conditions=[ConditionUpdate(type="SourceReachable", status="False", reason="PVCNotBound",
                                                    message="claim weights is Pending"),
                                    ConditionUpdate(type="Ready", status="False", reason="PVCNotBound",
                                                    message="claim weights is Pending")],
                        events=[EventNote(type="Normal", reason="PVCNotBound", message="claim weights is Pending")])
    assert await backend.call(model, "kube.patch_status", patch) is True
    status = await backend.status(model)
    assert (status["state"], status["nodesReady"], status["observedGeneration"]) == ("In_Transit", ["node-a"], 1)
    assert await backend.call(model, "kube.patch_status", patch.model_copy(
        update={"status": {"state": "Ready", "nodesReady": ["node-a"]}})) is True
    assert (await backend.status(model))["state"] == "Ready"
    await backend.gone(model)
    assert await backend.call(model, "kube.patch_status", patch) is False
