"""`python -m devstack.pod_server --control PATH`: the process that plays the serving container of the local
stack's kwok pods (devstack only, never shipped).

kwok gives serving pods IPs (10.244.x.y) but runs nothing behind them. The host side (`devstack/pod_runtime.py`)
puts those IPs on the `lo` of a network namespace the stack made and starts this one long-lived process inside
it (`ip netns exec <ns> python -m devstack.pod_server --control <unix socket>`). It then tells the process, over
the control socket (a Unix socket lives in the filesystem, so it crosses network namespaces), which pods to
serve; each pod answers on every one of its (ip, port) like a small vLLM OpenAI-compatible server:

- `GET /health` (200 `{}`, 503 when configured unhealthy), `GET /v1/models`;
- `POST /v1/chat/completions` and `POST /v1/completions`, streamed (server-sent events ending `data: [DONE]`)
  or not, with a configurable time to first token, time per output token, token count and error rate;
- `GET /metrics`: vLLM's metric names in Prometheus text, written by hand;
- `GET` or `POST /capacity`: the routing capacity poll's `Report` (servingops/rendering/capacity_poll.py),
  `{"servable": n, "observedAt": now}`, when the pod is given a servable count; 404 otherwise (a home that
  publishes no report);
- every response carries `x-servingops-pod`, `x-servingops-pod-ip` and `x-servingops-revision`, so a load
  generator can count which revision answered.

The served model name is not checked against the request's `model` (a router in front may rewrite it).

Control protocol: newline-delimited JSON on the Unix socket, one reply line per request, any number of
requests per connection (`PodServerClient` below is the host side's synchronous client):

    {"op": "start", "pod": "ns/name", "uid", "ip", "ports": [...], "revision", "model",
     "ttft_ms", "tpot_ms", "tokens", "error_rate", "servable"}             -> {"ok": true}
    {"op": "configure", "pod", any of "ttft_ms", "tpot_ms", "tokens", "error_rate", "healthy", "servable"}
                                                                          -> {"ok": true}
    {"op": "stop", "pod", "grace_seconds", "uid"?}          -> {"ok": true, "finished": n, "cut": n}
    {"op": "list"}          -> {"ok": true, "pods": {"ns/name": {"uid", "ip", "ports", "in_flight", "served", ...}}}

and `{"ok": false, "error": "..."}` for a request that is malformed or fails. Starting a pod already running with
the same uid is a no-op; the same pod with another uid replaces it (the old one is cut at once). Stopping does
what a kubelet's SIGTERM does to a server that shuts down gracefully: the listeners close at once, requests in
flight finish (streams included) and whatever is left at `grace_seconds` is cut. Stopping a pod that is not
running, or (with `uid`) whose name now belongs to another pod object, answers `finished: 0, cut: 0`.

The process prints `ready` on stdout once the control socket listens, and on SIGTERM or SIGINT stops every pod
with a 5 s grace and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import socket
import stat
import sys
import time
import uuid
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from aiohttp import hdrs, web
from pydantic import BaseModel, ConfigDict, Field, IPvAnyAddress, TypeAdapter, ValidationError, field_validator

log = logging.getLogger("devstack.pod_server")

SHUTDOWN_GRACE_SECONDS = 5.0
OWNED_BY = "servingops-devstack"

# --- control messages --------------------------------------------------------------------------------------

PodKey = Annotated[str, Field(pattern=r"^[^/\s]+/[^/\s]+$", description="<namespace>/<name>")]
Port = Annotated[int, Field(ge=1, le=65535)]
Millis = Annotated[float, Field(ge=0, le=3_600_000)]
Tokens = Annotated[int, Field(ge=1, le=1_000_000)]
Rate = Annotated[float, Field(ge=0, le=1)]
Servable = Annotated[int, Field(ge=0, le=1_000_000)]


class _Message(BaseModel):
    # A misspelt field ("ttft": 40) is an error, not a silently ignored key.
    model_config = ConfigDict(extra="forbid")


class StartRequest(_Message):
    op: Literal["start"] = "start"
    pod: PodKey
    uid: Annotated[str, Field(min_length=1)]
    ip: IPvAnyAddress
    ports: Annotated[list[Port], Field(min_length=1)]
    revision: str = ""
    model: Annotated[str, Field(min_length=1)]
    ttft_ms: Millis = 0
    tpot_ms: Millis = 0
    tokens: Tokens = 16
    error_rate: Rate = 0.0
    servable: Servable | None = None

    @field_validator("ports")
    @classmethod
    def _distinct(cls, ports: list[int]) -> list[int]:
        if len(set(ports)) != len(ports):
            raise ValueError("ports must be distinct")
        return ports


class ConfigureRequest(_Message):
    op: Literal["configure"] = "configure"
    pod: PodKey
    ttft_ms: Millis | None = None
    tpot_ms: Millis | None = None
    tokens: Tokens | None = None
    error_rate: Rate | None = None
    healthy: bool | None = None
    servable: Servable | None = None


class StopRequest(_Message):
    op: Literal["stop"] = "stop"
    pod: PodKey
    grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 30
    uid: str | None = None
    """Only the pod object of this uid: a stop sent for a deleted pod after a new pod of the same name started
    (a StatefulSet-style name, or an InferenceReplica's) leaves the new one serving."""


class ListRequest(_Message):
    op: Literal["list"] = "list"


ControlRequest = Annotated[StartRequest | ConfigureRequest | StopRequest | ListRequest, Field(discriminator="op")]
_CONTROL_REQUEST: TypeAdapter[ControlRequest] = TypeAdapter(ControlRequest)


def _describe(exc: ValidationError) -> str:
    """One line per problem, `where: what` (the union's tag leads the path: `start.ports.0: ...`)."""
    problems = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "request"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


class ControlError(Exception):
    """An operation that cannot be done; its text is the reply's `error`."""


# --- metrics -----------------------------------------------------------------------------------------------

# vLLM's names, label (`model_name`, plus `engine` since the V1 engine) and buckets, as in vllm/v1/metrics/loggers.py
# (PrometheusStatLogger; read at vllm-project/vllm commit 005a810b). Newer vLLM releases may have moved buckets.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length")

# vLLM's API server counts HTTP requests through prometheus-fastapi-instrumentator: `http_requests_total` with
# labels handler (the route's template), method and status grouped by its first digit ("2xx", the default
# should_group_status_codes=True), leaving out /metrics, /health, /load, /ping, /version and /server_info. Paths
# that match no route (the instrumentator's handler "none") are not counted here.
HTTP_REQUESTS_HELP = "Total number of requests by method, status and handler."


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Histogram:
    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        # bisect_left: a value equal to a bound belongs to that bucket (Prometheus buckets are `le`).
        self.counts[bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.count += times

    def render(self, name: str, labels: str) -> Iterator[str]:
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            cumulative += n
            yield f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}'
        yield f'{name}_bucket{{{labels},le="+Inf"}} {self.count}'
        yield f"{name}_sum{{{labels}}} {self.total}"
        yield f"{name}_count{{{labels}}} {self.count}"


class PodMetrics:
    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success: Counter[str] = Counter()
        self.http: Counter[tuple[str, str, str]] = Counter()  # (handler, method, status class)

    def render(self, model: str, running: int) -> str:
        labels = f'model_name="{_escape(model)}",engine="0"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} 0",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {self.prompt_tokens}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {self.generation_tokens}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        lines += [
            f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {self.success[reason]}'
            for reason in FINISH_REASONS
        ]
        for name, doc, histogram in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
            ("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", self.tpot),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
        ):
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *histogram.render(name, labels)]
        lines += [f"# HELP http_requests_total {HTTP_REQUESTS_HELP}", "# TYPE http_requests_total counter"]
        lines += [
            f'http_requests_total{{handler="{handler}",method="{method}",status="{status}"}} {n}'
            for (handler, method, status), n in sorted(self.http.items())
        ]
        return "\n".join(lines) + "\n"


