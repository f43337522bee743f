"""Indexing a `type: HuggingFace` ModelCatalogSource within its policy (issue #15, first slice).

The pure parts (policy verdicts, entry fitting, the canonical index document) are tested directly; the scan
and the activity run the real `huggingface_hub` client against the Hub-compatible server over HTTP, and the
token comes from a real Secret in the local kube-apiserver. Activities run in temporalio's
ActivityEnvironment; a retried attempt is a second run with attempt=2 and the previous attempt's last
heartbeat, which is what Temporal hands a retried attempt.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from huggingface_hub import HfApi
from kubernetes import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from devstack import model_repos
from devstack.hub_server import HubServer, write_collection
from servingops.activities.catalog.huggingface_index import CatalogIndexActivities, scan
from servingops.activities.catalog.index_document import (
    build_index,
    entry_json,
    fit_entry,
    index_of,
    parse_index,
)
from servingops.activities.catalog.policy import (
    DEFAULT_MAX_METADATA_BYTES,
    DEFAULT_REFRESH_BUDGET,
    IndexBounds,
    PolicyReason,
    evaluate_policy,
)
from servingops.activities.catalog.types import (
    CatalogEntry,
    IndexHuggingFaceInput,
    IndexHuggingFaceResult,
    ScanCursor,
    ScanProgress,
    ScanState,
)
from servingops.api_models.deckhouse.catalog_source import CatalogPolicy
from servingops.api_models.errors import ErrorType
from tests.crd_helpers import new_namespace
from tests.fixtures.hub import HUB_USER_TOKEN, HubRepos

FAR = float("inf")

# -- helpers ---------------------------------------------------------------------------------------


def _org() -> str:
    return f"cat-{uuid.uuid4().hex[:8]}"


def _repo(hub_repos: HubRepos, repo_id: str, *, size: int = 16, **register: Any) -> str:
    """A tiny repo (one small safetensors file) under `repo_id`; returns its commit."""
    repo = model_repos.make_blob_repo(hub_repos.server.root, repo_id, {"model.safetensors": size}, **register)
    return repo.commit


def _api(hub: HubServer, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def _policy(**kwargs: Any) -> CatalogPolicy:
    kwargs.setdefault("max_indexed_entries", 100)
    return CatalogPolicy(**kwargs)


def _scan(hub: HubServer, policy: CatalogPolicy, token: str | bool = False, deadline: float = FAR,
          resume: ScanProgress | ScanState | None = None) -> ScanState:  # fmt: skip
    verdict = evaluate_policy(policy)
    assert verdict.allowed and verdict.scope and verdict.bounds, verdict.message
    return scan(_api(hub, token), verdict.scope, verdict.bounds, deadline, resume)


def _names(state: ScanState) -> list[str]:
    return sorted(state.entries)


class _Ticks:
    """A monotonic clock that advances one second per reading: a budget of N seconds is N readings."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _run(acts: CatalogIndexActivities, req: IndexHuggingFaceInput,
         env: ActivityEnvironment | None = None) -> IndexHuggingFaceResult:  # fmt: skip
    result: IndexHuggingFaceResult = (env or ActivityEnvironment()).run(acts.index_huggingface, req)
    return result


# -- policy (pure) ---------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    "policy",
    [
        None,
        CatalogPolicy(),
        CatalogPolicy(max_indexed_entries=10),
        CatalogPolicy(allowed_tags=["text-generation"], max_indexed_entries=10),
        CatalogPolicy(allowed_organizations=[], allowed_repositories=[], max_indexed_entries=10),
    ],
    ids=["no-policy", "empty", "bounds-only", "tags-only", "empty-lists"],
)
def test_a_source_without_scope_is_blocked(policy: CatalogPolicy | None) -> None:
    verdict = evaluate_policy(policy)
    assert not verdict.allowed and verdict.reason is PolicyReason.SCOPE_MISSING
    assert verdict.scope is None and verdict.bounds is None
    for field in ("allowedOrganizations", "allowedRepositories", "allowedCollections"):
        assert field in verdict.message
    if policy is not None and policy.allowed_tags:
        assert "allowedTags only narrows" in verdict.message


