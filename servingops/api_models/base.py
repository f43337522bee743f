"""Building blocks shared by every served kind.

Python attributes are snake_case; the wire names (camelCase, exactly as the seeds spell them)
come from the alias generator, or from an explicit alias where camel-casing would differ.
Everything here is also what the CRD generator reads, so a constraint written once on a field
is enforced by pydantic for SDK input and by the apiserver at apply time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

# Kubernetes name shapes, as the seeds' patterns give them.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# A resource.Quantity: integer or string on the wire, like Kubernetes' own schema for it.
Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
# intstr.IntOrString (percentages like "25%" or absolute counts).
IntOrString = Annotated[
    int | str,
    WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}),
]
# metav1.Duration serialises as a Go duration string such as "1h30m" or "90s".
Duration = Annotated[str, WithJsonSchema({"type": "string"})]
# metav1.Time: RFC 3339.
Time = Annotated[datetime, WithJsonSchema({"type": "string", "format": "date-time"})]
# A core Kubernetes type (Container, Volume, Affinity, ...) embedded verbatim: the apiserver
# already owns its schema, so the CRD keeps it opaque rather than copying thousands of lines.
KubeObject = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]
KubeObjectList = Annotated[
    list[dict[str, Any]],
    WithJsonSchema(
        {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    ),
]
# Free-form JSON (a json.RawMessage / runtime.RawExtension in the Go API).
RawJson = Annotated[Any, WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})]


def cel(rule: str, message: str, *, field_path: str | None = None, reason: str | None = None) -> dict[str, str]:
    """One x-kubernetes-validations entry: a CEL rule the apiserver checks at admission."""
    entry = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    if reason:
        entry["reason"] = reason
    return entry


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    """json_schema_extra carrying CEL rules, for a model's config or a Field."""
    return {"x-kubernetes-validations": list(rules)}


class ApiModel(BaseModel):
    """Base of every spec and status type: camelCase on the wire, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
        use_attribute_docstrings=True,
    )

    def to_api(self) -> dict[str, Any]:
        """The JSON the apiserver expects: aliases, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def to_merge_patch(self, *, whole_values: bool = False) -> dict[str, Any]:
        """The top-level fields that were set, as a merge patch: a field set to None is removed,
        a field never set is left as it is; below the top level, None means absent. Below the top
        level only what was set is written too, unless `whole_values`: then each value is written whole,
        its nested defaults included (a status whose fields are each replaced whole, and whose nested
        defaults are part of what it says: the InferenceService's)."""
        if whole_values:
            body = self.model_dump(include=set(self.model_fields_set), by_alias=True, exclude_none=True, mode="json")
        else:
            body = self.model_dump(by_alias=True, exclude_unset=True, exclude_none=True, mode="json")
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                field = type(self).model_fields[name]
                body[field.serialization_alias or field.alias or name] = None
        return body


class Condition(ApiModel):
    """metav1.Condition, with the apiserver's own constraints."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """type of condition in CamelCase or in foo.example.com/CamelCase."""
    status: Literal["True", "False", "Unknown"]
    """status of the condition, one of True, False, Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """observedGeneration represents the .metadata.generation that the condition was set based upon."""
    last_transition_time: Time
    """lastTransitionTime is the last time the condition transitioned from one status to another."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """reason contains a programmatic identifier (CamelCase) for the condition's last transition."""
    message: str = Field(max_length=32768)
    """message is a human readable message indicating details about the transition."""


def condition_list_schema() -> dict[str, Any]:
    """Conditions are a map keyed by type, as in every upstream API."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}


class LocalObjectReference(ApiModel):
    name: str = Field(min_length=1)
    """Name of the referent."""


class PrinterColumn(BaseModel):
    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0


class ScaleSubresource(BaseModel):
    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


class CrdInfo(BaseModel):
    """How one pydantic root model is served: names, scope, subresources, columns."""

    group: str
    version: str
    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: list[str] = []
    categories: list[str] = []
    printer_columns: list[PrinterColumn] = []
    scale: ScaleSubresource | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


class KubeResource(ApiModel):
    """A served custom resource: apiVersion, kind, metadata, spec, status."""

    crd: ClassVar[CrdInfo]

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str | None:
        ns = self.metadata.get("namespace")
        return str(ns) if ns else None

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def generation(self) -> int:
        return int(self.metadata.get("generation", 0))