# --- one pod's HTTP server ---------------------------------------------------------------------------------

_WORDS = (" Hello", " from", " a", " devstack", " pod", " of", " servingops", ".")


def _token(i: int) -> str:
    return _WORDS[i % len(_WORDS)]


def _error_body(status: int, message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


def _json_response(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return web.Response(body=data, status=status, content_type="application/json")


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class BadRequest(Exception):
    pass


@dataclass
class Generation:
    """What one completion request asks for, read from its OpenAI body."""

    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int

    @classmethod
    def parse(cls, raw: bytes, *, chat: bool) -> Generation:
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"request body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("'messages' must be a non-empty list")
            texts = [m.get("content") for m in messages if isinstance(m, dict)]
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str | list):
                raise BadRequest("'prompt' must be a string or a list")
            texts = [prompt] if isinstance(prompt, str) else list(prompt)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                       or max_tokens < 1):
            raise BadRequest("'max_tokens' must be a positive integer")
        options = body.get("stream_options")
        return cls(
            stream=body.get("stream") is True,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            max_tokens=max_tokens,
            # No tokenizer: a word of the prompt counts as a token.
            prompt_tokens=max(1, sum(len(t.split()) for t in texts if isinstance(t, str))),
        )


@dataclass
class Behaviour:
    """How the pod's "model" behaves; `configure` changes it live (a request reads it once, when it starts)."""

    ttft_ms: float
    tpot_ms: float
    tokens: int
    error_rate: float
    healthy: bool = True
    servable: int | None = None
    """The replicas the pod's capacity report says its home can serve; None: no report (404)."""


