"""devstack/pod_server.py, the process that answers for the local stack's serving pods, run as the host side runs
it (`python -m devstack.pod_server --control PATH`) but without a network namespace: its pods listen on
127.0.0.0/8 addresses, which Linux answers on without any setup, on free ports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devstack.pod_server import PodServerClient, StopResult

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
POD_IP = "127.0.0.21"
OTHER_IP = "127.0.0.22"


# --- the process -------------------------------------------------------------------------------------------


@dataclass
class Server:
    process: subprocess.Popen[str]
    control: Path
    stderr: Path

    @property
    def client(self) -> PodServerClient:
        return PodServerClient(self.control, timeout=10)

    def log(self) -> str:
        return self.stderr.read_text() if self.stderr.exists() else ""

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"pod server ignored SIGTERM for 20 s; its log:\n{self.log()}") from None


def _launch(workdir: Path) -> Server:
    control, stderr_path = workdir / "ctl.sock", workdir / "stderr.log"
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "devstack.pod_server", "--control", str(control)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )
    server = Server(process, control, stderr_path)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 30)
    line = process.stdout.readline() if ready else ""
    if line.strip() != "ready":
        process.kill()
        process.wait()
        raise AssertionError(f"pod server never said ready (got {line!r}); its log:\n{server.log()}")
    return server


@pytest.fixture(scope="module")
def pod_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _launch(tmp_path_factory.mktemp("pod_server"))
    yield server
    server.terminate()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


# --- pods and requests -------------------------------------------------------------------------------------


@dataclass
class PodAt:
    key: str
    ip: str
    port: int
    revision: str
    model: str

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


def _free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def _start_pod(server: Server, ip: str = POD_IP, **settings: Any) -> PodAt:
    name = uuid.uuid4().hex[:8]
    pod = PodAt(f"test/pod-{name}", ip, _free_port(ip), f"rev-{name}", f"model-{name}")
    server.client.start(pod.key, uid=f"uid-{name}", ip=ip, ports=[pod.port], model=pod.model,
                        revision=pod.revision, **settings)
    return pod


def _chat_body(*, stream: bool = False, max_tokens: int | None = None, usage: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "any", "messages": [{"role": "user", "content": "say something nice"}],
                            "stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if usage:
        body["stream_options"] = {"include_usage": True}
    return body


def _events(raw: bytes) -> list[str]:
    """The `data:` payloads of a server-sent event stream, in order."""
    return [line[len("data: "):] for line in raw.decode().splitlines() if line.startswith("data: ")]


def _assert_stamped(response: aiohttp.ClientResponse, pod: PodAt) -> None:
    assert response.headers["x-servingops-pod"] == pod.key
    assert response.headers["x-servingops-revision"] == pod.revision


async def _refused(pod: PodAt, seconds: float = 10) -> None:
    """Waits until a new connection to the pod is refused."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection(pod.ip, pod.port)
        except ConnectionRefusedError:
            return
        writer.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{pod.url} still accepts connections after {seconds} s")


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _parse_metrics(text: str) -> Samples:
    """Prometheus text exposition: every line a HELP, a TYPE or a sample (a line that is none fails the test)."""
    samples: Samples = {}
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(_LABEL.findall(match["labels"] or ""))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


async def _metrics(session: aiohttp.ClientSession, pod: PodAt) -> Samples:
    async with session.get(pod.url + "/metrics") as response:
        assert response.status == 200
        assert response.content_type == "text/plain"
        return _parse_metrics(await response.text())


# --- control -----------------------------------------------------------------------------------------------


