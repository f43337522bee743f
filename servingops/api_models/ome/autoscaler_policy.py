"""The AutoscalerPolicy kind: a reusable, parameterized autoscaler template that components attach to
through spec.<component>.autoscalerPolicyRef (seed 004, since v1.3).

Every admission rule the seed states is a CEL rule here, so the apiserver refuses a bad policy at apply
time; servingops/rendering/autoscaler_policy.py checks the same rules again before it renders (a policy
stored before a rule existed must not render) and holds what only the consuming component can decide.
Upstream OME's public code has no AutoscalerPolicy (checked at sgl-project/ome 17b77eda): where the seed
is silent the choice is said next to the field.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, WithJsonSchema

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeObject,
    KubeResource,
    PrinterColumn,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.autoscaling import HPAAutoscaler
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.enums import ComponentBoundsField, PolicyEnforcement
from servingops.api_models.ome.rollout import MetricProviderRef

TEMPLATE_VARIABLES: tuple[str, ...] = ("Namespace", "ISVCName", "Component", "MinReplicas", "MaxReplicas",
                                       "TargetName")
"""The closed, controller-derived variable set a trigger's metadata may name as `{{ .Var }}` (seed 004,
KedaTriggerTemplate)."""

TEMPLATE_REFERENCE = r"\{\{\s*\.(" + "|".join(TEMPLATE_VARIABLES) + r")\s*\}\}"
"""One admitted template reference. Nothing else Go's text/template knows (pipelines, functions, trim
markers) is admitted: the variables are the whole language."""

TEMPLATED_VALUE = r"^(?:[^{]|\{(?:[^{]|$)|" + TEMPLATE_REFERENCE.replace("(", "(?:", 1) + r")*$"
"""A metadata value whose every `{{` opens an admitted reference (RE2 and Python `re` read it alike; the
CEL rule and the renderer use this one pattern)."""

NETWORK_TRIGGER_TYPES: tuple[str, ...] = ("prometheus", "metrics-api", "loki", "graphite")
"""KEDA trigger types that dial an endpoint named in their metadata: admission requires providerRef for
them (seed: "Admission requires ProviderRef for network-endpoint trigger types"; the seed names
prometheus for v1, the others are KEDA's URL-taking scalers, so a policy cannot name an endpoint through
them either)."""

PROVIDER_OWNED_KEYS: tuple[str, ...] = ("serverAddress", "authModes")
"""Trigger metadata keys the provider binding owns (admission rejects them in a policy)."""

MAX_TRIGGERS, MAX_METADATA_KEYS, MAX_METADATA_VALUE = 8, 16, 2048
"""Bounds the seed leaves open, set so the apiserver can cost the CEL rules over the metadata."""

# The messages of the admission rules: the apiserver answers them, and the renderer names the same rule.
CLASS_RULE = "class KEDA requires keda and forbids hpa; class HPA forbids keda"
ENFORCEMENT_RULE = "enforcement Required is reserved; v1 admits only Default"
FALLBACK_RULE = "exactly one of value or fromComponent must be set"
DESIRED_REPLICAS_RULE = "queryReturnsDesiredReplicas requires metricType AverageValue"
OWNED_KEYS_RULE = "metadata keys serverAddress and authModes are owned by the provider binding"
IGNORE_NULL_RULE = "a prometheus trigger must set ignoreNullValues explicitly"
PROVIDER_RULE = "a network-endpoint trigger (" + ", ".join(NETWORK_TRIGGER_TYPES) + ") requires providerRef"
TEMPLATE_RULE = ("metadata templates may name only " + ", ".join("{{ ." + v + " }}" for v in TEMPLATE_VARIABLES))

_py_list = "[" + ", ".join(f"'{t}'" for t in NETWORK_TRIGGER_TYPES) + "]"
_cel_pattern = TEMPLATED_VALUE.replace("\\", "\\\\")

TriggerMetadata = Annotated[
    dict[str, str],
    WithJsonSchema({"type": "object", "maxProperties": MAX_METADATA_KEYS,
                    "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE}}),
]


class ReplicaValueSource(ApiModel):
    """ReplicaValueSource derives an int32 replica count for a rendered scaler field. Exactly one of
    Value / FromComponent is set. kedav1.Fallback.Replicas is an int32; a typed source avoids
    round-tripping numbers through string templates, which would add a parse failure mode for no
    expressiveness."""

    model_config = ConfigDict(json_schema_extra=validations(
        cel("has(self.value) != has(self.fromComponent)", FALLBACK_RULE),
    ))

    value: int | None = Field(default=None, ge=0)
    """Value is a fixed replica count."""
    from_component: ComponentBoundsField | None = None
    """FromComponent resolves against the consuming component's effective replica bounds — after
    defaulting and, on a placement-derived InferenceService, after the per-home bounds rewrite."""


class FallbackTemplate(ApiModel):
    """FallbackTemplate renders a kedav1.Fallback with the replica count derived per consuming
    component instead of authored as a literal."""

    failure_threshold: int = Field(ge=1)
    """FailureThreshold is the number of consecutive failed metric evaluations after which KEDA serves
    the fallback (it trips on the threshold+1-th consecutive failure)."""
    replicas: ReplicaValueSource
    """Replicas is the fallback replica count."""


class KedaTriggerTemplate(ApiModel):
    """KedaTriggerTemplate is a parameterized KEDA trigger. Metadata string values may contain
    {{ .Var }} templates over a closed, controller-derived variable set (Namespace, ISVCName,
    Component, MinReplicas, MaxReplicas, TargetName)."""

    model_config = ConfigDict(json_schema_extra=validations(
        cel(f"!(self.type in {_py_list}) || has(self.providerRef)",
            PROVIDER_RULE),
        cel("!has(self.queryReturnsDesiredReplicas) || !self.queryReturnsDesiredReplicas || "
            "(has(self.metricType) && self.metricType == 'AverageValue')",
            DESIRED_REPLICAS_RULE),
        cel("!('serverAddress' in self.metadata) && !('authModes' in self.metadata)",
            OWNED_KEYS_RULE),
        cel("self.type != 'prometheus' || 'ignoreNullValues' in self.metadata",
            IGNORE_NULL_RULE),
        cel(f"self.metadata.all(k, self.metadata[k].matches('{_cel_pattern}'))",
            TEMPLATE_RULE),
    ))

    type: str = Field(min_length=1, max_length=63)
    """Type is the KEDA trigger type ("prometheus" in v1). Admission requires ProviderRef for
    network-endpoint trigger types."""
    provider_ref: MetricProviderRef | None = None
    """ProviderRef binds the trigger's endpoint by logical provider name."""
    metric_type: Literal["AverageValue", "Value"] | None = None
    """MetricType is forwarded to the rendered trigger."""
    query_returns_desired_replicas: bool | None = None
    """QueryReturnsDesiredReplicas declares that the trigger's query already computes the desired
    replica count. When true, admission requires MetricType=AverageValue."""
    metadata: TriggerMetadata
    """Metadata is the KEDA trigger metadata. Admission rejects the keys "serverAddress" and
    "authModes" (the provider binding owns them), and requires "ignoreNullValues" to be explicit on
    prometheus triggers."""


