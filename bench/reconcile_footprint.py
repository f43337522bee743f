"""What one first reconcile of an InferenceService costs the worker: product files whose code ran, reads
and writes of the object at the apiserver, and how often it was resolved and rendered.

    .venv/bin/python -m bench.reconcile_footprint [--keep]

A local cluster, Temporal, the worker and the bridge as processes (the chart's identities). The worker runs
with a profiler installed at interpreter start (a `sitecustomize` on its PYTHONPATH, nothing in the
product): it records every function of the product that is called, in every thread, from a reset (SIGUSR1)
to a dump (SIGUSR2). Between the two, one Deployment-mode InferenceService (one engine, no rollout spec) is
created and served until Ready. The apiserver's own counter (`apiserver_request_total` for
inferenceservices, by verb) gives the reads and writes of the object across the same interval; the bridge
and this script watch and never GET, so the GETs are the worker's.

Issue 29 measured before its change: about 32 files touched, the object read 4 times (observe,
ensure_revision, set_traffic, patch_status), resolved and rendered twice. No goal: the figures go in the
note and docs/architecture.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.rollout_promote import GROUP, OLD_IMAGE, PLURAL, VERSION
from bench.stack import chart_identities, start_servers, wait_for
from bench.watches import ObjectWatch
from devstack.product import BridgeLauncher, start_worker

PRODUCT = str(Path(__file__).resolve().parent.parent / "servingops")
NAMESPACE, NAME = "footprint", "chat"

SITECUSTOMIZE = '''
import atexit, json, os, signal, sys, threading
_product, _out = os.environ["SERVINGOPS_FOOTPRINT_ROOT"], os.environ["SERVINGOPS_FOOTPRINT_OUT"]
_calls = {}
def _profile(frame, event, arg):
    if event == "call":
        code = frame.f_code
        if code.co_filename.startswith(_product):
            key = (code.co_filename, code.co_name)
            _calls[key] = _calls.get(key, 0) + 1
def _reset(*_):
    _calls.clear()
def _dump(*_):
    with open(_out, "w") as out:
        json.dump([[f, n, c] for (f, n), c in list(_calls.items())], out)
signal.signal(signal.SIGUSR1, _reset)
signal.signal(signal.SIGUSR2, _dump)
sys.setprofile(_profile)
threading.setprofile(_profile)
'''


def isvc() -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": NAME},
            "spec": {"engine": {"minReplicas": 1, "runner": {"name": "engine", "image": OLD_IMAGE,
                                                             "ports": [{"containerPort": 8000}]}}}}  # fmt: skip


_REQUESTS = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')


def object_requests(api: client.ApiClient) -> collections.Counter[str]:
    """apiserver_request_total for inferenceservices, by verb (and subresource)."""
    params = api.param_serialize(method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
    response = api.call_api(*params)
    response.read()  # type: ignore[no-untyped-call]
    counts: collections.Counter[str] = collections.Counter()
    for line in bytes(response.data or b"").decode().splitlines():
        match = _REQUESTS.match(line)
        if not match or 'resource="inferenceservices"' not in match["labels"]:
            continue
        labels = dict(part.split("=", 1) for part in match["labels"].split(","))
        verb = labels["verb"].strip('"')
        sub = labels.get("subresource", '""').strip('"')
        counts[f"{verb}{'/' + sub if sub else ''}"] += int(float(match["value"]))
    return counts


def ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    keep = parser.parse_args().keep
    work = Path(tempfile.mkdtemp(prefix="bench-footprint-"))
    with contextlib.ExitStack() as cleanup:
        if not keep:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        servers = start_servers(cleanup, work, nodes=1)
        api = servers.api
        ids = chart_identities(servers.cluster, work / "identities", {})
        tracer = work / "tracer"
        tracer.mkdir()
        (tracer / "sitecustomize.py").write_text(SITECUSTOMIZE)
        out = work / "footprint.json"
        env = {"PYTHONPATH": os.pathsep.join([str(tracer), os.environ.get("PYTHONPATH", "")]),
               "SERVINGOPS_FOOTPRINT_ROOT": PRODUCT, "SERVINGOPS_FOOTPRINT_OUT": str(out)}  # fmt: skip
        worker = start_worker(servers.cluster, servers.temporal, servers.registry, servers.hub, "footprint",
                              work / "spool", work / "logs", host_id="footprint", extra_env=env, identities=ids)
        cleanup.callback(worker.stop)
        launcher = BridgeLauncher(ids, servers.temporal.address, work / "logs")
        cleanup.callback(launcher.stop_all)
        launcher.start(task_queue="footprint", kinds="InferenceService")
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        time.sleep(2)  # the worker's start-up calls are done before the reset

        custom = client.CustomObjectsApi(api)
        # Readiness through a watch (LIST/WATCH at the apiserver), so every GET counted is the worker's.
        services = ObjectWatch(api, GROUP, VERSION, NAMESPACE, PLURAL, ready)
        cleanup.callback(services.stop)
        pid = worker.pid
        assert pid is not None, "the worker is not running"
        os.kill(pid, signal.SIGUSR1)
        before = object_requests(api)
        began = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, isvc())
        services.wait(NAME, lambda is_ready: bool(is_ready), 180)
        served_s = time.monotonic() - began
        time.sleep(3)  # the status write after Ready, and nothing else pending
        os.kill(pid, signal.SIGUSR2)
        wait_for("the footprint dump", out.exists, 10)
        after = object_requests(api)

        calls = json.loads(out.read_text())
        files = collections.Counter[str]()
        functions: dict[tuple[str, str], int] = {}
        for filename, function, count in calls:
            relative = str(Path(filename).relative_to(Path(PRODUCT).parent))
            files[relative] += count
            functions[(relative, function)] = count
        requests = after - before
        print(f"one first reconcile of a Deployment-mode InferenceService (created -> Ready in {served_s:.1f} s)")
        print(f"  product files whose code ran in the worker: {len(files)}")
        for package, count in sorted(collections.Counter(f.split("/")[1] for f in files).items()):
            print(f"    {package}: {count}")
        print(f"  requests for the object at the apiserver: {dict(sorted(requests.items()))}")
        for label, path, function in (
            ("resolved (resolution.resolve_service)", "servingops/rendering/resolution.py", "resolve_service"),
            ("revisions rendered (render.render_revision)", "servingops/rendering/render.py", "render_revision"),
            ("serving.observe", "servingops/activities/serving/activities.py", "observe"),
        ):
            print(f"  {label}: {functions.get((path, function), 0)}")
        if keep:
            print(f"work directory (kept): {work}; files: {sorted(files)}")


if __name__ == "__main__":
    main()
