"""The source activities against real servers: the Hub-compatible server (real `huggingface_hub` client), a
real distribution registry holding Ollama-shaped manifests, and the real kube-apiserver for token Secrets.

Activities run in temporalio's ActivityEnvironment; a retry is a second run with attempt=2 and the previous
attempt's last heartbeat, which is what Temporal hands a retried attempt.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import hashlib
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.hub_server import HubServer
from devstack.ollama_registry import DEFAULT_LICENSE, DEFAULT_PARAMS, DEFAULT_TEMPLATE, publish_ollama_model
from devstack.services import OciRegistry, TemporalDevServer
from servingops.activities.sources import (
    TOKEN_KEYS,
    CleanSpoolInput,
    FetchedFile,
    FetchInput,
    ResolveInput,
    SourceActivities,
    SourceFile,
    SourceListing,
)
from servingops.activities.sources import spool as spool_module
from servingops.activities.sources.activities import _without_token_in_errors
from servingops.activities.sources.huggingface import HubFile, parse_hf_url, quantization_label, select_files
from servingops.activities.sources.ollama import parse_ollama_url
from servingops.activities.sources.spool import gguf_header_end
from servingops.api_models.deckhouse import Model
from servingops.api_models.deckhouse.enums import ModelFormat, SourceType
from servingops.api_models.errors import ErrorType
from servingops.api_models.refs import ObjectRef
from servingops.clients.model_files import inspect_model_dir, read_gguf_header, read_safetensors_header
from servingops.runtime.temporal import TemporalSettings, connect
from tests.crd_helpers import new_namespace
from tests.fixtures.hub import HUB_USER_TOKEN, HubRepos

MiB = 1024 * 1024
HF = "https://huggingface.co"


# -- helpers ---------------------------------------------------------------------------------------


def _ref(namespace: str = "default") -> ObjectRef:
    return ObjectRef.of(Model, f"m-{uuid.uuid4().hex[:8]}", namespace, str(uuid.uuid4()))


def _resolve(acts: SourceActivities, ref: ObjectRef, url: str, secret: str | None = None) -> SourceListing:
    result: SourceListing = ActivityEnvironment().run(
        acts.resolve, ResolveInput(model=ref, url=url, auth_secret_name=secret)
    )
    return result


def _fetch_input(ref: ObjectRef, listing: SourceListing, file: SourceFile, secret: str | None = None,
                 header_only: bool = False) -> FetchInput:  # fmt: skip
    return FetchInput(model=ref, provider=listing.provider, locator=listing.locator,
                      resolved_revision=listing.resolved_revision, file=file, auth_secret_name=secret,
                      header_only=header_only)  # fmt: skip


def _fetch(acts: SourceActivities, req: FetchInput, env: ActivityEnvironment | None = None) -> FetchedFile:
    result: FetchedFile = (env or ActivityEnvironment()).run(acts.fetch_file, req)
    return result


def _fetch_all(acts: SourceActivities, ref: ObjectRef, listing: SourceListing,
               secret: str | None = None) -> list[FetchedFile]:  # fmt: skip
    return [_fetch(acts, _fetch_input(ref, listing, f, secret)) for f in listing.files]


def _error(call: Any, *args: Any) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(call, *args)
    return info.value


def _error_text(err: BaseException) -> str:
    """Everything of an exception that could travel or be logged: messages, details, the whole chain."""
    parts: list[str] = []
    seen: BaseException | None = err
    while seen is not None:
        parts += [repr(seen), str(seen), *(str(d) for d in getattr(seen, "details", ()))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(MiB):
            digest.update(block)
    return digest.hexdigest()


@pytest.fixture
def acts(hub_server: HubServer, hf_cache: Path, tmp_path: Path) -> SourceActivities:
    return SourceActivities(None, tmp_path / "spool", hub_server.url, heartbeat_interval=0.01)


# -- URLs and file selection (pure) ------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("url", "repo_id", "revision", "file"),
    [
        ("https://huggingface.co/org/repo", "org/repo", None, None),
        ("https://huggingface.co/org/repo/", "org/repo", None, None),
        ("https://hf.co/org/repo", "org/repo", None, None),
        ("https://www.huggingface.co/gpt2", "gpt2", None, None),
        ("https://huggingface.co/gpt2/tree/main", "gpt2", "main", None),
        ("https://huggingface.co/org/repo/tree/v1.0", "org/repo", "v1.0", None),
        ("https://huggingface.co/org/repo/tree/refs%2Fpr%2F1", "org/repo", "refs/pr/1", None),
        ("https://huggingface.co/org/repo/blob/main/m-Q4_K_M.gguf", "org/repo", "main", "m-Q4_K_M.gguf"),
    ],
)
def test_hugging_face_urls(url: str, repo_id: str, revision: str | None, file: str | None) -> None:
    ref = parse_hf_url(url)
    assert (ref.repo_id, ref.revision, ref.file) == (repo_id, revision, file)


@pytest.mark.unit
def test_ollama_urls() -> None:
    assert parse_ollama_url("https://ollama.com/library/llama3.2").locator == "llama3.2:latest"
    assert parse_ollama_url("https://www.ollama.com/library/qwen3:0.6b").locator == "qwen3:0.6b"
    assert parse_ollama_url("https://ollama.com/library/Gemma3:1b/").repository == "library/gemma3"


@pytest.mark.integration
@pytest.mark.parametrize(
    "url",
    [
        "http://huggingface.co/org/repo",
        "https://huggingface.co/",
        "https://huggingface.co/datasets/org/data",
        "https://huggingface.co/spaces/org/app",
        "https://huggingface.co/docs/transformers",
        "https://huggingface.co/org/repo/resolve/main/config.json",
        "https://huggingface.co/org/repo/tree/main/sub/folder",
        "https://huggingface.co/org/repo/blob/main/config.json",
        "https://huggingface.co/org/repo?library=transformers",
        "https://huggingface.co/org/re..po",
        "https://huggingface.co:8443/org/repo",
        "https://evil.example/org/repo",
        "https://ollama.com/library/",
        "https://ollama.com/library/llama3/blobs/x",
        "https://ollama.com/someone/model",
        "https://ollama.com/library/llama3:bad tag",
    ],
)
def test_bad_url_is_invalid_source_url(acts: SourceActivities, url: str) -> None:
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=url))
    assert err.type == ErrorType.INVALID_SOURCE_URL and err.non_retryable
    assert url[:40] in err.message


def _hub(*paths: str | tuple[str, int]) -> list[HubFile]:
    return [HubFile(p, 100) if isinstance(p, str) else HubFile(p[0], p[1]) for p in paths]


@pytest.mark.unit
def test_selection_safetensors_skips_duplicates_and_other_frameworks() -> None:
    selection = select_files(_hub(
        ".gitattributes", "README.md", "config.json", "tokenizer.json", "modeling_custom.py",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
        "pytorch_model-00001-of-00002.bin", "pytorch_model.bin.index.json", "training_args.bin",
        "tf_model.h5", "flax_model.msgpack", "onnx/model.onnx", "onnx/config.json", "openvino/model.xml",
        "original/consolidated.00.pth", "original/params.json", "consolidated.safetensors", "params.json",
        "model-q4.gguf", "runs/events.out.tfevents.1", "1_Pooling/config.json", ".github/workflows/ci.yml",
    ))  # fmt: skip
    assert [f.path for f in selection.files] == [
        "README.md", "config.json", "tokenizer.json", "modeling_custom.py", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "params.json", "1_Pooling/config.json",
    ]  # fmt: skip
    assert "consolidated.safetensors" in selection.skipped and ".gitattributes" in selection.skipped


@pytest.mark.unit
def test_selection_diffusers_drops_variants_and_single_file_checkpoints() -> None:
    selection = select_files(_hub(
        "model_index.json", "v1-5-pruned.safetensors", "v1-5-pruned.ckpt", "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors", "unet/diffusion_pytorch_model.fp16.safetensors",
        "unet/diffusion_pytorch_model.bin", "vae/config.json", "vae/diffusion_pytorch_model.fp16.safetensors",
        "text_encoder/model.safetensors", "text_encoder/model.fp16.safetensors", "tokenizer/vocab.json",
    ))  # fmt: skip
    assert [f.path for f in selection.files] == [
        "model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors", "vae/config.json",
        # only a variant in vae/: it is the weights there, so it stays
        "vae/diffusion_pytorch_model.fp16.safetensors", "text_encoder/model.safetensors", "tokenizer/vocab.json",
    ]  # fmt: skip


@pytest.mark.unit
def test_selection_gguf_picks_one_quantization() -> None:
    files = _hub(
        "README.md", "LICENSE", "params", "imatrix.dat", "logo.png", ("m-Q2_K.gguf", 10), ("m-Q4_K_M.gguf", 40),
        ("m-Q8_0.gguf", 80), ("m-F16.gguf", 160), ("mmproj-F32.gguf", 9), ("mmproj-F16.gguf", 5),
        ("mmproj-BF16.gguf", 5),
    )  # fmt: skip
    chosen = [f.path for f in select_files(files).files]
    assert chosen == ["m-Q4_K_M.gguf", "mmproj-F16.gguf", "README.md", "LICENSE", "params"]
    no_q4 = [f for f in files if "Q4_K_M" not in f.path]
    assert select_files(no_q4).files[0].path == "m-Q8_0.gguf"
    neither = [f for f in no_q4 if "Q8_0" not in f.path]
    assert select_files(neither).files[0].path == "m-Q2_K.gguf"  # the smallest
    # a blob/ URL names the quantization
    assert select_files(files, "m-F16.gguf").files[0].path == "m-F16.gguf"
    # split models: every part of the chosen one, by total size
    split = _hub(("big-Q4_K_M-00001-of-00002.gguf", 50), ("big-Q4_K_M-00002-of-00002.gguf", 50),
                 ("big-Q8_0-00001-of-00002.gguf", 90), ("big-Q8_0-00002-of-00002.gguf", 90))  # fmt: skip
    assert [f.path for f in select_files(split).files] == [
        "big-Q4_K_M-00001-of-00002.gguf", "big-Q4_K_M-00002-of-00002.gguf",
    ]  # fmt: skip
    assert quantization_label("Llama-3.2-1B-Instruct-UD-Q4_K_XL.gguf") == "Q4_K_XL"
    assert quantization_label("llama-2-7b.q4_k_m.gguf") == "Q4_K_M"
    assert quantization_label("model.gguf") is None


@pytest.mark.unit
def test_selection_refuses_pickle_only_repos_before_downloading() -> None:
    with pytest.raises(Exception) as info:
        select_files(_hub("config.json", "pytorch_model.bin"))
    assert getattr(info.value, "reason", None) == "UnsupportedFormat"


@pytest.mark.integration
def test_gguf_header_end_needs_only_the_header(hub_repos: HubRepos) -> None:
    repo = hub_repos.gguf(vocab_size=2000, fill="sparse")
    path = next(repo.snapshot / f for f in repo.files if f.endswith(".gguf"))
    info = read_gguf_header(path)
    raw = path.read_bytes()
    end = gguf_header_end(raw, len(raw))
    assert end == info.data_offset
    assert gguf_header_end(raw[: end // 2], len(raw)) is None  # not enough yet


# -- Hugging Face: resolve and fetch -----------------------------------------------------------------


@pytest.mark.integration
def test_sharded_safetensors_resolve_fetch_inspect(acts: SourceActivities, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=3, extra_files={"pytorch_model.bin": b"\x80" * 64,
                                                            "onnx/model.onnx": b"onnx"})  # fmt: skip
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    assert listing.provider == SourceType.HUGGING_FACE and listing.locator == repo.repo_id
    assert listing.resolved_revision == repo.commit and listing.requested_revision is None
    paths = {f.path for f in listing.files}
    assert {f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)} <= paths
    assert {"pytorch_model.bin", "onnx/model.onnx", ".gitattributes"} <= set(listing.skipped)
    assert listing.provider_info.pipeline_tag == "text-generation"
    assert listing.provider_info.library_name == "transformers"
    assert listing.provider_info.config and listing.provider_info.config["model_type"] == "llama"
    assert listing.provider_info.card_data and listing.provider_info.card_data["license"] == "apache-2.0"
    for f in listing.files:
        assert (f.sha256 is not None) == f.path.endswith(".safetensors")  # LFS files come with their sha256

    fetched = _fetch_all(acts, ref, listing)
    for f, got in zip(listing.files, fetched, strict=True):
        origin = repo.snapshot / f.path
        assert Path(got.path).read_bytes() == origin.read_bytes(), f.path
        assert got.sha256 == _sha256(origin) and got.size == f.size and got.transferred_bytes == f.size
        assert not got.header_only and got.relative_path == f.path
        assert Path(got.path) == acts.spool.model_dir(str(ref.uid)) / f.path

    # Complete files are not downloaded again, even when the marker is gone (they are re-hashed instead).
    assert all(g.transferred_bytes == 0 for g in _fetch_all(acts, ref, listing))
    shutil.rmtree(acts.spool.model_dir(str(ref.uid)) / ".cache" / "servingops" / "done")
    assert all(g.transferred_bytes == 0 for g in _fetch_all(acts, ref, listing))

    result = inspect_model_dir(acts.spool.model_dir(str(ref.uid)), SourceType.HUGGING_FACE, listing.provider_info)
    assert result.format == ModelFormat.SAFETENSORS
    assert result.resolved.architecture == "LlamaForCausalLM"
    assert sorted(f.path for f in result.files) == sorted(paths)  # the spool's bookkeeping is not seen

    ActivityEnvironment().run(acts.clean_spool, CleanSpoolInput(model_uid=str(ref.uid)))
    assert not acts.spool.model_dir(str(ref.uid)).exists()
    ActivityEnvironment().run(acts.clean_spool, CleanSpoolInput(model_uid=str(ref.uid)))  # idempotent


@pytest.mark.integration
def test_pinned_revision(acts: SourceActivities, hub_repos: HubRepos, tmp_path: Path) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    update = tmp_path / "update"
    shutil.copytree(repo.snapshot, update)
    (update / "NOTES.md").write_text("second commit\n")
    second = hub_repos.register(repo.repo_id, update)
    assert second != repo.commit

    latest = _resolve(acts, _ref(), f"{HF}/{repo.repo_id}")
    assert latest.resolved_revision == second and "NOTES.md" in {f.path for f in latest.files}
    ref = _ref()
    pinned = _resolve(acts, ref, f"{HF}/{repo.repo_id}/tree/{repo.commit}")
    assert pinned.resolved_revision == repo.commit and pinned.requested_revision == repo.commit
    assert "NOTES.md" not in {f.path for f in pinned.files}
    by_branch = _resolve(acts, _ref(), f"https://hf.co/{repo.repo_id}/tree/main")
    assert by_branch.resolved_revision == second and by_branch.requested_revision == "main"
    # The fetch reads the pinned commit even though main moved on.
    for f, got in zip(pinned.files, _fetch_all(acts, ref, pinned), strict=True):
        assert Path(got.path).read_bytes() == (repo.snapshot / f.path).read_bytes()


@pytest.mark.integration
def test_gguf_repo_quantization_rule_and_blob_url(acts: SourceActivities, hub_repos: HubRepos) -> None:
    repo = hub_repos.gguf(quantizations=("F16", "Q8_0", "F32"))
    name = repo.repo_id.rsplit("/", 1)[-1]
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    assert [f.path for f in listing.files] == [f"{name}-Q8_0.gguf", "README.md"]  # no Q4_K_M here: Q8_0
    _fetch_all(acts, ref, listing)
    result = inspect_model_dir(acts.spool.model_dir(str(ref.uid)), SourceType.HUGGING_FACE, listing.provider_info)
    assert result.format == ModelFormat.GGUF and result.resolved.quantization == "Q8_0"

    chosen = _resolve(acts, _ref(), f"{HF}/{repo.repo_id}/blob/main/{name}-F16.gguf")
    assert [f.path for f in chosen.files] == [f"{name}-F16.gguf", "README.md"]
    assert chosen.requested_revision == "main" and chosen.resolved_revision == repo.commit


@pytest.mark.integration
def test_unknown_repo_and_revision(acts: SourceActivities, hub_repos: HubRepos) -> None:
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=f"{HF}/devstack/no-such-model-{uuid.uuid4().hex}"))
    assert err.type == ErrorType.SOURCE_NOT_FOUND and err.non_retryable
    repo = hub_repos.safetensors(num_shards=1)
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=f"{HF}/{repo.repo_id}/tree/no-such-branch"))
    assert err.type == ErrorType.REVISION_NOT_FOUND and err.non_retryable
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=f"{HF}/{repo.repo_id}/blob/main/missing.gguf"))
    assert err.type == ErrorType.SOURCE_FILE_NOT_FOUND and err.non_retryable


@pytest.mark.integration
def test_pickle_only_repo_fails_at_resolve(acts: SourceActivities, hub_repos: HubRepos) -> None:
    repo = hub_repos.blobs({"config.json": b"{}", "pytorch_model.bin": 4096})
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=f"{HF}/{repo.repo_id}"))
    assert err.type == ErrorType.UNSUPPORTED_FORMAT and err.non_retryable


@pytest.mark.unit
def test_unreachable_hub_is_retryable(tmp_path: Path, hf_cache: Path) -> None:
    acts = SourceActivities(None, tmp_path / "spool", "http://127.0.0.1:9")
    err = _error(acts.resolve, ResolveInput(model=_ref(), url=f"{HF}/org/repo"))
    assert err.type == ErrorType.SOURCE_UNAVAILABLE and not err.non_retryable


# -- resume, integrity ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_interrupted_download_resumes_with_a_range(acts: SourceActivities, hub_repos: HubRepos,
                                                   hub_server: HubServer) -> None:  # fmt: skip
    # One ~72 MB LFS file: 2 layers of 1024/2048 and a 8192-token vocabulary in F16.
    repo = hub_repos.safetensors(num_shards=1, hidden_size=1024, intermediate_size=2048, num_hidden_layers=2,
                                 vocab_size=8192)  # fmt: skip
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    weights = next(f for f in listing.files if f.path == "model.safetensors")
    assert weights.size > 64 * MiB and weights.sha256
    cut = 24 * MiB + 12345
    hub_server.fail_next_download(repo.repo_id, "model.safetensors", after_bytes=cut)

    first = ActivityEnvironment()
    beats: list[Any] = []
    first.on_heartbeat = lambda *details: beats.append(details[0])
    err = _error_in(first, acts, _fetch_input(ref, listing, weights))
    assert not err.non_retryable and err.type in (ErrorType.SOURCE_UNAVAILABLE, ErrorType.SOURCE_TRUNCATED)
    partial = acts.spool.model_dir(str(ref.uid)) / ".cache" / "servingops" / "partial" / "model.safetensors.part"
    have = partial.stat().st_size
    assert cut - MiB <= have <= cut  # what arrived before the cut, but for the chunk in flight
    assert beats and set(beats[-1]) == {"offset"} and beats[-1]["offset"] <= have
    assert not (acts.spool.model_dir(str(ref.uid)) / "model.safetensors").exists()

    second = ActivityEnvironment()
    second.info = dataclasses.replace(second.info, attempt=2, heartbeat_details=[beats[-1]])
    mark = hub_server.mark()
    got = _fetch(acts, _fetch_input(ref, listing, weights), second)
    assert got.transferred_bytes == weights.size - have  # only the remainder crossed the network
    gets = hub_server.downloads(repo.repo_id, mark)  # the bytes come from the CDN host, past the Hub's redirect
    assert len(gets) == 1 and gets[0].headers["range"] == f"bytes={have}-" and gets[0].status == 206
    assert got.sha256 == weights.sha256 == _sha256(repo.snapshot / "model.safetensors")
    assert Path(got.path).read_bytes() == (repo.snapshot / "model.safetensors").read_bytes()
    assert not partial.exists()


def _error_in(env: ActivityEnvironment, acts: SourceActivities, req: FetchInput) -> ApplicationError:
    with pytest.raises(ApplicationError) as info:
        env.run(acts.fetch_file, req)
    return info.value


@pytest.mark.integration
def test_checksum_mismatch_is_final_and_leaves_nothing(acts: SourceActivities, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    weights = next(f for f in listing.files if f.path == "model.safetensors")
    wrong = weights.model_copy(update={"sha256": "0" * 64})
    err = _error(acts.fetch_file, _fetch_input(ref, listing, wrong))
    assert err.type == ErrorType.SOURCE_CHECKSUM_MISMATCH and err.non_retryable
    assert "model.safetensors" in err.message
    model_dir = acts.spool.model_dir(str(ref.uid))
    assert not (model_dir / "model.safetensors").exists()
    assert not list((model_dir / ".cache" / "servingops" / "partial").iterdir())
    # Files outside LFS are checked against their git blob id.
    config = next(f for f in listing.files if f.path == "config.json")
    err = _error(acts.fetch_file, _fetch_input(ref, listing, config.model_copy(update={"blob": "1" * 40})))
    assert err.type == ErrorType.SOURCE_CHECKSUM_MISMATCH and "git blob id" in err.message


@pytest.mark.integration
def test_corrupt_partial_file_is_redone_from_zero(acts: SourceActivities, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    weights = next(f for f in listing.files if f.path == "model.safetensors")
    partial = acts.spool.model_dir(str(ref.uid)) / ".cache" / "servingops" / "partial" / "model.safetensors.part"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 1000)  # what a crash mid-write can leave
    got = _fetch(acts, _fetch_input(ref, listing, weights))
    assert got.sha256 == weights.sha256
    assert got.transferred_bytes == (weights.size - 1000) + weights.size  # the resumed try, then a fresh one


@pytest.mark.integration
def test_a_second_attempt_waits_for_the_first(acts: SourceActivities, hub_repos: HubRepos,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    repo = hub_repos.safetensors(num_shards=1)
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    lock = acts.spool.model_dir(str(ref.uid)) / ".cache" / "servingops" / "lock" / "config.json.lock"
    lock.parent.mkdir(parents=True)
    monkeypatch.setattr(spool_module, "LOCK_WAIT", 0.3)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a timed-out attempt still writing in this worker
        err = _error(acts.fetch_file, _fetch_input(ref, listing, next(f for f in listing.files
                                                                       if f.path == "config.json")))  # fmt: skip
    assert err.type == ErrorType.FETCH_IN_PROGRESS and not err.non_retryable


@pytest.mark.integration
def test_paths_and_uids_cannot_escape_the_spool(acts: SourceActivities, tmp_path: Path) -> None:
    def request(model: ObjectRef, path: str) -> FetchInput:
        return FetchInput(model=model, provider=SourceType.HUGGING_FACE, locator="org/repo",
                          resolved_revision="a" * 40, file=SourceFile(path=path, size=1))  # fmt: skip

    for path in ("../escape", "a/../../b", "/etc/passwd", ".cache/servingops/x", "a//b"):
        err = _error(acts.fetch_file, request(_ref(), path))
        assert err.type == ErrorType.INVALID_FETCH_INPUT and err.non_retryable, path
    err = _error(acts.fetch_file, request(_ref().model_copy(update={"uid": "../../etc"}), "x"))
    assert err.type == ErrorType.INVALID_FETCH_INPUT
    assert not (tmp_path / "escape").exists()


# -- header-only ---------------------------------------------------------------------------------------


@pytest.mark.integration
def test_header_only_safetensors_and_gguf(acts: SourceActivities, hub_repos: HubRepos) -> None:
    # Sparse repos: hundreds of MB that cost no disk on the server; the fetch must cost none either.
    repo = hub_repos.safetensors(num_shards=2, hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                                 vocab_size=8192, fill="sparse")  # fmt: skip
    ref = _ref()
    listing = _resolve(acts, ref, f"{HF}/{repo.repo_id}")
    total = 0
    for f in listing.files:
        weight = f.path.endswith(".safetensors")
        got = _fetch(acts, _fetch_input(ref, listing, f, header_only=weight))
        path = Path(got.path)
        assert path.stat().st_size == f.size
        if weight:
            assert got.header_only and got.sha256 == f.sha256
            assert f.size > 100 * MiB and got.transferred_bytes <= 256 * 1024
            assert path.stat().st_blocks * 512 <= 256 * 1024  # a sparse file: the header, then a hole
            info = read_safetensors_header(path)
            assert info.tensor_count > 0 and info.file_size == f.size
        total += got.transferred_bytes
    assert total < MiB < listing.total_size // 100
    result = inspect_model_dir(acts.spool.model_dir(str(ref.uid)), SourceType.HUGGING_FACE, listing.provider_info)
    assert result.format == ModelFormat.SAFETENSORS and result.resolved.parameter_count

    # A full fetch later replaces the header-only file; a header-only ask is then answered by the full file.
    weights = next(f for f in listing.files if f.path.endswith(".safetensors"))
    full = _fetch(acts, _fetch_input(ref, listing, weights))
    assert not full.header_only and full.transferred_bytes == weights.size and full.sha256 == weights.sha256
    again = _fetch(acts, _fetch_input(ref, listing, weights, header_only=True))
    assert not again.header_only and again.transferred_bytes == 0

    # GGUF: metadata with a 32000-token vocabulary (~0.8 MB) and tensor infos, read in growing ranges.
    gguf = hub_repos.gguf(vocab_size=32000, embedding_length=1024, feed_forward_length=2048, fill="sparse",
                          quantizations=("Q8_0",))  # fmt: skip
    gref = _ref()
    glisting = _resolve(acts, gref, f"{HF}/{gguf.repo_id}")
    model = next(f for f in glisting.files if f.path.endswith(".gguf"))
    got = _fetch(acts, _fetch_input(gref, glisting, model, header_only=True))
    origin = read_gguf_header(gguf.snapshot / model.path)
    assert got.header_only and model.size > 50 * MiB
    assert origin.data_offset <= got.transferred_bytes < 4 * origin.data_offset
    assert Path(got.path).stat().st_blocks * 512 <= origin.data_offset + 64 * 1024
    header = read_gguf_header(Path(got.path))
    assert header.tensor_count == origin.tensor_count and header.name == origin.name
    _fetch(acts, _fetch_input(gref, glisting, next(f for f in glisting.files if f.path == "README.md")))
    result = inspect_model_dir(acts.spool.model_dir(str(gref.uid)), SourceType.HUGGING_FACE, glisting.provider_info)
    assert result.format == ModelFormat.GGUF and result.resolved.context_window_tokens == 2048

    # Small files are fetched whole, header_only or not.
    readme = next(f for f in glisting.files if f.path == "README.md")
    small = _fetch(acts, _fetch_input(_ref(), glisting, readme, header_only=True))
    assert not small.header_only and small.transferred_bytes == readme.size


# -- tokens from Secrets -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secrets_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "sources")


def _secret(api: client.ApiClient, namespace: str, data: dict[str, str]) -> str:
    name = f"hf-{uuid.uuid4().hex[:8]}"
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name),
                           data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})  # fmt: skip
    client.CoreV1Api(api).create_namespaced_secret(namespace, body)
    return name


@pytest.fixture
def kube_acts(kube_api: client.ApiClient, hub_server: HubServer, hf_cache: Path,
              tmp_path: Path) -> Iterator[SourceActivities]:  # fmt: skip
    yield SourceActivities(kube_api, tmp_path / "spool", hub_server.url, heartbeat_interval=0.01)


@pytest.mark.integration
@pytest.mark.parametrize("key", TOKEN_KEYS)
def test_gated_repo_with_a_token_secret(key: str, kube_acts: SourceActivities, kube_api: client.ApiClient,
                                        secrets_ns: str, hub_repos: HubRepos) -> None:  # fmt: skip
    token = f"hf_gated_{uuid.uuid4().hex}"
    repo = hub_repos.safetensors("gated", num_shards=1, gated=True, tokens=[token])
    url = f"{HF}/{repo.repo_id}"
    secret = _secret(kube_api, secrets_ns, {key: token + "\n"})  # as `kubectl create secret --from-file` leaves it
    ref = _ref(secrets_ns)
    beats: list[Any] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    listing: SourceListing = env.run(kube_acts.resolve, ResolveInput(model=ref, url=url, auth_secret_name=secret))
    fetched = [_fetch(kube_acts, _fetch_input(ref, listing, f, secret), env) for f in listing.files]
    for f, got in zip(listing.files, fetched, strict=True):
        assert Path(got.path).read_bytes() == (repo.snapshot / f.path).read_bytes()
    visible = listing.model_dump_json() + "".join(g.model_dump_json() for g in fetched) + repr(beats)
    assert token not in visible

    # Without a token, and with a valid token that has no grant: access denied, and said so.
    for secret_name, what in ((None, "no token"), (_secret(kube_api, secrets_ns, {key: HUB_USER_TOKEN}), "wrong")):
        err = _error(kube_acts.resolve, ResolveInput(model=_ref(secrets_ns), url=url, auth_secret_name=secret_name))
        assert err.type == ErrorType.SOURCE_ACCESS_DENIED and err.non_retryable, what
        assert "gated" in err.message and HUB_USER_TOKEN not in _error_text(err)
        weights = next(f for f in listing.files if f.path == "model.safetensors")
        err = _error(kube_acts.fetch_file, _fetch_input(_ref(secrets_ns), listing, weights, secret_name))
        assert err.type == ErrorType.SOURCE_ACCESS_DENIED and err.non_retryable, what
        assert HUB_USER_TOKEN not in _error_text(err)

    # An error while the right token is in use carries no trace of it either.
    missing = SourceFile(path="missing.safetensors", size=10, sha256="0" * 64)
    err = _error(kube_acts.fetch_file, _fetch_input(ref, listing, missing, secret))
    assert err.type == ErrorType.SOURCE_FILE_NOT_FOUND and token not in _error_text(err)


@pytest.mark.integration
def test_private_repo_and_secret_problems(kube_acts: SourceActivities, kube_api: client.ApiClient,
                                          secrets_ns: str, hub_repos: HubRepos) -> None:  # fmt: skip
    token = f"hf_private_{uuid.uuid4().hex}"
    repo = hub_repos.safetensors("private", num_shards=1, private=True, tokens=[token])
    url = f"{HF}/{repo.repo_id}"
    good = _secret(kube_api, secrets_ns, {"HF_TOKEN": token})
    assert _resolve(kube_acts, _ref(secrets_ns), url, good).resolved_revision == repo.commit
    # The Hub does not tell a private repo from a missing one.
    err = _error(kube_acts.resolve, ResolveInput(model=_ref(secrets_ns), url=url))
    assert err.type == ErrorType.SOURCE_NOT_FOUND

    cases = [
        ("no-such-secret", ErrorType.AUTH_SECRET_NOT_FOUND),
        (_secret(kube_api, secrets_ns, {"password": token}), ErrorType.AUTH_SECRET_INVALID),
        (_secret(kube_api, secrets_ns, {"token": "  \n"}), ErrorType.AUTH_SECRET_INVALID),
        (_secret(kube_api, secrets_ns, {"token": "two words"}), ErrorType.AUTH_SECRET_INVALID),
    ]
    for name, expected in cases:
        err = _error(kube_acts.resolve, ResolveInput(model=_ref(secrets_ns), url=url, auth_secret_name=name))
        assert err.type == expected and err.non_retryable, name
        assert token not in _error_text(err)


@pytest.mark.unit
def test_unexpected_errors_are_scrubbed_of_the_token() -> None:
    token = "hf_secret_value_123"

    def fails() -> None:
        raise RuntimeError(f"boom near Bearer {token}")

    with pytest.raises(ApplicationError) as info:
        _without_token_in_errors(token, fails)
    assert token not in _error_text(info.value) and "***" in info.value.message
    assert info.value.__cause__ is None and info.value.__context__ is None

    def says_it() -> None:
        raise ApplicationError(f"said {token}", token, type="X", non_retryable=True)

    with pytest.raises(ApplicationError) as info:
        _without_token_in_errors(token, says_it)
    assert token not in _error_text(info.value) and info.value.non_retryable and info.value.type == "X"


# -- through a real Temporal server: the retry policy drives the resume; history holds no token ----------


@workflow.defn(sandboxed=False)  # imports this test module, which the sandbox would re-import
class _FetchOneFile:
    @workflow.run
    async def run(self, request: FetchInput) -> FetchedFile:
        result: FetchedFile = await workflow.execute_activity(
            "source.fetch_file", request, result_type=FetchedFile,
            start_to_close_timeout=timedelta(minutes=2), heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=3),
        )  # fmt: skip
        return result


@pytest.mark.integration
async def test_temporal_retry_resumes_a_gated_download(temporal_server: TemporalDevServer, kube_api: client.ApiClient,
                                                       secrets_ns: str, hub_repos: HubRepos, hub_server: HubServer,
                                                       hf_cache: Path, tmp_path: Path) -> None:  # fmt: skip
    token = f"hf_temporal_{uuid.uuid4().hex}"
    repo = hub_repos.blobs({"model.safetensors": 40 * MiB + 321}, gated=True, tokens=[token], lfs_threshold=1)
    secret = _secret(kube_api, secrets_ns, {"HF_TOKEN": token})
    acts = SourceActivities(kube_api, tmp_path / "spool", hub_server.url)
    meta = "model.safetensors"
    origin = repo.snapshot / meta
    request = FetchInput(model=_ref(secrets_ns), provider=SourceType.HUGGING_FACE, locator=repo.repo_id,
                         resolved_revision=repo.commit, auth_secret_name=secret,
                         file=SourceFile(path=meta, size=origin.stat().st_size, sha256=_sha256(origin)))  # fmt: skip
    hub_server.fail_next_download(repo.repo_id, meta, after_bytes=16 * MiB + 99)

    temporal = await connect(TemporalSettings(address=temporal_server.address))
    queue = f"sources-{uuid.uuid4()}"
    with ThreadPoolExecutor(max_workers=4) as pool:
        async with Worker(temporal, task_queue=queue, workflows=[_FetchOneFile], activities=acts.all(),
                          activity_executor=pool):  # fmt: skip
            handle = await temporal.start_workflow(_FetchOneFile.run, request, id=f"fetch-{uuid.uuid4()}",
                                                   task_queue=queue)  # fmt: skip
            result = await handle.result()
            history = await handle.fetch_history()
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.HasField("activity_task_started_event_attributes")]  # fmt: skip
    print(f"\ntemporal retry: attempts={attempts} transferred={result.transferred_bytes} of {request.file.size}")
    assert attempts == [2]  # the started event of the attempt that completed; its last_failure is attempt 1
    assert result.transferred_bytes == request.file.size - 16 * MiB  # what the first attempt wrote, not again
    assert result.sha256 == request.file.sha256 == _sha256(Path(result.path))
    recorded = history.to_json()
    assert "SourceUnavailable" in recorded and token not in recorded


# -- Ollama --------------------------------------------------------------------------------------------


@pytest.fixture
def ollama_acts(oci_registry: OciRegistry, tmp_path: Path) -> SourceActivities:
    return SourceActivities(None, tmp_path / "spool", ollama_registry=oci_registry.url, heartbeat_interval=0.01)


@pytest.mark.integration
def test_ollama_resolve_fetch_inspect(ollama_acts: SourceActivities, oci_registry: OciRegistry,
                                      tmp_path: Path) -> None:  # fmt: skip
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    published = publish_ollama_model(oci_registry.address, name, "latest", workdir=tmp_path / "gen",
                                     system="You are a tiny model.", capabilities=["completion", "tools"],
                                     vocab_size=8000, embedding_length=512, feed_forward_length=1024)  # fmt: skip
    ref = _ref()
    listing = _resolve(ollama_acts, ref, f"https://ollama.com/library/{name}")  # the tag defaults to latest
    assert listing.provider == SourceType.OLLAMA and listing.locator == f"{name}:latest"
    assert listing.requested_revision == "latest" and listing.resolved_revision == published.manifest_digest
    assert [f.path for f in listing.files] == ["model.gguf", "ollama/template", "ollama/system",
                                               "ollama/params.json", "LICENSE"]  # fmt: skip
    assert all(f.sha256 and f.blob == f"sha256:{f.sha256}" for f in listing.files)
    info = listing.provider_info
    assert info.template == DEFAULT_TEMPLATE and info.params == DEFAULT_PARAMS and info.license == DEFAULT_LICENSE
    assert info.system == "You are a tiny model." and info.capabilities == ["completion", "tools"]
    assert info.config and info.config["model_format"] == "gguf" and info.config["file_type"] == "Q8_0"

    fetched = _fetch_all(ollama_acts, ref, listing)
    model = fetched[0]
    assert model.relative_path == "model.gguf" and model.transferred_bytes == model.size > MiB
    assert Path(model.path).read_bytes() == published.gguf.read_bytes()
    assert model.sha256 == _sha256(published.gguf)
    assert Path(fetched[1].path).read_text() == DEFAULT_TEMPLATE
    result = inspect_model_dir(ollama_acts.spool.model_dir(str(ref.uid)), SourceType.OLLAMA, info)
    assert result.format == ModelFormat.GGUF and result.resolved.quantization == "Q8_0"
    assert result.resolved.supported_endpoint_types and result.resolved.supported_endpoint_types[0] == "Chat"

    # Header-only from the registry: ranged blob GETs, a sparse file the GGUF reader accepts.
    header = _fetch(ollama_acts, _fetch_input(_ref(), listing, listing.files[0], header_only=True))
    assert header.header_only and header.transferred_bytes < model.size // 2
    assert read_gguf_header(Path(header.path)).tensor_count == read_gguf_header(published.gguf).tensor_count

    # A retry after a cut: the partial model.gguf is continued with a Range request.
    rref = _ref()
    partial = ollama_acts.spool.model_dir(str(rref.uid)) / ".cache" / "servingops" / "partial" / "model.gguf.part"
    partial.parent.mkdir(parents=True)
    with published.gguf.open("rb") as src:
        partial.write_bytes(src.read(model.size // 3))
    resumed = _fetch(ollama_acts, _fetch_input(rref, listing, listing.files[0]))
    assert resumed.transferred_bytes == model.size - model.size // 3 and resumed.sha256 == model.sha256


@pytest.mark.integration
def test_ollama_unknown_model_or_tag(ollama_acts: SourceActivities, oci_registry: OciRegistry,
                                     tmp_path: Path) -> None:  # fmt: skip
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    publish_ollama_model(oci_registry.address, name, "v1", workdir=tmp_path / "gen", template=None, license=None)
    for url in (f"https://ollama.com/library/{name}:v2", f"https://ollama.com/library/{name}",
                f"https://ollama.com/library/nothing-{uuid.uuid4().hex[:8]}:v1"):  # fmt: skip
        err = _error(ollama_acts.resolve, ResolveInput(model=_ref(), url=url))
        assert err.type == ErrorType.SOURCE_NOT_FOUND and err.non_retryable, url
    # Without text layers nothing is invented; a config without a task capability states none.
    listing = _resolve(ollama_acts, _ref(), f"https://ollama.com/library/{name}:v1")
    assert [f.path for f in listing.files] == ["model.gguf", "ollama/params.json"]
    assert listing.provider_info.template is None and listing.provider_info.capabilities == []


@pytest.mark.integration
def test_ollama_non_gguf_model_is_refused(ollama_acts: SourceActivities, oci_registry: OciRegistry,
                                          tmp_path: Path) -> None:  # fmt: skip
    name = f"st-{uuid.uuid4().hex[:8]}"
    publish_ollama_model(oci_registry.address, name, workdir=tmp_path / "gen", model_format="safetensors")
    err = _error(ollama_acts.resolve, ResolveInput(model=_ref(), url=f"https://ollama.com/library/{name}"))
    assert err.type == ErrorType.UNSUPPORTED_FORMAT


@pytest.mark.unit
def test_spool_root_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SERVINGOPS_SPOOL_DIR", str(tmp_path / "from-env"))
    assert SourceActivities().spool.root == tmp_path / "from-env"
    monkeypatch.delenv("SERVINGOPS_SPOOL_DIR")
    assert SourceActivities().spool.root == spool_module.DEFAULT_SPOOL_DIR
    monkeypatch.setenv("SERVINGOPS_OLLAMA_REGISTRY", "http://127.0.0.1:5999")
    assert SourceActivities().ollama.address == "127.0.0.1:5999" and SourceActivities().ollama.insecure