@pytest.mark.unit
def test_a_scoped_source_without_max_indexed_entries_is_blocked() -> None:
    verdict = evaluate_policy(CatalogPolicy(allowed_organizations=["google"]))
    assert not verdict.allowed and verdict.reason is PolicyReason.BOUNDS_MISSING
    assert "spec.policy.maxIndexedEntries" in verdict.message and "1..10000" in verdict.message


@pytest.mark.unit
@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"refresh_budget": "soon"}, "not a duration"),
        ({"refresh_budget": "0s"}, "refreshBudget"),
        ({"refresh_budget": "-5m"}, "refreshBudget"),
        ({"refresh_budget": "2h"}, "no longer than"),
        ({"allowed_repositories": ["a/1", "a/2", "a/3"], "max_indexed_entries": 2}, "names 3 repositories"),
        ({"max_indexed_entries": 20000}, "outside 1..10000"),
        ({"max_metadata_bytes": 100}, "outside 1024..1048576"),
    ],
)
def test_a_source_beyond_its_bounds_is_blocked(fields: dict[str, Any], needle: str) -> None:
    values: dict[str, Any] = {"allowed_organizations": ["google"], "max_indexed_entries": 10, **fields}
    # model_construct: values the CRD schema would reject at admission still reach the rule (input is input).
    verdict = evaluate_policy(CatalogPolicy.model_construct(**values))
    assert not verdict.allowed and verdict.reason is PolicyReason.BOUNDS_EXCEEDED
    assert needle in verdict.message


@pytest.mark.unit
def test_an_allowed_policy_is_normalised_with_safe_defaults() -> None:
    verdict = evaluate_policy(
        CatalogPolicy(allowed_organizations=["b", "a", "b", " "], allowed_tags=["gguf", "gguf"], max_indexed_entries=5)
    )
    assert verdict.allowed and verdict.reason is PolicyReason.SATISFIED
    assert verdict.scope is not None and verdict.scope.organizations == ("a", "b") and verdict.scope.tags == ("gguf",)
    assert verdict.bounds == IndexBounds(max_indexed_entries=5, max_metadata_bytes=DEFAULT_MAX_METADATA_BYTES,
                                         refresh_budget_seconds=DEFAULT_REFRESH_BUDGET.total_seconds())  # fmt: skip
    budget = evaluate_policy(CatalogPolicy(allowed_repositories=["a/b"], max_indexed_entries=1, refresh_budget="90s"))
    assert budget.bounds is not None and budget.bounds.refresh_budget_seconds == 90


# -- entries and the index document (pure) ---------------------------------------------------------


def _entry(name: str = "org/model", **fields: Any) -> CatalogEntry:
    values: dict[str, Any] = {
        "revision": "a" * 40, "tags": ("safetensors",), "pipeline_tag": "text-generation", "library": "transformers",
        "total_size": 123, "last_modified": "2024-01-01T00:00:00.000Z",
    }  # fmt: skip
    return CatalogEntry(name=name, **{**values, **fields})


@pytest.mark.unit
def test_an_oversized_entry_loses_optional_fields_in_order_then_is_skipped() -> None:
    small = _entry()
    assert fit_entry(small, 1024) == small
    big = _entry(tags=tuple(f"tag-{i:04d}-{'x' * 40}" for i in range(100)))
    fitted = fit_entry(big, 1024)
    assert fitted is not None and fitted.tags is None and fitted.library == "transformers"
    assert len(entry_json(fitted)) <= 1024
    # Tags first, then the small scalars one by one, until it fits.
    just_required = len(entry_json(CatalogEntry(name=big.name, revision=big.revision)))
    partly = fit_entry(big, len(entry_json(big.model_copy(update={"tags": None, "library": None}))))
    assert partly is not None and partly.tags is None and partly.library is None and partly.pipeline_tag is not None
    bare = fit_entry(big, just_required)
    assert bare == CatalogEntry(name=big.name, revision=big.revision)
    assert fit_entry(big, just_required - 1) is None