def test_a_repeat_start_is_a_no_op_a_new_uid_replaces_the_pod_and_a_stop_names_its_uid(pod_server: Server) -> None:
    client = pod_server.client
    name = uuid.uuid4().hex[:8]
    key, first_port = f"test/replaced-{name}", _free_port(POD_IP)
    client.start(key, uid="uid-1", ip=POD_IP, ports=[first_port], model="m", revision="r1")
    status = client.list()[key]
    assert (status.uid, status.ip, status.ports, status.in_flight, status.served) == ("uid-1", POD_IP,
                                                                                      [first_port], 0, 0)
    body = json.dumps(_chat_body()).encode()
    with socket.create_connection((POD_IP, first_port), timeout=10) as sock:  # one request, so `served` moves
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert sock.makefile("rb").readline().startswith(b"HTTP/1.1 200")
    assert client.list()[key].served == 1

    client.start(key, uid="uid-1", ip=POD_IP, ports=[first_port], model="m", revision="r1")
    assert client.list()[key].served == 1, "the same uid again must leave the running pod alone"

    second_port = _free_port(OTHER_IP)
    client.start(key, uid="uid-2", ip=OTHER_IP, ports=[second_port], model="m", revision="r2")
    status = client.list()[key]
    assert (status.uid, status.ip, status.ports, status.served) == ("uid-2", OTHER_IP, [second_port], 0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((POD_IP, first_port), timeout=10).close()
    socket.create_connection((OTHER_IP, second_port), timeout=10).close()

    # The deleted pod's late stop (its grace ran out after the new pod of its name started) leaves the new one.
    assert client.stop(key, 5, uid="uid-1") == StopResult(finished=0, cut=0)
    assert client.list()[key].uid == "uid-2"
    socket.create_connection((OTHER_IP, second_port), timeout=10).close()

    assert client.stop(key, 5, uid="uid-2") == StopResult(finished=0, cut=0)
    assert key not in client.list()
    assert client.stop(key, 5) == StopResult(finished=0, cut=0), "stopping a pod that is gone is a no-op"


def test_bad_control_messages_get_clear_errors_and_the_server_keeps_running(pod_server: Server) -> None:
    held = socket.create_server((POD_IP, 0))  # a port someone else listens on
    busy_port = held.getsockname()[1]
    lines = [
        b"{not json",
        b'{"op": "explode"}',
        b'{"op": "start", "pod": "no-namespace", "uid": "u", "ip": "127.0.0.21", "ports": [0], "model": "m"}',
        b'{"op": "start", "pod": "test/x", "uid": "u", "ip": "127.0.0.21", "ports": [1], "model": "m", "ttft": 5}',
        b'{"op": "configure", "pod": "test/never-started", "healthy": false}',
        b'{"op": "configure", "pod": "test/x", "error_rate": 2}',
        b'{"op": "start", "pod": "test/busy", "uid": "u", "ip": "127.0.0.21", "ports": [%d], "model": "m"}'
        % busy_port,
        b'{"op": "list"}',
    ]
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(pod_server.control))
            sock.sendall(b"\n".join(lines) + b"\n")  # several requests on one connection, one reply line each
            replies = sock.makefile("rb")
            answers = [json.loads(replies.readline()) for _ in lines]
    finally:
        held.close()

    errors = [a.get("error", "") for a in answers[:-1]]
    assert all(a["ok"] is False for a in answers[:-1]), answers
    assert "Invalid JSON" in errors[0]
    assert "'explode'" in errors[1] and "'start'" in errors[1]
    assert "start.pod" in errors[2] and "start.ports.0" in errors[2]
    assert "start.ttft: Extra inputs are not permitted" in errors[3]
    assert "test/never-started is not running" in errors[4]
    assert "configure.error_rate" in errors[5]
    assert f"cannot listen on 127.0.0.21:{busy_port}" in errors[6]
    assert answers[-1]["ok"] is True and "test/busy" not in answers[-1]["pods"]

    with pytest.raises(RuntimeError, match="is not running"):
        pod_server.client.configure("test/never-started", healthy=False)
    assert pod_server.process.poll() is None
    assert pod_server.client.list() is not None


# --- what a pod answers ------------------------------------------------------------------------------------


async def test_health_and_models_answer_with_the_pod_and_revision(pod_server: Server,
                                                                 session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server)
    async with session.get(pod.url + "/health") as response:
        assert (response.status, await response.json()) == (200, {})
        _assert_stamped(response, pod)
    async with session.get(pod.url + "/v1/models") as response:
        assert response.status == 200
        _assert_stamped(response, pod)
        models = await response.json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in models["data"]] == [
        (pod.model, "model", "servingops-devstack")]
    async with session.get(pod.url + "/no/such/path") as response:  # even aiohttp's own 404 is stamped
        assert response.status == 404
        _assert_stamped(response, pod)


