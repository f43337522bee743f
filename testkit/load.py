"""A bounded load generator that judges serving by what its requests saw.

Rollout tests (and the benchmarks) send OpenAI-style requests through the local Gateway to fake serving
pods and judge a canary step, a promotion or a drain by the answers: every answer names the revision
(`x-servingops-revision`) and the pod (`x-servingops-pod`) that served it, so "a quarter of the answers
came from the canary" or "no request failed while the old pods drained" is read off a `LoadReport`
instead of trusting the HTTPRoute's weights.

Two ways to drive load, both bounded by a number of requests AND a number of seconds (there is no
unbounded mode, so a test that forgets to stop its load cannot hammer the machine forever):

- open loop (`rate=200.0`): requests start on a fixed schedule whatever the answers do, the way many
  independent clients behave; a slow server makes requests pile up (up to `concurrency` in flight)
  instead of slowing the offered load, so latency is not hidden by the generator waiting;
- closed loop (`rate=None`): `concurrency` workers send back to back, for the most load the client can
  offer.

Only loopback and the addresses the local stack makes itself (its network namespaces, 10.250.0.0/16,
and kwok's pod addresses, 10.244.0.0/16) may be targeted: the target is checked when the `LoadSpec` is
made, before any request, and again by the connector's resolver; redirects are never followed and no
proxy from the environment is used, so nothing leaves the machine.

`run_load` serves an async test; `BackgroundLoad` runs the same load on an event loop in a thread while
a sync test drives a rollout, with `mark("promoted")` to name moments the report can be cut at.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import ResolveResult

REVISION_HEADER = "x-servingops-revision"
POD_HEADER = "x-servingops-pod"
POD_IP_HEADER = "x-servingops-pod-ip"
MISSING = "(none)"
"""The revision or pod a successful answer is counted under when it carried no such header."""

ALLOWED_NETWORKS = tuple(ipaddress.ip_network(net) for net in (
    "127.0.0.0/8", "::1/128",
    "10.250.0.0/16",  # the local stack's network namespaces (devstack/netns.py)
    "10.244.0.0/16",  # kwok's pod addresses (devstack/kube.py POD_CIDR)
))

Kind = Literal["chat", "stream", "get"]
DEFAULT_PATHS: Mapping[Kind, str] = {"chat": "/v1/chat/completions", "stream": "/v1/chat/completions",
                                     "get": "/v1/models"}
CLOSED_LOOP_WORKERS = 8
OPEN_LOOP_IN_FLIGHT = 128


# ---------------------------------------------------------------------------------------------------------------
# The target: loopback and the stack's own addresses only


def allowed_address(address: str) -> bool:
    """Whether an IP address is one the tests may send traffic to (loopback or the stack's own ranges)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in ALLOWED_NETWORKS)


def check_target(url: str) -> str:
    """The URL's host once it is known to be safe; ValueError otherwise.

    Only an IP literal or `localhost` is accepted: resolving any other name would ask DNS, and what a
    name resolves to can change between this check and the connection. `localhost` is resolved here
    (from /etc/hosts) and every address it names must be loopback."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"load target {url!r}: only http and https URLs")
    host = parts.hostname
    if not host:
        raise ValueError(f"load target {url!r} names no host")
    try:
        parts.port  # noqa: B018 - a malformed port raises here, not in the middle of a run
    except ValueError as exc:
        raise ValueError(f"load target {url!r}: {exc}") from None
    for address in _addresses(host, url):
        if not allowed_address(address):
            raise ValueError(f"load target {url!r} resolves to {address}, outside loopback, 10.250.0.0/16 "
                             "and 10.244.0.0/16: tests send traffic only to the local stack")
    return host


def _addresses(host: str, url: str) -> list[str]:
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host.split("%", 1)[0]))]
    if host != "localhost":
        raise ValueError(f"load target {url!r}: the host must be an IP literal or localhost, not a name to look up")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(f"load target {url!r}: localhost does not resolve ({exc})") from None
    return [str(info[4][0]) for info in infos]


class _GuardedResolver(aiohttp.ThreadedResolver):
    """The connector's resolver: `localhost` only, and only its allowed addresses.

    check_target already refused everything else; this holds the same rule at connection time, so no
    path through aiohttp (a Host header, a later change of the URL) can reach another address."""

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host != "localhost":
            raise OSError(f"load generator refuses to resolve {host!r}")
        results = [r for r in await super().resolve(host, port, family) if allowed_address(r["host"])]
        if not results:
            raise OSError("localhost resolves to no loopback address")
        return results


# ---------------------------------------------------------------------------------------------------------------
# What to send


@dataclass(frozen=True)
class LoadSpec:
    """One bounded run: where, what, how fast, and when to stop.

    `url` is the base (scheme, host, port: `http://127.0.0.1:8080`); the path comes from `path` or the
    kind's default. The run ends at `max_requests` started requests or `max_seconds`, whichever comes
    first (requests in flight then get up to `request_timeout` to finish). `rate` set: open loop, that
    many starts per second, at most `concurrency` in flight (default 128). `rate=None`: closed loop,
    `concurrency` workers back to back (default 8). `host` is the Host header the Gateway routes by."""

    url: str
    max_requests: int
    max_seconds: float
    rate: float | None = None
    concurrency: int | None = None
    kind: Kind = "chat"
    path: str | None = None
    host: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    model: str = "model"
    prompt: str = "Say hello."
    max_tokens: int = 16
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        check_target(self.url)
        _positive("max_requests", self.max_requests)
        _positive("max_seconds", self.max_seconds)
        _positive("request_timeout", self.request_timeout)
        if self.rate is not None:
            _positive("rate", self.rate)
        if self.concurrency is not None:
            _positive("concurrency", self.concurrency)
        if self.kind not in DEFAULT_PATHS:
            raise ValueError(f"kind must be one of {sorted(DEFAULT_PATHS)}, not {self.kind!r}")

    @property
    def in_flight(self) -> int:
        """Closed loop: the number of workers; open loop: the most requests in flight (the pool's size)."""
        if self.concurrency is not None:
            return self.concurrency
        return CLOSED_LOOP_WORKERS if self.rate is None else OPEN_LOOP_IN_FLIGHT

    @property
    def target(self) -> str:
        return self.url.rstrip("/") + (self.path or DEFAULT_PATHS[self.kind])

    def request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"} if self.kind != "get" else {}
        if self.kind == "stream":
            headers["Accept"] = "text/event-stream"
        headers.update(self.headers)
        if self.host is not None:
            headers["Host"] = self.host
        return headers

    def body(self) -> bytes | None:
        """The request body, made once per run: serializing it per request would cost the client CPU it
        needs to keep the rate."""
        if self.kind == "get":
            return None
        payload: dict[str, object] = {"model": self.model, "messages": [{"role": "user", "content": self.prompt}],
                                      "max_tokens": self.max_tokens}
        if self.kind == "stream":
            payload["stream"] = True
        return json.dumps(payload).encode()


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number above 0 (the load is always bounded), not {value!r}")


# ---------------------------------------------------------------------------------------------------------------
# What each request saw, and the report


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request. Times are seconds on the monotonic clock since the run started."""

    index: int
    kind: Kind
    start_s: float
    end_s: float
    status: int | None
    """The HTTP status, or None when no answer came (the connection failed)."""
    error: str | None
    """Why the request failed although (or before) a status came: "ConnectionRefusedError",
    "ConnectionResetError", "timeout", "stream cut", ...; None when nothing went wrong on the wire."""
    revision: str | None
    pod: str | None
    ttft_s: float | None = None
    """Streams: seconds from the start to the first data chunk with content."""
    address: str | None = None
    """The answering pod's IP (`x-servingops-pod-ip`): tells apart same-named pods of two member clusters."""

    @property
    def ok(self) -> bool:
        """2xx and nothing cut (a stream ended with `data: [DONE]`)."""
        return self.error is None and self.status is not None and 200 <= self.status < 300

    @property
    def latency_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def reason(self) -> str | None:
        """The failure's name in `LoadReport.failures`, None for a success."""
        if self.ok:
            return None
        return self.error if self.error is not None else f"status {self.status}"


@dataclass(frozen=True)
class Mark:
    """A named moment ("promoted", "weight 25") on the run's clock, so a report can be cut between two."""

    label: str
    at_s: float


@dataclass(frozen=True)
class Percentiles:
    """Nearest-rank percentiles (seconds) of `count` values: no interpolation, so each is a value seen."""

    p50: float
    p90: float
    p99: float
    count: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles | None:
        ordered = sorted(values)
        if not ordered:
            return None
        return cls(p50=_rank(ordered, 50), p90=_rank(ordered, 90), p99=_rank(ordered, 99), count=len(ordered))


def _rank(ordered: Sequence[float], percent: float) -> float:
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


class Second(NamedTuple):
    """One step of a report's timeline: the requests that started in [second, second + width)."""

    second: float
    by_revision: Counter[str]
    """Successful answers by revision."""
    failures: int


When = float | str
"""A time on the run's clock: seconds, or the label of a mark."""


@dataclass(frozen=True)
class LoadReport:
    """What the requests that started in [start_s, end_s) saw.

    For a whole run, end_s is when it stopped starting requests (open loop: the end of the schedule;
    closed loop: when the last worker finished), so `achieved_rate` is the rate the server was offered
    (open loop) or its throughput (closed loop). Counts by revision and pod are of successful answers:
    a failure is counted once, by its reason, in `failures`."""

    records: tuple[RequestRecord, ...] = field(repr=False)
    marks: tuple[Mark, ...]
    start_s: float
    end_s: float
    target_rate: float | None
    total: int
    succeeded: int
    failed: int
    failures: Counter[str]
    by_revision: Counter[str]
    by_pod: Counter[str]
    by_address: Counter[str]
    """Successful answers by the answering pod's IP."""
    latency: Percentiles | None
    """Of successful requests, start to the end of the body (streams: to [DONE])."""
    ttft: Percentiles | None
    """Of successful streams."""

    @classmethod
    def of(cls, records: Iterable[RequestRecord], marks: Iterable[Mark] = (), *, start_s: float = 0.0,
           end_s: float | None = None, target_rate: float | None = None) -> LoadReport:
        """The report of these records (sorted by start); end_s defaults to the last end seen."""
        ordered = tuple(sorted(records, key=lambda r: (r.start_s, r.index)))
        if end_s is None:
            end_s = max((r.end_s for r in ordered), default=start_s)
        good = [r for r in ordered if r.ok]
        return cls(
            records=ordered, marks=tuple(sorted(marks, key=lambda m: m.at_s)), start_s=start_s, end_s=end_s,
            target_rate=target_rate, total=len(ordered), succeeded=len(good), failed=len(ordered) - len(good),
            failures=Counter(r.reason for r in ordered if r.reason is not None),
            by_revision=Counter(r.revision or MISSING for r in good), by_pod=Counter(r.pod or MISSING for r in good),
            by_address=Counter(r.address or MISSING for r in good),
            latency=Percentiles.of(r.latency_s for r in good),
            ttft=Percentiles.of(r.ttft_s for r in good if r.ttft_s is not None))

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def achieved_rate(self) -> float:
        """Requests started per second over the report's span."""
        return self.total / self.duration_s if self.duration_s > 0 else 0.0

    def share(self, revision: str) -> float:
        """The fraction of successful answers that came from `revision` (0.0 when none succeeded)."""
        return self.by_revision[revision] / self.succeeded if self.succeeded else 0.0

    def mark_time(self, label: str) -> float:
        """When the first mark with this label was made; KeyError if none was."""
        for mark in self.marks:
            if mark.label == label:
                return mark.at_s
        raise KeyError(f"no mark {label!r} (marks: {[m.label for m in self.marks]})")

    def at(self, when: When) -> float:
        return self.mark_time(when) if isinstance(when, str) else float(when)

    def window(self, start: When | None = None, end: When | None = None) -> LoadReport:
        """The requests that started in [start, end): seconds or mark labels, None for the report's own
        bounds. Marks are kept, so a window can be cut again."""
        lo = self.start_s if start is None else max(self.start_s, self.at(start))
        hi = self.end_s if end is None else min(self.end_s, self.at(end))
        hi = max(lo, hi)
        chosen = [r for r in self.records if lo <= r.start_s and (end is None or r.start_s < hi)]
        return LoadReport.of(chosen, self.marks, start_s=lo, end_s=hi, target_rate=self.target_rate)

    def first_time(self, predicate: Callable[[RequestRecord], bool], *, after: When | None = None,
                   include_failures: bool = False) -> float | None:
        """The start time of the earliest request (from `after` on) from which every later one satisfies
        `predicate`, None if the last one does not: `first_time(lambda r: r.revision == "v2")` is when the
        answers settled on v2. Only successful answers are judged unless `include_failures`."""
        lo = self.start_s if after is None else self.at(after)
        candidates = [r for r in self.records if r.start_s >= lo and (include_failures or r.ok)]
        settled: float | None = None
        for record in reversed(candidates):
            if not predicate(record):
                break
            settled = record.start_s
        return settled

    def first_window(self, predicate: Callable[[LoadReport], bool], *, width: float = 1.0,
                     after: When | None = None) -> float | None:
        """The start of the first non-empty window of `width` seconds (from `after` on) whose report
        satisfies `predicate`: `first_window(lambda w: w.share("v2") >= 0.5, after="promoted")` minus the
        mark's time is how long promotion took to reach half the answers."""
        _positive("width", width)
        lo = self.start_s if after is None else self.at(after)
        while lo < self.end_s:
            part = self.window(lo, lo + width)
            if part.total and predicate(part):
                return lo
            lo += width
        return None

    def timeline(self, width: float = 1.0) -> list[Second]:
        """Successful answers by revision and failures, per `width` seconds of start time, empty steps
        included: where in a rollout the traffic moved and where it failed."""
        _positive("width", width)
        steps = max(1, math.ceil(self.duration_s / width))
        revisions: list[Counter[str]] = [Counter() for _ in range(steps)]
        failures = [0] * steps
        for record in self.records:
            step = min(steps - 1, max(0, int((record.start_s - self.start_s) // width)))
            if record.ok:
                revisions[step][record.revision or MISSING] += 1
            else:
                failures[step] += 1
        return [Second(self.start_s + i * width, revisions[i], failures[i]) for i in range(steps)]


# ---------------------------------------------------------------------------------------------------------------
# One request


@dataclass
class _Seen:
    """What one request has seen so far (filled in as the answer arrives, so a failure keeps the status
    and headers that came before it)."""

    status: int | None = None
    revision: str | None = None
    pod: str | None = None
    address: str | None = None
    ttft: float | None = None
    streaming: bool = False


async def _send(session: aiohttp.ClientSession, spec: LoadSpec, body: bytes | None, headers: Mapping[str, str],
                started: float, seen: _Seen) -> str | None:
    """Send one request and read its whole answer; the error (a failure name) or None."""
    method = "GET" if spec.kind == "get" else "POST"
    async with session.request(method, spec.target, data=body, headers=headers, allow_redirects=False) as resp:
        seen.status = resp.status
        seen.revision = resp.headers.get(REVISION_HEADER)
        seen.pod = resp.headers.get(POD_HEADER)
        seen.address = resp.headers.get(POD_IP_HEADER)
        if spec.kind != "stream" or not 200 <= resp.status < 300:
            await resp.read()
            return None
        seen.streaming = True
        return await _read_stream(resp, started, seen)


async def _read_stream(resp: aiohttp.ClientResponse, started: float, seen: _Seen) -> str | None:
    """Read server-sent events to the end of the body; "stream cut" unless `data: [DONE]` came.

    The body is read to its end even after [DONE], so the connection goes back to the pool."""
    done = False
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
        elif seen.ttft is None and not done and _has_content(data):
            seen.ttft = time.monotonic() - started
    return None if done else "stream cut"


def _has_content(data: bytes) -> bool:
    """Whether a chunk carries generated text (a chat delta's content or a completion's text); the first
    chunk often carries only the role."""
    try:
        choice = json.loads(data)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return False
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return bool(content)


def classify(exc: BaseException, streaming: bool = False) -> str:
    """The failure name of an exception: "timeout", "stream cut" (a stream broken after its 2xx),
    "body cut", or the OS error's class ("ConnectionRefusedError", "ConnectionResetError")."""
    if isinstance(exc, TimeoutError):  # aiohttp's timeouts are asyncio.TimeoutError, TimeoutError since 3.11
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _os_error_name(exc.os_error)
    if streaming and isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError
                                | ConnectionResetError):
        return "stream cut"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "body cut"
    if isinstance(exc, ConnectionResetError):
        return "ConnectionResetError"
    if isinstance(exc, OSError):
        return _os_error_name(exc)
    return type(exc).__name__


def _os_error_name(exc: OSError) -> str:
    """The builtin subclass an errno stands for (ECONNREFUSED: ConnectionRefusedError), whatever class the
    library wrapped it in."""
    if exc.errno is not None:
        named = type(OSError(exc.errno, ""))
        if named is not OSError:
            return named.__name__
    return type(exc).__name__


# ---------------------------------------------------------------------------------------------------------------
# A run


class LoadRun:
    """One run of a LoadSpec on the running event loop: `await run()` for the report; `mark`, `snapshot`
    and `stop` meanwhile (from the loop's thread; BackgroundLoad makes them safe from another thread)."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self._t0: float | None = None
        self._records: list[RequestRecord] = []
        self._marks: list[Mark] = []
        self._next = 0
        self._stopping = False
        self._starter: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._starts_ended: float | None = None
        self._started = threading.Event()

    def now(self) -> float:
        """Seconds since the run started."""
        if self._t0 is None:
            raise RuntimeError("the load run has not started")
        return time.monotonic() - self._t0

    def mark(self, label: str) -> float:
        """Record a named moment (kept by every report of this run) and return its time."""
        at = self.now()
        self._marks.append(Mark(label, at))
        return at

    def snapshot(self) -> LoadReport:
        """The requests answered so far (those in flight are not in it yet)."""
        return LoadReport.of(tuple(self._records), tuple(self._marks), end_s=self.now(),
                             target_rate=self.spec.rate)

    def stop(self) -> None:
        """Start no more requests; those in flight finish (within the request timeout). Closed-loop
        workers finish their request and see the flag; an open loop's schedule is woken."""
        self._stopping = True
        if self._starter is not None and self.spec.rate is not None:
            self._starter.cancel()  # wakes the schedule; the requests in flight are tasks of their own

    async def run(self) -> LoadReport:
        """Send the load until a bound is reached or `stop()`; then the report of every request."""
        if self._t0 is not None:
            raise RuntimeError("a LoadRun runs once")
        spec = self.spec
        body, headers = spec.body(), spec.request_headers()
        connector = aiohttp.TCPConnector(limit=spec.in_flight, resolver=_GuardedResolver())
        timeout = aiohttp.ClientTimeout(total=spec.request_timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
            self._t0 = time.monotonic()
            self._started.set()
            send = _Sender(self, session, body, headers)
            try:
                await self._start_all(send)
                await self._drain()
            finally:  # the caller cancelled the run: so are its requests (each recorded as "cancelled")
                await self._cancel_in_flight()
        end = self._starts_ended if self._starts_ended is not None else self.now()
        return LoadReport.of(self._records, self._marks, end_s=end, target_rate=spec.rate)

    async def _start_all(self, send: _Sender) -> None:
        """Start requests until a bound or stop(); stop() cancels an open loop's schedule, which ends it
        here, while a cancellation of the run itself goes on up."""
        starter = self._closed_loop(send) if self.spec.rate is None else self._open_loop(send)
        self._starter = asyncio.create_task(starter)
        try:
            await self._starter
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def _cancel_in_flight(self) -> None:
        pending = set(self._in_flight)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _claim(self) -> int | None:
        """The next request's index, None once a bound is reached or the run was stopped."""
        if self._stopping or self._next >= self.spec.max_requests or self.now() >= self.spec.max_seconds:
            return None
        self._next += 1
        return self._next - 1

    async def _closed_loop(self, send: _Sender) -> None:
        await asyncio.gather(*(self._worker(send) for _ in range(self.spec.in_flight)))
        self._starts_ended = self.now()

    async def _worker(self, send: _Sender) -> None:
        while (index := self._claim()) is not None:
            await send(index)

    async def _open_loop(self, send: _Sender) -> None:
        """Start request i at i / rate whatever the earlier ones do; when behind (a busy loop, every slot
        in flight), start at once to catch up, so the offered rate over the run stays the target."""
        assert self.spec.rate is not None
        interval = 1.0 / self.spec.rate
        slots = asyncio.Semaphore(self.spec.in_flight)
        try:
            while self._next < self.spec.max_requests:
                await asyncio.sleep(max(0.0, self._next * interval - self.now()))
                await slots.acquire()
                index = self._claim()
                if index is None:
                    slots.release()
                    return
                self._in_flight_task(send(index), slots)
        finally:
            # All started: the schedule's end is the slot after the last (so a run on time reports the
            # target rate); otherwise (deadline, stop) now.
            done = self._next >= self.spec.max_requests and not self._stopping
            self._starts_ended = max(self.now(), self._next * interval) if done else self.now()

    def _in_flight_task(self, request: Coroutine[None, None, None], slots: asyncio.Semaphore) -> None:
        """Run one open-loop request as a task of its own (kept until it ends, then its slot is free)."""
        task = asyncio.create_task(request)
        self._in_flight.add(task)

        def finished(done: asyncio.Task[None]) -> None:
            self._in_flight.discard(done)
            slots.release()

        task.add_done_callback(finished)

    async def _drain(self) -> None:
        """Wait for the requests in flight; each is bounded by the request timeout, so this is too."""
        if not self._in_flight:
            return
        await asyncio.wait(set(self._in_flight), timeout=self.spec.request_timeout + 1.0)

    def _record(self, record: RequestRecord) -> None:
        self._records.append(record)


class _Sender:
    """Sends request `index` of a run and records what it saw: the per-request path, kept small because
    it runs hundreds of times a second on the client's one event loop."""

    def __init__(self, run: LoadRun, session: aiohttp.ClientSession, body: bytes | None,
                 headers: Mapping[str, str]) -> None:
        self._run, self._session, self._body, self._headers = run, session, body, headers

    async def __call__(self, index: int) -> None:
        run = self._run
        started = time.monotonic()
        start_s = run.now()
        seen = _Seen()
        error: str | None = "cancelled"  # what the record says if the request never ends by itself
        try:
            error = await _send(self._session, run.spec, self._body, self._headers, started, seen)
        except Exception as exc:  # every failure is a result to count, not a reason to stop the run
            error = classify(exc, seen.streaming)
        finally:
            run._record(RequestRecord(index=index, kind=run.spec.kind, start_s=start_s, end_s=run.now(),
                                      status=seen.status, error=error, revision=seen.revision, pod=seen.pod,
                                      ttft_s=seen.ttft, address=seen.address))


async def run_load(spec: LoadSpec) -> LoadReport:
    """Run the load to its bounds on the running loop (an async test's) and return the report."""
    return await LoadRun(spec).run()


# ---------------------------------------------------------------------------------------------------------------
# In the background of a sync test


class BackgroundLoad:
    """The load on its own event loop in a thread, while a sync test drives a rollout:

        with BackgroundLoad(spec) as load:
            promote(); load.mark("promoted")
            wait_until("half on v2", lambda: load.snapshot().window("promoted").share("v2") >= 0.5)
        report = load.report

    `stop()` (or leaving the block) stops starting requests, lets those in flight finish and returns the
    report; the run also ends by itself at its bounds."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self._run = LoadRun(spec)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._report: LoadReport | None = None
        self._error: BaseException | None = None

    def start(self) -> BackgroundLoad:
        """Start the load; returns once the run's clock runs (so `mark` works at once)."""
        if self._thread is not None:
            raise RuntimeError("a BackgroundLoad starts once")
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="load", daemon=True)
        self._thread.start()
        while not self._run._started.wait(0.05):
            if not self._thread.is_alive():
                self._raise()
                raise RuntimeError("the load thread ended before the run started")
        return self

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self._report = await self._run.run()
        except BaseException as exc:  # handed to the test's thread by stop()
            self._error = exc

    def mark(self, label: str) -> float:
        """Record a named moment on the run's clock (kept in every report) and return its time."""
        return self._run.mark(label)

    def now(self) -> float:
        return self._run.now()

    def snapshot(self) -> LoadReport:
        """The requests answered so far."""
        if self._report is not None:
            return self._report
        return self._run.snapshot()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> LoadReport:
        """Start no more requests, wait for those in flight, and return the report of the run."""
        if self._thread is None:
            raise RuntimeError("the load was never started")
        if self._loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the run had ended anyway
                self._loop.call_soon_threadsafe(self._run.stop)
        return self.wait()

    def wait(self, timeout: float | None = None) -> LoadReport:
        """The report once the run ends by its bounds; TimeoutError if it has not after `timeout` seconds
        (default: what its bounds allow)."""
        assert self._thread is not None
        limit = timeout if timeout is not None else self.spec.max_seconds + self.spec.request_timeout + 5.0
        self._thread.join(limit)
        if self._thread.is_alive():
            raise TimeoutError(f"the load run did not end within {limit:.1f} s")
        return self.report

    @property
    def report(self) -> LoadReport:
        """The final report (after stop() or wait())."""
        self._raise()
        if self._report is None:
            raise RuntimeError("the load is still running: stop() or wait() first")
        return self._report

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError("the load run failed") from self._error

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if not self.running:
            return
        if exc_type is None:
            self.stop()
            return
        with contextlib.suppress(Exception):  # the block's own failure is the one to see
            self.stop()
