"""Rollout state in status: the canary step machine, pinned rollout runs, per-group resolution and
cross-component coordination."""

from __future__ import annotations

from pydantic import Field

from servingops.api_models.base import ApiModel, IntOrString, Time
from servingops.api_models.ome.enums import (
    CanaryFailureReason,
    ComparisonOperator,
    ComponentType,
    CoordinationPhase,
    CoordinationPolicy,
    RolloutPlanSource,
    RolloutRunOutcome,
)
from servingops.api_models.ome.rollout import RolloutGroup, RolloutPolicyRef


class AnalysisMetricResult(ApiModel):
    """AnalysisMetricResult is the last observed evaluation of one AnalysisMetric. Value is a string
    (not a float) because the Kubernetes API convention avoids floating-point fields; it is for
    display only."""

    name: str | None = None
    """Name matches the AnalysisMetric.Name this result is for."""
    value: str | None = None
    """Value is the query result at the last sample, formatted for display (e.g. "0.012"). Empty
    when the sample was inconclusive."""
    threshold: str | None = None
    """Threshold echoes the bound that was applied, so the result is self-describing in status."""
    operator: ComparisonOperator | None = None
    """Operator echoes the comparison that was applied."""
    passed: bool | None = None
    """Passed is whether this metric satisfied its condition at the last sample."""
    message: str | None = None
    """Message carries the reason when a metric did not pass or could not be evaluated (e.g. "no
    data", a query error)."""
    time: Time | None = None
    """Time is when this result was recorded."""


class CanaryFailure(ApiModel):
    """CanaryFailure is why and when a canary parked."""

    reason: CanaryFailureReason | None = None
    """Reason names the gate that gave up."""
    time: Time | None = None
    """Time is when the canary parked."""


class CanaryStatus(ApiModel):
    """CanaryStatus is the canary executor's persistent state machine for one unit's
    spec.rollout.groups[].canary run: which step is active, when it was entered (Auto promotion
    measures Pause.Duration from here), and which revisions are the canary and the stable."""

    target_id: str | None = Field(default=None, alias="targetID")
    """TargetID identifies the canary group's pinned Component target set. A new target set re-arms
    the canary even when the externally routed Component's revision did not change."""
    canary_revision_hash: str | None = None
    """CanaryRevisionHash is the revision hash being rolled out."""
    stable_revision_hash: str | None = None
    """StableRevisionHash is the revision hash that was serving as stable when the canary began —
    the rollback target."""
    current_step: int | None = None
    """CurrentStep is the zero-based index into spec.rollout.groups[i].canary.steps; equal to the
    number of steps once the canary has completed."""
    step_entered_time: Time | None = None
    """StepEnteredTime is when CurrentStep was entered. Auto promotion measures Pause.Duration from
    this timestamp."""
    observed_traffic_weight: int | None = None
    """ObservedTrafficWeight is the external traffic weight currently programmed for the canary
    revision (mirrors the active step's TrafficWeight once applied)."""
    promoted_through: str | None = None
    """PromotedThrough is the ome.io/rollout-promote value the most recent step advance applied. It
    is stamped in the same status write as the advance — the durable record of the promotion, since
    metadata (the annotation) and status cannot be written atomically."""
    pre_step_hold: bool | None = None
    """PreStepHold holds the canary's traffic at its currently-programmed weight after a repin whose
    clamped step would raise exposure: a repin may only hold or tighten, so the raise waits for an
    explicit ome.io/rollout-promote (value = the canary revision hash)."""
    rolled_back_revision_hash: str | None = None
    """RolledBackRevisionHash is set when a rollback (ome.io/rollout-rollback) abandons a canary: it
    records the primary Component's rejected revision hash."""
    analysis_failed_checks: int | None = None
    """AnalysisFailedChecks counts failing analysis samples in the CURRENT step (reset to zero on
    each advance). Auto-rollback fires when it reaches Analysis.FailureLimit. Set only under
    Promotion=Analysis."""
    last_evaluation_time: Time | None = None
    """LastEvaluationTime is when the analysis metrics were last sampled. The controller throttles
    sampling to at most once per Analysis.Interval using this timestamp, so a burst of unrelated
    reconciles cannot over-count failures. Set only under Promotion=Analysis."""
    last_conclusive_evaluation_time: Time | None = None
    """LastConclusiveEvaluationTime is when analysis last produced a conclusive sample (pass or fail
    — i.e. Prometheus answered). The stall timeout is measured from here: a long run of inconclusive
    samples escalates to Failed. Set only under Promotion=Analysis."""
    metric_results: list[AnalysisMetricResult] | None = None
    """MetricResults is the most recent per-metric evaluation, for observability (kubectl get isvc
    shows why a step held or rolled back). Set only under Promotion=Analysis."""
    capacity_wait_since: Time | None = None
    """CapacityWaitSince is when the current step's capacity gate became unmet. The ready timeout is
    measured from here and never from the step's soak anchor, so a long soak cannot spend the
    capacity budget and a capacity dip cannot restart the soak."""
    failed: CanaryFailure | None = None
    """Failed records that the canary is parked at CurrentStep: the capacity gate stayed unmet past
    the ready timeout, analysis stayed inconclusive past the stall timeout, or a rollback found no
    stable revision to return to."""