async def test_chat_completion_not_streamed(pod_server: Server, session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, tokens=6)
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body()) as response:
        assert response.status == 200
        _assert_stamped(response, pod)
        answer = await response.json()
    assert answer["object"] == "chat.completion" and answer["model"] == pod.model
    [choice] = answer["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    assert len(choice["message"]["content"].split()) == 6
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}

    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(max_tokens=2)) as response:
        capped = await response.json()
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 2

    async with session.post(pod.url + "/v1/completions", json={"prompt": "once upon", "max_tokens": 3}) as response:
        assert response.status == 200
        _assert_stamped(response, pod)
        text = await response.json()
    assert text["object"] == "text_completion"
    assert len(text["choices"][0]["text"].split()) == 3 and text["choices"][0]["finish_reason"] == "length"
    assert text["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}

    async with session.post(pod.url + "/v1/chat/completions", data=b"{oops") as response:
        assert response.status == 400
        assert "not JSON" in (await response.json())["error"]["message"]


async def test_chat_completion_streamed(pod_server: Server, session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, tokens=5)
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True, usage=True)) as response:
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        _assert_stamped(response, pod)
        events = _events(await response.read())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    tokens = [c["choices"][0]["delta"]["content"] for c in chunks[:5]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len("".join(tokens).split()) == 5
    assert chunks[5]["choices"][0] == {"index": 0, "logprobs": None, "finish_reason": "stop", "delta": {}}
    assert chunks[6]["choices"] == [] and chunks[6]["usage"]["completion_tokens"] == 5
    assert len(chunks) == 7

    body = {"prompt": "hi", "max_tokens": 2, "stream": True}
    async with session.post(pod.url + "/v1/completions", json=body) as response:
        events = _events(await response.read())
    assert events[-1] == "[DONE]"
    texts = [json.loads(e) for e in events[:-1]]
    assert [t["choices"][0]["finish_reason"] for t in texts] == [None, None, "length"]
    assert {t["object"] for t in texts} == {"text_completion"}


async def test_time_to_first_token_and_per_token_are_honoured(pod_server: Server,
                                                              session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, ttft_ms=300, tpot_ms=50, tokens=5)
    loop = asyncio.get_running_loop()
    sent = loop.time()
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True)) as response:
        assert (await response.content.readline()).startswith(b"data: ")
        first = loop.time() - sent
        await response.read()
        whole = loop.time() - sent
    # Lower bounds only: the client's interval contains the server's. 0.3 s to the first token, 4 x 0.05 after.
    assert first >= 0.29
    assert whole >= 0.49

    sent = loop.time()
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body()) as response:
        await response.read()
    assert loop.time() - sent >= 0.49

    samples = await _metrics(session, pod)
    assert _value(samples, "vllm:time_to_first_token_seconds_count") == 2
    assert _value(samples, "vllm:time_to_first_token_seconds_sum") >= 0.59
    assert _value(samples, "vllm:time_to_first_token_seconds_bucket", le="0.25") == 0
    assert _value(samples, "vllm:time_per_output_token_seconds_count") == 8
    assert _value(samples, "vllm:time_per_output_token_seconds_sum") >= 0.39


async def test_configure_live_error_rate_and_health(pod_server: Server, session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server)
    pod_server.client.configure(pod.key, error_rate=1.0)
    for _ in range(10):
        async with session.post(pod.url + "/v1/chat/completions", json=_chat_body()) as response:
            assert response.status == 500
            _assert_stamped(response, pod)
            error = (await response.json())["error"]
            assert error["code"] == 500 and error["message"]
    samples = await _metrics(session, pod)
    assert _value(samples, "http_requests_total", handler="/v1/chat/completions", method="POST", status="5xx") == 10
    assert _value(samples, "http_requests_total", status="2xx") == 0
    assert _value(samples, "vllm:request_success_total") == 0

    pod_server.client.configure(pod.key, error_rate=0.0, healthy=False)
    async with session.get(pod.url + "/health") as response:
        assert response.status == 503
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body()) as response:
        assert response.status == 200
    pod_server.client.configure(pod.key, healthy=True)
    async with session.get(pod.url + "/health") as response:
        assert response.status == 200


async def test_capacity_report_is_the_routing_polls_report_when_the_pod_is_given_one(
        pod_server: Server, session: aiohttp.ClientSession) -> None:
    from datetime import UTC, datetime

    from servingops.rendering.capacity_poll import parse_report

    silent = _start_pod(pod_server)
    async with session.get(silent.url + "/capacity") as response:
        assert response.status == 404, "no servable count given: no report"
    pod = _start_pod(pod_server, servable=3)
    for method in ("GET", "POST"):
        async with session.request(method, pod.url + "/capacity") as response:
            assert response.status == 200
            _assert_stamped(response, pod)
            outcome = parse_report(response.status, await response.read(), None, datetime.now(UTC))
            assert outcome.reading is not None and outcome.reading.servable == 3, outcome.failure
    pod_server.client.configure(pod.key, servable=0)
    async with session.get(pod.url + "/capacity") as response:
        assert (await response.json())["servable"] == 0, "configured live"


