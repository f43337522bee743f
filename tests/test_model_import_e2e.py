"""Model import end to end: `kubectl apply` -> bridge -> ModelWorkflow -> worker activities ->
Ready, with the worker and the bridge as their own processes, against the real apiserver,
Temporal, registry and the Hub-compatible server."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.identities import NAMESPACE as CONTROLLER_NAMESPACE
from devstack.ollama_registry import publish_ollama_model
from devstack.services import OciRegistry
from servingops.clients.oci.registry_client import ModelRegistry
from servingops.clients.upload_sessions import record_name
from testkit.model_import import GROUP, REPOSITORY, VERSION, Stack
from testkit.waiting import wait_until
from tests.fixtures.hub import HubRepos
from tests.support.model_import import stack

__all__ = ["stack"]  # the fixture, reused
pytestmark = pytest.mark.e2e









def pull_layers(registry: OciRegistry, digest: str, out: Path) -> dict[str, bytes]:
    """Every layer of the artifact, by its org.cncf.model.filepath."""
    files = {}
    with ModelRegistry(registry.address, insecure=True) as reg:
        manifest = reg.fetch_manifest(REPOSITORY, digest)
        assert manifest is not None
        body = manifest.json
        assert body["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
        assert body["config"]["mediaType"] == "application/vnd.cncf.model.config.v1+json"
        for layer in body["layers"]:
            path = layer["annotations"]["org.cncf.model.filepath"]
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            reg.pull_blob_to(REPOSITORY, layer["digest"], target)
            files[path] = target.read_bytes()
    return files


def test_hugging_face_safetensors_model_becomes_ready(stack: Stack, hub_repos: HubRepos, tmp_path: Path) -> None:
    repo = hub_repos.safetensors(num_shards=3)
    stack.apply(stack.model("tiny-llama", {"url": f"https://huggingface.co/{repo.repo_id}"}))
    obj = stack.wait_phase("models", "tiny-llama", ("Ready", "Failed"))
    status = obj["status"]
    assert status["phase"] == "Ready", status
    assert status["source"] == {"resolvedType": "HuggingFace", "resolvedRevision": repo.commit}
    assert status["resolved"]["format"] == "Safetensors"
    assert status["resolved"]["architecture"] == "LlamaForCausalLM"
    assert status["resolved"]["contextWindowTokens"] == 2048
    assert status["resolved"]["parameterCount"] > 0
    assert status["progress"] == "100%"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Published", 1)
    artifact = status["artifact"]
    assert artifact["kind"] == "OCI" and artifact["digest"].startswith("sha256:") and artifact["sizeBytes"] > 0
    pulled = pull_layers(stack.registry, artifact["digest"], tmp_path)
    weights = [f for f in repo.files if f.endswith(".safetensors")]
    assert len(weights) == 3
    for name in repo.files:
        if name in pulled:
            assert pulled[name] == (repo.snapshot / name).read_bytes(), f"{name} differs"
    assert set(weights) <= set(pulled) and "config.json" in pulled
    # What `kubectl get events` shows for the import: each phase change, with the condition's reason.
    assert stack.events("tiny-llama", expect=("Normal", "Published")) == [("Normal", "Published"),
                                                                          ("Normal", "Publishing")]


def test_second_model_of_the_same_repo_transfers_nothing(stack: Stack, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=2, hidden_size=512, intermediate_size=2048, num_hidden_layers=4)
    url = f"https://huggingface.co/{repo.repo_id}"
    stack.apply(stack.model("first", {"url": url}))
    first = stack.wait_phase("models", "first", ("Ready", "Failed"))
    stack.apply(stack.model("second", {"url": url}))
    second = stack.wait_phase("models", "second", ("Ready", "Failed"))
    assert second["status"]["phase"] == "Ready"

    def layers(digest: str) -> list[str]:
        with ModelRegistry(stack.registry.address, insecure=True) as reg:
            manifest = reg.fetch_manifest(REPOSITORY, digest)
            assert manifest is not None
            return sorted(layer["digest"] for layer in manifest.json["layers"])

    # Each Model has its own manifest (its config names it) over the very same layers.
    assert layers(second["status"]["artifact"]["digest"]) == layers(first["status"]["artifact"]["digest"])
    state = asyncio.run(stack.workflow_state(second))
    weights = [f for f in state["files"] if f["path"].endswith(".safetensors")]
    assert weights and all(f["in_registry"] and not f["uploaded_here"] for f in weights)
    weight_bytes = sum(f["size"] for f in weights)
    fetched = sum(f["transferred_bytes"] for f in weights)
    print(f"\nsecond import fetched {fetched} header bytes of {weight_bytes} weight bytes")
    assert fetched < weight_bytes * 0.05


def test_cluster_model_from_gguf(stack: Stack, hub_repos: HubRepos) -> None:
    repo = hub_repos.gguf()
    name = f"gguf-{uuid.uuid4().hex[:6]}"
    stack.apply(stack.model(name, {"url": f"https://huggingface.co/{repo.repo_id}"}, cluster_scoped=True))
    obj = stack.wait_phase("clustermodels", name, ("Ready", "Failed"))
    assert obj["status"]["phase"] == "Ready", obj["status"]
    assert obj["status"]["resolved"]["format"] == "GGUF"
    assert obj["status"]["resolved"]["contextWindowTokens"] == 2048


def test_ollama_model(stack: Stack, tmp_path: Path) -> None:
    published = publish_ollama_model(stack.registry.address, f"tiny{uuid.uuid4().hex[:6]}", "q8", workdir=tmp_path)
    stack.apply(stack.model("from-ollama", {"url": published.url}))
    obj = stack.wait_phase("models", "from-ollama", ("Ready", "Failed"))
    status = obj["status"]
    assert status["phase"] == "Ready", status
    assert status["source"]["resolvedType"] == "Ollama"
    assert status["resolved"]["format"] == "GGUF"
    pulled = pull_layers(stack.registry, status["artifact"]["digest"], tmp_path / "pulled")
    assert pulled["model.gguf"] == published.gguf.read_bytes()


def test_upload_of_a_gguf_file(stack: Stack, hub_repos: HubRepos) -> None:
    repo = hub_repos.gguf()
    gguf = next(repo.snapshot / f for f in repo.files if f.endswith(".gguf"))
    stack.apply(stack.model("uploaded", {"upload": {}}))
    waiting = stack.wait_phase("models", "uploaded", ("WaitForUpload", "Failed"))
    upload = waiting["status"]["upload"]
    assert upload["secretNamespace"] == stack.namespace and upload["expiresAt"]
    secret = client.CoreV1Api(stack.api).read_namespaced_secret(upload["secretName"], stack.namespace)
    import base64

    url = base64.b64decode(secret.data["uploadURL"]).decode()
    token = base64.b64decode(secret.data["token"]).decode()
    # The endpoint (the chart's uploads identity, which may read no Secret here) finds the session by
    # its record in the controller namespace.
    core = client.CoreV1Api(stack.api)
    record = record_name(waiting["metadata"]["uid"])
    assert core.read_namespaced_config_map(record, CONTROLLER_NAMESPACE).data
    data = gguf.read_bytes()
    request = urllib.request.Request(url, data=data, method="PUT", headers={
        "Authorization": f"Bearer {token}", "X-Filename": "model.gguf", "Content-Length": str(len(data))})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 201
    obj = stack.wait_phase("models", "uploaded", ("Ready", "Failed"))
    assert obj["status"]["phase"] == "Ready", obj["status"]
    assert obj["status"]["source"]["resolvedType"] == "Upload"
    assert "upload" not in obj["status"]
    # Closed with the import: neither the record nor the Secret is left.
    for read, name, namespace in ((core.read_namespaced_config_map, record, CONTROLLER_NAMESPACE),
                                  (core.read_namespaced_secret, upload["secretName"], stack.namespace)):
        with pytest.raises(ApiException) as gone:
            read(name, namespace)
        assert gone.value.status == 404
    assert hashlib.sha256(data).hexdigest() in str(asyncio.run(stack.workflow_state(obj)))


def _truncated_repo(hub_repos: HubRepos, tmp_path: Path) -> str:
    """A repo whose shard is cut short: its LFS hash matches the bytes served, so only the
    safetensors header check can tell."""
    good = hub_repos.safetensors(num_shards=2)
    files = tmp_path / "files"
    shutil.copytree(good.snapshot, files)
    shard = next(p for p in sorted(files.glob("*.safetensors")))
    with shard.open("r+b") as fh:
        fh.truncate(shard.stat().st_size - 100)
    repo_id = hub_repos.unique_id("truncated")
    hub_repos.register(repo_id, files)
    return repo_id


@pytest.mark.parametrize(("case", "reason"), [
    ("unknown-repo", "SourceNotFound"),
    ("truncated-shard", "TruncatedSafetensors"),
])
def test_bad_sources_fail_with_a_reason_and_leave_nothing(stack: Stack, hub_repos: HubRepos, tmp_path: Path,
                                                          case: str, reason: str) -> None:
    repo_id = "devstack/does-not-exist" if case == "unknown-repo" else _truncated_repo(hub_repos, tmp_path)
    stack.apply(stack.model(case, {"url": f"https://huggingface.co/{repo_id}"}))
    obj = stack.wait_phase("models", case, ("Failed", "Ready"))
    status = obj["status"]
    assert status["phase"] == "Failed"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", reason), ready
    assert ready["message"]
    assert ("Warning", reason) in stack.events(case, expect=("Warning", reason)), stack.events(case)
    state = asyncio.run(stack.workflow_state(obj))
    pushed = [f["pushed_digest"] for f in state["files"] if f.get("uploaded_here")]
    with ModelRegistry(stack.registry.address, insecure=True) as reg:
        assert not [d for d in pushed if reg.blob_exists(REPOSITORY, d)], "a failed import left blobs behind"


def test_delete_removes_artifact_and_finalizer(stack: Stack, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=1, seed=7)
    stack.apply(stack.model("short-lived", {"url": f"https://huggingface.co/{repo.repo_id}"}))
    obj = stack.wait_phase("models", "short-lived", ("Ready", "Failed"))
    assert obj["metadata"]["finalizers"] == ["ai.deckhouse.io/model-cleanup"]
    digest = obj["status"]["artifact"]["digest"]
    client.CustomObjectsApi(stack.api).delete_namespaced_custom_object(GROUP, VERSION, stack.namespace, "models",
                                                                       "short-lived")
    wait_until("the finalizer removed (the Model gone)", lambda: stack.get("models", "short-lived") is None,
               stack.worker, timeout=60)
    with ModelRegistry(stack.registry.address, insecure=True) as reg:
        assert reg.fetch_manifest(REPOSITORY, digest) is None, "the artifact is still in the registry"


def test_diffusers_model_becomes_ready(stack: Stack, hub_repos: HubRepos, tmp_path: Path) -> None:
    repo = hub_repos.diffusers()
    stack.apply(stack.model("tiny-sd", {"url": f"https://huggingface.co/{repo.repo_id}"}))
    obj = stack.wait_phase("models", "tiny-sd", ("Ready", "Failed"))
    status = obj["status"]
    assert status["phase"] == "Ready", status
    assert status["resolved"]["format"] == "Diffusers"
    assert "ImageGeneration" in status["resolved"]["supportedEndpointTypes"]
    pulled = pull_layers(stack.registry, status["artifact"]["digest"], tmp_path)
    assert pulled["model_index.json"] == (repo.snapshot / "model_index.json").read_bytes()
    assert len([p for p in pulled if p.endswith(".safetensors")]) >= 2


def test_a_gguf_with_a_bad_header_fails(stack: Stack, hub_repos: HubRepos) -> None:
    bad = b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + b"\x00" * 2048
    repo = hub_repos.blobs({"model-Q4_K_M.gguf": bad, "README.md": b"# bad\n"})
    stack.apply(stack.model("bad-gguf", {"url": f"https://huggingface.co/{repo.repo_id}"}))
    obj = stack.wait_phase("models", "bad-gguf", ("Failed", "Ready"))
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert obj["status"]["phase"] == "Failed"
    assert ready["reason"] in ("InvalidGGUF", "TruncatedGGUF"), ready
    assert "model-Q4_K_M.gguf" in ready["message"]


def test_an_uploaded_archive_escaping_its_root_fails(stack: Stack, tmp_path: Path) -> None:
    import base64
    import io
    import tarfile

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"not a model"
        info = tarfile.TarInfo("../evil.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    body = archive.getvalue()
    stack.apply(stack.model("evil-archive", {"upload": {}}))
    waiting = stack.wait_phase("models", "evil-archive", ("WaitForUpload", "Failed"))
    upload = waiting["status"]["upload"]
    secret = client.CoreV1Api(stack.api).read_namespaced_secret(upload["secretName"], stack.namespace)
    url = base64.b64decode(secret.data["uploadURL"]).decode()
    token = base64.b64decode(secret.data["token"]).decode()
    request = urllib.request.Request(url, data=body, method="PUT", headers={
        "Authorization": f"Bearer {token}", "X-Filename": "model.tar.gz", "Content-Length": str(len(body))})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 201
    obj = stack.wait_phase("models", "evil-archive", ("Failed", "Ready"))
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (obj["status"]["phase"], ready["reason"]) == ("Failed", "ArchivePathEscape"), ready
