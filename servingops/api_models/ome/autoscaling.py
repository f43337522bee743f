"""Per-component autoscaler configuration (HPA, KEDA, External), cross-component scaling policy, and
the autoscaler state reported in status."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    KubeObject,
    KubeObjectList,
    Quantity,
    Time,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.enums import AutoscalerClass, AutoscalerManagedBy, ComponentType, ScalingMode


class KedaAutoscaler(ApiModel):
    """KedaAutoscaler holds KEDA ScaledObject configuration passed through verbatim. Alpha. The API
    may change without notice."""

    # minItems is repeated for the schema: the opaque KubeObjectList schema replaces pydantic's own.
    triggers: KubeObjectList = Field(min_length=1, json_schema_extra={"minItems": 1})
    """Triggers are passed through verbatim to kedav1.ScaledObjectSpec.Triggers. The full KEDA
    trigger surface (prometheus, cron, external, kafka, ...) is supported."""
    advanced: KubeObject | None = None
    """Advanced ScaledObject configuration — horizontalPodAutoscalerConfig,
    restoreToOriginalReplicaCount."""
    polling_interval: int | None = None
    """PollingInterval is the interval, in seconds, at which KEDA checks each trigger. Defaults to
    the KEDA-side default when unset."""
    cooldown_period: int | None = None
    """CooldownPeriod is the time, in seconds, KEDA waits before scaling down after the last trigger
    fires. Defaults to the KEDA-side default when unset."""
    idle_replica_count: int | None = None
    """IdleReplicaCount enables scaling to a fixed count when no triggers fire (commonly 0 for
    scale-to-zero). Must be strictly less than the effective MinReplicaCount."""
    fallback: KubeObject | None = None
    """Fallback policy applied when the metric source becomes unavailable."""


class HPAAutoscaler(ApiModel):
    """HPAAutoscaler holds HorizontalPodAutoscaler configuration passed through verbatim. Alpha. The
    API may change without notice."""

    metrics: KubeObjectList | None = None
    """Metrics are passed through verbatim to autoscalingv2.HorizontalPodAutoscalerSpec.Metrics.
    Supports Resource, ContainerResource, Pods, Object, and External metric sources. If empty, the
    controller defaults to a single CPU=80% Resource metric."""
    behavior: KubeObject | None = None
    """Behavior controls scaling stabilization windows and per-direction policies."""


class ComponentAutoscaler(ApiModel):
    """ComponentAutoscaler configures the autoscaler for a single Component (engine / decoder /
    router). Takes priority over the legacy ome.io/autoscalerClass annotation for this Component,
    and is the only way to configure per-Component autoscaling on an InferenceService. Alpha. The
    API may change without notice."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(self.class != 'KEDA' || (has(self.keda) && !has(self.hpa))) && (self.class != "
                "'HPA' || !has(self.keda))",
                "class KEDA requires keda and forbids hpa; class HPA forbids keda",
            ),
        )
    )

    class_: AutoscalerClass = Field(alias="class")
    """Class selects the autoscaler implementation."""
    keda: KedaAutoscaler | None = None
    """Keda holds KEDA-specific configuration. Required when Class == "KEDA"."""
    hpa: HPAAutoscaler | None = None
    """HPA holds HorizontalPodAutoscaler-specific configuration. Optional when Class == "HPA"; if
    absent the controller emits a default CPU=80% HPA."""


class AutoscalerPolicyRef(ApiModel):
    """AutoscalerPolicyRef names a same-namespace AutoscalerPolicy that renders this component's
    autoscaler. Deliberately a sibling of the inline Autoscaler block, not a field inside it: ref
    and inline block may coexist — the inline block wins — and that coexistence is the
    preview/rollback mechanism."""

    name: str = Field(min_length=1)
    """Name of an AutoscalerPolicy in the InferenceService's namespace."""
    kind: Literal["AutoscalerPolicy", "ClusterAutoscalerPolicy"] = Field(
        default="AutoscalerPolicy",
        json_schema_extra=validations(
            cel("self == 'AutoscalerPolicy'", "ClusterAutoscalerPolicy is reserved until the cluster-scoped twin ships")
        ),
    )
    """Kind of the referenced policy. "ClusterAutoscalerPolicy" is a reserved shape: admission
    rejects it until the cluster-scoped twin ships."""


class AutoscalerPolicyProvenance(ApiModel):
    """AutoscalerPolicyProvenance reports, on the consuming InferenceService, which policy produced
    a component's live autoscaler."""

    name: str | None = None
    """Name of the AutoscalerPolicy in the InferenceService's namespace."""
    observed_generation: int | None = None
    """ObservedGeneration is the policy generation the rendered block came from."""
    portable_digest: str | None = None
    """PortableDigest is the policy's canonical spec digest — equal across clusters iff the policy
    specs match."""
    resolved_digest: str | None = None
    """ResolvedDigest is a digest of the rendered ComponentAutoscaler plus the effective bounds and
    bound provider endpoint. It differs per cluster by design; its job is per-home provenance ("did
    my policy edit land here?")."""


