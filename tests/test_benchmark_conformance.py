"""The BenchmarkJob fake (testkit/benchmark_fakes.py) against the real activities
(activities/benchmark/activities.py): the same cases on both, the real side against the session's
kube-apiserver as the chart's worker identity (so its RBAC is proven too), called by the activities' wire
names with their payloads through the data converter.

The real side's Jobs carry a nodeSelector no node has (podOverride), so their pod, if the stack's controllers
make one, stays Pending: the case reads Pending on both sides. What differed when the suite was written: a Job
deleted in the foreground stays readable (with a deletionTimestamp) until its pods are collected, where the
fake's is gone at once; the real job_state now reads a Job being deleted as Missing, like the fake."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack.identities import Identities
from devstack.services import OciRegistry
from servingops.activities.benchmark.activities import BenchmarkActivities
from servingops.activities.benchmark.types import (
    BenchJobInput,
    BenchJobOutput,
    BenchObserveInput,
    BenchObserveOutput,
    BenchStartInput,
    BenchStartOutput,
    BenchStopOutput,
    BenchSummarizeInput,
    BenchSummarizeOutput,
    BenchWriteInput,
    BenchWriteOutput,
    JobPhase,
    StartOutcome,
)
from servingops.api_models.ome.benchmark_job import BenchmarkJob, BenchmarkJobStatus
from servingops.api_models.refs import ObjectRef
from testkit.benchmark_fakes import FakeBenchWorld, FakeJob
from testkit.waiting import wait_until
from tests.fixtures.kube import api_as
from tests.support.conformance import FAKE_UNIT_AND_REAL, activity_name, chosen_backend, wire

CONTROLLER_NAMESPACE = "servingops-system"
"""Where the chart's worker identity reads the operator ConfigMap (its Role)."""
SPEC: dict[str, Any] = {
    "endpoint": {"endpoint": {"url": "http://10.250.0.9:8000", "apiFormat": "openai", "modelName": "org/tiny"}},
    "task": "text-to-text", "trafficScenarios": ["D(10,10)"], "numConcurrency": [1],
    "maxTimePerIteration": 1, "maxRequestsPerIteration": 5,
    "outputLocation": {"storageUri": "oci://127.0.0.1:5000/bench/results"},
    "podOverride": {"nodeSelector": {"servingops.test/none": "none"}},
}


class Backend(Protocol):
    namespace: str
    registry: str

    def add(self, name: str, spec: dict[str, Any]) -> ObjectRef: ...
    def edit(self, ref: ObjectRef, spec: dict[str, Any]) -> None: ...
    def add_foreign_job(self, name: str) -> None: ...
    def job_names(self) -> list[str]: ...
    def push_results(self, repository: str, tag: str, layer: bytes) -> str: ...
    def complete(self, job: str, summarize_message: str) -> None: ...
    def call(self, fn: Any, request: Any, answer: type) -> Any: ...

    def events(self, name: str) -> list[tuple[str, str]]: ...


