"""Is a `type: HuggingFace` ModelCatalogSource's `spec.policy` scoped and bounded? Decided before any scan.

Pure: no I/O, no clock, no Temporal. The workflow (or the activity, defensively) asks `evaluate_policy` and
starts an index scan only with the `IndexBounds` of an allowed verdict; a blocked verdict becomes the
source's condition (reason and message as returned) and no provider request is made.

What counts as scope (seed 000: "A source that omits scope or exceeds these bounds must stay blocked instead
of starting an unbounded provider scan"):

- `allowedOrganizations`, `allowedRepositories` and `allowedCollections` each name a finite set on the
  provider: an organisation's models, one repository, a curated collection. Any one of them non-empty scopes
  a source; together they are a union.
- `allowedTags` alone is no scope. It narrows the entries of the scope above ("entries matching at least one
  of the selected tags"), but a tag by itself selects from the whole provider: `text-generation` or
  `safetensors` match hundreds of thousands of Hub models, so a tags-only source would be exactly the
  unbounded provider scan the seed forbids. It stays blocked with `PolicyScopeMissing`.

What counts as a bound ("Policy defines required bounds for provider indexing"):

- `maxIndexedEntries` is required: it is the one bound on how much a scan reads and stores. Without it an
  organisation with tens of thousands of models is indexed whole, so the source is blocked with
  `PolicyBoundsMissing` (the message names the field and its range).
- `maxMetadataBytes` and `refreshBudget` bound each entry and each attempt; when omitted they take the safe
  defaults below (the seed leaves them optional and a default cannot make a scan unbounded).
- Beyond the bounds (`PolicyBoundsExceeded`): a value outside the schema's range (the CRD rejects these at
  admission; checked again because input is input), a refresh budget that is not a positive Go duration or
  is longer than `MAX_REFRESH_BUDGET`, and more explicit `allowedRepositories` than `maxIndexedEntries` (the
  policy then asks for more entries than it allows).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from servingops.api_models.deckhouse.catalog_source import CatalogPolicy
from servingops.api_models.durations import parse_duration

MAX_INDEXED_ENTRIES_RANGE = (1, 10000)
MAX_METADATA_BYTES_RANGE = (1024, 1048576)
DEFAULT_MAX_METADATA_BYTES = 65536
"""Per-entry metadata cap when `maxMetadataBytes` is omitted: far above a normal entry (~0.5 KiB)."""
DEFAULT_REFRESH_BUDGET = timedelta(minutes=10)
"""How long one refresh attempt may scan when `refreshBudget` is omitted."""
MAX_REFRESH_BUDGET = timedelta(hours=1)
"""The longest budget one attempt may have: a longer scan yields and continues in the next attempt."""


class PolicyReason(StrEnum):
    """Condition reasons of a policy verdict (metav1.Condition reason pattern, CamelCase)."""

    SATISFIED = "PolicySatisfied"
    SCOPE_MISSING = "PolicyScopeMissing"
    BOUNDS_MISSING = "PolicyBoundsMissing"
    BOUNDS_EXCEEDED = "PolicyBoundsExceeded"


class IndexBounds(BaseModel):
    """The bounds a scan runs within, resolved from the policy (defaults applied)."""

    model_config = ConfigDict(frozen=True)

    max_indexed_entries: int
    max_metadata_bytes: int
    refresh_budget_seconds: float


class IndexScope(BaseModel):
    """What a scan lists, normalised: each list sorted and without duplicates (so scans are deterministic)."""

    model_config = ConfigDict(frozen=True)

    organizations: tuple[str, ...] = ()
    repositories: tuple[str, ...] = ()
    collections: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Empty: no tag filter. Otherwise an entry must carry at least one of these tags."""


class PolicyVerdict(BaseModel):
    """Whether a scan may start; when it may not, the condition reason and a message saying what to set."""

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: PolicyReason
    message: str
    scope: IndexScope | None = None
    """Set when allowed."""
    bounds: IndexBounds | None = None
    """Set when allowed."""


def _normalised(values: list[str] | None) -> tuple[str, ...]:
    return tuple(sorted({v.strip() for v in values or [] if v and v.strip()}))


def _blocked(reason: PolicyReason, message: str) -> PolicyVerdict:
    return PolicyVerdict(allowed=False, reason=reason, message=message)


