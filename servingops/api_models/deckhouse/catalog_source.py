"""ModelCatalogSource (cluster-scoped), seed 000: an external ClusterModel catalog, either a
cluster-to-cluster catalog URL (type Catalog, the default) or the Hugging Face provider index."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import ConfigDict, Field

from servingops.api_models.base import (
    DNS1123_SUBDOMAIN,
    ApiModel,
    Condition,
    CrdInfo,
    Duration,
    KubeResource,
    PrinterColumn,
    Time,
    cel,
    condition_list_schema,
    validations,
)
from servingops.api_models.deckhouse.enums import CatalogSourceType
from servingops.api_models.deckhouse.model import GROUP, VERSION

SecretName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]


class HuggingFaceCatalog(ApiModel):
    """Configures the Hugging Face provider backend."""

    token_secret_name: SecretName | None = None
    """TokenSecretName names an optional d8-system Secret with key token used for gated or private
    models. Listing and importing public models works anonymously when omitted."""


class CatalogPolicy(ApiModel):
    """Required bounds for provider indexing and import eligibility. A source that omits scope or
    exceeds these bounds stays blocked instead of starting an unbounded provider scan."""

    allowed_collections: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = None
    """AllowedCollections limits synchronization to specific provider collections, playlists, or
    curated sets."""
    allowed_organizations: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = None
    """AllowedOrganizations limits synchronization to specific provider organizations or namespaces."""
    allowed_repositories: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = None
    """AllowedRepositories limits synchronization to specific provider repositories."""
    allowed_tags: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = None
    """AllowedTags limits synchronization to remote entries matching at least one of the selected
    provider tags."""
    max_indexed_entries: int | None = Field(default=None, ge=1, le=10000)
    """MaxIndexedEntries caps how many remote entries one source may index."""
    max_metadata_bytes: int | None = Field(default=None, ge=1024, le=1048576)
    """MaxMetadataBytes caps how much normalized metadata may be stored per indexed remote entry."""
    refresh_budget: Duration | None = None
    """RefreshBudget limits how long one refresh attempt may spend on provider indexing work before
    it yields and retries later."""


class ModelCatalogSourceSpec(ApiModel):
    """ModelCatalogSourceSpec declares an external ClusterModel catalog. The backend is selected by
    spec.type: a cluster-to-cluster catalog URL (default), or the Hugging Face provider index."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("self.type != 'Catalog' || has(self.url)", "url is required when type is Catalog",
                field_path=".url"),
            cel("self.type != 'HuggingFace' || !has(self.url)", "url is allowed only when type is Catalog",
                field_path=".url"),
            cel("self.type != 'HuggingFace' || !has(self.credentialsSecretName)",
                "credentialsSecretName is used only by the Catalog backend", field_path=".credentialsSecretName"),
            cel("self.type == 'HuggingFace' || !has(self.huggingFace)",
                "huggingFace is allowed only when type is HuggingFace", field_path=".huggingFace"),
        )
    )

    ca_secret_name: SecretName | None = Field(default=None, alias="caSecretName")
    """CASecretName names an optional d8-system Secret with ca.crt."""
    credentials_secret_name: SecretName | None = None
    """CredentialsSecretName names a d8-system Secret used for the semantic catalog API and grant
    exchange. The controller reads this Secret directly and never copies it into workload
    namespaces. Used by the Catalog backend."""
    hugging_face: HuggingFaceCatalog | None = None
    """HuggingFace configures the Hugging Face provider backend. Allowed only when type is
    HuggingFace."""
    policy: CatalogPolicy | None = None
    """Policy defines required bounds for provider indexing and import eligibility."""
    refresh_interval: Duration | None = None
    """RefreshInterval controls how often the controller refreshes catalog metadata. The controller
    uses a safe default when omitted."""
    type: CatalogSourceType = CatalogSourceType.CATALOG
    """Type selects the catalog source backend. Defaults to Catalog (cluster-to-cluster)."""
    url: str | None = Field(default=None, min_length=9, pattern=r"^https:\/\/[^:\/?#@]+(:[0-9]+)?(\/[^?#]*)?$")
    """URL is the HTTPS base URL of the remote catalog endpoint. Required when type is Catalog."""


class ModelCatalogSourceStatus(ApiModel):
    """Remote catalog health, without the remote inventory or secret material."""

    catalog_revision: str | None = None
    """CatalogRevision is the last successfully observed remote catalog revision."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=condition_list_schema())
    """Conditions of readiness and the reasons of connection failures."""
    entry_count: int | None = Field(default=None, ge=0)
    """EntryCount is the number of active entries in the last successful refresh."""
    last_successful_refresh_time: Time | None = None
    """LastSuccessfulRefreshTime is the time of the last successful catalog refresh."""
    next_retry_time: Time | None = None
    """NextRetryTime is the next scheduled retry after provider, policy, or data-service failures."""
    observed_generation: int | None = None
    """ObservedGeneration is the latest metadata.generation reconciled by the controller."""


class ModelCatalogSource(KubeResource):
    """An external catalog of models: the controller reads the list of available models and imports
    the selected ones as local copies in DMCR."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        group=GROUP, version=VERSION, kind="ModelCatalogSource", plural="modelcatalogsources",
        scope="Cluster", categories=["servingops"],
        printer_columns=[
            PrinterColumn(name="Type", type="string", json_path=".spec.type"),
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="Entries", type="integer", json_path=".status.entryCount"),
            PrinterColumn(name="Revision", type="string", json_path=".status.catalogRevision", priority=1),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )

    spec: ModelCatalogSourceSpec
    """The desired state of the catalog source."""
    status: ModelCatalogSourceStatus | None = None
    """ModelCatalogSourceStatus reports remote catalog health."""
