"""One analysis sample: render each metric's PromQL with the revision context, resolve the
metrics source, ask the prometheus.evaluate activity, and turn its answer into the seed's
AnalysisMetricResult rows. A sample that cannot be taken (no source, a template error, the
activity failing) is inconclusive, never a breach: the step's onInconclusive decides."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from servingops.activities.prometheus import (
        EvaluateInput,
        Evaluation,
        MetricOutcome,
        MetricQuery,
        PrometheusActivities,
    )
    from servingops.api_models.contract.rollout import ComponentTarget
    from servingops.api_models.ome.rollout import GroupCanary, RolloutAnalysis
    from servingops.api_models.ome.rollout_status import AnalysisMetricResult
    from servingops.api_models.operator_config import OperatorDefaults, PrometheusSource
    from servingops.api_models.refs import ObjectRef
    from servingops.rendering.names import revision_name
    from servingops.workflows import options
    from servingops.workflows.rollout.templating import QueryContext, TemplateError, render


def prometheus_source(canary: GroupCanary, operator: OperatorDefaults,
                      namespace: str | None) -> PrometheusSource | None:
    """providerRef (bound by the operator's metricProviders), else serverAddress, else the
    operator's default source; None when there is no source at all. The spec's authRef and
    headers refine whichever source was chosen (a header the spec sets wins over a provider's)."""
    prometheus = canary.prometheus
    if prometheus is not None and prometheus.provider_ref is not None:
        base = operator.metric_providers.get(prometheus.provider_ref.name)
    elif prometheus is not None and prometheus.server_address:
        base = PrometheusSource(address=prometheus.server_address)
    else:
        base = operator.default_source
    if base is None:
        return None
    if prometheus is None:
        return base
    update: dict[str, object] = {"headers": {**base.headers, **(prometheus.headers or {})}}
    if prometheus.auth_ref:
        # Only the reference travels; the activity reads the token from the Secret.
        update["auth_secret"] = ObjectRef(group="", version="v1", plural="secrets", kind="Secret",
                                          name=str(prometheus.auth_ref.get("name", "")), namespace=namespace)
        update["auth_key"] = str(prometheus.auth_ref.get("key") or "token")
    return base.model_copy(update=update)


def unbound_provider(canary: GroupCanary | None, operator: OperatorDefaults) -> str | None:
    """The providerRef name the operator has not bound, if any: a deterministic config error the
    run parks on at open, rather than rolling with a gate that can never sample."""
    prometheus = canary.prometheus if canary is not None else None
    if prometheus is None or prometheus.provider_ref is None:
        return None
    name = prometheus.provider_ref.name
    return None if name in operator.metric_providers else name


def query_context(isvc: ObjectRef, primary: ComponentTarget, stable: str) -> QueryContext:
    component = primary.component.value
    return QueryContext(
        namespace=isvc.namespace or "", isvc_name=isvc.name, component=component,
        canary_service=revision_name(isvc.name, component, primary.revision),
        stable_service=revision_name(isvc.name, component, stable),
        canary_revision=primary.revision, stable_revision=stable)


async def sample(analysis: RolloutAnalysis, source: PrometheusSource | None, context: QueryContext) -> Evaluation:
    queries: list[MetricQuery] = []
    problems: list[MetricOutcome] = []
    for metric in analysis.metrics:
        try:
            queries.append(MetricQuery(name=metric.name, query=render(metric.query, context),
                                       threshold=metric.threshold, operator=metric.operator.value))
        except TemplateError as error:
            problems.append(MetricOutcome(name=metric.name, value=None, passed=None, message=str(error)))
    if source is None:
        return Evaluation(metrics=[*problems, *(MetricOutcome(
            name=q.name, value=None, passed=None, message="no Prometheus source configured") for q in queries)])
    if not queries:
        return Evaluation(metrics=problems)
    try:
        result = await workflow.execute_activity_method(
            PrometheusActivities.evaluate, EvaluateInput(source=source, metrics=queries), **options.SAMPLE)
    except ActivityError as error:
        message = f"sample failed: {error.cause or error}"
        return Evaluation(metrics=[*problems, *(MetricOutcome(name=q.name, value=None, passed=None, message=message)
                                                for q in queries)])
    return Evaluation(metrics=[*problems, *result.metrics])


def metric_results(analysis: RolloutAnalysis, evaluation: Evaluation, now: datetime) -> list[AnalysisMetricResult]:
    """The seed's per-metric rows: value empty and passed false when inconclusive, the message
    saying why; threshold and operator echoed so a row explains itself."""
    by_name = {m.name: m for m in analysis.metrics}
    results = []
    for outcome in evaluation.metrics:
        metric = by_name.get(outcome.name)
        results.append(AnalysisMetricResult(
            name=outcome.name, value=outcome.value or "", threshold=metric.threshold if metric else None,
            operator=metric.operator if metric else None, passed=outcome.passed is True,
            message=outcome.message or None, time=now))
    return results


def outcome_key(verdict: str, failed_checks: int, evaluation: Evaluation) -> str:
    """What a sample changed, for deciding whether it must be published now or may be throttled."""
    return f"{verdict}:{failed_checks}:" + ",".join(f"{m.name}={m.passed}" for m in evaluation.metrics)