class RolloutRunTarget(ApiModel):
    """RolloutRunTarget is one grouped Component's pinned target revision."""

    component: ComponentType | None = None
    """Component this target is for."""
    revision: str | None = None
    """Revision is the Component's target revision hash at run open."""
    stable_revision: str | None = None
    """StableRevision is the Component's last promoted revision hash at run open. It is preserved
    across retargets and is the exact rollback target."""


class RolloutRunGroup(ApiModel):
    """RolloutRunGroup is one pinned group: the resolved RolloutGroup the executors consume, plus
    the provenance of where its progression came from."""

    source: RolloutPlanSource | None = None
    """Source is where this group's progression came from."""
    policy_ref: RolloutPolicyRef | None = None
    """PolicyRef identifies the policy when Source is Policy. On derived ISVCs (multi-cluster
    inflation) it is recovered from the derive-time provenance annotation so members report the same
    identity a locally-resolved ref would."""
    policy_generation: int | None = None
    """PolicyGeneration is the referenced policy's generation at pin time."""
    portable_digest: str | None = None
    """PortableDigest is the pinned policy body's portable digest ("rp1:..."), or — for inline
    groups — the digest of the inline progression body, so drift detection works for both sources."""
    group: RolloutGroup | None = None
    """Group is the resolved group: components plus exactly one inline progression (a pinned group
    never carries a PolicyRef — the ref was resolved at pin time)."""


class RolloutRunPlan(ApiModel):
    """RolloutRunPlan is the frozen effective plan: the resolved groups in their pinned order. Group
    list-index identity (which keys the coordination engine's sticky state) indexes THIS list for
    the whole run, so mid-run group reorders in the spec cannot re-key ratio anchors or soak clocks."""

    groups: list[RolloutRunGroup] | None = Field(default=None, max_length=3)
    """Groups are the resolved groups in pinned order."""


class RolloutRun(ApiModel):
    """RolloutRun is one open rollout run: identity, targets, and the pinned plan."""

    run_id: str | None = Field(default=None, alias="runID")
    """RunID uniquely names this run (stable for its lifetime; a retarget closes the run and opens a
    new one with a new ID)."""
    opened_at: Time | None = None
    """OpenedAt is when the run was pinned."""
    pinned_at: Time | None = None
    """PinnedAt advances on every plan pin — the open, and each applied repin."""
    target_revisions: list[RolloutRunTarget] | None = None
    """TargetRevisions records, per grouped Component, the revision hash this run is rolling toward
    and the stable hash it can roll back to. A Component's target changing mid-run is a retarget:
    the run closes (Superseded) and a fresh run opens with a fresh render."""
    plan: RolloutRunPlan | None = None
    """Plan is the effective groups list, frozen for this run. Executors index it — never the live
    spec — while the run is open."""