@pytest.mark.unit
def test_the_index_document_is_canonical_and_its_digest_follows_the_content() -> None:
    a, b = _entry("org/a"), _entry("org/b", tags=None, library=None)
    first, second = build_index([a, b]), build_index([b, a, a])
    assert first.content == second.content and first.digest == second.digest and first.entry_count == 2
    body = json.loads(first.content)
    assert [e["name"] for e in body["entries"]] == ["org/a", "org/b"]
    assert "tags" not in body["entries"][1] and "library" not in body["entries"][1]  # absent, not null
    assert first.content == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert parse_index(first.content) == [a, b]
    changed = build_index([a, b.model_copy(update={"revision": "b" * 40})])
    assert changed.digest != first.digest and changed.digest.startswith("sha256:")
    assert build_index([a, b], truncated=True).digest != first.digest


@pytest.mark.unit
def test_scan_progress_round_trips_packed() -> None:
    state = ScanState(
        scope_digest="d", cursor=ScanCursor(phase="organizations", item=1, listing=2, offset=3),
        entries={"org/a": _entry("org/a")}, skipped_oversized=["org/big"], missing=["repo:x/y"],
    )  # fmt: skip
    progress = ScanProgress.model_validate_json(state.pack().model_dump_json())
    assert progress.entry_count == 1 and progress.unpack() == state
    with pytest.raises(ValueError, match="not complete"):
        index_of(state)


# -- the scan against the Hub-compatible server ------------------------------------------------------


