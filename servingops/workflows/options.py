"""The one catalogue of activity timeouts and retry policies, one entry per kind of activity.

Workflows call activities by reference with one typed input, in the manner of Temporal's own
samples, and take the options from here:

    seen = await workflow.execute_activity_method(
        ServingActivities.observe, ObserveInput(isvc=ref), **options.KUBE)

Every policy lists the permanent error types (api_models.errors) as non-retryable, so a bad
input ends its attempt at once even if an activity forgot to say so. Where a policy has no
bound on attempts, the reason is written next to it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TypedDict

from temporalio.common import RetryPolicy

from servingops.api_models.errors import NON_RETRYABLE_TYPES


def _policy(*, maximum_attempts: int, maximum_interval: timedelta, initial_interval: timedelta = timedelta(seconds=1),
            backoff_coefficient: float = 2.0) -> RetryPolicy:
    """A retry policy under which a permanent error type (api_models.errors) is never retried,
    even when an activity forgot to raise it non-retryable. (The defaults are Temporal's.)"""
    return RetryPolicy(initial_interval=initial_interval, backoff_coefficient=backoff_coefficient,
                       maximum_interval=maximum_interval, maximum_attempts=maximum_attempts,
                       non_retryable_error_types=list(NON_RETRYABLE_TYPES))


class ActivityOptions(TypedDict, total=False):
    """The keyword arguments of `workflow.execute_activity*` that the catalogue fixes."""

    start_to_close_timeout: timedelta
    schedule_to_start_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy


KUBE: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=30),
    # Unbounded on purpose: every Kubernetes activity is idempotent (read, ensure, set, delete,
    # merge a status), and while the apiserver is away the only way forward is to wait for it.
    # What retrying cannot fix is a permanent error type and ends the attempt at once.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=0,
    ),
}
"""A Kubernetes read or write (also the serving activities and the operator ConfigMap read)."""


class LocalActivityOptions(TypedDict, total=False):
    """The keyword arguments of `workflow.execute_local_activity*` that the catalogue fixes."""

    start_to_close_timeout: timedelta
    retry_policy: RetryPolicy


KUBE_LOCAL: LocalActivityOptions = {
    # A local activity runs inside the workflow task that asks for it: no schedule on the server,
    # no poll, no second workflow task for its result. Used where a workflow task waits on a short
    # apiserver write and a person waits on the workflow task (a promote's scale and weights).
    # Kept short: while it runs the workflow task stays open (the SDK heartbeats it past its timeout).
    "start_to_close_timeout": timedelta(seconds=10),
    # Unbounded as KUBE, for the same reason; past the SDK's local retry threshold (a minute) the
    # backoff becomes a durable timer instead of a held workflow task.
    "retry_policy": KUBE["retry_policy"],
}
"""A Kubernetes write on a path a user waits on, as a local activity (`execute_local_activity*`)."""

CLEANUP: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=30),
    # Bounded: a best-effort Kubernetes write the workflow can do without (removing a consumed
    # rollout annotation) must not hold the workflow while the apiserver is away; the workflow
    # tries again on a later pass instead (InferenceServiceWorkflow: every minute while one is due).
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=4,
    ),
}
"""A best-effort Kubernetes write whose failure the workflow tolerates and retries later itself."""

QUICK: ActivityOptions = {
    "start_to_close_timeout": timedelta(minutes=2),
    # Bounded: a registry or source that stays unreachable for ~10 minutes fails the import with
    # the last error as its reason, instead of leaving the model Pending without a word.
    "retry_policy": _policy(
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=20,
    ),
}
"""A short call to a registry, a source's metadata, a host claim or an upload session."""

TRANSFER: ActivityOptions = {
    "start_to_close_timeout": timedelta(hours=6),
    # Transfers heartbeat every 2 s: a silent worker is presumed dead after 20 s (the SDK sends
    # heartbeat details at most every 0.8 x the timeout, so a short timeout also keeps resume
    # points fresh) and the retry resumes from the last heartbeat details.
    "heartbeat_timeout": timedelta(seconds=20),
    # A host that never picks its task up (gone for good) ends the attempt.
    "schedule_to_start_timeout": timedelta(minutes=10),
    # Bounded: each attempt resumes where the last heartbeat left it, so 50 attempts is far more
    # than a flaky network needs and still ends a transfer that can never finish.
    "retry_policy": _policy(
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=50,
    ),
}
"""A long transfer or inspection on one worker host's spool, heartbeating its resume point."""

SAMPLE: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=60),
    # A sample that cannot be taken is an inconclusive sample, not a reason to block the step: a
    # few quick attempts, then the gate decides what "no answer" means.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=5),
        maximum_attempts=3,
    ),
}
"""One metrics sample (Prometheus)."""

MEMBER: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=90),
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        # Unbounded, as KUBE: a member that cannot be reached is an answer the activity returns
        # (MemberWrite / MemberObservation), so what is retried here is the control plane's own
        # apiserver (the registration and its Secret), which an outage makes wait, not fail.
        maximum_attempts=0,
    ),
}
"""A read or write in a member cluster (placement): a few requests of at most 15 s each."""

CATALOG_INDEX: ActivityOptions = {
    # One attempt scans for at most the source's refreshBudget (1 h at most: activities/catalog/policy.py)
    # and then returns its progress; the margin covers the last Hub request and packing the state.
    "start_to_close_timeout": timedelta(minutes=75),
    # The scan heartbeats its resume point every 5 s; one Hub request may take 30 s.
    "heartbeat_timeout": timedelta(seconds=90),
    # Bounded: a Hub that stays unreachable after a few quick attempts is the source's condition
    # (Ready False, nextRetryTime) and the workflow's own backoff takes over; each attempt resumes from
    # the last heartbeat.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=3,
    ),
}
"""One budgeted attempt of a catalog index scan (catalog.index_huggingface)."""

CATALOG_STORE: ActivityOptions = {
    "start_to_close_timeout": timedelta(minutes=5),
    # Bounded for the same reason as CATALOG_INDEX: a registry that stays away is the source's
    # condition with a nextRetryTime, and the last stored revision stays.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=5,
    ),
}
"""Pushing a catalog index artifact (catalog.store_index), and the source's Temporal Schedule calls."""

CATALOG_REMOTE: ActivityOptions = {
    # One HTTPS call to another cluster's catalog endpoint (30 s per connection and per read, a body of
    # at most ACTIVITY_MAX_INDEX_BYTES).
    "start_to_close_timeout": timedelta(minutes=2),
    # Bounded like CATALOG_INDEX: an endpoint that stays unreachable after a few quick attempts is the
    # source's condition (Ready False CatalogUnreachable, nextRetryTime) and the workflow's backoff takes over.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=3,
    ),
}
"""A type Catalog source's index fetch (catalog.fetch_remote_index)."""

CATALOG_COPY: ActivityOptions = {
    # A copy by digest of a whole model artifact from the remote registry: as long as a transfer.
    "start_to_close_timeout": timedelta(hours=6),
    # catalog.copy_artifact heartbeats a CopyProgress after every blob and every 2 s within one; a retry
    # resumes after the blobs done (present blobs are skipped anyway).
    "heartbeat_timeout": timedelta(minutes=2),
    # Bounded: a remote that stays away fails the import (ImportGaveUp with the last error); a new spec
    # or a new run of the workflow tries again.
    "retry_policy": _policy(
        initial_interval=timedelta(seconds=2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(minutes=1),
        maximum_attempts=8,
    ),
}
"""Copying a type Catalog source's entry into this cluster's registry (catalog.copy_artifact)."""
