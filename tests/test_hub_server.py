"""The real `huggingface_hub` client against the local Hub-compatible server."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from huggingface_hub import (
    HfApi,
    HfFileSystem,
    RepoFile,
    constants,
    get_hf_file_metadata,
    get_session,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from devstack import model_repos
from devstack.hub_server import HubServer, iter_repo_files, write_collection
from devstack.model_repos import read_gguf, read_safetensors_header
from tests.fixtures.hub import HUB_USER_TOKEN, HubRepos


def _api(hub: HubServer, token: str | bool = False) -> HfApi:
    # token=False: never send whatever token the machine has.
    return HfApi(endpoint=hub.url, token=token)


def _same_tree(downloaded: Path, served: Path) -> None:
    got = sorted(p.relative_to(downloaded).as_posix() for p in downloaded.rglob("*") if p.is_file())
    want = sorted(p.relative_to(served).as_posix() for p in served.rglob("*") if p.is_file())
    assert got == want
    for name in want:
        assert (downloaded / name).read_bytes() == (served / name).read_bytes(), name


@pytest.mark.integration
def test_snapshot_download_of_a_sharded_safetensors_repo_is_byte_identical(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path
) -> None:
    repo = hub_repos.safetensors(num_shards=3)
    path = Path(snapshot_download(repo.repo_id, endpoint=hub_server.url, cache_dir=hf_cache, token=False))

    assert path.name == repo.commit  # the snapshot folder is named after the resolved commit
    _same_tree(path, repo.snapshot)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    headers = [read_safetensors_header(path / s) for s in shards]
    assert sum(t.nbytes for h in headers for t in h.tensors.values()) == index["metadata"]["total_size"]
    assert {n for h in headers for n in h.tensors} == set(index["weight_map"])
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert {"model_type", "max_position_embeddings", "torch_dtype"} <= config.keys()


@pytest.mark.integration
def test_model_info_reports_what_the_hub_derives_from_the_files(hub_server: HubServer, hub_repos: HubRepos) -> None:
    repo = hub_repos.safetensors(num_shards=2)
    info = _api(hub_server).model_info(repo.repo_id, files_metadata=True)

    assert (info.id, info.sha, info.private, info.gated) == (repo.repo_id, repo.commit, False, False)
    assert info.library_name == "transformers" and info.pipeline_tag == "text-generation"
    assert {"safetensors", "llama", "license:apache-2.0"} <= set(info.tags or [])
    assert info.config is not None and info.config["architectures"] == ["LlamaForCausalLM"]
    assert info.card_data is not None and info.card_data.license == "apache-2.0"
    assert info.safetensors is not None and info.safetensors.total == sum(info.safetensors.parameters.values())
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert set(siblings) == set(repo.files)
    shard = siblings["model-00001-of-00002.safetensors"]
    data = (repo.snapshot / shard.rfilename).read_bytes()
    # Safetensors are LFS through .gitattributes, whatever their size; the blob id is the pointer's.
    assert shard.lfs is not None and shard.lfs.sha256 == hashlib.sha256(data).hexdigest()
    assert shard.size == len(data) and shard.blob_id == model_repos.git_blob_sha1(
        model_repos.lfs_pointer(shard.lfs.sha256, len(data))
    )
    config = siblings["config.json"]
    assert config.lfs is None and config.blob_id == model_repos.git_blob_sha1(
        (repo.snapshot / "config.json").read_bytes()
    )


@pytest.mark.integration
def test_resolve_by_branch_and_by_commit_pins_the_commit(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path, tmp_path: Path
) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    first = repo.commit
    update = tmp_path / "update"
    shutil.copytree(repo.snapshot, update)
    (update / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama2"}))
    second = hub_repos.register(repo.repo_id, update, title="change config")
    model_repos.set_branch(hub_server.root, repo.repo_id, "stable", first)
    api = _api(hub_server)

    def download(revision: str) -> Path:
        return Path(
            hf_hub_download(
                repo.repo_id, "config.json", revision=revision, endpoint=hub_server.url, cache_dir=hf_cache, token=False
            )
        )

    assert second != first
    assert download("main").parent.name == second
    assert json.loads(download("main").read_text())["model_type"] == "llama2"
    assert download(first).parent.name == first
    assert json.loads(download(first).read_text())["model_type"] == "llama"
    assert download("stable").parent.name == first
    refs = hf_cache / f"models--{repo.repo_id.replace('/', '--')}" / "refs"
    assert (refs / "main").read_text() == second and (refs / "stable").read_text() == first
    meta = get_hf_file_metadata(hf_hub_url(repo.repo_id, "config.json", revision="stable", endpoint=hub_server.url))
    assert meta.commit_hash == first
    assert api.model_info(repo.repo_id, revision=first).sha == first
    assert api.model_info(repo.repo_id).sha == second
    assert {b.name: b.target_commit for b in api.list_repo_refs(repo.repo_id).branches} == {
        "main": second,
        "stable": first,
    }
    assert [c.commit_id for c in api.list_repo_commits(repo.repo_id)] == [second, first]


@pytest.mark.integration
def test_large_file_takes_the_lfs_path_and_resumes_after_a_dropped_connection(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path
) -> None:
    big = 24 * 1024 * 1024  # above the 10 MB LFS threshold, no .gitattributes pattern: LFS by size
    repo = hub_repos.blobs({"weights/big.dat": big, "notes.txt": b"small file\n"})
    served = repo.snapshot / "weights" / "big.dat"
    sha256 = hashlib.sha256(served.read_bytes()).hexdigest()

    meta = get_hf_file_metadata(hf_hub_url(repo.repo_id, "weights/big.dat", endpoint=hub_server.url), token=False)
    assert (meta.etag, meta.size, meta.commit_hash) == (sha256, big, repo.commit)
    assert meta.xet_file_data is None  # hf_xet is installed, yet the plain HTTP path is taken
    assert meta.location.startswith(f"{hub_server.cdn_url}/{repo.repo_id}/{sha256}?")
    # As on the Hub, the LFS metadata rides on the redirect itself.
    head = get_session().head(hf_hub_url(repo.repo_id, "weights/big.dat", endpoint=hub_server.url),
                              follow_redirects=False)  # fmt: skip
    assert head.status_code == 302 and head.headers["Location"].startswith(f"{hub_server.cdn_url}/{repo.repo_id}/")
    assert head.headers["X-Linked-Etag"] == f'"{sha256}"' and head.headers["X-Linked-Size"] == str(big)
    assert head.headers["X-Repo-Commit"] == repo.commit
    small = get_session().head(hf_hub_url(repo.repo_id, "notes.txt", endpoint=hub_server.url), follow_redirects=False)
    small_oid = model_repos.git_blob_sha1(b"small file\n")
    assert small.status_code == 200 and small.headers["ETag"] == f'"{small_oid}"'
    assert "X-Linked-Etag" not in small.headers and "X-Linked-Size" not in small.headers

    # The client writes in DOWNLOAD_CHUNK_SIZE (10 MiB) pieces, so a cut at 12 MiB resumes from 10 MiB.
    cut, resume = 12 * 1024 * 1024, constants.DOWNLOAD_CHUNK_SIZE
    hub_server.fail_next_download(repo.repo_id, "weights/big.dat", after_bytes=cut)
    mark = hub_server.mark()
    path = hf_hub_download(repo.repo_id, "weights/big.dat", endpoint=hub_server.url, cache_dir=hf_cache, token=False)

    assert Path(path).read_bytes() == served.read_bytes()
    gets = hub_server.downloads(repo.repo_id, mark)
    assert [(r.host, r.status, r.headers.get("range")) for r in gets] == [
        ("cdn", 200, None),
        ("cdn", 206, f"bytes={resume}-"),
    ]
    assert gets[0].body_bytes == cut and gets[1].body_bytes == big - resume
    assert gets[1].response_headers["Content-Range"] == f"bytes {resume}-{big - 1}/{big}"
    blob = hf_cache / f"models--{repo.repo_id.replace('/', '--')}" / "blobs" / sha256
    assert blob.is_file()  # the cache names LFS blobs after their sha256


@pytest.mark.integration
def test_the_token_reaches_the_hub_and_never_the_cdn_host(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path
) -> None:
    token = f"hf_cdn_{uuid.uuid4().hex}"
    big = 12 * 1024 * 1024 + 321
    repo = hub_repos.blobs({"weights/big.dat": big, "config.json": b"{}"}, gated=True, tokens=[token])
    served = (repo.snapshot / "weights" / "big.dat").read_bytes()
    cut = 5 * 1024 * 1024 + 7
    hub_server.fail_next_download(repo.repo_id, "weights/big.dat", after_bytes=cut)
    mark = hub_server.mark()

    # The real client: a gated download, cut mid-file, resumed by the client within the call.
    path = hf_hub_download(repo.repo_id, "weights/big.dat", endpoint=hub_server.url, cache_dir=hf_cache, token=token)
    assert Path(path).read_bytes() == served
    # The client's session as the import activity uses it: its own Authorization and Range headers, redirects
    # followed by the session; a resume from past the cut goes through the redirect with its Range intact.
    url = hf_hub_url(repo.repo_id, "weights/big.dat", revision=repo.commit, endpoint=hub_server.url)
    rest = get_session().get(url, headers={"Authorization": f"Bearer {token}", "Range": f"bytes={cut}-"})
    assert rest.status_code == 206 and rest.content == served[cut:]
    assert [r.status_code for r in rest.history] == [302]
    assert rest.history[0].headers["X-Repo-Commit"] == repo.commit
    assert rest.headers["Content-Range"] == f"bytes {cut}-{big - 1}/{big}"
    snapshot = Path(snapshot_download(repo.repo_id, endpoint=hub_server.url, cache_dir=hf_cache / "s", token=token))
    assert (snapshot / "weights" / "big.dat").read_bytes() == served

    seen = hub_server.requests[mark:]
    hub_side = [r for r in seen if r.host == "hub" and "/resolve/" in r.path]
    cdn_side = [r for r in seen if r.host == "cdn"]
    assert hub_side and all(r.headers.get("authorization") == f"Bearer {token}" for r in hub_side)
    assert {r.status for r in hub_side if r.file == (repo.repo_id, "weights/big.dat")} == {302}
    assert len(cdn_side) >= 4 and all(r.status in (200, 206) for r in cdn_side)
    assert not [r for r in cdn_side if "authorization" in r.headers or token in json.dumps(r.headers)]
    assert not [r for r in cdn_side if token in r.path]
    ranges = [r.headers.get("range") for r in cdn_side if r.method == "GET"]
    assert f"bytes={cut}-" in ranges  # the session's resume, across the redirect
    resumed = [r for r in cdn_side if r.status == 206 and r.body_bytes == big - cut]
    assert resumed and resumed[0].response_headers["Content-Range"] == f"bytes {cut}-{big - 1}/{big}"
    # Anonymous users are refused at the Hub: they never learn a CDN URL.
    anonymous = get_session().get(url, follow_redirects=False)
    assert anonymous.status_code == 401 and "Location" not in anonymous.headers


@pytest.mark.integration
def test_the_cdn_host_refuses_a_token_a_forged_url_and_an_expired_one(
    hub_server: HubServer, hub_repos: HubRepos, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = hub_repos.blobs({"big.bin": 11 * 1024 * 1024})
    resolve = hf_hub_url(repo.repo_id, "big.bin", endpoint=hub_server.url)
    location = get_session().head(resolve, follow_redirects=False).headers["Location"]
    assert location.startswith(hub_server.cdn_url) and not location.startswith(hub_server.url)

    ok = get_session().get(location, headers={"Range": "bytes=0-9"})
    assert ok.status_code == 206 and ok.content == (repo.snapshot / "big.bin").read_bytes()[:10]
    with_token = get_session().get(location, headers={"Authorization": f"Bearer {HUB_USER_TOKEN}"})
    assert with_token.status_code == 400 and b"Only one auth mechanism allowed" in with_token.content
    forged = location.replace(repo.repo_id, repo.repo_id + "x")
    assert get_session().get(forged).status_code == 403
    assert get_session().get(location.split("&Signature=")[0]).status_code == 403
    monkeypatch.setattr(hub_server, "signed_url_ttl", -1)
    expired = get_session().head(resolve, follow_redirects=False).headers["Location"]
    refused = get_session().get(expired)
    assert refused.status_code == 403 and b"expired" in refused.content


@pytest.mark.integration
def test_range_requests_and_hf_file_system(hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path) -> None:
    content = bytes(range(256)) * 40
    repo = hub_repos.blobs({"data/blob.bin": content})
    url = hf_hub_url(repo.repo_id, "data/blob.bin", endpoint=hub_server.url)
    session = get_session()

    part = session.get(url, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == content[10:20]
    assert part.headers["Content-Range"] == f"bytes 10-19/{len(content)}"
    tail = session.get(url, headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == content[-5:]
    past = session.get(url, headers={"Range": f"bytes={len(content)}-"})
    assert past.status_code == 416 and past.headers["Content-Range"] == f"bytes */{len(content)}"

    fs = HfFileSystem(endpoint=hub_server.url, token=False)
    assert fs.ls(f"{repo.repo_id}/data", detail=False) == [f"{repo.repo_id}/data/blob.bin"]
    with fs.open(f"{repo.repo_id}/data/blob.bin", "rb", block_size=1024) as fh:
        fh.seek(5000)
        assert fh.read(100) == content[5000:5100]
    assert fs.cat_file(f"{repo.repo_id}/data/blob.bin", start=-7) == content[-7:]


@pytest.mark.integration
def test_gated_repo_needs_an_authorized_token(hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path) -> None:
    repo = hub_repos.safetensors(num_shards=1, gated=True, tokens={"hf_gated_reader": "reader"})

    def download(token: str | bool) -> str:
        return hf_hub_download(repo.repo_id, "config.json", endpoint=hub_server.url, cache_dir=hf_cache, token=token)

    with pytest.raises(GatedRepoError) as anonymous:
        download(False)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as unauthorized:
        download(HUB_USER_TOKEN)
    assert unauthorized.value.response.status_code == 403
    assert "not in the authorized list" in str(unauthorized.value)
    assert Path(download("hf_gated_reader")).read_bytes() == (repo.snapshot / "config.json").read_bytes()
    # As on the Hub, a gated repo's metadata stays public; only its files are gated.
    assert _api(hub_server).model_info(repo.repo_id).gated == "auto"
    with pytest.raises(GatedRepoError):
        _api(hub_server).auth_check(repo.repo_id)


@pytest.mark.integration
def test_private_repo_is_hidden_without_its_token(hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path) -> None:
    repo = hub_repos.safetensors(num_shards=1, private=True, tokens=["hf_private_reader"])
    author = repo.repo_id.split("/")[0]

    with pytest.raises(RepositoryNotFoundError) as anonymous:
        _api(hub_server).model_info(repo.repo_id)
    assert anonymous.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as other_user:
        _api(hub_server, HUB_USER_TOKEN).model_info(repo.repo_id)
    assert other_user.value.response.status_code == 404
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(repo.repo_id, "config.json", endpoint=hub_server.url, cache_dir=hf_cache, token=False)
    assert repo.repo_id not in {m.id for m in _api(hub_server).list_models(author=author)}

    owner = _api(hub_server, "hf_private_reader")
    assert owner.model_info(repo.repo_id).private is True
    assert repo.repo_id in {m.id for m in owner.list_models(author=author)}
    path = hf_hub_download(
        repo.repo_id, "config.json", endpoint=hub_server.url, cache_dir=hf_cache, token="hf_private_reader"
    )
    assert Path(path).read_bytes() == (repo.snapshot / "config.json").read_bytes()


@pytest.mark.integration
def test_unknown_repo_revision_and_file_raise_the_clients_errors(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path
) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    api = _api(hub_server)

    def download(repo_id: str, filename: str = "config.json", revision: str | None = None) -> str:
        return hf_hub_download(
            repo_id, filename, revision=revision, endpoint=hub_server.url, cache_dir=hf_cache, token=False
        )

    with pytest.raises(RepositoryNotFoundError):
        download("devstack/does-not-exist")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("does-not-exist")
    with pytest.raises(RevisionNotFoundError):
        download(repo.repo_id, revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(repo.repo_id, revision="0" * 40)
    with pytest.raises(EntryNotFoundError):
        download(repo.repo_id, "no/such/file.bin")
    assert not api.repo_exists("devstack/does-not-exist")
    assert not api.revision_exists(repo.repo_id, "no-such-branch")
    assert api.file_exists(repo.repo_id, "config.json") and not api.file_exists(repo.repo_id, "nope.json")
    with pytest.raises(HfHubHTTPError) as bad_token:
        _api(hub_server, "hf_not_a_real_token").model_info(repo.repo_id)
    assert bad_token.value.response.status_code == 401
    assert not isinstance(bad_token.value, RepositoryNotFoundError)  # the Hub's "Invalid credentials" case


@pytest.mark.integration
def test_whoami(hub_server: HubServer) -> None:
    assert _api(hub_server, HUB_USER_TOKEN).whoami()["name"] == "devstack-user"
    with pytest.raises(HfHubHTTPError):
        _api(hub_server, "hf_not_a_real_token").whoami()


@pytest.mark.integration
def test_list_models_follows_link_pagination(
    hub_server: HubServer, hub_repos: HubRepos, monkeypatch: pytest.MonkeyPatch
) -> None:
    author = hub_repos.unique_id("org").split("/")[1]
    made = [model_repos.make_safetensors_repo(hub_server.root, f"{author}/model-{i}", num_shards=1) for i in range(5)]
    model_repos.make_gguf_repo(hub_server.root, f"{author}/quantized")
    monkeypatch.setattr(hub_server, "list_page_size", 2)
    mark = hub_server.mark()
    api = _api(hub_server)

    listed = [m.id for m in api.list_models(author=author)]
    assert sorted(listed) == sorted([*(m.repo_id for m in made), f"{author}/quantized"])
    pages = [r for r in hub_server.requests_for("/api/models?", mark) if r.method == "GET"]
    assert len(pages) == 3 and all(r.status == 200 for r in pages)
    assert "cursor=" in pages[1].path and 'rel="next"' in pages[0].response_headers["Link"]
    assert "Link" not in pages[-1].response_headers

    assert [m.id for m in api.list_models(author=author, filter="gguf")] == [f"{author}/quantized"]
    assert len(list(api.list_models(author=author, search="model-"))) == 5
    assert len(list(api.list_models(author=author, limit=3))) == 3
    full = next(iter(api.list_models(author=author, search="quantized", full=True)))
    assert full.siblings is not None and any(s.rfilename.endswith(".gguf") for s in full.siblings)


@pytest.mark.unit
def test_listings_see_every_write_through_the_index(tmp_path: Path) -> None:
    """The stand-in answers listings from an index kept while nothing is written: every devstack write
    (register, branch reset, rename, delete) makes the next listing and count see it, and a root no writer
    announces its changes in (no generation marker) is read afresh on every listing."""
    root = tmp_path / "hub"
    with HubServer(root=root, lfs_redirect=False) as hub:
        api = _api(hub)
        (root / "org" / "hand" / "commits").mkdir(parents=True)
        sha = "a" * 40
        meta = {"id": "org/hand", "private": False, "gated": False, "tags": [], "tokens": {},
                "branches": {"main": sha}, "created_at": "2025-01-01T00:00:00.000Z",
                "commits": {sha: {"parents": [], "title": "t", "message": "", "author": "a",
                                  "date": "2025-01-01T00:00:00.000Z", "files": {}}}}  # fmt: skip
        (root / "org" / "hand" / "repo.json").write_text(json.dumps(meta))
        assert not (root / ".generation").exists()
        assert [m.id for m in api.list_models(author="org")] == ["org/hand"]
        meta["tags"] = ["edited"]
        (root / "org" / "hand" / "repo.json").write_text(json.dumps(meta))  # in place, no marker: seen
        assert [m.id for m in api.list_models(author="org", filter="edited")] == ["org/hand"]

        one = model_repos.make_blob_repo(root, "org/one", {"a.json": b"{}"})
        assert (root / ".generation").exists()
        assert sorted(m.id for m in api.list_models(author="org")) == ["org/hand", "org/one"]
        assert api.get_organization_overview("org").num_models == 2
        assert sorted(m.id for m in api.list_models(author="org")) == ["org/hand", "org/one"]  # cached, same

        second = model_repos.make_blob_repo(root, "org/one", {"a.json": b"{ }"}, title="second")
        listed = next(iter(api.list_models(author="org", search="one", expand=["sha"])))
        assert second.commit != one.commit and listed.sha == second.commit
        model_repos.set_branch(root, "org/one", "main", one.commit)
        assert next(iter(api.list_models(author="org", search="one", expand=["sha"]))).sha == one.commit

        model_repos.rename_repo(root, "org/one", "org/renamed")
        assert sorted(m.id for m in api.list_models(author="org")) == ["org/hand", "org/renamed"]
        model_repos.delete_repo(root, "org/renamed")
        assert [m.id for m in api.list_models(author="org")] == ["org/hand"]
        assert api.get_organization_overview("org").num_models == 1


@pytest.mark.integration
def test_get_collection_derives_model_items_from_the_repos(hub_server: HubServer, hub_repos: HubRepos) -> None:
    public = hub_repos.safetensors(num_shards=1)
    token = f"hf_private_{uuid.uuid4().hex}"
    private = hub_repos.blobs({"model.safetensors": 8}, private=True, tokens=[token])
    paper = {"type": "paper", "id": "2307.09288", "note": "the paper"}
    items: list[str | dict[str, str]] = [public.repo_id, paper, private.repo_id, "devstack/gone"]
    slug = write_collection(hub_server.root, "devstack", "Tiny models!", items, description="small ones")
    assert slug.startswith("devstack/tiny-models-") and len(slug.rsplit("-", 1)[1]) == 24

    collection = _api(hub_server).get_collection(slug)
    assert (collection.slug, collection.title, collection.description) == (slug, "Tiny models!", "small ones")
    assert collection.url == f"{hub_server.url}/collections/{slug}" and not collection.private
    # The private repo is left out for an anonymous caller, the deleted one for everybody.
    assert [(i.item_type, i.item_id) for i in collection.items] == [("model", public.repo_id), ("paper", "2307.09288")]
    assert collection.items[1].note == "the paper"
    owned = _api(hub_server, token).get_collection(slug)
    assert [i.item_id for i in owned.items if i.item_type == "model"] == [public.repo_id, private.repo_id]
    raw = get_session().get(f"{hub_server.url}/api/collections/{slug}").json()
    model = raw["items"][0]
    assert model["repoType"] == "model" and model["author"] == "devstack" and model["gated"] is False
    assert raw["owner"]["name"] == "devstack" and isinstance(raw["lastUpdated"], str)

    hidden = write_collection(hub_server.root, "devstack", "Hidden", [public.repo_id], private=True, tokens=[token])
    for api in (_api(hub_server), _api(hub_server, HUB_USER_TOKEN)):
        with pytest.raises(HfHubHTTPError) as info:
            api.get_collection(hidden)
        assert info.value.response is not None and info.value.response.status_code == 404
    assert _api(hub_server, token).get_collection(hidden).private

    # Replacing a collection by its slug changes what it lists.
    write_collection(hub_server.root, "devstack", "Tiny models!", [private.repo_id], slug=slug)
    assert [i.item_id for i in _api(hub_server, token).get_collection(slug).items] == [private.repo_id]


@pytest.mark.integration
def test_tree_listing_paginates_and_paths_info_expands(
    hub_server: HubServer, hub_repos: HubRepos, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = hub_repos.diffusers()
    api = _api(hub_server)
    monkeypatch.setattr(hub_server, "tree_page_size", 4)
    mark = hub_server.mark()

    entries = list(api.list_repo_tree(repo.repo_id, recursive=True))
    files = sorted(e.path for e in entries if isinstance(e, RepoFile))
    folders = sorted(e.path for e in entries if not isinstance(e, RepoFile))
    assert files == sorted(repo.files)
    assert folders == ["scheduler", "text_encoder", "tokenizer", "unet", "vae"]
    assert len(hub_server.requests_for("/tree/", mark)) == -(-len(entries) // 4)
    top = {e.path for e in api.list_repo_tree(repo.repo_id)}
    assert "unet" in top and "unet/config.json" not in top
    assert {e.path for e in api.list_repo_tree(repo.repo_id, "unet")} == {
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
    }

    info = api.get_paths_info(repo.repo_id, ["unet", "model_index.json", "missing.txt"], expand=True)
    assert [e.path for e in info] == ["unet", "model_index.json"]
    assert all(e.last_commit is not None and e.last_commit.oid == repo.commit for e in info)
    weights = api.get_paths_info(repo.repo_id, "unet/diffusion_pytorch_model.safetensors")[0]
    assert isinstance(weights, RepoFile)
    assert weights.lfs is not None and weights.xet_hash is None


@pytest.mark.integration
def test_gguf_file_is_a_real_gguf_v3(hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path) -> None:
    repo = hub_repos.gguf(model_name="tiny", context_length=4096, quantizations=("F16", "Q8_0"))
    path = Path(
        hf_hub_download(repo.repo_id, "tiny-Q8_0.gguf", endpoint=hub_server.url, cache_dir=hf_cache, token=False)
    )

    raw = path.read_bytes()
    # Checked by hand first, so the test does not only trust the project's own reader.
    assert raw[:4] == b"GGUF" and struct.unpack_from("<IQQ", raw, 4)[0] == 3
    gguf = read_gguf(path)
    assert gguf.version == 3
    assert gguf.metadata["general.architecture"] == "llama"
    assert gguf.metadata["general.name"] == "tiny"
    assert gguf.metadata["llama.context_length"] == 4096
    assert gguf.metadata["general.file_type"] == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    assert len(gguf.metadata["tokenizer.ggml.tokens"]) == 64
    assert gguf.metadata["tokenizer.ggml.model"] == "llama"
    assert gguf.data_offset % 32 == 0 and all(t.offset % 32 == 0 for t in gguf.tensors)
    assert {t.ggml_type for t in gguf.tensors} == {"Q8_0", "F32"}
    last = max(gguf.tensors, key=lambda t: t.offset)
    assert gguf.data_offset + last.offset + last.nbytes <= len(raw)

    info = _api(hub_server).model_info(repo.repo_id)
    assert info.gguf is not None and info.gguf["context_length"] == 4096 and "gguf" in (info.tags or [])


@pytest.mark.integration
def test_diffusers_repo_layout(hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path) -> None:
    repo = hub_repos.diffusers()
    path = Path(snapshot_download(repo.repo_id, endpoint=hub_server.url, cache_dir=hf_cache, token=False))

    _same_tree(path, repo.snapshot)
    index = json.loads((path / "model_index.json").read_text())
    components = {k for k, v in index.items() if isinstance(v, list) and v[0] is not None}
    assert components == {"unet", "vae", "text_encoder", "tokenizer", "scheduler"}
    for name in components:
        assert (path / name).is_dir() and any((path / name).glob("*.json"))
    for weights in path.rglob("*.safetensors"):
        read_safetensors_header(weights)
    info = _api(hub_server).model_info(repo.repo_id)
    assert info.library_name == "diffusers" and info.pipeline_tag == "text-to-image"


@pytest.mark.integration
def test_renamed_repo_answers_with_a_relative_redirect(
    hub_server: HubServer, hub_repos: HubRepos, hf_cache: Path
) -> None:
    repo = hub_repos.safetensors(num_shards=1)
    new_id = hub_repos.unique_id("renamed")
    model_repos.rename_repo(hub_server.root, repo.repo_id, new_id)
    mark = hub_server.mark()

    path = hf_hub_download(repo.repo_id, "config.json", endpoint=hub_server.url, cache_dir=hf_cache, token=False)
    assert (
        Path(path).read_bytes()
        == next(p for p in iter_repo_files(hub_server.root, new_id) if p.name == "config.json").read_bytes()
    )
    moved = hub_server.requests_for(f"/{repo.repo_id}/resolve/", mark)
    assert moved and moved[0].status == 307 and moved[0].response_headers["Location"].startswith(f"/{new_id}/")
    assert _api(hub_server).model_info(repo.repo_id).id == new_id


@pytest.mark.integration
def test_multi_gb_sparse_model_is_served_without_reading_it_whole(hub_server: HubServer, hub_repos: HubRepos) -> None:
    # TinyLlama-1.1B shapes in F16: about 2.2 GB of tensor data, written as holes in sparse files.
    repo = hub_repos.safetensors(
        "sparse-1b",
        num_shards=2,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=22,
        num_key_value_heads=4,
        num_attention_heads=32,
        vocab_size=32000,
        fill="sparse",
    )
    shards = sorted(repo.snapshot.glob("*.safetensors"))
    sizes = [s.stat().st_size for s in shards]
    assert sum(sizes) > 2 * 10**9
    assert sum(s.stat().st_blocks * 512 for s in shards) < 50 * 10**6  # holes, not data

    api = _api(hub_server)
    meta = api.get_safetensors_metadata(repo.repo_id)  # the client reads headers through Range requests
    assert meta.sharded and meta.parameter_count == {"F16": 1_100_048_384}
    info = api.model_info(repo.repo_id, files_metadata=True)
    assert info.safetensors is not None and info.safetensors.total == 1_100_048_384
    listed = {s.rfilename: s.size for s in info.siblings or []}
    assert [listed[s.name] for s in shards] == sizes
    url = hf_hub_url(repo.repo_id, shards[-1].name, endpoint=hub_server.url)
    end = get_session().get(url, headers={"Range": "bytes=-16"})
    assert end.status_code == 206 and end.content == b"\0" * 16


@pytest.mark.integration
def test_no_response_ever_carries_a_xet_header(hub_server: HubServer) -> None:
    # Runs after the others in this module: the session server's whole recorded traffic so far.
    assert hub_server.requests
    assert not [r for r in hub_server.requests if any("xet" in h.lower() for h in r.response_headers)]
    # The path only: a query's base64 paging cursor may spell "xet" by chance.
    assert not [r for r in hub_server.requests if "xet" in urlsplit(r.path).path.lower()]