class Fake:
    def __init__(self) -> None:
        self.namespace = "ns"
        self.registry = "127.0.0.1:5000"
        self.world = FakeBenchWorld()

    def push_results(self, repository: str, tag: str, layer: bytes) -> str:
        reference = f"{self.registry}/{repository}:{tag}"
        self.world.artifacts[reference] = layer
        return reference

    def add(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        return self.world.add(name, copy.deepcopy(spec), self.namespace).ref()

    def complete(self, job: str, summarize_message: str) -> None:
        self.world.succeed(job, self.namespace, termination_message=summarize_message)

    def edit(self, ref: ObjectRef, spec: dict[str, Any]) -> None:
        stored = self.world.benches[(self.namespace, ref.name)]
        stored.spec, stored.generation = copy.deepcopy(spec), stored.generation + 1

    def add_foreign_job(self, name: str) -> None:
        self.world.jobs[(self.namespace, name)] = FakeJob(name=name, namespace=self.namespace, owner_uid="other",
                                                          manifest={}, results="")

    def job_names(self) -> list[str]:
        return sorted(name for ns, name in self.world.jobs if ns == self.namespace)

    def call(self, fn: Any, request: Any, answer: type) -> Any:
        method = getattr(self.world, fn.__name__)
        return wire(method(wire(request, type(request))), answer)

    def events(self, name: str) -> list[tuple[str, str]]:
        del name  # the fake's world holds one object's Events per case
        return sorted((e.type, e.reason) for e in self.world.events)


class Real:
    def __init__(self, admin: client.ApiClient, worker: client.ApiClient, registry: str) -> None:
        self.namespace = f"bench-{uuid.uuid4().hex[:6]}"
        self.registry = registry
        self.core, self.custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
        self.batch = client.BatchV1Api(admin)
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        # An operator ConfigMap of this case's own, in the controller namespace where the worker reads it (the
        # registry is plain HTTP on loopback).
        self.config = f"bench-config-{self.namespace}"
        self.core.create_namespaced_config_map(CONTROLLER_NAMESPACE, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=self.config),
            data={"benchmark": f"insecureRegistries: [{registry!r}]\n"}))
        self.activities = BenchmarkActivities(worker, CONTROLLER_NAMESPACE, self.config)

    def push_results(self, repository: str, tag: str, layer: bytes) -> str:
        import hashlib
        import json

        from servingops.clients.oci.registry_client import ModelRegistry
        from servingops.rendering.benchmark_job import ARTIFACT_TYPE, LAYER_MEDIA_TYPE

        config = b"{}"
        with ModelRegistry(self.registry, insecure=True) as reg:
            layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
            config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
            reg.put_blob_bytes(repository, layer, layer_digest)
            reg.put_blob_bytes(repository, config, config_digest)
            manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "artifactType": ARTIFACT_TYPE,
                        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config_digest,
                                   "size": len(config)},
                        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": len(layer)}]}
            reg.put_manifest(repository, tag, json.dumps(manifest).encode())
        return f"{self.registry}/{repository}:{tag}"

    def complete(self, job: str, summarize_message: str) -> None:
        """What the kubelet and the Job controller do for a pod whose containers all succeeded: its status
        (the summarize container's termination message in it) is written as a kubelet writes it, and the real
        Job controller marks the Job Complete."""
        pod = wait_until(f"the pod of {job}", lambda: next(iter(self.core.list_namespaced_pod(
            self.namespace, label_selector=f"job-name={job}").items), None), timeout=60)

        def ended(name: str, message: str | None = None) -> dict[str, Any]:
            return {"name": name, "image": "i", "imageID": "", "ready": False, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                                             "startedAt": "2026-12-07T12:00:00Z",
                                             "finishedAt": "2026-12-07T12:01:00Z"}}}

        spec = pod.spec
        self.core.patch_namespaced_pod_status(pod.metadata.name, self.namespace, {"status": {
            "phase": "Succeeded",
            "initContainerStatuses": [ended(c.name) for c in spec.init_containers or []],
            "containerStatuses": [ended(c.name, summarize_message) for c in spec.containers]}})
        wait_until(f"{job} Complete", lambda: any(
            c.type == "Complete" and c.status == "True"
            for c in self.batch.read_namespaced_job(job, self.namespace).status.conditions or []), timeout=60)

    def add(self, name: str, spec: dict[str, Any]) -> ObjectRef:
        body = {"apiVersion": "ome.io/v1beta1", "kind": "BenchmarkJob", "metadata": {"name": name}, "spec": spec}
        made = self.custom.create_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "benchmarkjobs", body)
        return ObjectRef.of(BenchmarkJob, name, self.namespace, uid=made["metadata"]["uid"])

    def edit(self, ref: ObjectRef, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object("ome.io", "v1beta1", self.namespace, "benchmarkjobs", ref.name,
                                                   {"spec": spec})

    def add_foreign_job(self, name: str) -> None:
        self.batch.create_namespaced_job(self.namespace, {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"servingops.test/none": "x"},
                                           "containers": [{"name": "c", "image": "example.invalid/none"}]}}}})

    def job_names(self) -> list[str]:
        jobs = self.batch.list_namespaced_job(self.namespace).items
        return sorted(j.metadata.name for j in jobs if j.metadata.deletion_timestamp is None)

    def call(self, fn: Any, request: Any, answer: type) -> Any:
        bound = getattr(self.activities, fn.__name__)
        return wire(ActivityEnvironment().run(bound, wire(request, type(request))), answer)

    def events(self, name: str) -> list[tuple[str, str]]:
        listed = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.kind=BenchmarkJob,involvedObject.name={name}")
        return sorted((e.type, e.reason) for e in listed.items)

    def close(self) -> None:
        try:
            self.core.delete_namespaced_config_map(self.config, CONTROLLER_NAMESPACE)
            self.core.delete_namespace(self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def real_backend(kube_api: client.ApiClient, chart_identities: Identities, oci_registry: OciRegistry) -> Iterator[Real]:
    with api_as(chart_identities.worker) as worker:
        real = Real(kube_api, worker, oci_registry.address)
        try:
            yield real
        finally:
            real.close()


@pytest.fixture(params=FAKE_UNIT_AND_REAL)
def backend(request: pytest.FixtureRequest) -> Backend:
    return chosen_backend(request, Fake)


A = BenchmarkActivities


def start(backend: Backend, ref: ObjectRef, generation: int = 1) -> BenchStartOutput:
    out: BenchStartOutput = backend.call(A.start, BenchStartInput(job=ref, generation=generation), BenchStartOutput)
    return out


def state(backend: Backend, name: str) -> BenchJobOutput:
    out: BenchJobOutput = backend.call(A.job_state, BenchJobInput(namespace=backend.namespace, job_name=name),
                                       BenchJobOutput)
    return out


@pytest.mark.unit
def test_the_names_are_the_wire_contract() -> None:
    assert [activity_name(f) for f in (A.observe, A.start, A.job_state, A.stop, A.write_status, A.summarize)] == [
        "benchmark.observe", "benchmark.start", "benchmark.job_state", "benchmark.stop", "benchmark.write_status",
        "benchmark.summarize"]


def test_start_creates_one_job_per_generation_and_again_finds_it(backend: Backend) -> None:
    ref = backend.add("url", SPEC)
    first = start(backend, ref)
    assert (first.outcome, first.job_name, first.results) == (StartOutcome.STARTED, "url-g1",
                                                              "127.0.0.1:5000/bench/results:url-g1")
    again = start(backend, ref)
    assert (again.outcome, again.job_name, again.results) == (StartOutcome.STARTED, "url-g1", first.results)
    assert backend.job_names() == ["url-g1"]
    assert state(backend, "url-g1").phase == JobPhase.PENDING
    assert start(backend, ref, generation=2).outcome == StartOutcome.STALE
    backend.edit(ref, {**SPEC, "numConcurrency": [1, 2]})
    assert start(backend, ref, generation=2).job_name == "url-g2"
    assert backend.job_names() == ["url-g1", "url-g2"]
    stopped: BenchStopOutput = backend.call(A.stop, BenchJobInput(namespace=backend.namespace, job_name="url-g1"),
                                            BenchStopOutput)
    assert stopped.deleted and state(backend, "url-g1").phase == JobPhase.MISSING
    assert backend.job_names() == ["url-g2"]
    assert not backend.call(A.stop, BenchJobInput(namespace=backend.namespace, job_name="nope"),
                            BenchStopOutput).deleted


def test_what_cannot_start_says_why(backend: Backend) -> None:
    s3 = start(backend, backend.add("s3", {**SPEC, "outputLocation": {"storageUri": "s3://bucket/x"}}))
    assert s3.outcome == StartOutcome.INVALID and "s3://" in s3.message
    nameless = start(backend, backend.add("nameless", {**SPEC, "endpoint": {"endpoint": {
        "url": "http://10.250.0.9:8000", "apiFormat": "openai"}}}))
    assert nameless.outcome == StartOutcome.INVALID and "modelName" in nameless.message
    missing = start(backend, backend.add("svc", {**SPEC, "endpoint": {"inferenceService": {
        "name": "absent", "namespace": backend.namespace}}}))
    assert missing.outcome == StartOutcome.WAITING and "does not exist" in missing.message
    literal = start(backend, backend.add("literal", {**SPEC, "podOverride": {"env": [
        {"name": "MODEL_API_KEY", "value": "sk-not-a-ref"}]}}))
    assert literal.outcome == StartOutcome.INVALID and "Secret" in literal.message
    backend.add_foreign_job("taken-g1")
    taken = start(backend, backend.add("taken", SPEC))
    assert taken.outcome == StartOutcome.INVALID and "not this BenchmarkJob's" in taken.message
    assert backend.job_names() == ["taken-g1"]


def test_status_reads_back_and_a_reused_name_is_never_written(backend: Backend) -> None:
    ref = backend.add("st", SPEC)
    seen: BenchObserveOutput = backend.call(A.observe, BenchObserveInput(job=ref), BenchObserveOutput)
    assert seen.present and seen.generation == 1 and seen.status is None
    status = BenchmarkJobStatus.model_validate({
        "state": "Completed", "startTime": "2026-12-07T12:00:00Z", "completionTime": "2026-12-07T12:01:00Z",
        "lastReconcileTime": "2026-12-07T12:01:00Z", "details": '{"generation": 1}'})
    written: BenchWriteOutput = backend.call(A.write_status, BenchWriteInput(job=ref, status=status), BenchWriteOutput)
    assert written.present
    seen = backend.call(A.observe, BenchObserveInput(job=ref), BenchObserveOutput)
    assert seen.status is not None and seen.status.to_api() == status.to_api()
    reused = ref.model_copy(update={"uid": str(uuid.uuid4())})
    assert not backend.call(A.write_status, BenchWriteInput(job=reused, status=status), BenchWriteOutput).present
    assert not backend.call(A.observe, BenchObserveInput(job=reused), BenchObserveOutput).present


def test_summarize_reads_the_pushed_results_and_says_what_is_missing(backend: Backend) -> None:
    import io
    import tarfile
    from pathlib import Path

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted((Path(__file__).parent / "fixtures" / "genai_bench").glob("*.json")):
            archive.add(path, arcname=f"run/{path.name}")
    repository = f"bench-{uuid.uuid4().hex[:6]}/results"
    reference = backend.push_results(repository, "run-g1", buffer.getvalue())
    read: BenchSummarizeOutput = backend.call(A.summarize, BenchSummarizeInput(results=reference),
                                              BenchSummarizeOutput)
    assert read.problem == "" and read.summary is not None
    assert [(s.concurrency, s.requests) for s in read.summary][1] == (2, 38)
    absent = f"{backend.registry}/{repository}:nope"
    gone: BenchSummarizeOutput = backend.call(A.summarize, BenchSummarizeInput(results=absent), BenchSummarizeOutput)
    assert gone.summary is None and gone.problem == f"no artifact at {absent}"
    junk = backend.push_results(repository, "junk", b"not an archive")
    bad: BenchSummarizeOutput = backend.call(A.summarize, BenchSummarizeInput(results=junk), BenchSummarizeOutput)
    assert bad.summary is None and "not a tar archive" in bad.problem


def test_a_completed_pvc_job_reports_the_summary_its_pod_left(backend: Backend) -> None:
    """A pvc:// Job's pod ends with the summarize step's termination message: job_state reads the summary
    from it once the Job is Complete (rendering/benchmark_summary_step.py)."""
    ref = backend.add("pvcsum", {**SPEC, "outputLocation": {"storageUri": "pvc://results/runs"}})
    assert start(backend, ref).results == "pvc://results/runs/pvcsum-g1"
    backend.complete("pvcsum-g1", '{"benchSummary":1,"total":1,"rows":[["D(10,10)",1,17,0,24.881,29.9,232.756]]}')
    seen = state(backend, "pvcsum-g1")
    assert seen.phase == JobPhase.SUCCEEDED and seen.summary_problem == "", seen
    assert seen.summary is not None and [(s.scenario, s.requests, s.ttft_p99_ms) for s in seen.summary] == [
        ("D(10,10)", 17, 29.9)]


def test_status_writes_tell_each_transition_once_as_an_event(backend: Backend) -> None:
    ref = backend.add("ev", SPEC)

    def write(state: str, **extra: str) -> None:
        status = BenchmarkJobStatus.model_validate({"state": state, "lastReconcileTime": "2026-12-07T12:00:00Z",
                                                    "details": '{"generation": 1, "job": "ev-g1"}', **extra})
        assert backend.call(A.write_status, BenchWriteInput(job=ref, status=status), BenchWriteOutput).present

    write("Pending")
    write("Pending", failureMessage="InferenceService ns/x is not Ready with a URL")
    assert backend.events("ev") == []
    write("Running", startTime="2026-12-07T12:00:00Z")
    write("Running", startTime="2026-12-07T12:00:00Z")  # a retried write tells nothing again
    write("Failed", failureMessage="Job ev-g1 failed: BackoffLimitExceeded")
    assert backend.events("ev") == [("Normal", "BenchmarkStarted"), ("Warning", "BenchmarkFailed")]


@pytest.mark.integration
def test_a_model_on_a_claim_of_another_namespace_is_refused_before_any_job(real_backend: Real) -> None:
    """The benchmark pod mounts the served model's claim to read its tokenizer, and a pod mounts only claims of
    its own namespace: a BenchmarkJob against a service whose model is on a claim elsewhere ends Failed naming
    the claim (INVALID at start), where a Job would have left its pod waiting on FailedMount. Real side only:
    the fake resolves no models (the rule is rendering/model_claim.claim_refusal, unit-tested there)."""
    real, custom = real_backend, real_backend.custom
    served = f"served-{uuid.uuid4().hex[:6]}"
    real.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=served)))
    selection = {"modelFormat": {"name": "safetensors", "version": "1.0.0"},
                 "modelFramework": {"name": "transformers", "version": "4.45.0"},
                 "modelArchitecture": "LlamaForCausalLM"}
    try:
        for ns in (served, real.namespace):
            custom.create_namespaced_custom_object("ome.io", "v1beta1", ns, "basemodels", {
                "apiVersion": "ome.io/v1beta1", "kind": "BaseModel", "metadata": {"name": "tiny"},
                "spec": {**selection, "storage": {"storageUri": "pvc://weights/tiny/llama"}}})
            custom.create_namespaced_custom_object("ome.io", "v1beta1", ns, "inferenceservices", {
                "apiVersion": "ome.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "tiny"},
                "spec": {"model": {"name": "tiny", "kind": "BaseModel"}, "engine": {"minReplicas": 1}}})
            custom.patch_namespaced_custom_object_status("ome.io", "v1beta1", ns, "inferenceservices", "tiny", {
                "status": {"url": f"http://tiny.{ns}.example.com", "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                     "lastTransitionTime": "2026-12-07T12:00:00Z"}]}})

        def against(ns: str, name: str) -> BenchStartOutput:
            return start(real, real.add(name, {**SPEC, "endpoint": {"inferenceService": {"name": "tiny",
                                                                                         "namespace": ns}}}))

        elsewhere = against(served, "elsewhere")
        assert elsewhere.outcome == StartOutcome.INVALID, elsewhere
        assert "PersistentVolumeClaim weights" in elsewhere.message and f"namespace {served}" in elsewhere.message
        assert f"this BenchmarkJob is in {real.namespace}" in elsewhere.message, elsewhere.message
        assert real.job_names() == []
        # The same model beside the job mounts: the Job is made, its pod reading the tokenizer from the claim.
        beside = against(real.namespace, "beside")
        assert beside.outcome == StartOutcome.STARTED, beside
        job = real.batch.read_namespaced_job("beside-g1", real.namespace)
        volumes = [v.persistent_volume_claim.claim_name for v in job.spec.template.spec.volumes or []
                   if v.persistent_volume_claim is not None]
        assert "weights" in volumes, volumes
    finally:
        real.core.delete_namespace(served, grace_period_seconds=0)