class RolloutRunProvenance(ApiModel):
    """RolloutRunProvenance is the provenance subset of a pinned group, kept after the run closes."""

    source: RolloutPlanSource | None = None
    """Source is where the group's progression came from."""
    policy_ref: RolloutPolicyRef | None = None
    """PolicyRef identifies the policy when Source is Policy."""
    portable_digest: str | None = None
    """PortableDigest is the pinned progression body's portable digest."""


class RolloutRunRecord(ApiModel):
    """RolloutRunRecord is the bounded record of a closed run."""

    outcome: RolloutRunOutcome | None = None
    """Outcome is how the run ended."""
    opened_at: Time | None = None
    """OpenedAt is when the run was pinned."""
    closed_at: Time | None = None
    """ClosedAt is when the run closed."""
    target_revisions: list[RolloutRunTarget] | None = None
    """TargetRevisions retains each Component's target and stable revision so a rolled-back hold has
    an exact per-Component identity after ActiveRun is dropped."""
    groups: list[RolloutRunProvenance] | None = Field(default=None, max_length=3)
    """Groups carries per-group provenance (groups may reference different policies, so one digest
    per run would be lossy)."""


class ShadowedRolloutPolicyRef(ApiModel):
    """ShadowedRolloutPolicyRef reports what an outranked policy ref would pin."""

    name: str | None = None
    """Name of the shadowed RolloutPolicy."""
    would_pin_digest: str | None = None
    """WouldPinDigest is the portable digest of the policy body that a run would pin if the inline
    progression were removed."""


class RolloutGroupResolution(ApiModel):
    """RolloutGroupResolution is the always-current resolution view for one spec group: which source
    would pin now, and the shadowed-policy preview when an inline progression outranks a ref."""

    index: int | None = None
    """Index is the group's position in spec.rollout.groups[]."""
    source: RolloutPlanSource | None = None
    """Source is the source a run opened now would pin for this group."""
    policy_ref: RolloutPolicyRef | None = None
    """PolicyRef is the group's policy reference, if any."""
    observed_digest: str | None = None
    """ObservedDigest is the portable digest of the progression body Source resolves to right now
    (live render — compare against the active run's pinned digest to see drift)."""
    shadowed_policy_ref: ShadowedRolloutPolicyRef | None = None
    """ShadowedPolicyRef is set when an inline progression outranks a ref: the preview surface an
    operator diffs before deleting the inline block."""


class RolloutStatus(ApiModel):
    """RolloutStatus is the run-model surface under status.rollout: the pinned active run, a bounded
    record of the previous run, and the always-current per-group resolution view (what WOULD pin now
    — the preview surface)."""

    active_run: RolloutRun | None = None
    """ActiveRun is the pinned plan the executors are consuming. Present iff a run is open."""
    last_run: RolloutRunRecord | None = None
    """LastRun is the bounded record of the most recently closed run (digests and outcome, never the
    full plan — post-close plan history is the policy's git history)."""
    groups: list[RolloutGroupResolution] | None = Field(default=None, max_length=3)
    """Groups is the always-current resolution view, written every reconcile independent of runs:
    per group, which source would pin now and — when an inline progression shadows a ref — what the
    shadowed policy would pin."""


class RolloutCoordinationRatio(ApiModel):
    """RolloutCoordinationRatio is the cross-Component ratio snapshot used by RatioBalanced pacing."""

    original: dict[ComponentType, int] | None = None
    """Original is the snapshot of desired replica counts per Component at rollout start. The keys
    are ComponentType strings."""
    current: dict[ComponentType, int] | None = None
    """Current reports the live replica counts per Component."""
    new_pods: dict[ComponentType, int] | None = None
    """NewPods reports the new-revision pod counts per Component."""