class Pod:
    def __init__(self, spec: StartRequest) -> None:
        self.key = spec.pod
        self.uid = spec.uid
        self.ip = str(spec.ip)
        self.ports = list(spec.ports)
        self.revision = spec.revision
        self.model = spec.model
        self.behaviour = Behaviour(spec.ttft_ms, spec.tpot_ms, spec.tokens, spec.error_rate, servable=spec.servable)
        self.metrics = PodMetrics()
        # The handler tasks of completion requests being answered: what a stop waits for, then cuts.
        self.in_flight: set[asyncio.Task[Any]] = set()
        self.served = 0  # completion requests answered (any status) or cut
        self.stopping = False
        self.runner: web.AppRunner | None = None

    # lifecycle

    async def listen(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._text)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/capacity", self._capacity)
        app.router.add_post("/capacity", self._capacity)
        app.on_response_prepare.append(self._stamp)
        # access_log=None: no line per request (throughput). shutdown_timeout bounds only what is left after stop()
        # has waited for and cut the completions: health probes and scrapes, which take no time.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self.runner = runner
        port = self.ports[0]
        try:
            for port in self.ports:
                # A load generator opens many connections at once: a deeper accept queue than the default 128.
                await web.TCPSite(runner, self.ip, port, backlog=1024).start()
        except OSError as exc:
            await runner.cleanup()
            raise ControlError(f"cannot listen on {self.ip}:{port}: {exc.strerror or exc}") from exc

    async def stop(self, grace: float) -> tuple[int, int]:
        """Graceful stop: (finished, cut) counts the completion requests that finished during the grace and those
        still running at its end."""
        runner = self.runner
        assert runner is not None and runner.server is not None
        self.stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        served_before = self.served
        for site in list(runner.sites):
            await site.stop()  # the listening sockets close: a new connection is refused from now on
        # Idle keep-alive connections close now; busy ones after their response (which says Connection: close).
        runner.server.pre_shutdown()
        await asyncio.sleep(0)  # requests already read start their handlers, so they are waited for too
        while self.in_flight and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self.in_flight), timeout=left)
        finished = self.served - served_before
        cut = list(self.in_flight)
        for task in cut:
            task.cancel()  # aiohttp then closes the connection: the client sees a truncated response
        await asyncio.gather(*cut, return_exceptions=True)
        await runner.cleanup()
        return finished, len(cut)

    def status(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "ip": self.ip,
            "ports": self.ports,
            "revision": self.revision,
            "model": self.model,
            "in_flight": len(self.in_flight),
            "served": self.served,
            "stopping": self.stopping,
        }

    # HTTP

    async def _stamp(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        response.headers["x-servingops-pod"] = self.key
        response.headers["x-servingops-revision"] = self.revision
        response.headers["x-servingops-pod-ip"] = self.ip  # pods of one name in two member clusters differ by it
        if self.stopping:
            response.headers[hdrs.CONNECTION] = "close"  # so the client does not reuse a connection about to close

    async def _health(self, request: web.Request) -> web.Response:
        if self.behaviour.healthy:
            return _json_response(b"{}")
        return _json_response(_error_body(503, "unhealthy (configured)", "ServiceUnavailable"), 503)

    async def _capacity(self, request: web.Request) -> web.Response:
        servable = self.behaviour.servable
        if servable is None:
            return _json_response(_error_body(404, "this pod publishes no capacity report", "NotFound"), 404)
        observed = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return _json_response({"servable": servable, "observedAt": observed})

    async def _models(self, request: web.Request) -> web.Response:
        self.metrics.http[("/v1/models", "GET", "2xx")] += 1
        card = {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": OWNED_BY,
                "root": self.model, "parent": None}
        return _json_response({"object": "list", "data": [card]})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = self.metrics.render(self.model, len(self.in_flight))
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Version": "0.0.4"})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/chat/completions", chat=True)

    async def _text(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "/v1/completions", chat=False)

    async def _complete(self, request: web.Request, handler: str, *, chat: bool) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self.in_flight.add(task)
        response: web.StreamResponse | None = None
        try:
            response = await self._generate(request, chat)
            return response
        finally:
            self.in_flight.discard(task)
            self.served += 1
            # Like the instrumentator: the status sent, or 500 when none was (cut before answering).
            status = response.status if response is not None else 500
            self.metrics.http[(handler, "POST", f"{status // 100}xx")] += 1

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        behaviour = self.behaviour
        try:
            ask = Generation.parse(await request.read(), chat=chat)
        except BadRequest as exc:
            return _json_response(_error_body(400, str(exc), "BadRequestError"), 400)
        if behaviour.error_rate and random.random() < behaviour.error_rate:
            return _json_response(_error_body(500, "injected failure (error_rate)", "InternalServerError"), 500)

        loop = asyncio.get_running_loop()
        started = loop.time()
        ttft, tpot = behaviour.ttft_ms / 1000, behaviour.tpot_ms / 1000
        n = behaviour.tokens if ask.max_tokens is None else min(behaviour.tokens, ask.max_tokens)
        reason = "length" if ask.max_tokens is not None and ask.max_tokens <= behaviour.tokens else "stop"
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        usage = {"prompt_tokens": ask.prompt_tokens, "completion_tokens": n, "total_tokens": ask.prompt_tokens + n}

        if ask.stream:
            sse_headers = {hdrs.CONTENT_TYPE: "text/event-stream", hdrs.CACHE_CONTROL: "no-cache"}
            stream = web.StreamResponse(headers=sse_headers)
            await stream.prepare(request)  # headers at once, as vLLM's StreamingResponse does; tokens after ttft
            emitted = 0
            try:
                await _sleep_until(loop, started + ttft)
                first = previous = loop.time()
                self.metrics.ttft.observe(first - started)
                for i in range(n):
                    if i:
                        # Against the first token's time, so per-token overhead does not add up over a long stream.
                        await _sleep_until(loop, first + i * tpot)
                        now = loop.time()
                        self.metrics.tpot.observe(now - previous)
                        previous = now
                    await stream.write(self._chunk(ident, created, chat, _token(i), first=i == 0))
                    emitted += 1
                tail = self._chunk(ident, created, chat, "", reason=reason)
                if ask.include_usage:
                    tail += self._chunk(ident, created, chat, "", usage=usage)
                await stream.write(tail + b"data: [DONE]\n\n")
            except ConnectionError:
                return stream  # the client went away: nothing to finish
            finally:
                self.metrics.generation_tokens += emitted
            self._finished(ask, reason, loop.time() - started)
            return stream

        await _sleep_until(loop, started + ttft)
        first = loop.time()
        if n > 1:
            await _sleep_until(loop, first + (n - 1) * tpot)
        ended = loop.time()
        self.metrics.ttft.observe(first - started)
        if n > 1:
            self.metrics.tpot.observe((ended - first) / (n - 1), times=n - 1)
        self.metrics.generation_tokens += n
        self._finished(ask, reason, ended - started)
        text = "".join(_token(i) for i in range(n))
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return _json_response({"id": ident, "object": "chat.completion" if chat else "text_completion",
                               "created": created, "model": self.model, "choices": [choice], "usage": usage})

    def _finished(self, ask: Generation, reason: str, e2e: float) -> None:
        self.metrics.prompt_tokens += ask.prompt_tokens
        self.metrics.success[reason] += 1
        self.metrics.e2e.observe(e2e)

    def _chunk(self, ident: str, created: int, chat: bool, text: str, *, first: bool = False,
               reason: str | None = None, usage: dict[str, int] | None = None) -> bytes:
        """One server-sent event: a token (the first one also names the role), the finish, or the usage."""
        choices: list[dict[str, Any]] = []
        if usage is None:
            choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
            if chat:
                delta: dict[str, str] = {"role": "assistant"} if first else {}
                if reason is None:
                    delta["content"] = text
                choice["delta"] = delta
            else:
                choice["text"] = text
            choices.append(choice)
        payload: dict[str, Any] = {"id": ident, "object": "chat.completion.chunk" if chat else "text_completion",
                                   "created": created, "model": self.model, "choices": choices}
        if usage is not None:
            payload["usage"] = usage
        return _sse(payload)


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    delay = deadline - loop.time()
    if delay > 0:  # no sleep(0) for a zero ttft: throughput
        await asyncio.sleep(delay)


