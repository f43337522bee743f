"""The chart's node agent: the DaemonSet runs `servingops agent` with flags and variables the agent reads,
as its own ServiceAccount, with the host directories and the registry credentials mounted where the flags
say. (Its RBAC is held to the code by tests/test_identities.py.)"""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from devstack import identities
from servingops.agents.settings import add_arguments, from_arguments

pytestmark = pytest.mark.unit

VALUES = {"registry": {"address": "registry.example:5000", "insecure": False,
                       "credentials": {"create": True, "username": "u", "password": "p"}},
          "agent": {"modelDirs": ["/mnt/models", "/raid/models"], "nodeSelector": {"gpu": "true"},
                    "bandwidthMBPerSecond": 100, "workers": 3, "layersInFlight": 4}}


def _daemonset(values: dict[str, Any] | None) -> dict[str, Any]:
    [daemonset] = [d for d in identities.render("servingops", "ops", values) if d["kind"] == "DaemonSet"]
    return daemonset


def test_the_daemonset_runs_the_agent_with_what_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    daemonset = _daemonset(VALUES)
    pod = daemonset["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["serviceAccountName"] == "servingops-agent" and pod["nodeSelector"] == {"gpu": "true"}
    assert container["args"][0] == "agent"
    env = {e["name"]: e.get("value") for e in container["env"]}
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    # Every variable the chart sets is the default of one of the agent's flags (runtime/process.py's Flags
    # names it in the flag's help), HOME aside: the libraries' caches read it.
    declared = "\n".join(action.help or "" for action in parser._actions)
    for name in env:
        if name != "HOME":
            assert re.search(rf"\(env {name}\)", declared), name
    for name, value in env.items():
        monkeypatch.setenv(name, value if value is not None else "node-from-downward-api")
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser)
    settings = from_arguments(parser.parse_args(container["args"][1:]))
    assert (settings.registry, settings.registry_insecure) == ("registry.example:5000", False)
    assert settings.node == "node-from-downward-api" and str(settings.root) == "/"
    assert (settings.workers, settings.bandwidth_mb_per_second, settings.layers_in_flight) == (3, 100, 4)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert str(settings.registry_credentials_dir) == mounts["registry-credentials"]
    assert volumes["registry-credentials"]["secret"]["secretName"] == "servingops-registry"
    assert str(settings.state_dir) == mounts["state"]
    for index, directory in enumerate(VALUES["agent"]["modelDirs"]):  # type: ignore[index]
        assert mounts[f"models-{index}"] == directory
        assert volumes[f"models-{index}"]["hostPath"]["path"] == directory


def test_no_credentials_mount_without_a_secret_and_the_local_stack_runs_no_daemonset() -> None:
    container = _daemonset(None)["spec"]["template"]["spec"]["containers"][0]
    assert "registry-credentials" not in {m["name"] for m in container["volumeMounts"]}
    local = identities.render("servingops", "ops", identities.local_values())
    assert not [d for d in local if d["kind"] == "DaemonSet"]
    assert [d for d in local if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "servingops-agent"]
