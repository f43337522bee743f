"""The analysis sample against a real Prometheus scraping an exporter whose values the test sets."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from temporalio import workflow
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from devstack.services import Prometheus, TemporalDevServer
from servingops.activities.prometheus import EvaluateInput, Evaluation, MetricQuery, PrometheusActivities
from servingops.api_models.errors import ErrorType
from servingops.api_models.operator_config import PrometheusSource
from servingops.api_models.refs import ObjectRef
from servingops.runtime.temporal import TemporalSettings, connect
from tests.crd_helpers import new_namespace
from tests.metrics_exporter import Exporter
from tests.secret_scan import register_token

pytestmark = pytest.mark.integration

# Generous: the suite may run on a loaded 2-core machine. Only an upper bound, never asserted.
DEADLINE = 60.0
TOKEN = "s3cr3t-" + uuid.uuid4().hex
register_token(TOKEN)


class AuthProxy:
    """A front-end that demands a bearer token and a tenant header, as a hosted Prometheus would,
    and records every Authorization header it receives."""

    def __init__(self, upstream: str) -> None:
        self.seen: list[str] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization", "")
                proxy.seen.append(auth)
                if auth != f"Bearer {TOKEN}" or self.headers.get("X-Scope-OrgID") != "tenant-a":
                    self._answer(401, b"unauthorized\n")
                    return
                try:
                    with urllib.request.urlopen(upstream + self.path, timeout=5) as response:
                        self._answer(response.status, response.read())
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def _instant(prometheus: Prometheus, query: str) -> list[Any]:
    url = f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return list(json.load(response)["data"]["result"])


def _publish(prometheus: Prometheus, exporter: Exporter, series: dict[str, float]) -> str:
    """Expose the series under a fresh metric name (so no test sees another's samples) and wait
    until Prometheus has scraped all of them; returns the metric name."""
    name = f"servingops_test_{uuid.uuid4().hex[:8]}"
    exporter.set({name + labels: value for labels, value in series.items()})
    end = time.monotonic() + DEADLINE
    while len(_instant(prometheus, name)) < len(series):
        assert time.monotonic() < end, f"{name} never scraped"
        time.sleep(0.3)
    return name


def _evaluate(acts: PrometheusActivities, address: str, *metrics: MetricQuery, **source: Any) -> Evaluation:
    result = ActivityEnvironment().run(acts.evaluate, EvaluateInput(
        source=PrometheusSource(address=address, **source), metrics=list(metrics)))
    assert isinstance(result, Evaluation)
    return result


def _m(name: str, query: str, operator: str, threshold: str) -> MetricQuery:
    return MetricQuery(name=name, query=query, operator=operator, threshold=threshold)


@pytest.fixture(scope="module")
def acts(kube_api: client.ApiClient) -> PrometheusActivities:
    return PrometheusActivities(kube_api)


def test_each_operator_passes_and_fails(prometheus: Prometheus, exporter: Exporter,
                                        acts: PrometheusActivities) -> None:
    metric = _publish(prometheus, exporter, {"": 5.0})
    cases = [("LT", "10", True), ("LT", "5", False), ("LTE", "5", True), ("LTE", "4.9", False),
             ("GT", "4", True), ("GT", "5", False), ("GTE", "5", True), ("GTE", "5.1", False)]
    evaluation = _evaluate(acts, prometheus.url, *(_m(f"{op}-{t}", metric, op, t) for op, t, _ in cases))
    assert [(m.name, m.passed, m.value) for m in evaluation.metrics] == [
        (f"{op}-{t}", passed, "5") for op, t, passed in cases]
    assert evaluation.failed and evaluation.conclusive and not evaluation.passed
    healthy = _evaluate(acts, prometheus.url, _m("a", metric, "LT", "10"), _m("b", f"{metric} * 2", "GTE", "10"))
    assert healthy.passed and healthy.conclusive
    # A scalar result is judged like a one-series vector.
    assert _evaluate(acts, prometheus.url, _m("s", "2", "LT", "3")).metrics[0].passed is True


def test_multi_series_reduces_to_the_worst(prometheus: Prometheus, exporter: Exporter,
                                           acts: PrometheusActivities) -> None:
    metric = _publish(prometheus, exporter, {'{pod="a"}': 1.0, '{pod="b"}': 7.0, '{pod="c"}': 3.0})
    lt_fail, gt_fail, lt_pass, gt_pass = _evaluate(
        acts, prometheus.url, _m("lt-fail", metric, "LT", "5"), _m("gt-fail", metric, "GT", "2"),
        _m("lt-pass", metric, "LT", "10"), _m("gt-pass", metric, "GTE", "1")).metrics
    assert (lt_fail.passed, lt_fail.value) == (False, "7") and 'pod="b"' in lt_fail.message
    assert (gt_fail.passed, gt_fail.value) == (False, "1") and 'pod="a"' in gt_fail.message
    # Passing: the series closest to failing is the one reported.
    assert (lt_pass.passed, lt_pass.value) == (True, "7") and 'pod="b"' in lt_pass.message
    assert (gt_pass.passed, gt_pass.value) == (True, "1") and 'pod="a"' in gt_pass.message
    assert "3 series" in lt_fail.message


def test_inconclusive_outcomes(prometheus: Prometheus, exporter: Exporter, acts: PrometheusActivities) -> None:
    metric = _publish(prometheus, exporter, {"": 1.0})
    no_data, bad, nan, matrix, ok = _evaluate(
        acts, prometheus.url,
        _m("no-data", f'{metric}{{pod="nobody"}}', "LT", "1"),
        _m("bad", "sum(rate(", "LT", "1"),
        _m("nan", "0/0", "LT", "1"),
        _m("matrix", f"{metric}[1m]", "LT", "1"),
        _m("ok", metric, "LT", "2")).metrics
    assert (no_data.passed, no_data.value, no_data.message) == (None, None, "no data")
    assert bad.passed is None and "bad_data" in bad.message and "parse error" in bad.message
    assert nan.passed is None and "NaN" in nan.message
    assert matrix.passed is None and "matrix" in matrix.message
    assert ok.passed is True
    # A metric that could not be read makes the sample inconclusive, unless another one failed.
    evaluation = Evaluation(metrics=[ok, no_data])
    assert not evaluation.conclusive and not evaluation.failed and not evaluation.passed


def test_unreachable_prometheus_is_inconclusive(acts: PrometheusActivities) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        evaluation = _evaluate(acts, closed, _m("down", "up", "GT", "0"), _m("also-down", "up", "LT", "1"))
    assert [m.passed for m in evaluation.metrics] == [None, None]
    assert "unreachable" in evaluation.metrics[0].message and not evaluation.conclusive
    assert _evaluate(acts, "", _m("nowhere", "up", "GT", "0")).metrics[0].passed is None


def test_bad_input_is_refused(prometheus: Prometheus, acts: PrometheusActivities) -> None:
    for operator, threshold in (("LessThan", "1"), ("lt", "1"), ("LT", "one"), ("LT", "nan")):
        with pytest.raises(ApplicationError) as info:
            _evaluate(acts, prometheus.url, _m("ok", "1", "LT", "2"), _m("bad", "1", operator, threshold))
        assert info.value.type == ErrorType.INVALID_METRIC and info.value.non_retryable


def test_bearer_token_from_a_secret(prometheus: Prometheus, exporter: Exporter, kube_api: client.ApiClient,
                                    acts: PrometheusActivities, caplog: pytest.LogCaptureFixture) -> None:
    ns = new_namespace(kube_api, "prom-auth")
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="prom-token"), data={"token": base64.b64encode(TOKEN.encode()).decode()}))
    # authRef is a SecretKeySelector: the token may sit under any key the Secret's author chose.
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="prom-custom-key"),
        data={"reader-token": base64.b64encode(TOKEN.encode()).decode()}))
    secret = ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name="prom-token", namespace=ns)
    metric = _publish(prometheus, exporter, {"": 3.0})
    proxy = AuthProxy(prometheus.url)
    caplog.set_level(logging.DEBUG)
    try:
        good = _evaluate(acts, proxy.url, _m("m", metric, "LT", "4"), auth_secret=secret,
                         headers={"X-Scope-OrgID": "tenant-a"})
        assert good.passed and good.metrics[0].value == "3"
        assert proxy.seen[-1] == f"Bearer {TOKEN}"
        # Without the tenant header the front-end refuses: inconclusive, and still no token anywhere.
        refused = _evaluate(acts, proxy.url, _m("m", metric, "LT", "4"), auth_secret=secret)
        assert refused.metrics[0].passed is None and "401" in refused.metrics[0].message
        custom = ObjectRef(**{**secret.model_dump(), "name": "prom-custom-key"})
        proxy.seen.clear()
        keyed = _evaluate(acts, proxy.url, _m("m", metric, "LT", "4"), auth_secret=custom, auth_key="reader-token",
                          headers={"X-Scope-OrgID": "tenant-a"})
        assert keyed.passed and proxy.seen == [f"Bearer {TOKEN}"]
        wrong_key = _evaluate(acts, proxy.url, _m("m", metric, "LT", "4"), auth_secret=custom,
                              headers={"X-Scope-OrgID": "tenant-a"})
        assert wrong_key.metrics[0].passed is None and "no key 'token'" in wrong_key.metrics[0].message
        missing = ObjectRef(**{**secret.model_dump(), "name": "absent"})
        no_secret = _evaluate(acts, proxy.url, _m("m", metric, "LT", "4"), auth_secret=missing)
        assert no_secret.metrics[0].passed is None and "not found" in no_secret.metrics[0].message
        for evaluation in (good, refused, keyed, wrong_key, no_secret):
            assert TOKEN not in evaluation.model_dump_json()
            assert all(TOKEN not in m.message for m in evaluation.metrics)
        assert TOKEN not in caplog.text
    finally:
        proxy.server.shutdown()


class _Echoing:
    """A front-end that answers every query with what the test chose, echoing the request's
    Authorization header into it (as a misconfigured proxy or an error page might), and records
    the headers it received."""

    def __init__(self, status: int, body: str, content_type: str = "text/html") -> None:
        self.headers: list[dict[str, str]] = []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                front.headers.append(dict(self.headers.items()))
                payload = body.replace("{auth}", self.headers.get("Authorization", "")).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


LEAKY_ANSWERS = [
    pytest.param(502, "<html><body>upstream refused {auth} for /api/v1/query</body></html>", "text/html",
                 "HTTP 502 Bad Gateway", id="html-error-page"),
    pytest.param(200, "welcome back, {auth}!", "text/plain", "HTTP 200 OK with a body that is not Prometheus JSON",
                 id="login-page-with-200"),
    pytest.param(400, json.dumps({"status": "error", "errorType": "bad_data{auth}",
                                  "error": "parse error near {auth} token=" + "x" * 40}),
                 "application/json", "query error (error): parse error near Bearer [redacted]", id="prometheus-error"),
    pytest.param(200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {}, "value": [1, "{auth}"]}]}}), "application/json", "unparsable sample value",
                 id="garbage-sample"),
]


@pytest.mark.parametrize(("status", "body", "content_type", "expected"), LEAKY_ANSWERS)
def test_no_response_text_reaches_status(kube_api: client.ApiClient, acts: PrometheusActivities, status: int,
                                         body: str, content_type: str, expected: str) -> None:
    """Whatever answers, the message (what status shows) names the status and our own words,
    bounded; the answer's text, which here echoes the bearer token, never reaches it."""
    ns = new_namespace(kube_api, "prom-leak")
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="prom-token"), data={"token": base64.b64encode(TOKEN.encode()).decode()}))
    secret = ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name="prom-token", namespace=ns)
    front = _Echoing(status, body, content_type)
    try:
        evaluation = _evaluate(acts, front.url, _m("m", "up", "LT", "1"), auth_secret=secret)
    finally:
        front.server.shutdown()
    assert front.headers and front.headers[0]["Authorization"] == f"Bearer {TOKEN}"  # it did echo the token
    outcome = evaluation.metrics[0]
    assert outcome.passed is None and expected in outcome.message, outcome.message
    assert TOKEN not in evaluation.model_dump_json() and "x" * 40 not in outcome.message
    assert len(outcome.message) <= 310