class KedaPolicyTemplate(ApiModel):
    """KedaPolicyTemplate is the parameterized counterpart of KedaAutoscaler. Everything except trigger
    metadata templates and the typed fallback replicas is passed through verbatim to the rendered
    block."""

    triggers: list[KedaTriggerTemplate] = Field(min_length=1, max_length=MAX_TRIGGERS)
    """The parameterized triggers, rendered in order into the ScaledObject's triggers."""
    advanced: KubeObject | None = None
    """Advanced ScaledObject configuration, verbatim."""
    polling_interval: int | None = None
    """PollingInterval, verbatim (seconds; KEDA's default when unset)."""
    cooldown_period: int | None = None
    """CooldownPeriod, verbatim (seconds; KEDA's default when unset)."""
    idle_replica_count: int | None = None
    """IdleReplicaCount, verbatim; it must be below the consuming component's minReplicas (checked when
    rendered for that component)."""
    fallback: FallbackTemplate | None = None
    """Fallback with the replica count derived per consuming component."""


class AutoscalerPolicySpec(ApiModel):
    """AutoscalerPolicySpec carries exactly one parameterized autoscaler template. A policy that needs
    different behavior for different components is two policies; components compose by each choosing a
    ref."""

    model_config = ConfigDict(json_schema_extra=validations(
        cel("(self.class != 'KEDA' || (has(self.keda) && !has(self.hpa))) && "
            "(self.class != 'HPA' || !has(self.keda))",
            CLASS_RULE),
    ))

    enforcement: PolicyEnforcement = Field(
        default=PolicyEnforcement.DEFAULT,
        json_schema_extra=validations(
            cel("self == 'Default'", ENFORCEMENT_RULE)),
    )
    """Enforcement tier. v1 admits only "Default"; "Required" is a reserved shape rejected at
    admission."""
    class_: Literal["HPA", "KEDA"] = Field(alias="class")
    """Class selects the template. External and None are inline-only: "someone else scales this
    component" is a per-service statement, not a reusable behavior."""
    keda: KedaPolicyTemplate | None = None
    """Keda holds the parameterized KEDA template. Required when Class=KEDA."""
    hpa: HPAAutoscaler | None = None
    """HPA holds HorizontalPodAutoscaler configuration, verbatim (no templating). Optional when
    Class=HPA; if absent the rendered block gets the default CPU=80% metric downstream."""


class AutoscalerPolicyStatus(ApiModel):
    """AutoscalerPolicyStatus is bounded: counts and digests, never consumer name lists — per-consumer
    truth lives on each InferenceService's own status."""

    observed_generation: int | None = None
    """ObservedGeneration is the spec generation this status reflects."""
    portable_digest: str | None = None
    """PortableDigest is a digest of the spec after API defaulting, in a canonical encoding ("ap1:...").
    Equal across clusters iff the specs are semantically identical."""
    attached_components: int | None = None
    """AttachedComponents counts the components in this namespace that currently reference the policy."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions report the policy's state (Ready: the stored body passes every admission rule)."""


class AutoscalerPolicy(KubeResource):
    """AutoscalerPolicy is a reusable, parameterized autoscaler template. Components attach individually
    via spec.<component>.autoscalerPolicyRef on the InferenceService; the referenced template is rendered
    per component at reconcile time into a verbatim ComponentAutoscaler and fed to the existing
    autoscaler dispatch. Creating a policy actuates nothing by itself. Alpha. The API may change without
    notice."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="AutoscalerPolicy",
        plural="autoscalerpolicies",
        scope="Namespaced",
        short_names=["asp"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Class", type="string", json_path=".spec.class"),
            PrinterColumn(name="Attached", type="integer", json_path=".status.attachedComponents"),
            PrinterColumn(name="Digest", type="string", json_path=".status.portableDigest", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: AutoscalerPolicySpec | None = None
    """The desired state of the AutoscalerPolicy."""
    status: AutoscalerPolicyStatus | None = None
    """The observed state of the AutoscalerPolicy."""
