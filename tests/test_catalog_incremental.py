"""The incremental catalog refresh (issue #15's no-change goal): given the last complete refresh, a scan of
organisations without tags reads only the models changed since (the Hub's `sort=lastModified` listing, newest
first, stopped at the previous listing's mark) plus each organisation's model count, and gives the index a
full scan gives; whenever it cannot be sure (a count that does not add up, tags, truncation, an old full
listing) it is a full scan. Real `huggingface_hub` client against the Hub-compatible server.

The stand-in's lastModified is the commit date its writer gives (the Hub's is the time of the push): updates
here are committed with the current time, as the Hub would stamp them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from huggingface_hub import HfApi
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from devstack import model_repos
from devstack.hub_server import HubServer
from devstack.services import OciRegistry
from servingops.activities.catalog import huggingface_index, scan_store
from servingops.activities.catalog.huggingface_index import CatalogIndexActivities, scan
from servingops.activities.catalog.index_document import index_of
from servingops.activities.catalog.policy import evaluate_policy
from servingops.activities.catalog.types import IndexHuggingFaceInput, IndexHuggingFaceResult, ScanState
from servingops.activities.oci.activities import RegistryTarget
from servingops.api_models.deckhouse.catalog_source import CatalogPolicy
from servingops.clients.oci.registry_client import ModelRegistry
from tests.fixtures.hub import HubRepos

pytestmark = pytest.mark.integration

FAR = float("inf")


def _org() -> str:
    return f"inc-{uuid.uuid4().hex[:8]}"


def _repo(hub_repos: HubRepos, repo_id: str, **register: Any) -> str:
    return model_repos.make_blob_repo(hub_repos.server.root, repo_id, {"model.safetensors": 16}, **register).commit


def _commit(hub: HubServer, repo_id: str, tmp_path: Path, content: bytes) -> str:
    files = tmp_path / uuid.uuid4().hex
    files.mkdir()
    (files / "model.safetensors").write_bytes(content)
    return model_repos.register_repo(hub.root, repo_id, files, date=datetime.now(UTC), title="update")


def _scan(hub: HubServer, previous: ScanState | None = None, **policy: Any) -> ScanState:
    policy.setdefault("max_indexed_entries", 100)
    verdict = evaluate_policy(CatalogPolicy(**policy))
    assert verdict.allowed and verdict.scope and verdict.bounds, verdict.message
    state = scan(HfApi(endpoint=hub.url, token=False), verdict.scope, verdict.bounds, FAR, previous=previous)
    assert state.complete
    return state


def _listings(hub: HubServer, since: int) -> list[dict[str, list[str]]]:
    return [parse_qs(urlsplit(r.path).query) for r in hub.requests_for("/api/models?", since=since)]


def _incremental(listings: list[dict[str, list[str]]]) -> bool:
    """Only lastModified listings (the incremental refresh), no createdAt one (a full listing)."""
    return bool(listings) and all(q.get("sort") == ["lastModified"] for q in listings)


def _three(hub_repos: HubRepos) -> tuple[str, dict[str, str]]:
    org = _org()
    return org, {f"{org}/m{i}": _repo(hub_repos, f"{org}/m{i}") for i in range(3)}


def test_a_full_scan_notes_each_organisation_listing(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, commits = _three(hub_repos)
    state = _scan(hub_server, allowed_organizations=[org])
    listing = state.listings[org]
    assert sorted(listing.ids) == sorted(commits) and listing.model_count == 3
    assert listing.mark is not None and listing.newest is not None and listing.mark < listing.newest
    # It travels in the packed progress (the workflow's payload) and back.
    assert state.pack().unpack().listings == state.listings


def test_a_no_change_refresh_reads_one_short_page_and_gives_the_same_index(
    hub_server: HubServer, hub_repos: HubRepos
) -> None:
    org, _ = _three(hub_repos)
    first = _scan(hub_server, allowed_organizations=[org])
    mark = hub_server.mark()
    second = _scan(hub_server, first, allowed_organizations=[org])
    listings = _listings(hub_server, mark)
    assert _incremental(listings) and len(listings) == 1 and listings[0]["limit"] == ["100"]
    assert hub_server.requests_for(f"/api/organizations/{org}/overview", since=mark)
    assert index_of(second).digest == index_of(first).digest
    assert second.listings[org].mark is not None and second.listings[org].mark >= first.listings[org].mark  # type: ignore[operator]


def test_a_changed_and_a_new_model_are_read_and_the_index_equals_a_full_scan(
    hub_server: HubServer, hub_repos: HubRepos, tmp_path: Path
) -> None:
    org, _ = _three(hub_repos)
    first = _scan(hub_server, allowed_organizations=[org])
    new_sha = _commit(hub_server, f"{org}/m1", tmp_path, b"new weights")
    _commit(hub_server, f"{org}/added", tmp_path, b"another model")
    mark = hub_server.mark()
    second = _scan(hub_server, first, allowed_organizations=[org])
    assert _incremental(_listings(hub_server, mark))
    assert second.entries[f"{org}/m1"].revision == new_sha and f"{org}/added" in second.entries
    full = _scan(hub_server, allowed_organizations=[org])
    assert index_of(second).digest == index_of(full).digest != index_of(first).digest
    # And the next no-change refresh from there is incremental again, with the same index.
    third = _scan(hub_server, second, allowed_organizations=[org])
    assert index_of(third).digest == index_of(full).digest


def test_a_deleted_model_makes_the_count_disagree_and_the_organisation_is_listed_fully(
    hub_server: HubServer, hub_repos: HubRepos
) -> None:
    org, _ = _three(hub_repos)
    first = _scan(hub_server, allowed_organizations=[org])
    model_repos.delete_repo(hub_server.root, f"{org}/m2")
    mark = hub_server.mark()
    second = _scan(hub_server, first, allowed_organizations=[org])
    assert not _incremental(_listings(hub_server, mark))
    assert sorted(second.entries) == [f"{org}/m0", f"{org}/m1"]
    assert second.listings[org].model_count == 2


def test_a_deleted_and_a_new_model_together_are_not_mistaken_for_no_deletion(
    hub_server: HubServer, hub_repos: HubRepos, tmp_path: Path
) -> None:
    org, _ = _three(hub_repos)
    first = _scan(hub_server, allowed_organizations=[org])
    model_repos.delete_repo(hub_server.root, f"{org}/m0")
    _commit(hub_server, f"{org}/added", tmp_path, b"another model")
    second = _scan(hub_server, first, allowed_organizations=[org])
    assert sorted(second.entries) == [f"{org}/added", f"{org}/m1", f"{org}/m2"]


def test_scopes_the_incremental_refresh_does_not_cover_scan_fully(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, _ = _three(hub_repos)
    _repo(hub_repos, f"{org}/chat", tags=["chat"])
    tagged = _scan(hub_server, allowed_organizations=[org], allowed_tags=["chat"])
    assert tagged.listings == {}
    mark = hub_server.mark()
    again = _scan(hub_server, tagged, allowed_organizations=[org], allowed_tags=["chat"])
    assert not _incremental(_listings(hub_server, mark)) and sorted(again.entries) == [f"{org}/chat"]

    truncated = _scan(hub_server, allowed_organizations=[org], max_indexed_entries=2)
    assert truncated.truncated
    mark = hub_server.mark()
    _scan(hub_server, truncated, allowed_organizations=[org], max_indexed_entries=2)
    assert not _incremental(_listings(hub_server, mark))

    # A previous refresh of another scope is not used.
    other = _scan(hub_server, allowed_organizations=[org], max_indexed_entries=50)
    mark = hub_server.mark()
    _scan(hub_server, other, allowed_organizations=[org])
    assert not _incremental(_listings(hub_server, mark))


def test_an_old_full_listing_is_listed_again(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, _ = _three(hub_repos)
    first = _scan(hub_server, allowed_organizations=[org])
    first.listings[org].listed_at = (first.listings[org].listed_at or 0) - huggingface_index.FULL_LISTING_INTERVAL - 1
    mark = hub_server.mark()
    second = _scan(hub_server, first, allowed_organizations=[org])
    assert not _incremental(_listings(hub_server, mark))
    assert index_of(second).digest == index_of(first).digest


def test_explicit_repositories_are_read_again_beside_the_incremental_organisation(
    hub_server: HubServer, hub_repos: HubRepos, tmp_path: Path
) -> None:
    org, _ = _three(hub_repos)
    other = _org()
    _repo(hub_repos, f"{other}/explicit")
    policy: dict[str, Any] = {"allowed_organizations": [org], "allowed_repositories": [f"{other}/explicit"]}
    first = _scan(hub_server, **policy)
    new_sha = _commit(hub_server, f"{other}/explicit", tmp_path, b"new explicit weights")
    second = _scan(hub_server, first, **policy)
    assert second.entries[f"{other}/explicit"].revision == new_sha
    assert index_of(second).digest == index_of(_scan(hub_server, **policy)).digest


def _activity_run(hub: HubServer, policy: CatalogPolicy,
                  previous: IndexHuggingFaceResult | None) -> IndexHuggingFaceResult:  # fmt: skip
    acts = CatalogIndexActivities(hf_endpoint=hub.url)
    req = IndexHuggingFaceInput(source="s", policy=policy, previous=previous.progress if previous else None)
    result: IndexHuggingFaceResult = ActivityEnvironment().run(acts.index_huggingface, req)
    assert result.complete and result.progress is not None
    return result


def test_the_activity_answers_a_no_change_refresh_without_rebuilding_the_index(
    hub_server: HubServer, hub_repos: HubRepos
) -> None:
    org, _ = _three(hub_repos)
    policy = CatalogPolicy(allowed_organizations=[org], max_indexed_entries=10)
    first = _activity_run(hub_server, policy, None)
    assert first.progress is not None and first.progress.summary is not None
    assert first.progress.summary.document_digest == first.digest
    mark = hub_server.mark()
    second = _activity_run(hub_server, policy, first)
    assert _incremental(_listings(hub_server, mark))
    assert (second.digest, second.message, second.entry_count) == (first.digest, first.message, first.entry_count)
    assert second.progress is not None and second.progress.packed == first.progress.packed  # not repacked
    # And again from there.
    third = _activity_run(hub_server, policy, second)
    assert third.digest == first.digest


def test_the_activity_sees_a_change_among_the_newest_models_and_a_deletion(
    hub_server: HubServer, hub_repos: HubRepos, tmp_path: Path
) -> None:
    org, _ = _three(hub_repos)
    policy = CatalogPolicy(allowed_organizations=[org], max_indexed_entries=10)
    first = _activity_run(hub_server, policy, None)
    # The newest model is among those a no-change refresh reads again: a new commit to it is a change.
    new_sha = _commit(hub_server, f"{org}/m2", tmp_path, b"new weights")
    second = _activity_run(hub_server, policy, first)
    assert second.digest != first.digest and second.progress is not None
    assert second.progress.unpack().entries[f"{org}/m2"].revision == new_sha
    assert second.digest == _activity_run(hub_server, policy, None).digest
    unchanged = _activity_run(hub_server, policy, second)
    assert unchanged.digest == second.digest
    model_repos.delete_repo(hub_server.root, f"{org}/m0")
    third = _activity_run(hub_server, policy, unchanged)
    assert third.progress is not None and f"{org}/m0" not in third.progress.unpack().entries
    assert third.digest == _activity_run(hub_server, policy, None).digest


def test_the_stand_in_counts_an_organisations_public_models(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, _ = _three(hub_repos)
    _repo(hub_repos, f"{org}/hidden", private=True, tokens=["hf_incremental_private"])
    api = HfApi(endpoint=hub_server.url, token=False)
    assert api.get_organization_overview(org).num_models == 3
    try:
        api.get_organization_overview(_org())
    except Exception as exc:
        assert getattr(getattr(exc, "response", None), "status_code", None) == 404
    else:
        raise AssertionError("an unknown organisation has no overview")


def test_with_a_registry_the_scan_body_leaves_the_payload_and_a_no_change_refresh_does_not_read_it(
    hub_server: HubServer, hub_repos: HubRepos, oci_registry: OciRegistry, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker with a registry offloads every scan body (scan_store.py): the result carries its digest and
    travels in a few hundred bytes. The next refresh gets that as `previous`: unchanged, it answers from the
    summary without reading the body back; changed, it reads the body back and gives a full scan's index; a
    body the registry lost costs a full listing, not a failure."""
    reads: list[str | None] = []
    real_hydrate = scan_store.hydrate

    def counted(registry: Any, source: str, progress: Any) -> Any:
        reads.append(progress.packed_digest)
        return real_hydrate(registry, source, progress)

    monkeypatch.setattr(scan_store, "hydrate", counted)
    acts = CatalogIndexActivities(
        hf_endpoint=hub_server.url,
        registry=RegistryTarget(address=oci_registry.address, repository="unused", insecure=True))
    org, _ = _three(hub_repos)
    policy = CatalogPolicy(allowed_organizations=[org], max_indexed_entries=10)
    source = f"hub-{uuid.uuid4().hex[:6]}"

    def run(previous: IndexHuggingFaceResult | None) -> IndexHuggingFaceResult:
        req = IndexHuggingFaceInput(source=source, policy=policy, previous=previous.progress if previous else None)
        result: IndexHuggingFaceResult = ActivityEnvironment().run(acts.index_huggingface, req)
        assert result.complete and result.progress is not None
        assert result.progress.packed == "" and result.progress.packed_digest is not None
        assert len(pydantic_data_converter.payload_converter.to_payloads([result])[0].data) < 2048
        return result

    first = run(None)
    assert reads == []
    mark = hub_server.mark()
    unchanged = run(first)
    assert _incremental(_listings(hub_server, mark)) and reads == []
    assert unchanged.digest == first.digest
    assert unchanged.progress is not None and first.progress is not None
    assert unchanged.progress.packed_digest == first.progress.packed_digest  # nothing pushed again

    new_sha = _commit(hub_server, f"{org}/m1", tmp_path, b"changed weights")
    changed = run(unchanged)
    assert reads == [first.progress.packed_digest]
    assert changed.digest != first.digest and changed.digest == _activity_run(hub_server, policy, None).digest
    with ModelRegistry(oci_registry.address, insecure=True) as registry:
        whole = scan_store.hydrate(registry, source, changed.progress)  # type: ignore[arg-type]
    assert whole is not None and whole.unpack().entries[f"{org}/m1"].revision == new_sha

    assert changed.progress is not None
    lost = changed.model_copy(update={"progress": changed.progress.model_copy(
        update={"packed_digest": "sha256:" + "0" * 64})})
    # Unchanged, a lost body is not even noticed (the summary answers); changed, it costs a full listing.
    assert run(lost).digest == changed.digest
    _commit(hub_server, f"{org}/m2", tmp_path, b"changed again")
    mark = hub_server.mark()
    again = run(lost)
    assert not _incremental(_listings(hub_server, mark))  # a full listing
    assert again.digest == _activity_run(hub_server, policy, None).digest
