"""runtime/process.py: how every process reads its settings and stops (unit), and that a real process
started the way the chart starts it stops on SIGTERM."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import textwrap

import pytest

from servingops.admission.main import PROCESS as ADMISSION
from servingops.agents.main import PROCESS as AGENT
from servingops.crd_bridge.main import PROCESS as BRIDGE
from servingops.ingress.catalog_endpoint import PROCESS as CATALOG_ENDPOINT
from servingops.ingress.model_webhook import PROCESS as WEBHOOK
from servingops.runtime.process import DEFAULT_REGISTRY, Flags, Process
from servingops.workers.main import PROCESS as WORKER

pytestmark = pytest.mark.unit


def _parser(declare: object) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    assert callable(declare)
    declare(Flags(parser))
    return parser


def test_a_flag_defaults_to_its_variable_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def declare(flags: Flags) -> None:
        flags.value("--workers", "T_WORKERS", 2, kind=int, help="how many")
        flags.switch("--insecure", "T_INSECURE", True, help="plain HTTP")
        flags.registry()

    monkeypatch.delenv("SERVINGOPS_REGISTRY", raising=False)
    args = _parser(declare).parse_args([])
    assert (args.workers, args.insecure, args.registry) == (2, True, DEFAULT_REGISTRY)
    monkeypatch.setenv("T_WORKERS", "5")
    monkeypatch.setenv("T_INSECURE", "false")
    monkeypatch.setenv("SERVINGOPS_REGISTRY", "r.example:443")
    parser = _parser(declare)
    args = parser.parse_args([])
    assert (args.workers, args.insecure, args.registry) == (5, False, "r.example:443")
    assert parser.parse_args(["--workers", "7", "--insecure"]).workers == 7, "a flag beats its variable"
    helps = {action.dest: action.help for action in parser._actions}
    assert helps["workers"] == "how many (env T_WORKERS)"
    assert helps["registry"] == "host:port of the registry models are published to (env SERVINGOPS_REGISTRY)"


def test_a_required_flag_is_satisfied_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    def declare(flags: Flags) -> None:
        flags.value("--node", "T_NODE", required=True)

    monkeypatch.delenv("T_NODE", raising=False)
    with pytest.raises(SystemExit):
        _parser(declare).parse_args([])
    monkeypatch.setenv("T_NODE", "gpu-1")
    assert _parser(declare).parse_args([]).node == "gpu-1"


@pytest.mark.parametrize("process", [WORKER, BRIDGE, AGENT, WEBHOOK, CATALOG_ENDPOINT, ADMISSION], ids=lambda p: p.name)
def test_every_process_names_the_variable_behind_each_flag(process: Process[object]) -> None:
    parser = process.parser()
    assert parser.prog == f"servingops {process.name}"
    for action in parser._actions:
        if action.dest in ("help", "queue_size", "concurrency"):  # the bridge's two tuning flags have no variable
            continue
        assert action.help and "(env " in action.help, f"{process.name} {action.option_strings}: {action.help}"


def test_a_process_stops_on_sigterm_once_its_work_returns() -> None:
    """The same start-up as the five processes (run_threaded, run_async), in a child process of its own:
    SIGTERM sets the stop event, the process's run returns, and it exits 0."""
    script = textwrap.dedent("""
        import argparse, asyncio, sys
        from servingops.runtime.process import Flags, Process, run_async, run_threaded

        def declare(parser: argparse.ArgumentParser) -> None:
            Flags(parser).value("--name", "T_NAME", "x")

        process = Process("probe", "", declare, lambda args: args.name)

        def threaded(name, stop):
            print("ready", flush=True)
            stop.wait()
            print("stopped", name, flush=True)

        async def in_loop(name, stop):
            print("ready", flush=True)
            await stop.wait()
            print("stopped", name, flush=True)

        if sys.argv[1] == "threaded":
            run_threaded(process, ["--name", "t"], threaded)
        else:
            run_async(process, ["--name", "a"], in_loop)
    """)
    for mode, name in (("threaded", "t"), ("async", "a")):
        child = subprocess.Popen([sys.executable, "-c", script, mode], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
        assert (child.returncode, out.strip()) == (0, f"stopped {name}"), mode