class ShadowedAutoscalerPolicy(ApiModel):
    """ShadowedAutoscalerPolicy reports a policy ref that is currently shadowed by an inline
    autoscaler block (inline outranks policy). The shadow render is the in-cluster preview surface:
    it shows what the policy would produce without changing behavior."""

    name: str | None = None
    """Name of the shadowed AutoscalerPolicy."""
    portable_digest: str | None = None
    """PortableDigest is the shadowed policy's canonical spec digest."""
    would_render_digest: str | None = None
    """WouldRenderDigest is the resolved digest the policy would produce for this component if the
    inline block were removed."""


class ComponentAutoscalerStatus(ApiModel):
    """ComponentAutoscalerStatus reports per-Component autoscaler state on the InferenceService.
    Mirrors the resolved ComponentAutoscaler block plus the live HPA / ScaledObject metrics so an
    operator can read the authoritative scaler shape, who owns it, and what it's currently doing —
    all from the parent ISVC without chasing IRs and scalers separately."""

    class_: AutoscalerClass | None = Field(default=None, alias="class")
    """Class echoes the resolved autoscaler class as picked by the Component's deployment-mode
    resolver. One of HPA | KEDA | External | None. Mirrors the input that drove dispatch so the
    operator can confirm the inheritance chain landed on the expected class."""
    managed_by: AutoscalerManagedBy | None = None
    """ManagedBy reports who owns the underlying scaler object. Distinguished from Class because
    none and external are dispatch-equivalent (both => delete any OME-managed HPA / SO); the
    surface-level distinction lives here."""
    spec_source: str | None = None
    """SpecSource reports which layer of the ISVC -> policy -> runtime -> legacy -> default
    inheritance chain produced the resolved Autoscaler block. One of "isvc" | "policy" | "runtime" |
    "legacy" | "default"."""
    policy: AutoscalerPolicyProvenance | None = None
    """Policy identifies the AutoscalerPolicy that rendered the live block. Set only when SpecSource
    is "policy"."""
    shadowed_policy_ref: ShadowedAutoscalerPolicy | None = None
    """ShadowedPolicyRef reports a policy ref outranked by an inline block (SpecSource "isvc" with
    spec.<component>.autoscalerPolicyRef set). Its wouldRenderDigest is the in-cluster preview of
    what the policy would produce if the inline block were removed."""
    current_replicas: int | None = None
    """CurrentReplicas is mirrored from the HPA / ScaledObject status. Zero when ManagedBy != "ome"
    or when the scaler has not yet reported."""
    desired_replicas: int | None = None
    """DesiredReplicas is mirrored from the HPA / ScaledObject status. Zero when ManagedBy != "ome"
    or when the scaler has not yet reported."""
    last_scale_time: Time | None = None
    """LastScaleTime mirrors the HPA / ScaledObject's last scale event. Nil when ManagedBy != "ome",
    when the scaler has not yet reported, or when no scaling has occurred since the scaler was
    created."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions mirrors the HPA's or ScaledObject's conditions verbatim (HPA: ScalingActive /
    AbleToScale / ScalingLimited; ScaledObject: Ready / Active / Fallback / Paused)."""


class ProportionalPolicy(ApiModel):
    """ProportionalPolicy specifies the anchor Component and per-follower replica ratios for
    ScalingProportional. Alpha. The API may change without notice."""

    anchor: ComponentType = ComponentType.ENGINE
    """Anchor is the Component whose replica count drives followers."""
    ratios: dict[ComponentType, Quantity] | None = None
    """Ratios maps each follower Component to its replica ratio relative to the anchor. A ratio of
    1.0 means parity; 0.25 means one follower per four anchor replicas (rounded up). Components not
    listed scale independently."""


class ScalingPolicy(ApiModel):
    """ScalingPolicy defines coordination between the Components of an InferenceService. Alpha. The
    API may change without notice."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "!has(self.mode) || self.mode != 'Proportional' || has(self.proportional)",
                "proportional is required when mode is Proportional",
            ),
        )
    )

    mode: ScalingMode = ScalingMode.INDEPENDENT
    """Mode selects the coordination strategy."""
    proportional: ProportionalPolicy | None = None
    """Proportional configuration; required when Mode == "Proportional"."""


class CandidatePolicyDigest(ApiModel):
    """CandidatePolicyDigest pairs a policy name with the portable digest this home observed for it."""

    name: str | None = None
    """Name of the AutoscalerPolicy."""
    portable_digest: str | None = None
    """PortableDigest this home observed for the policy."""


class CandidateComponentAutoscaling(ApiModel):
    """CandidateComponentAutoscaling is one component's rendered-autoscaler state on one home."""

    resolved_digest: str | None = None
    """ResolvedDigest of the rendered autoscaler on this home."""
    ready: bool | None = None
    """Ready is true when the component reports a policy-rendered autoscaler."""


class CandidateAutoscalingStatus(ApiModel):
    """CandidateAutoscalingStatus is the per-home AutoscalerPolicy digest state the watch-funnel
    lifts off a derived InferenceService."""

    policies: list[CandidatePolicyDigest] | None = None
    """Policies reports the portable digest of each policy as observed on this home. Every entry
    must match the control plane's copy; a mismatch is distribution skew."""
    components: dict[ComponentType, CandidateComponentAutoscaling] | None = None
    """Components maps each policy-consuming component to its per-home resolved digest ("did my
    policy edit land here?")."""
    ready: bool | None = None
    """Ready is true when every policy-consuming component on this home reports specSource=policy
    with a resolved digest."""
