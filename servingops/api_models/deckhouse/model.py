"""Model (namespaced) and ClusterModel (cluster-scoped), seed 000.

Both declare an immutable source (exactly one of url, upload, catalog) and report the
preparation of a published OCI artifact in status.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    DNS1123_SUBDOMAIN,
    ApiModel,
    Condition,
    CrdInfo,
    KubeResource,
    LocalObjectReference,
    PrinterColumn,
    Time,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.deckhouse.enums import (
    ArtifactKind,
    EndpointType,
    ModelFeature,
    ModelFormat,
    ModelPhase,
    SourceType,
)

GROUP = "ai.deckhouse.io"
VERSION = "v1alpha1"

SOURCE_URL_PATTERN = (
    r"^https:\/\/(((www\.)?huggingface\.co|hf\.co)\/.+|(www\.)?ollama\.com\/library\/[^:\/?#]+(:[^\/?#]+)?([\/?#].*)?)$"
)
# Character classes instead of backslashes: CEL string literals do not take regex escapes.
HUGGING_FACE_URL_PREFIX = "^https://((www[.])?huggingface[.]co|hf[.]co)/"

_EXACTLY_ONE_SOURCE = cel(
    "[has(self.url), has(self.upload), has(self.catalog)].filter(x, x).size() == 1",
    "exactly one of url, upload or catalog must be set",
)
_SOURCE_IMMUTABLE = cel("self == oldSelf", "spec.source is immutable after create")

ShortName = Annotated[str, Field(min_length=1, max_length=128)]


class CatalogSourceReference(ApiModel):
    """Catalog imports a model entry from a ModelCatalogSource."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
    """Name is the public catalog model name."""
    source_name: str | None = Field(default=None, min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)
    """SourceName selects a ModelCatalogSource. When omitted, the controller may use the only Ready
    ModelCatalogSource in the cluster."""
    version: str | None = Field(default=None, min_length=1, max_length=128)
    """Version selects a catalog version when the upstream exposes more than one active version for
    the same name."""


class UploadSource(ApiModel):
    """Upload requests a controller-owned upload session for a local file or archive."""


class ClusterModelSource(ApiModel):
    """The source of a cluster model: exactly one of url, upload or catalog; immutable after create."""

    model_config = ConfigDict(json_schema_extra=validations(_EXACTLY_ONE_SOURCE))

    url: str | None = Field(default=None, min_length=1, pattern=SOURCE_URL_PATTERN)
    """URL points to a Hugging Face repository or an Ollama registry reference."""
    upload: UploadSource | None = None
    """Upload requests a controller-owned upload session for a local file or archive."""
    catalog: CatalogSourceReference | None = None
    """Catalog imports a cluster model entry from a ModelCatalogSource."""


