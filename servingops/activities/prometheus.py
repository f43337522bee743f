"""The canary analysis sample: instant PromQL queries compared with thresholds.

Prometheus being down, slow, wrong or empty is a normal outcome here, not an activity failure:
such a metric is inconclusive and the workflow applies onInconclusive. Only bad input (an unknown
operator, a non-numeric threshold) raises, non-retryable, since a retry would read the same input.

The bearer token is read from its Secret on every call and only ever placed in the request
header: it is never logged, returned, or put into an error message. What reaches a message (and
so the workflow's history and the InferenceService status) is built from parts we choose, each
bounded and scrubbed (`_clean`): the HTTP status and its standard phrase, Prometheus's errorType
when it is one word, and its error text or an exception's text with URL queries and user
information removed and anything token-shaped redacted. A response body is never quoted.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from servingops.api_models.credential_headers import credential_headers, without_credentials
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.enums import ComparisonOperator
from servingops.api_models.operator_config import PrometheusSource
from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import call
from servingops.clients.kube.errors import absent

log = logging.getLogger(__name__)


# -- the activity's input and output (workflows import them with the activity class) ----------


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


CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 5.0
"""Seconds. An analysis sample is taken every interval; a slow Prometheus makes this sample
inconclusive rather than holding the activity (and the gate) for a long time."""
_MAX_REASON = 300

_COMPARE: dict[ComparisonOperator, tuple[Callable[[float, float], bool], str]] = {
    ComparisonOperator.LT: (operator.lt, "<"),
    ComparisonOperator.LTE: (operator.le, "<="),
    ComparisonOperator.GT: (operator.gt, ">"),
    ComparisonOperator.GTE: (operator.ge, ">="),
}


@dataclass(frozen=True)
class _Series:
    labels: dict[str, str]
    raw: str
    """The sample value as Prometheus wrote it: what the operator sees in status."""
    value: float

    def describe(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return "{" + inner + "}"


class _Inconclusive(Exception):
    """This metric could not be evaluated this time; the message says why."""


_URL_QUERY = re.compile(r"(/[^\s?'\"]*)\?[^\s'\")]*")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic|digest|negotiate|apikey|token)(\s+|[=:]\s*)[^\s,;'\"]+")
_OPAQUE = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e]")
_WORD = re.compile(r"^[A-Za-z_]{1,32}$")


def _clean(text: str, limit: int = _MAX_REASON) -> str:
    """Text that came from elsewhere (an exception, Prometheus's error), fit for status: printable,
    one line, bounded, with URL queries, user information, auth values and long opaque strings
    (tokens, signatures) removed."""
    text = _NOT_PRINTABLE.sub(" ", text)
    text = _URL_QUERY.sub(r"\1?...", text)
    text = _USERINFO.sub(r"\1...@", text)
    text = _AUTH_VALUE.sub(r"\1 [redacted]", text)
    text = _OPAQUE.sub("[redacted]", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _reason(text: str) -> str:
    return _clean(text)


def _http_phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""


def _bad_input(message: str) -> ApplicationError:
    return application_error(ErrorType.INVALID_METRIC, message)


def _checked(metric: MetricQuery) -> tuple[ComparisonOperator, float]:
    try:
        op = ComparisonOperator(metric.operator)
    except ValueError:
        allowed = ", ".join(o.value for o in ComparisonOperator)
        raise _bad_input(f"metric {metric.name}: unknown operator {metric.operator!r} (one of {allowed})") from None
    try:
        threshold = float(metric.threshold)
    except ValueError:
        raise _bad_input(f"metric {metric.name}: threshold {metric.threshold!r} is not a number") from None
    if not math.isfinite(threshold):
        raise _bad_input(f"metric {metric.name}: threshold {metric.threshold!r} is not finite")
    return op, threshold


def _series(data: dict[str, Any]) -> list[_Series]:
    """The samples of an instant query's vector or scalar result."""
    kind, result = data.get("resultType"), data.get("result")
    samples: list[tuple[dict[str, Any], Any]]
    if kind == "scalar":
        samples = [({}, result)]
    elif kind == "vector":
        samples = [(item.get("metric") or {}, item.get("value")) for item in result or []]
    else:
        kind_text = kind if isinstance(kind, str) and _WORD.match(kind) else "result of another type"
        raise _Inconclusive(f"the query returns a {kind_text}, not an instant vector or scalar")
    series = []
    for labels, sample in samples:
        raw = str(sample[1]) if isinstance(sample, list) and len(sample) == 2 else ""
        try:
            value = float(raw)
        except ValueError:
            raise _Inconclusive(f"unparsable sample value {_clean(raw, 40)!r}") from None
        series.append(_Series(labels={str(k): str(v) for k, v in labels.items()}, raw=raw, value=value))
    return series


def judge(metric: MetricQuery, series: list[_Series]) -> MetricOutcome:
    """Reduce to the worst series for the operator (the maximum for LT/LTE, the minimum for
    GT/GTE): it fails if any series fails, else it is the one closest to failing."""
    op, threshold = _checked(metric)
    compare, symbol = _COMPARE[op]
    if not series:
        return MetricOutcome(name=metric.name, value=None, passed=None, message="no data")
    numeric = [s for s in series if not math.isnan(s.value)]
    descending = op in (ComparisonOperator.LT, ComparisonOperator.LTE)
    ordered = sorted(numeric, key=lambda s: (-s.value if descending else s.value, s.describe()))
    worst = ordered[0] if ordered else None
    of = f" (worst of {len(series)} series)" if len(series) > 1 else ""
    if worst is not None and not compare(worst.value, threshold):
        return MetricOutcome(name=metric.name, value=worst.raw, passed=False,
                             message=f"{worst.raw} is not {symbol} {metric.threshold} for {worst.describe()}{of}")
    if len(numeric) < len(series):
        # A NaN series cannot be said to pass; with no failing series the sample reads nothing.
        nan = next(s for s in series if math.isnan(s.value))
        return MetricOutcome(name=metric.name, value=None, passed=None, message=f"NaN for {nan.describe()}{of}")
    assert worst is not None
    return MetricOutcome(name=metric.name, value=worst.raw, passed=True,
                         message=f"{worst.raw} {symbol} {metric.threshold} for {worst.describe()}{of}")


class PrometheusActivities:
    """Bound to one ApiClient (to read auth Secrets) for the life of the worker."""

    def __init__(self, api_client: client.ApiClient, timeout: tuple[float, float] = (CONNECT_TIMEOUT,
                                                                                    READ_TIMEOUT)) -> None:
        self.core = client.CoreV1Api(api_client)
        self.timeout = timeout

    def _token(self, ref: ObjectRef, key: str) -> str:
        if not ref.namespace:
            raise _bad_input(f"auth secret {ref.name}: no namespace given")
        try:
            secret = call(self.core.read_namespaced_secret, ref.name, ref.namespace)
        except ApiException as exc:
            if absent(exc):
                # Like an unreachable source: the sample reads nothing until the Secret appears.
                raise _Inconclusive(f"auth secret {ref.namespace}/{ref.name} not found") from None
            raise
        encoded = (secret.data or {}).get(key)
        if not encoded:
            raise _Inconclusive(f"auth secret {ref.namespace}/{ref.name} has no key {key!r}")
        try:
            return base64.b64decode(encoded).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            raise _Inconclusive(f"auth secret {ref.namespace}/{ref.name}: key {key!r} is not text") from None

    def _query(self, session: requests.Session, address: str, query: str) -> list[_Series]:
        url = address.rstrip("/") + "/api/v1/query"
        try:
            response = session.get(url, params={"query": query, "timeout": f"{self.timeout[1]:g}"},
                                   timeout=self.timeout, allow_redirects=False)
        except requests.RequestException as exc:
            # The exception names the URL (never the headers); its query and any user information go.
            raise _Inconclusive(_reason(f"Prometheus unreachable: {type(exc).__name__}: {exc}")) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("status") == "error":
            kind = body.get("errorType")
            kind = kind if isinstance(kind, str) and _WORD.match(kind) else "error"
            raise _Inconclusive(_reason(f"query error ({kind}): {body.get('error', '')}"))
        if response.status_code != 200 or not isinstance(body, dict):
            # Whatever answered (a proxy's login page, an HTML error) is not quoted: it is not
            # Prometheus's, and it may echo what we sent.
            what = "" if response.status_code != 200 else " with a body that is not Prometheus JSON"
            raise _Inconclusive(f"Prometheus answered HTTP {response.status_code} "
                                f"{_http_phrase(response.status_code)}{what}".strip())
        return _series(body.get("data") or {})

    @activity.defn(name="prometheus.evaluate")
    def evaluate(self, inp: EvaluateInput) -> Evaluation:
        """One analysis sample: every metric queried once and judged."""
        for metric in inp.metrics:
            _checked(metric)  # refuse bad input before any query
        return Evaluation(metrics=self._evaluate(inp.source, inp.metrics))

    def _evaluate(self, source: PrometheusSource, metrics: list[MetricQuery]) -> list[MetricOutcome]:
        if not source.address:
            return [MetricOutcome(name=m.name, value=None, passed=None, message="no Prometheus source configured")
                    for m in metrics]
        with requests.Session() as session:
            session.trust_env = False  # no proxy or netrc from the worker's environment
            refused = credential_headers(source.headers)
            if refused:
                # Admission and the ConfigMap refuse these; a spec stored before that rule existed
                # may still have them. Not sent: the token belongs in authRef.
                log.warning("not sending headers %s: they carry credentials (use authRef)", ", ".join(refused))
            session.headers.update(without_credentials(source.headers))
            try:
                if source.auth_secret is not None:
                    session.headers["Authorization"] = f"Bearer {self._token(source.auth_secret, source.auth_key)}"
            except _Inconclusive as exc:
                return [MetricOutcome(name=m.name, value=None, passed=None, message=str(exc)) for m in metrics]
            outcomes = []
            for metric in metrics:
                try:
                    outcome = judge(metric, self._query(session, source.address, metric.query))
                except _Inconclusive as exc:
                    outcome = MetricOutcome(name=metric.name, value=None, passed=None, message=str(exc))
                log.info("metric %s: passed=%s %s", metric.name, outcome.passed, outcome.message)
                outcomes.append(outcome)
        return outcomes

    def all(self) -> list[Any]:
        return [self.evaluate]
