"""testkit/load.py against an in-process OpenAI-style server on 127.0.0.1 that names a revision and a pod in
every answer, chosen by weight, and can fail (500), cut a stream, reset a connection or be slow.

The server counts what it sent, so the report's counts are checked exactly against the server's; timing is
checked only with generous bounds (2 cores, other suites beside this one)."""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from testkit.load import (
    POD_HEADER,
    REVISION_HEADER,
    BackgroundLoad,
    Kind,
    LoadReport,
    LoadSpec,
    Mark,
    RequestRecord,
    _GuardedResolver,
    check_target,
    classify,
    run_load,
)

pytestmark = pytest.mark.unit


@dataclass
class FakeServing:
    """What the server answers (set before the load starts; `weights` may change while it runs) and what it
    sent (read after)."""

    weights: dict[str, float] = field(default_factory=lambda: {"v1": 1.0})
    pods_per_revision: int = 2
    fail_every: int = 0
    """Every n-th chat request answers 500 (with its revision's headers, as a pod would)."""
    cut_every: int = 0
    """Every n-th stream stops before [DONE]: alternately a clean end of the body and an aborted connection."""
    reset_every: int = 0
    """Every n-th request gets its connection reset (RST) instead of an answer."""
    delay: tuple[float, float] = (0.0, 0.0)
    """Seconds before answering, uniform in [low, high]."""
    first_token_delay: float = 0.0
    """Streams: seconds between the role chunk and the first content chunk."""
    answered: Counter[str] = field(default_factory=Counter)
    pods: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    cut: int = 0
    resets: int = 0
    requests: int = 0
    hosts: Counter[str] = field(default_factory=Counter)
    extra: Counter[str] = field(default_factory=Counter)
    random: random.Random = field(default_factory=lambda: random.Random(7))

    def __post_init__(self) -> None:
        self._numbers = itertools.count(1)
        self._pod_turn: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/redirect", self.redirect)
        return app

    def choose(self) -> tuple[str, str]:
        revisions, weights = zip(*self.weights.items(), strict=True)
        revision = self.random.choices(revisions, weights)[0]
        self._pod_turn[revision] += 1
        return revision, f"team-a/{revision}-{self._pod_turn[revision] % self.pods_per_revision}"

    def sent(self, revision: str, pod: str) -> None:
        self.answered[revision] += 1
        self.pods[pod] += 1

    async def begin(self, request: web.Request) -> tuple[int, dict[str, str]]:
        number = next(self._numbers)
        self.requests += 1
        self.hosts[request.host] += 1
        self.extra[request.headers.get("x-test", "")] += 1
        if any(self.delay):
            await asyncio.sleep(self.random.uniform(*self.delay))
        revision, pod = self.choose()
        return number, {REVISION_HEADER: revision, POD_HEADER: pod}

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        number, headers = await self.begin(request)
        if self.reset_every and number % self.reset_every == 0:
            return self.reset(request)
        if self.fail_every and number % self.fail_every == 0:
            self.statuses[500] += 1
            return web.json_response({"error": "engine overloaded"}, status=500, headers=headers)
        if body.get("stream"):
            return await self.stream(request, number, headers)
        self.statuses[200] += 1
        self.sent(headers[REVISION_HEADER], headers[POD_HEADER])
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": "hi"}}]}, headers=headers)

    async def stream(self, request: web.Request, number: int, headers: dict[str, str]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n')
        await asyncio.sleep(self.first_token_delay)
        await resp.write(b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
        self.statuses[200] += 1
        if self.cut_every and number % self.cut_every == 0:
            self.cut += 1
            if (number // self.cut_every) % 2:
                assert request.transport is not None
                request.transport.abort()
            else:
                await resp.write_eof()
            return resp
        await resp.write(b'data: {"choices":[{"delta":{"content":" there"}}]}\n\ndata: [DONE]\n\n')
        await resp.write_eof()
        self.sent(headers[REVISION_HEADER], headers[POD_HEADER])
        return resp

    def reset(self, request: web.Request) -> web.StreamResponse:
        """Close the connection with an RST, before any answer."""
        self.resets += 1
        assert request.transport is not None
        sock = request.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        request.transport.abort()
        return web.Response()

    async def models(self, request: web.Request) -> web.StreamResponse:
        _, headers = await self.begin(request)
        self.statuses[200] += 1
        self.sent(headers[REVISION_HEADER], headers[POD_HEADER])
        return web.json_response({"data": [{"id": "model"}]}, headers=headers)

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        raise web.HTTPFound("http://8.8.8.8/v1/models")


class ServerThread:
    """The fake server on its own event loop in a thread, so a sync test's BackgroundLoad and an async test's
    run_load reach it alike, over real loopback connections."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fake-serving", daemon=True)
        self.url = ""

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._ready.wait(10), "the fake server did not start"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _main(self) -> None:
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()


@pytest.fixture
def serving() -> Iterator[tuple[FakeServing, str]]:
    fake = FakeServing()
    with ServerThread(fake.app()) as server:
        yield fake, server.url


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# ---------------------------------------------------------------------------------------------------------------
# Safety and bounds


@pytest.mark.parametrize("url", [
    "http://8.8.8.8/", "http://example.com", "http://192.168.1.1:8080", "http://10.251.0.2", "http://10.0.0.1",
    "http://0.0.0.0:80", "http://[2001:db8::1]:80", "http://[::ffff:8.8.8.8]/", "http://localtest.me:80",
    "ftp://127.0.0.1/", "http://:80",
])
def test_targets_outside_loopback_and_the_stack_are_refused_before_any_request(url: str) -> None:
    with pytest.raises(ValueError):
        LoadSpec(url=url, max_requests=1, max_seconds=1)
    with pytest.raises(ValueError):
        check_target(url)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8080", "http://127.9.9.9", "http://[::1]:80", "http://localhost:80", "http://10.250.3.2",
    "http://10.244.0.7:8000", "https://[::ffff:127.0.0.1]:443",
])
def test_loopback_and_the_stacks_addresses_are_allowed(url: str) -> None:
    LoadSpec(url=url, max_requests=1, max_seconds=1)


@pytest.mark.parametrize("bad", [
    {"max_requests": 0}, {"max_seconds": float("inf")}, {"max_seconds": 0}, {"rate": 0.0},
    {"rate": float("nan")}, {"concurrency": 0}, {"request_timeout": -1.0},
])
def test_every_run_is_bounded(bad: dict[str, float]) -> None:
    options: dict[str, float] = {"max_requests": 1, "max_seconds": 1.0, **bad}
    with pytest.raises(ValueError):
        LoadSpec("http://127.0.0.1:1", **options)  # type: ignore[arg-type]


async def test_the_resolver_refuses_any_name_but_localhost() -> None:
    resolver = _GuardedResolver()
    with pytest.raises(OSError):
        await resolver.resolve("example.com", 80)
    assert all(r["host"] in ("127.0.0.1", "::1") for r in await resolver.resolve("localhost", 80))


async def test_a_redirect_elsewhere_is_not_followed(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    report = await run_load(LoadSpec(url, kind="get", path="/redirect", max_requests=3, max_seconds=5))
    assert fake.requests == 3
    assert report.failures == Counter({"status 302": 3})


@pytest.mark.parametrize("rate", [None, 400.0])
async def test_max_requests_bounds_the_run(serving: tuple[FakeServing, str], rate: float | None) -> None:
    fake, url = serving
    report = await run_load(LoadSpec(url, max_requests=57, max_seconds=10, rate=rate, concurrency=5))
    assert report.total == report.succeeded == fake.requests == 57
    assert sorted(r.index for r in report.records) == list(range(57))


@pytest.mark.parametrize("rate", [None, 100.0])
async def test_max_seconds_bounds_the_run(serving: tuple[FakeServing, str], rate: float | None) -> None:
    fake, url = serving
    fake.delay = (0.05, 0.05)
    began = time.monotonic()
    report = await run_load(LoadSpec(url, max_requests=100_000, max_seconds=0.6, rate=rate, concurrency=4))
    took = time.monotonic() - began
    assert all(r.start_s < 0.6 for r in report.records)
    assert 4 <= report.total == fake.requests <= (61 if rate else 4 * (0.6 / 0.05 + 1))
    assert took < 0.6 + 3, "requests in flight at the deadline finish within the request timeout, here fast"


# ---------------------------------------------------------------------------------------------------------------
# Rate


async def test_the_open_loop_keeps_its_rate(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    report = await run_load(LoadSpec(url, rate=200, max_seconds=1.5, max_requests=100_000))
    assert 0.8 * 300 <= report.total == fake.requests <= 300
    assert 160 <= report.achieved_rate <= 210
    steps = report.timeline(width=0.5)[:3]  # a fourth holds the few milliseconds past 1.5 s the run took to end
    assert all(60 <= sum(step.by_revision.values()) + step.failures <= 101 for step in steps), steps


async def test_the_open_loop_does_not_wait_for_answers(serving: tuple[FakeServing, str]) -> None:
    """At 0.2 s per answer, 4 closed-loop workers make 20 requests a second; the open loop still offers 100."""
    fake, url = serving
    fake.delay = (0.2, 0.2)
    closed = await run_load(LoadSpec(url, concurrency=4, max_seconds=1.0, max_requests=1000))
    opened = await run_load(LoadSpec(url, rate=100, max_seconds=1.0, max_requests=1000))
    assert closed.total <= 4 * 6
    assert opened.total >= 80
    assert opened.latency is not None and opened.latency.p50 >= 0.2


# ---------------------------------------------------------------------------------------------------------------
# Counting what the server sent


@pytest.mark.parametrize("kind", ["chat", "stream", "get"])
async def test_counts_by_revision_and_pod_are_what_the_server_sent(serving: tuple[FakeServing, str],
                                                                    kind: Kind) -> None:
    fake, url = serving
    fake.weights = {"v1": 3.0, "v2": 1.0}
    fake.pods_per_revision = 3
    report = await run_load(LoadSpec(url, kind=kind, max_requests=400, max_seconds=20, concurrency=8))
    assert report.total == report.succeeded == 400
    assert report.by_revision == fake.answered
    assert report.by_pod == fake.pods
    assert len(report.by_pod) == 6
    assert report.share("v2") == fake.answered["v2"] / 400
    assert 0.15 <= report.share("v2") <= 0.35
    assert report.share("v3") == 0.0


async def test_host_and_extra_headers_reach_the_server(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    report = await run_load(LoadSpec(url, host="llama.team-a.example", headers={"x-test": "yes"}, max_requests=5,
                                     max_seconds=5))
    assert report.succeeded == 5
    assert fake.hosts == Counter({"llama.team-a.example": 5})
    assert fake.extra == Counter({"yes": 5})


# ---------------------------------------------------------------------------------------------------------------
# Failures


async def test_a_500_is_a_failure_counted_by_status(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    fake.fail_every = 4
    report = await run_load(LoadSpec(url, max_requests=100, max_seconds=10, concurrency=4))
    assert report.failures == Counter({"status 500": fake.statuses[500]}) == Counter({"status 500": 25})
    assert report.succeeded == 75 and report.by_revision == fake.answered
    assert all(r.revision == "v1" and r.status == 500 for r in report.records if not r.ok), "headers of failures kept"


async def test_a_closed_port_is_connection_refused() -> None:
    report = await run_load(LoadSpec(f"http://127.0.0.1:{closed_port()}", max_requests=6, max_seconds=5))
    assert report.failures == Counter({"ConnectionRefusedError": 6})
    assert report.succeeded == 0 and all(r.status is None for r in report.records)
    assert report.latency is None and report.share("v1") == 0.0


async def test_a_stream_without_done_is_cut(serving: tuple[FakeServing, str]) -> None:
    """Both ways a stream breaks: the body ends cleanly before [DONE], or the connection is aborted mid-stream."""
    fake, url = serving
    fake.cut_every = 3
    report = await run_load(LoadSpec(url, kind="stream", max_requests=60, max_seconds=10, concurrency=4))
    assert fake.cut == 20
    assert report.failures == Counter({"stream cut": 20})
    assert report.by_revision == fake.answered and report.succeeded == 40
    assert all(r.status == 200 for r in report.records)


async def test_a_reset_connection_and_a_timeout_are_named(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    fake.reset_every = 2
    report = await run_load(LoadSpec(url, max_requests=10, max_seconds=10, concurrency=1))
    assert fake.resets == 5 and report.failed == 5
    assert set(report.failures) <= {"ConnectionResetError", "ServerDisconnectedError"}
    fake.reset_every, fake.delay = 0, (2.0, 2.0)
    slow = await run_load(LoadSpec(url, max_requests=2, max_seconds=10, concurrency=2, request_timeout=0.2))
    assert slow.failures == Counter({"timeout": 2})


def test_exceptions_are_classified() -> None:
    assert classify(TimeoutError()) == "timeout"
    assert classify(ConnectionResetError(104, "reset")) == "ConnectionResetError"
    assert classify(OSError(111, "refused")) == "ConnectionRefusedError"
    assert classify(ConnectionResetError(104, "reset"), streaming=True) == "stream cut"
    assert classify(RuntimeError("bug")) == "RuntimeError"


# ---------------------------------------------------------------------------------------------------------------
# Reports: windows, marks, shares, percentiles


def record(index: int, start: float, revision: str | None = "v1", status: int | None = 200, error: str | None = None,
           latency: float = 0.01, ttft: float | None = None) -> RequestRecord:
    return RequestRecord(index=index, kind="chat", start_s=start, end_s=start + latency, status=status, error=error,
                         revision=revision, pod=f"ns/{revision}-0" if revision else None, ttft_s=ttft)


def test_window_mark_share_first_time_and_timeline_on_known_records() -> None:
    records = [record(0, 0.1), record(1, 0.6), record(2, 1.2, status=503, revision=None),
               record(3, 1.5), record(4, 2.1, revision="v2"), record(5, 2.4),
               record(6, 2.9, revision="v2"), record(7, 3.3, revision="v2", error="stream cut"),
               record(8, 3.5, revision="v2"), record(9, 3.9, revision="v2")]
    report = LoadReport.of(records, [Mark("promoted", 2.0), Mark("weight 100", 2.8)], end_s=4.0)
    assert (report.total, report.succeeded, report.failed) == (10, 8, 2)
    assert report.failures == Counter({"status 503": 1, "stream cut": 1})
    assert report.by_revision == Counter({"v1": 4, "v2": 4}) and report.share("v2") == 0.5
    assert report.achieved_rate == 10 / 4.0

    before, during, after = report.window(None, "promoted"), report.window("promoted", "weight 100"), \
        report.window("weight 100")
    assert [r.index for r in before.records] == [0, 1, 2, 3]
    assert [r.index for r in during.records] == [4, 5]
    assert [r.index for r in after.records] == [6, 7, 8, 9]
    assert before.total + during.total + after.total == report.total
    assert during.share("v2") == 0.5 and after.share("v2") == 1.0 and before.share("v2") == 0.0
    assert during.duration_s == pytest.approx(0.8) and after.end_s == 4.0
    assert [r.index for r in report.window(1.2, 2.4).records] == [2, 3, 4]
    assert report.window("promoted").mark_time("weight 100") == 2.8, "marks survive a cut"

    assert report.first_time(lambda r: r.revision == "v2") == 2.9
    assert report.first_time(lambda r: r.revision == "v2", include_failures=True) == 2.9
    assert report.first_time(lambda r: r.revision == "v3") is None
    assert report.first_time(lambda r: True, after="promoted") == 2.1
    assert report.first_window(lambda w: w.share("v2") >= 0.5, after="promoted") == 2.0
    assert report.first_window(lambda w: w.share("v2") == 1.0, width=0.5) == 2.5

    assert [(s.second, dict(s.by_revision), s.failures) for s in report.timeline()] == [
        (0.0, {"v1": 2}, 0), (1.0, {"v1": 1}, 1), (2.0, {"v1": 1, "v2": 2}, 0), (3.0, {"v2": 2}, 1)]
    with pytest.raises(KeyError):
        report.mark_time("rolled back")


def test_percentiles_are_nearest_rank() -> None:
    records = [record(i, i * 0.01, latency=(i + 1) / 100, ttft=(i + 1) / 1000) for i in range(100)]
    records.append(record(100, 1.0, status=500, latency=99.0))
    report = LoadReport.of(records)
    assert report.latency is not None and report.ttft is not None
    assert (report.latency.p50, report.latency.p90, report.latency.p99) == pytest.approx((0.5, 0.9, 0.99))
    assert report.latency.count == 100, "the failure (99 s) is not a latency"
    assert (report.ttft.p50, report.ttft.p99) == pytest.approx((0.05, 0.099))
    assert LoadReport.of([]).latency is None


async def test_measured_percentiles_are_sane(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    fake.delay, fake.first_token_delay = (0.01, 0.04), 0.02
    report = await run_load(LoadSpec(url, kind="stream", max_requests=60, max_seconds=10, concurrency=6))
    assert report.latency is not None and report.ttft is not None and report.succeeded == 60
    assert 0.01 <= report.latency.p50 <= report.latency.p90 <= report.latency.p99 <= max(
        r.latency_s for r in report.records)
    assert 0.03 <= report.ttft.p50 <= report.latency.p50, "the first content comes after the delay and the role chunk"
    assert report.ttft.p99 < report.latency.p99 + 1e-9


# ---------------------------------------------------------------------------------------------------------------
# In the background of a sync test


def test_background_load_in_sync_code_cuts_at_marks(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    with BackgroundLoad(LoadSpec(url, rate=100, max_seconds=20, max_requests=10_000)) as load:
        time.sleep(0.5)
        early = load.snapshot()
        load.mark("switching")
        fake.weights = {"v2": 1.0}  # what a promotion does, as seen from the traffic
        load.mark("promoted")
        time.sleep(0.5)
        assert load.running and load.snapshot().total > early.total > 0
        report = load.stop()
    assert not load.running and load.snapshot() is report
    assert report.total == fake.requests and report.by_revision == fake.answered and report.failed == 0
    assert report.window("promoted").share("v2") == 1.0, "requests sent after the switch all reach v2"
    assert report.window(None, "switching").share("v1") >= 0.9, "only those answered during the switch may be v2"
    assert report.window(None, "switching").total + report.window("switching").total == report.total
    settled = report.first_time(lambda r: r.revision == "v2")
    assert settled is not None and report.mark_time("switching") - 0.2 <= settled <= report.mark_time("promoted") + 0.2
    assert 1.0 <= report.duration_s < 3.0


def test_background_load_ends_by_itself_at_its_bound(serving: tuple[FakeServing, str]) -> None:
    fake, url = serving
    load = BackgroundLoad(LoadSpec(url, kind="stream", max_requests=20, max_seconds=10, concurrency=2)).start()
    report = load.wait()
    assert report.succeeded == 20 == fake.requests and report.ttft is not None
    assert load.stop() is report
