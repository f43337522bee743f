"""The RolloutPolicy kind: a reusable rollout progression that rollout groups reference."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    ApiModel,
    Condition,
    CrdInfo,
    KubeResource,
    PrinterColumn,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.ome.constants import GROUP, VERSION
from servingops.api_models.ome.rollout import GroupBlueGreen, GroupCanary, GroupRollingUpdate


class RolloutPolicySpec(ApiModel):
    """RolloutPolicySpec carries exactly one progression body, reusing the spec.rollout group
    progression types verbatim so a composed plan is a literal RolloutGroup fragment and run-open
    re-validation can run the same checks ISVC admission runs. Policy-only restrictions (percent-
    only capacities, providerRef-only metrics source) are admission rules on this kind, not type
    differences."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel(
                "(has(self.canary) ? 1 : 0) + (has(self.blueGreen) ? 1 : 0) + (has(self.rollingUpdate) ? 1 : 0) == 1",
                "exactly one of canary, blueGreen, or rollingUpdate must be set",
            ),
            cel(
                "!has(self.canary) || !has(self.canary.steps) || self.canary.steps.all(s, "
                "type(s.capacity) == string && s.capacity.endsWith('%'))",
                "a RolloutPolicy canary step capacity must be a percentage",
            ),
            cel(
                "!has(self.canary) || !has(self.canary.prometheus) || !has(self.canary.prometheus.serverAddress)",
                "a RolloutPolicy names its metrics source by providerRef only; serverAddress is not admitted",
            ),
        )
    )

    canary: GroupCanary | None = None
    """Canary is a stepped capacity+traffic progression with optional analysis gates. One-of."""
    blue_green: GroupBlueGreen | None = None
    """BlueGreen surges the full new set, then flips traffic atomically. One-of."""
    rolling_update: GroupRollingUpdate | None = None
    """RollingUpdate replaces pods gradually within the surge/unavailable budget. One-of."""


class RolloutPolicyStatus(ApiModel):
    """RolloutPolicyStatus is deliberately bounded: counts and digests, never consumer name lists (a
    popular policy would otherwise grow status with its fleet)."""

    observed_generation: int | None = None
    """ObservedGeneration is the spec generation this status reflects."""
    portable_digest: str | None = None
    """PortableDigest is the hash of the defaulted, canonicalized spec ("rp1:..."): equal across
    clusters iff the specs match, so fleet drift is one field-compare away."""
    attached_groups: int | None = None
    """AttachedGroups counts rollout groups currently referencing this policy across the namespace."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions report the policy's state."""


class RolloutPolicy(KubeResource):
    """RolloutPolicy is a namespaced, reusable rollout progression consumed by InferenceService
    rollout groups via RolloutGroup.PolicyRef. Alpha. The API may change without notice."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP,
        version=VERSION,
        kind="RolloutPolicy",
        plural="rolloutpolicies",
        scope="Namespaced",
        short_names=["rop"],
        categories=["ome"],
        printer_columns=[
            PrinterColumn(name="Attached", type="integer", json_path=".status.attachedGroups"),
            PrinterColumn(name="Digest", type="string", json_path=".status.portableDigest", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: RolloutPolicySpec | None = None
    """The desired state of the RolloutPolicy."""
    status: RolloutPolicyStatus | None = None
    """The observed state of the RolloutPolicy."""