async def test_metrics_parse_and_add_up_to_the_requests_sent(pod_server: Server,
                                                             session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, tokens=4)
    for _ in range(5):
        async with session.post(pod.url + "/v1/chat/completions", json=_chat_body()) as response:
            assert response.status == 200
    for _ in range(3):
        async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(max_tokens=2)) as response:
            assert response.status == 200
    for _ in range(2):
        async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True)) as response:
            await response.read()
    async with session.post(pod.url + "/v1/completions", json={"prompt": "x"}) as response:
        assert response.status == 200
    for _ in range(4):
        async with session.get(pod.url + "/v1/models") as response:
            assert response.status == 200
        async with session.get(pod.url + "/health") as response:
            assert response.status == 200

    samples = await _metrics(session, pod)
    model = {"model_name": pod.model}
    chat = {"handler": "/v1/chat/completions", "method": "POST"}
    assert _value(samples, "http_requests_total", **chat, status="2xx") == 10
    assert _value(samples, "http_requests_total", handler="/v1/completions", method="POST", status="2xx") == 1
    assert _value(samples, "http_requests_total", handler="/v1/models", method="GET", status="2xx") == 4
    assert _value(samples, "http_requests_total", handler="/health") == 0, "vLLM's server leaves /health out"
    assert _value(samples, "vllm:request_success_total", **model, finished_reason="stop") == 8
    assert _value(samples, "vllm:request_success_total", **model, finished_reason="length") == 3
    assert _value(samples, "vllm:generation_tokens_total", **model) == 5 * 4 + 3 * 2 + 2 * 4 + 4
    assert _value(samples, "vllm:num_requests_running", **model) == 0
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert _value(samples, f"{histogram}_count", **model) == 11
    assert _value(samples, "vllm:time_per_output_token_seconds_count", **model) == 5 * 3 + 3 * 1 + 2 * 3 + 3
    for histogram in ("vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
                      "vllm:e2e_request_latency_seconds"):
        buckets = sorted(((float(dict(ls)["le"]), v) for (n, ls), v in samples.items() if n == f"{histogram}_bucket"))
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{histogram} buckets are not cumulative"
        assert buckets[-1] == (float("inf"), _value(samples, f"{histogram}_count"))
    assert ("vllm:time_to_first_token_seconds_bucket",
            frozenset({("model_name", pod.model), ("engine", "0"), ("le", "0.001")})) in samples


# --- stopping ----------------------------------------------------------------------------------------------


async def test_stop_lets_a_stream_in_flight_finish_and_refuses_new_connections(
        pod_server: Server, session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, tpot_ms=150, tokens=12)  # a stream of about 1.7 s
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True)) as response:
        assert (await response.content.readline()).startswith(b"data: ")  # in flight now
        stopping = asyncio.create_task(asyncio.to_thread(pod_server.client.stop, pod.key, 20))
        await _refused(pod)
        events = _events(await response.read())
    assert events[-1] == "[DONE]"
    assert await stopping == StopResult(finished=1, cut=0)
    assert pod.key not in pod_server.client.list()


async def test_stop_cuts_a_stream_longer_than_the_grace(pod_server: Server, session: aiohttp.ClientSession) -> None:
    pod = _start_pod(pod_server, tpot_ms=100, tokens=200)  # a stream of about 20 s
    received = b""
    async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True)) as response:
        received += await response.content.readline()
        result = await asyncio.to_thread(pod_server.client.stop, pod.key, 0.5)
        with contextlib.suppress(aiohttp.ClientError):
            async for chunk in response.content.iter_any():
                received += chunk
    assert result == StopResult(finished=0, cut=1)
    assert received.startswith(b"data: ") and b"[DONE]" not in received
    await _refused(pod)


async def test_sigterm_stops_every_pod_gracefully_and_exits_zero(tmp_path: Path,
                                                                  session: aiohttp.ClientSession) -> None:
    control = tmp_path / "ctl.sock"
    with socket.socket(socket.AF_UNIX) as stale:  # what a killed process leaves behind
        stale.bind(str(control))
    server = _launch(tmp_path)
    try:
        pod = _start_pod(server, tpot_ms=100, tokens=4)
        async with session.post(pod.url + "/v1/chat/completions", json=_chat_body(stream=True)) as response:
            assert (await response.content.readline()).startswith(b"data: ")
            server.process.send_signal(signal.SIGTERM)
            events = _events(await response.read())
        assert events[-1] == "[DONE]", "a stream in flight at SIGTERM finishes within the 5 s grace"
        assert await asyncio.to_thread(server.process.wait, 20) == 0
        assert not control.exists()
        await _refused(pod)
    finally:
        server.terminate()