@pytest.mark.integration
def test_organizations_bound_the_scan(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, other = _org(), _org()
    commits = {f"{org}/m{i}": _repo(hub_repos, f"{org}/m{i}") for i in range(3)}
    _repo(hub_repos, f"{other}/elsewhere")
    mark = hub_server.mark()
    state = _scan(hub_server, _policy(allowed_organizations=[org]))
    assert state.complete and not state.truncated and _names(state) == sorted(commits)
    assert {e.name: e.revision for e in state.entries.values()} == commits
    entry = state.entries[f"{org}/m0"]
    assert entry.tags == ("safetensors",) and entry.total_size == 16 and entry.gated is False
    assert entry.last_modified is not None and entry.last_modified.endswith("Z")
    listing = hub_server.requests_for("/api/models?", since=mark)
    assert listing and all(f"author={org}" in r.path for r in listing)


@pytest.mark.integration
def test_repositories_bound_the_scan_and_a_missing_one_is_reported(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org = _org()
    for name in ("a", "b", "c"):
        _repo(hub_repos, f"{org}/{name}")
    state = _scan(hub_server, _policy(allowed_repositories=[f"{org}/c", f"{org}/a", f"{org}/gone"]))
    assert state.complete and _names(state) == [f"{org}/a", f"{org}/c"]
    assert state.missing == [f"repo:{org}/gone"]


@pytest.mark.integration
def test_collections_bound_the_scan(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, other = _org(), _org()
    for repo_id in (f"{org}/in-1", f"{org}/out", f"{other}/in-2"):
        _repo(hub_repos, repo_id)
    items: list[str | dict[str, str]] = [f"{other}/in-2", {"type": "paper", "id": "2307.09288"}, f"{org}/in-1",
                                         f"{org}/deleted"]  # fmt: skip
    slug = write_collection(hub_server.root, org, "Curated models", items)
    state = _scan(hub_server, _policy(allowed_collections=[slug, f"{org}/nothing-0123456789abcdef01234567"]))
    assert state.complete and _names(state) == sorted([f"{org}/in-1", f"{other}/in-2"])
    assert state.missing == [f"collection:{org}/nothing-0123456789abcdef01234567"]


@pytest.mark.integration
def test_tags_narrow_every_scope(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org = _org()
    _repo(hub_repos, f"{org}/chat", tags=["chat"])
    _repo(hub_repos, f"{org}/code", tags=["code"])
    _repo(hub_repos, f"{org}/both", tags=["chat", "code"])
    _repo(hub_repos, f"{org}/plain")
    _repo(hub_repos, f"{org}/explicit-plain")
    mark = hub_server.mark()
    state = _scan(hub_server, _policy(allowed_organizations=[org], allowed_repositories=[f"{org}/explicit-plain"],
                                      allowed_tags=["code", "chat"]))  # fmt: skip
    assert state.complete and _names(state) == [f"{org}/both", f"{org}/chat", f"{org}/code"]
    # The provider narrows: one listing per allowed tag (the Hub's filter is AND, allowedTags is OR).
    listings = hub_server.requests_for("/api/models?", since=mark)
    assert sorted(parse_qs(urlsplit(r.path).query)["filter"][0] for r in listings) == ["chat", "code"]


@pytest.mark.integration
def test_max_indexed_entries_truncates_and_stops_reading(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org = _org()
    for i in range(6):
        _repo(hub_repos, f"{org}/m{i}")
    _repo(hub_repos, f"{org}/first")
    policy = _policy(allowed_repositories=[f"{org}/first"], allowed_organizations=[org], max_indexed_entries=3)
    state = _scan(hub_server, policy)
    assert state.complete and state.truncated and len(state.entries) == 3
    assert f"{org}/first" in state.entries  # explicit repositories come first in the scan order
    again = _scan(hub_server, policy)
    assert index_of(again).content == index_of(state).content  # the same three, every time
    assert index_of(state).entry_count == 3 and json.loads(index_of(state).content)["truncated"] is True


@pytest.mark.integration
def test_max_metadata_bytes_trims_an_entry_with_huge_metadata(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org = _org()
    _repo(hub_repos, f"{org}/huge", tags=[f"tag-{i:04d}-{'y' * 50}" for i in range(200)])
    _repo(hub_repos, f"{org}/normal", tags=["chat"])
    state = _scan(hub_server, _policy(allowed_organizations=[org], max_metadata_bytes=1024))
    huge, normal = state.entries[f"{org}/huge"], state.entries[f"{org}/normal"]
    assert huge.tags is None and huge.revision and huge.total_size == 16  # tags dropped, the rest kept
    assert len(entry_json(huge)) <= 1024 and normal.tags == ("chat", "safetensors")
    assert state.skipped_oversized == []
    # Unbounded (the default cap), the tags stay.
    assert _scan(hub_server, _policy(allowed_organizations=[org])).entries[f"{org}/huge"].tags is not None


@pytest.mark.integration
def test_a_budget_spent_mid_scan_resumes_to_the_same_index(hub_server: HubServer, hub_repos: HubRepos) -> None:
    org, other = _org(), _org()
    for i in range(7):
        _repo(hub_repos, f"{org}/m{i}", tags=["chat"] if i % 2 else ["code"])
    _repo(hub_repos, f"{other}/x")
    _repo(hub_repos, f"{other}/y", tags=["chat"])
    slug = write_collection(hub_server.root, other, "picks", [f"{other}/x", f"{other}/y", f"{org}/m1"])
    policy = _policy(allowed_organizations=[org], allowed_repositories=[f"{other}/x", f"{org}/m3"],
                     allowed_collections=[slug], allowed_tags=["chat", "code"])  # fmt: skip
    full = _scan(hub_server, policy)
    assert full.complete and len(full.entries) == 8

    # A deadline already passed: every call does one unit of work and yields with its cursor.
    progress: ScanProgress | None = None
    calls, cursors = 0, []
    while True:
        state = _scan(hub_server, policy, deadline=0.0, resume=progress)
        calls += 1
        progress = ScanProgress.model_validate_json(state.pack().model_dump_json())  # through the wire form
        if state.complete:
            break
        cursors.append(state.cursor)
        assert calls < 100
    assert calls > 5 and len(set(cursors)) == len(cursors)  # it moved forward every time, never restarted
    assert {c.phase for c in cursors if c} == {"repositories", "collections", "organizations"}
    assert index_of(state).content == index_of(full).content

    # A progress of another policy is not resumed: the scan starts over.
    other_policy = _policy(allowed_organizations=[org])
    partial = _scan(hub_server, policy, deadline=0.0)
    restarted = _scan(hub_server, other_policy, resume=partial)
    assert restarted.entries.keys() == _scan(hub_server, other_policy).entries.keys()


@pytest.mark.integration
def test_same_digest_without_change_and_another_after_a_repo_change(
    hub_server: HubServer, hub_repos: HubRepos, tmp_path: Path
) -> None:
    org = _org()
    for i in range(3):
        _repo(hub_repos, f"{org}/m{i}")
    policy = _policy(allowed_organizations=[org])
    first, second = index_of(_scan(hub_server, policy)), index_of(_scan(hub_server, policy))
    assert first.content == second.content and first.digest == second.digest

    update = tmp_path / "update"
    update.mkdir()
    (update / "model.safetensors").write_bytes(b"changed weights")
    new_commit = hub_repos.register(f"{org}/m1", update, title="new weights")
    third = index_of(_scan(hub_server, policy))
    assert third.digest != first.digest
    assert {e.name: e.revision for e in parse_index(third.content)}[f"{org}/m1"] == new_commit


# -- the activity ------------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_activity_blocks_an_unscoped_source_without_asking_the_provider(hub_server: HubServer) -> None:
    acts = CatalogIndexActivities(None, "unused", hub_server.url)
    mark = hub_server.mark()
    for policy in (None, CatalogPolicy(allowed_tags=["chat"], max_indexed_entries=10)):
        result = _run(acts, IndexHuggingFaceInput(source="s", policy=policy))
        assert result.blocked_reason == "PolicyScopeMissing" and not result.complete and result.progress is None
        assert "allowedOrganizations" in result.message
    result = _run(acts, IndexHuggingFaceInput(source="s", policy=CatalogPolicy(allowed_organizations=["x"])))
    assert result.blocked_reason == "PolicyBoundsMissing"
    assert hub_server.requests_for("/", since=mark) == []


@pytest.mark.integration
def test_the_activity_yields_at_its_budget_and_a_retry_continues_from_the_heartbeat(
    hub_server: HubServer, hub_repos: HubRepos
) -> None:
    org = _org()
    for i in range(8):
        _repo(hub_repos, f"{org}/m{i}")
    repos = [f"{org}/m{i}" for i in range(4)]
    policy = _policy(allowed_organizations=[org], allowed_repositories=repos, refresh_budget="3s")
    unbudgeted = index_of(_scan(hub_server, policy))

    # The budget (three clock readings) runs out: the result says so and carries where to continue.
    acts = CatalogIndexActivities(None, "unused", hub_server.url, clock=_Ticks(), heartbeat_interval=0)
    req = IndexHuggingFaceInput(source="s", policy=policy)
    results = [_run(acts, req)]
    while not results[-1].complete:
        assert results[-1].progress is not None and results[-1].digest is None
        results.append(_run(acts, req.model_copy(update={"resume": results[-1].progress})))
        assert len(results) < 20
    assert len(results) > 2 and results[-1].digest == unbudgeted.digest and results[-1].entry_count == 8

    # An attempt that dies mid-scan: the retry starts from its last heartbeat, not from the beginning.
    beats: list[Any] = []
    crash_after = [6]

    def dying_clock() -> float:
        crash_after[0] -= 1
        if crash_after[0] < 0:
            raise ConnectionError("worker lost")
        return 0.0

    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details[0])
    dying = CatalogIndexActivities(None, "unused", hub_server.url, clock=dying_clock, heartbeat_interval=0)
    unbudgeted_policy = _policy(allowed_organizations=[org], allowed_repositories=repos)
    # (Inside a listing the lost connection surfaces as the retryable SourceUnavailable.)
    with pytest.raises((ConnectionError, ApplicationError)):
        _run(dying, IndexHuggingFaceInput(source="s", policy=unbudgeted_policy), env)
    assert beats
    last = ScanProgress.model_validate(beats[-1])
    assert last.cursor is not None and last.entry_count >= 2
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2, heartbeat_details=[beats[-1]])
    expected = index_of(_scan(hub_server, unbudgeted_policy)).digest
    mark = hub_server.mark()
    healthy = CatalogIndexActivities(None, "unused", hub_server.url, heartbeat_interval=0)
    done = _run(healthy, IndexHuggingFaceInput(source="s", policy=unbudgeted_policy), retry)
    assert done.complete and done.digest == expected
    # The repositories indexed before the crash are not asked for again.
    done_before = [r for r in repos if r in last.unpack().entries]
    asked = [r.path for r in hub_server.requests_for("/api/models/", since=mark)]
    assert done_before and not [p for p in asked for r in done_before if p.startswith(f"/api/models/{r}?")]


# -- gated repos and the token Secret (real kube-apiserver) -----------------------------------------------


@pytest.fixture(scope="module")
def controller_ns(kube_api: client.ApiClient) -> str:
    return new_namespace(kube_api, "catalog")


def _secret(api: client.ApiClient, namespace: str, data: dict[str, str]) -> str:
    name = f"hf-{uuid.uuid4().hex[:8]}"
    body = client.V1Secret(metadata=client.V1ObjectMeta(name=name),
                           data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()})  # fmt: skip
    client.CoreV1Api(api).create_namespaced_secret(namespace, body)
    return name


@pytest.mark.integration
def test_a_gated_repo_needs_the_token_from_the_secret(
    hub_server: HubServer, hub_repos: HubRepos, kube_api: client.ApiClient, controller_ns: str
) -> None:
    token = f"hf_catalog_{uuid.uuid4().hex}"
    org = _org()
    _repo(hub_repos, f"{org}/open")
    _repo(hub_repos, f"{org}/gated", gated=True, tokens=[token])
    _repo(hub_repos, f"{org}/private", private=True, tokens=[token])
    acts = CatalogIndexActivities(kube_api, controller_ns, hub_server.url, heartbeat_interval=0)
    policy = _policy(allowed_organizations=[org])

    def run(secret: str | None, beats: list[Any] | None = None) -> IndexHuggingFaceResult:
        env = ActivityEnvironment()
        if beats is not None:
            env.on_heartbeat = lambda *details: beats.append(details)
        return _run(acts, IndexHuggingFaceInput(source="s", policy=policy, token_secret_name=secret), env)

    anonymous = run(None)
    assert anonymous.complete and anonymous.entry_count == 1 and anonymous.skipped_inaccessible == 1
    no_grant = run(_secret(kube_api, controller_ns, {"token": HUB_USER_TOKEN}))
    assert no_grant.entry_count == 1 and no_grant.skipped_inaccessible == 1

    beats: list[Any] = []
    granted = run(_secret(kube_api, controller_ns, {"token": token + "\n"}), beats)
    assert granted.complete and granted.skipped_inaccessible == 0 and granted.progress is not None
    entries = granted.progress.unpack().entries
    assert sorted(entries) == [f"{org}/gated", f"{org}/open", f"{org}/private"] and entries[f"{org}/gated"].gated
    visible = granted.model_dump_json() + repr(beats) + json.dumps(granted.progress.unpack().model_dump(mode="json"))
    assert token not in visible

    # A token the Hub does not know fails the refresh (instead of hiding every private repo), and says so.
    with pytest.raises(ApplicationError) as info:
        run(_secret(kube_api, controller_ns, {"token": "hf_not_a_known_token"}))
    assert info.value.type == ErrorType.SOURCE_ACCESS_DENIED and "hf_not_a_known_token" not in str(info.value)
    with pytest.raises(ApplicationError) as info:
        run(f"absent-{uuid.uuid4().hex[:6]}")
    assert info.value.type == ErrorType.AUTH_SECRET_NOT_FOUND
