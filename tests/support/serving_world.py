"""A fake cluster of models and runtimes with OME's samples, for the serving-resolution and rendering rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SAMPLES = Path(__file__).parent.parent / "fixtures" / "ome_samples"

FILLED = {  # what the delivery workflow writes from config.json into a spec that left them empty
    "modelFormat": {"name": "safetensors", "version": "1.0.0"},
    "modelFramework": {"name": "transformers", "version": "4.45.0.dev0"},
    "modelArchitecture": "LlamaForCausalLM",
    "modelParameterSize": "1.24B",
}


def load(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SAMPLES / relative).read_text()) if d]


class Cluster:
    """The objects the resolver may read, by (group, kind, namespace, name)."""

    controller_namespace: str | None = None
    """Where a ClusterBaseModel's claim is without storage.parameters.namespace (None: not known)."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[tuple[str, str, str | None, str], dict[str, Any]] = {}
        for obj in objects:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> None:
        group = obj["apiVersion"].split("/")[0]
        meta = obj["metadata"]
        self.objects[(group, obj["kind"], meta.get("namespace"), meta["name"])] = obj

    def get(self, group: str, kind: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        return self.objects.get((group, kind, namespace, name))

    def list(self, group: str, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return [o for (g, k, ns, _), o in sorted(self.objects.items()) if (g, k, ns) == (group, kind, namespace)]


def ready_model(**status: Any) -> dict[str, Any]:
    [model] = load("models/meta/Llama-3.2-1B-Instruct.yaml")
    model["spec"].update(FILLED)
    model["status"] = status or {"state": "Ready", "nodesReady": ["node-a"]}
    return model


def sample_service() -> dict[str, Any]:
    [isvc] = load("isvc/meta/llama-3-2-1b-instruct.yaml")
    return isvc


def sglang_runtime() -> dict[str, Any]:
    [runtime] = load("runtimes/srt/meta/llama-3-2-1b-instruct-rt.yaml")
    return runtime
