"""Inputs and outputs of the serving activities (Deployments, Services, HTTPRoutes) and of the
Prometheus analysis activity: the contract between the rollout workflows and the activities.

An InferenceService component in RawDeployment mode is served as one Deployment and one Service
per revision, both named `<isvc>-<component>-rev-<hash>`, and one HTTPRoute named
`<isvc>-<component>` whose weighted backendRefs carry the split. The revision hash is a stable
hash of the rendered pod template. Activities observe and move capacity and traffic; the
workflow decides.
"""

from __future__ import annotations

from pydantic import BaseModel

from api_models.ome.enums import ComponentType
from api_models.refs import ObjectRef


def revision_name(isvc: str, component: str, revision: str) -> str:
    return f"{isvc}-{component}-rev-{revision}"


def route_name(isvc: str, component: str) -> str:
    return f"{isvc}-{component}"


class RevisionKey(BaseModel):
    isvc: ObjectRef
    component: ComponentType
    revision: str


class RevisionObservation(BaseModel):
    revision: str
    replicas: int
    """spec.replicas of the revision's Deployment."""
    ready_replicas: int
    updated_replicas: int = 0


class TrafficWeight(BaseModel):
    revision: str
    weight: int
    """0-100; the weights of one route add up to 100."""


class ComponentObservation(BaseModel):
    component: ComponentType
    desired_revision: str
    """The hash of the pod template the current spec renders."""
    desired_replicas: int
    """What the spec asks for (minReplicas, else 1)."""
    revisions: list[RevisionObservation]
    """Every revision Deployment that exists for this component."""
    traffic: list[TrafficWeight]
    """The HTTPRoute's current split (empty before the first set_traffic)."""
    url: str | None = None


class ServiceObservation(BaseModel):
    """One read of an InferenceService and what serves it."""

    uid: str
    generation: int
    resource_version: str
    deleting: bool
    annotations: dict[str, str]
    """Only the ome.io/rollout-* annotations."""
    spec_rollout: dict[str, object] | None
    """spec.rollout as the apiserver holds it (defaults applied); parse with RolloutSpec."""
    components: list[ComponentObservation]


class ObserveInput(BaseModel):
    isvc: ObjectRef


class EnsureRevisionInput(BaseModel):
    """Create the revision's Deployment and Service from the current spec when absent, else only
    set replicas. Refused (non-retryable, type RevisionSuperseded) when the revision does not
    exist and the current spec no longer renders to it."""

    key: RevisionKey
    replicas: int


class SetTrafficInput(BaseModel):
    isvc: ObjectRef
    component: ComponentType
    weights: list[TrafficWeight]


class PrometheusSource(BaseModel):
    """Where and how to query: a resolved providerRef, serverAddress, or the default source."""

    address: str
    auth_secret: ObjectRef | None = None
    """A Secret holding the bearer token; read by the activity, never carried."""
    auth_key: str = "token"
    """The key of auth_secret that holds the token."""
    headers: dict[str, str] = {}


class MetricQuery(BaseModel):
    name: str
    query: str
    """PromQL with the templates already rendered by the workflow."""
    threshold: str
    operator: str
    """A ComparisonOperator value."""


class EvaluateInput(BaseModel):
    source: PrometheusSource
    metrics: list[MetricQuery]


class MetricOutcome(BaseModel):
    name: str
    value: str | None
    """The worst series' value as a string (what the operator sees), None when inconclusive."""
    passed: bool | None
    """None when inconclusive (Prometheus down, query error, no data)."""
    message: str


class Evaluation(BaseModel):
    """One analysis sample: it passes only if every metric passes; inconclusive if any metric
    could not be evaluated and none failed."""

    metrics: list[MetricOutcome]

    @property
    def failed(self) -> bool:
        return any(m.passed is False for m in self.metrics)

    @property
    def conclusive(self) -> bool:
        return self.failed or all(m.passed is not None for m in self.metrics)

    @property
    def passed(self) -> bool:
        return all(m.passed is True for m in self.metrics)