def _in(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def evaluate_policy(policy: CatalogPolicy | None) -> PolicyVerdict:
    """The verdict on a HuggingFace source's `spec.policy` (None: no policy at all)."""
    scope = IndexScope(
        organizations=_normalised(policy.allowed_organizations if policy else None),
        repositories=_normalised(policy.allowed_repositories if policy else None),
        collections=_normalised(policy.allowed_collections if policy else None),
        tags=_normalised(policy.allowed_tags if policy else None),
    )
    if policy is None or not (scope.organizations or scope.repositories or scope.collections):
        tags_note = (
            " spec.policy.allowedTags only narrows a scope: on its own it would scan the whole provider."
            if scope.tags else ""
        )  # fmt: skip
        return _blocked(
            PolicyReason.SCOPE_MISSING,
            "The source has no scope, so indexing would scan the whole provider: set at least one of "
            "spec.policy.allowedOrganizations, spec.policy.allowedRepositories or spec.policy.allowedCollections."
            + tags_note,
        )
    if policy.max_indexed_entries is None:
        low, high = MAX_INDEXED_ENTRIES_RANGE
        return _blocked(
            PolicyReason.BOUNDS_MISSING,
            f"The source sets no bound on how many entries it indexes: set spec.policy.maxIndexedEntries "
            f"({low}..{high}).",
        )
    max_entries = policy.max_indexed_entries
    if not _in(max_entries, MAX_INDEXED_ENTRIES_RANGE):
        low, high = MAX_INDEXED_ENTRIES_RANGE
        return _blocked(
            PolicyReason.BOUNDS_EXCEEDED,
            f"spec.policy.maxIndexedEntries is {max_entries}, outside {low}..{high}: set a value in that range.",
        )
    max_bytes = policy.max_metadata_bytes if policy.max_metadata_bytes is not None else DEFAULT_MAX_METADATA_BYTES
    if not _in(max_bytes, MAX_METADATA_BYTES_RANGE):
        low, high = MAX_METADATA_BYTES_RANGE
        return _blocked(
            PolicyReason.BOUNDS_EXCEEDED,
            f"spec.policy.maxMetadataBytes is {max_bytes}, outside {low}..{high}: set a value in that range.",
        )
    budget = DEFAULT_REFRESH_BUDGET
    if policy.refresh_budget is not None:
        try:
            budget = parse_duration(policy.refresh_budget)
        except ValueError:
            return _blocked(
                PolicyReason.BOUNDS_EXCEEDED,
                f"spec.policy.refreshBudget {policy.refresh_budget[:64]!r} is not a duration: set a Go duration "
                f'such as "5m" (at most {_spell(MAX_REFRESH_BUDGET)}).',
            )
        if budget <= timedelta(0) or budget > MAX_REFRESH_BUDGET:
            return _blocked(
                PolicyReason.BOUNDS_EXCEEDED,
                f"spec.policy.refreshBudget {policy.refresh_budget!r} is outside (0, {_spell(MAX_REFRESH_BUDGET)}]: "
                "set a positive duration no longer than that; a longer refresh continues in the next attempt.",
            )
    if len(scope.repositories) > max_entries:
        return _blocked(
            PolicyReason.BOUNDS_EXCEEDED,
            f"spec.policy.allowedRepositories names {len(scope.repositories)} repositories but "
            f"spec.policy.maxIndexedEntries is {max_entries}: raise maxIndexedEntries or list fewer repositories.",
        )
    return PolicyVerdict(
        allowed=True,
        reason=PolicyReason.SATISFIED,
        message=_describe(scope, max_entries),
        scope=scope,
        bounds=IndexBounds(
            max_indexed_entries=max_entries,
            max_metadata_bytes=max_bytes,
            refresh_budget_seconds=budget.total_seconds(),
        ),
    )


def _spell(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds}s"


def _describe(scope: IndexScope, max_entries: int) -> str:
    parts = [
        f"{len(items)} {what}"
        for items, what in (
            (scope.organizations, "organizations"),
            (scope.repositories, "repositories"),
            (scope.collections, "collections"),
        )
        if items
    ]
    tags = f", entries tagged {' or '.join(scope.tags)}" if scope.tags else ""
    return f"Indexing {', '.join(parts)}{tags}, at most {max_entries} entries."