class ModelSource(ClusterModelSource):
    """The source of a model: exactly one of url, upload or catalog; immutable after create."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            _EXACTLY_ONE_SOURCE,
            cel(
                f"!has(self.authSecretRef) || (has(self.url) && self.url.matches('{HUGGING_FACE_URL_PREFIX}'))",
                "authSecretRef is supported only for Hugging Face sources",
            ),
        )
    )

    auth_secret_ref: LocalObjectReference | None = None
    """AuthSecretRef names a Secret from the same namespace as the Model. It is supported for private
    Hugging Face sources."""


class ModelSpec(ApiModel):
    """ModelSpec declares the immutable source for one namespace-scoped model."""

    source: ModelSource = Field(json_schema_extra=validations(_SOURCE_IMMUTABLE))
    """Source of the model."""


class ClusterModelSpec(ApiModel):
    """ClusterModelSpec declares the immutable source for one cluster-scoped model."""

    source: ClusterModelSource = Field(json_schema_extra=validations(_SOURCE_IMMUTABLE))
    """Source of the cluster model."""


class Artifact(ApiModel):
    """The prepared OCI artifact."""

    digest: str | None = None
    """Digest is the digest of the prepared OCI artifact."""
    kind: ArtifactKind | None = None
    """Kind is the artifact location kind exposed by the public API."""
    media_type: str | None = None
    """MediaType is the OCI artifact media type."""
    size_bytes: int | None = Field(default=None, ge=1)
    """SizeBytes is the prepared OCI artifact size."""


class SourceCapabilities(ApiModel):
    """Provider-level capabilities discovered from source metadata."""

    features: list[ShortName] | None = None
    """Features are provider-specific feature names."""
    provider: SourceType | None = None
    """Provider is the source provider that supplied the capabilities."""
    tasks: list[ShortName] | None = None
    """Tasks are provider-specific task names."""


class ResolvedModel(ApiModel):
    """Resolved carries the model metadata the controller derived from the source."""

    architecture: str | None = None
    """Architecture is the model architecture when it is available."""
    context_window_tokens: int | None = Field(default=None, ge=1)
    """ContextWindowTokens is the context window size when it is available."""
    family: str | None = None
    """Family is the model family inferred from source metadata."""
    format: ModelFormat | None = None
    """Format is the resolved input format."""
    parameter_count: int | None = Field(default=None, ge=1)
    """ParameterCount is the number of model parameters when it is available."""
    quantization: str | None = None
    """Quantization is the model quantization when it is available."""
    source_capabilities: SourceCapabilities | None = None
    """SourceCapabilities are provider-level capabilities discovered from source metadata."""
    supported_endpoint_types: list[EndpointType] | None = None
    """Endpoint types the model supports."""
    supported_features: list[ModelFeature] | None = None
    """Features the model supports."""


class CatalogProvenance(ApiModel):
    """Frozen external catalog provenance for catalog imports."""

    catalog_revision: str | None = None
    """CatalogRevision is the upstream catalog revision used for resolution."""
    name: str | None = Field(default=None, min_length=1)
    """Name is the resolved public catalog model name."""
    remote_digest: str | None = None
    """RemoteDigest is the pinned upstream OCI artifact digest."""
    source_name: str | None = Field(default=None, min_length=1)
    """SourceName is the resolved ModelCatalogSource name."""
    version: str | None = None
    """Version is the resolved catalog version when one was selected."""


class ResolvedSource(ApiModel):
    """What the controller resolved the source to."""

    catalog: CatalogProvenance | None = None
    """Catalog contains frozen external catalog provenance for catalog imports."""
    resolved_revision: str | None = None
    """ResolvedRevision is the source revision, tag, or digest when the provider exposes one."""
    resolved_type: SourceType | None = None
    """ResolvedType is the source provider detected by the controller."""


class UploadSession(ApiModel):
    """A controller-owned upload session."""

    expires_at: Time | None = None
    """ExpiresAt is the upload session expiration time."""
    secret_name: str | None = Field(default=None, min_length=1)
    """SecretName points to the Secret containing the upload URL and bearer token."""
    secret_namespace: str | None = Field(default=None, min_length=1)
    """SecretNamespace is the namespace of the Secret containing the upload URL and bearer token."""


class ModelStatus(ApiModel):
    """Preparation state, upload session details, artifact digest, and resolved model metadata."""

    artifact: Artifact | None = None
    """The prepared OCI artifact."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions of readiness and the reasons of failures."""
    observed_generation: int | None = None
    """ObservedGeneration is the latest metadata.generation reconciled by the controller."""
    phase: ModelPhase | None = None
    """Phase is the preparation lifecycle phase, reported together with Conditions."""
    progress: str | None = None
    """Progress reports bounded controller-computed completion percentage for upload and model
    preparation flows when runtime progress is available."""
    resolved: ResolvedModel | None = None
    """Resolved carries the model metadata the controller derived from the source."""
    source: ResolvedSource | None = None
    """The resolved source."""
    upload: UploadSession | None = None
    """The upload session, while the model waits for an upload."""


_MODEL_COLUMNS = [
    PrinterColumn(name="Phase", type="string", json_path=".status.phase"),
    PrinterColumn(name="Format", type="string", json_path=".status.resolved.format"),
    PrinterColumn(name="Size", type="integer", json_path=".status.artifact.sizeBytes"),
    PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
    PrinterColumn(name="Progress", type="string", json_path=".status.progress", priority=1),
    PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
]


class Model(KubeResource):
    """A model in one namespace: the controller fetches it from its source, validates it and keeps a
    local copy in the cluster's registry (DMCR). Workloads use it through the annotation
    ai.deckhouse.io/model once status.phase is Ready."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP, version=VERSION, kind="Model", plural="models", scope="Namespaced",
        categories=["servingops"], printer_columns=_MODEL_COLUMNS,
    )

    spec: ModelSpec
    """ModelSpec declares the immutable source for one namespace-scoped model."""
    status: ModelStatus | None = None
    """ModelStatus reports preparation state, upload session details, artifact digest, and resolved
    model metadata for a namespaced Model."""


class ClusterModel(KubeResource):
    """A model for the whole cluster. Workloads use it through the annotation
    ai.deckhouse.io/clustermodel once status.phase is Ready."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP, version=VERSION, kind="ClusterModel", plural="clustermodels", scope="Cluster",
        categories=["servingops"], printer_columns=_MODEL_COLUMNS,
    )

    spec: ClusterModelSpec
    """ClusterModelSpec declares the immutable source for one cluster-scoped model."""
    status: ModelStatus | None = None
    """ClusterModelStatus reports preparation state, artifact digest, and resolved model metadata for
    a cluster-scoped ClusterModel."""