class RolloutCoordinationGroupStatus(ApiModel):
    """RolloutCoordinationGroupStatus reports the observed state of one coordination group."""

    name: str | None = None
    """Name uniquely identifies the group within the RolloutCoordinationStatus. Auto-derived from
    the group index (stringified) on first observation."""
    components: list[ComponentType] | None = None
    """Components mirrors spec.rollout.groups[i].components for operator readability."""
    policy: CoordinationPolicy | None = None
    """Policy mirrors the spec policy."""
    order: list[ComponentType] | None = None
    """Order mirrors the spec order (Sequential / BlueGreen-ordered)."""
    phase: CoordinationPhase | None = None
    """Phase reports the base coordination phase. Metric-stable enum."""
    composite_phase: str | None = None
    """CompositePhase is a human-readable composite of Phase plus the active Component for
    Sequential / per-Component-aware policies (e.g. "decoder.Surging",
    "Sequential.AwaitingNextComponent"). Operator-facing; metrics use Phase, not CompositePhase."""
    current_component: ComponentType | None = None
    """CurrentComponent names the Component the group is actively reconciling (Sequential policy).
    Empty otherwise."""
    previous_component: ComponentType | None = None
    """PreviousComponent names the most recently completed Component in a Sequential group's order.
    Empty when no Component has yet reached Idle on the new revision."""
    observed_surge: IntOrString | None = None
    """ObservedSurge is the IntOrString surge target applied during the current Surging / Waiting
    phase. Empty when the group is Idle."""
    observed_ratio: RolloutCoordinationRatio | None = None
    """ObservedRatio reports cross-Component ratio snapshots when the group uses RatioBalanced
    pacing. Nil for PerComponent pacing."""
    last_transition_time: Time | None = None
    """LastTransitionTime is when Phase last changed."""
    message: str | None = None
    """Message is a short operator-facing explanation of the current Phase. Set on Failed /
    RollingBack / Paused phases."""


class RolloutCoordinationStatus(ApiModel):
    """RolloutCoordinationStatus reports per-group coordination state for the InferenceService."""

    groups: list[RolloutCoordinationGroupStatus] | None = None
    """Groups reports the observed state of each declared rollout group, indexed by position in
    spec.rollout.groups[]."""


class CandidateRolloutGroup(ApiModel):
    """CandidateRolloutGroup is one pinned group's provenance as observed on a home."""

    source: RolloutPlanSource | None = None
    """Source is where the group's progression came from (Inline or Policy)."""
    policy_name: str | None = None
    """PolicyName names the RolloutPolicy when Source is Policy."""
    portable_digest: str | None = None
    """PortableDigest is the pinned progression body's portable digest."""


class CandidateRolloutLastRun(ApiModel):
    """CandidateRolloutLastRun is the bounded outcome of a home's last closed run."""

    outcome: RolloutRunOutcome | None = None
    """Outcome is how the run ended."""
    digest: str | None = None
    """Digest folds the closed run's per-group portable digests into one order-sensitive comparable
    value."""


class CandidateRolloutStatus(ApiModel):
    """CandidateRolloutStatus is the bounded per-home rollout-run state the watch funnel lifts off a
    derived InferenceService: run identity and per-group provenance digests, never the pinned plan
    bodies (fleet-drift dashboards compare digests; plan content lives in the policy's git history)."""

    active_run_id: str | None = Field(default=None, alias="activeRunID")
    """ActiveRunID is the home's open rollout run, empty when none is open."""
    active_groups: list[CandidateRolloutGroup] | None = None
    """ActiveGroups is the active run's per-group provenance in pinned-plan order: which source each
    group pinned and under which digest."""
    last_run: CandidateRolloutLastRun | None = None
    """LastRun is the bounded record of the home's most recently closed run."""