def test_credential_headers_are_never_sent(acts: PrometheusActivities) -> None:
    """A source carrying credential headers (a spec stored before admission refused them) sends
    none of them; the tenant header still goes."""
    front = _Echoing(200, json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "0"]}}),
                     "application/json")
    try:
        evaluation = _evaluate(acts, front.url, _m("m", "vector(0)", "LT", "1"), headers={
            "Authorization": f"Bearer {TOKEN}", "Cookie": f"session={TOKEN}", "X-Api-Key": TOKEN,
            "X-Forwarded-Access": f"Basic {TOKEN}", "X-Scope-OrgID": "tenant-a"})
    finally:
        front.server.shutdown()
    assert evaluation.passed
    sent = {key.lower(): value for key, value in front.headers[0].items()}
    assert sent["x-scope-orgid"] == "tenant-a"
    assert not {"authorization", "cookie", "x-api-key", "x-forwarded-access"} & set(sent)
    assert all(TOKEN not in value for value in sent.values())


@workflow.defn(name="PrometheusSampleProbe", sandboxed=False)
class _Sample:
    @workflow.run
    async def run(self, inp: EvaluateInput) -> Evaluation:
        return await workflow.execute_activity_method(PrometheusActivities.evaluate, inp,
                                                      start_to_close_timeout=timedelta(seconds=60))