# --- the control side --------------------------------------------------------------------------------------


class PodServer:
    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        # One lock per pod key: a start and a stop of one pod never interleave, while a 30 s graceful stop of one
        # pod does not hold up the others. (Keys are few in a local stack; the locks are never dropped.)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def handle(self, line: bytes) -> dict[str, Any]:
        try:
            request = _CONTROL_REQUEST.validate_json(line)
        except ValidationError as exc:
            return {"ok": False, "error": _describe(exc)}
        try:
            match request:
                case StartRequest():
                    await self.start(request)
                    return {"ok": True}
                case ConfigureRequest():
                    self.configure(request)
                    return {"ok": True}
                case StopRequest():
                    finished, cut = await self.stop(request.pod, request.grace_seconds, request.uid)
                    return {"ok": True, "finished": finished, "cut": cut}
                case ListRequest():
                    return {"ok": True, "pods": {key: pod.status() for key, pod in self.pods.items()}}
        except ControlError as exc:
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # a bug must not take every pod down with the process
            log.exception("control request %s failed", request.op)
            return {"ok": False, "error": f"{request.op} failed: {exc!r}"}

    async def start(self, spec: StartRequest) -> None:
        async with self._locks[spec.pod]:
            old = self.pods.get(spec.pod)
            if old is not None:
                if old.uid == spec.uid:
                    return
                # A new pod object under the old name: the old one is gone, nothing waits for its requests.
                log.info("pod %s: uid %s replaces %s", spec.pod, spec.uid, old.uid)
                del self.pods[spec.pod]
                await old.stop(0)
            pod = Pod(spec)
            await pod.listen()
            self.pods[spec.pod] = pod
            log.info("pod %s (uid %s) listening on %s ports %s", pod.key, pod.uid, pod.ip, pod.ports)

    def configure(self, change: ConfigureRequest) -> None:
        pod = self.pods.get(change.pod)
        if pod is None or pod.stopping:
            raise ControlError(f"pod {change.pod} is not running")
        for name, value in change.model_dump(exclude={"op", "pod"}, exclude_none=True).items():
            setattr(pod.behaviour, name, value)

    async def stop(self, key: str, grace: float, uid: str | None = None) -> tuple[int, int]:
        async with self._locks[key]:
            pod = self.pods.get(key)
            if pod is None or (uid is not None and pod.uid != uid):
                return 0, 0
            finished, cut = await pod.stop(grace)
            del self.pods[key]
            log.info("pod %s stopped: %d finished, %d cut", key, finished, cut)
            return finished, cut

    async def stop_all(self, grace: float) -> None:
        await asyncio.gather(*(self.stop(key, grace) for key in list(self.pods)))

    async def serve_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # a line over the stream's limit: answer, then drop the connection
                    writer.write(json.dumps({"ok": False, "error": "request line too long"}).encode() + b"\n")
                    await writer.drain()
                    return
                if not line:
                    return
                if not line.strip():
                    continue
                reply = await self.handle(line)
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