async def test_a_sample_through_temporal_stores_no_token(temporal_server: TemporalDevServer,
                                                         kube_api: client.ApiClient,
                                                         acts: PrometheusActivities) -> None:
    """The analysis sample as a rollout takes it, through the real Temporal server, against a
    front-end that echoes the bearer token in its error page: the history (input, result and all)
    never holds the token. The suite's last test scans this history again with every other."""
    ns = new_namespace(kube_api, "prom-history")
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="prom-token"), data={"token": base64.b64encode(TOKEN.encode()).decode()}))
    secret = ObjectRef(group="", version="v1", plural="secrets", kind="Secret", name="prom-token", namespace=ns)
    front = _Echoing(503, "<h1>Service Unavailable</h1><pre>request had {auth}</pre>")
    temporal = await connect(TemporalSettings(address=temporal_server.address))
    queue = f"prom-{uuid.uuid4().hex[:6]}"
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            async with Worker(temporal, task_queue=queue, workflows=[_Sample], activities=[acts.evaluate],
                              activity_executor=pool):
                handle = await temporal.start_workflow(_Sample.run, EvaluateInput(
                    source=PrometheusSource(address=front.url, auth_secret=secret,
                                            headers={"X-Scope-OrgID": "tenant-a"}),
                    metrics=[_m("m", "up", "LT", "1")]), id=f"sample-{uuid.uuid4().hex[:6]}", task_queue=queue)
                evaluation = await handle.result()
                history = b"".join([event.SerializeToString() async for event in handle.fetch_history_events()])
    finally:
        front.server.shutdown()
    assert front.headers and front.headers[0]["Authorization"] == f"Bearer {TOKEN}"
    assert evaluation.metrics[0].passed is None and "HTTP 503 Service Unavailable" in evaluation.metrics[0].message
    assert b"Service Unavailable" in history  # the outcome is there, as the rollout records it
    assert TOKEN.encode() not in history and b"request had" not in history