def _remove_stale_socket(path: Path) -> None:
    """A socket left by a killed process would make the bind fail; anything else at that path is a mistake."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise SystemExit(f"{path} exists and is not a socket")
        path.unlink()


async def serve(control_path: Path) -> None:
    server = PodServer()
    control = await asyncio.start_unix_server(server.serve_control, path=str(control_path), limit=1 << 20)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, done.set)
    print("ready", flush=True)
    await done.wait()
    log.info("stopping every pod (grace %.0f s)", SHUTDOWN_GRACE_SECONDS)
    control.close()
    await server.stop_all(SHUTDOWN_GRACE_SECONDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.pod_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--control", required=True, type=Path, help="path of the control Unix socket to create")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s pod_server %(message)s")
    _remove_stale_socket(args.control)
    try:
        asyncio.run(serve(args.control))
    finally:
        with contextlib.suppress(FileNotFoundError):
            args.control.unlink()
    return 0


# --- the host side's client --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodStatus:
    uid: str
    ip: str
    ports: list[int]
    revision: str
    model: str
    in_flight: int
    served: int
    stopping: bool


@dataclass(frozen=True)
class StopResult:
    finished: int
    cut: int


class PodServerClient:
    """Synchronous client of the control socket: one connection per call, so threads can share an instance.

    Every method raises RuntimeError with the server's error when it answers `ok: false`.
    """

    def __init__(self, control_path: str | os.PathLike[str], timeout: float = 30.0) -> None:
        self.control_path = os.fspath(control_path)
        self.timeout = timeout

    def start(self, pod: str, *, uid: str, ip: str, ports: Sequence[int], model: str, revision: str = "",
              ttft_ms: float = 0, tpot_ms: float = 0, tokens: int = 16, error_rate: float = 0.0,
              servable: int | None = None) -> None:
        self._call({"op": "start", "pod": pod, "uid": uid, "ip": ip, "ports": list(ports), "model": model,
                    "revision": revision, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "tokens": tokens,
                    "error_rate": error_rate, "servable": servable})

    def configure(self, pod: str, *, ttft_ms: float | None = None, tpot_ms: float | None = None,
                  tokens: int | None = None, error_rate: float | None = None, healthy: bool | None = None,
                  servable: int | None = None) -> None:
        fields = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "tokens": tokens, "error_rate": error_rate,
                  "healthy": healthy, "servable": servable}
        self._call({"op": "configure", "pod": pod, **{k: v for k, v in fields.items() if v is not None}})

    def stop(self, pod: str, grace_seconds: float = 30, uid: str | None = None) -> StopResult:
        """Stop the pod (only its object of `uid`, when given)."""
        reply = self._call({"op": "stop", "pod": pod, "grace_seconds": grace_seconds,
                            **({"uid": uid} if uid is not None else {})})
        return StopResult(finished=reply["finished"], cut=reply["cut"])

    def list(self) -> dict[str, PodStatus]:
        reply = self._call({"op": "list"})
        return {key: PodStatus(**status) for key, status in reply["pods"].items()}

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send any message and return the reply as it is, `ok: false` included (tests of the protocol use it)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self._timeout_for(message))
            sock.connect(self.control_path)
            sock.sendall(json.dumps(message).encode() + b"\n")
            with sock.makefile("rb") as replies:
                line = replies.readline()
        if not line:
            raise RuntimeError(f"pod server at {self.control_path} closed the connection without a reply")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _timeout_for(self, message: dict[str, Any]) -> float:
        # A stop answers once its grace is over at the latest: wait that long, and then some.
        grace = message.get("grace_seconds") if message.get("op") == "stop" else None
        return self.timeout + (float(grace) if isinstance(grace, int | float) else 0.0)

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        reply = self.request(message)
        if not reply.get("ok"):
            raise RuntimeError(f"pod server: {message.get('op')} {message.get('pod', '')}: {reply.get('error')}")
        return reply


if __name__ == "__main__":
    sys.exit(main())
