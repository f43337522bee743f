"""Per-node state of each model, where upstream OME's controller and users look for it.

- a Node label per model (`keys.ModelKey.label_key`), value Ready / Updating / Failed, removed with the
  copy: what `kubectl get nodes -L` shows and what rendered pods' node affinity selects on;
- the node's report ConfigMap (named after the node, in the agent's namespace, labelled
  `models.ome/basemodel-status: "true"`), one data key per model (`keys.ModelKey.configmap_key`) holding
  JSON: upstream's `name` and `status`, plus `kind`, `namespace`, `digest`, `message` and `time` (when
  the entry last changed). The delivery workflow aggregates these into status.nodesReady / nodesFailed.

Writes are merge patches of the one key (no read-modify-write race with anyone), made only when the
state, digest or message differ from what is already there.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from kubernetes import client

from servingops.api_models.ome.model_keys import LABEL_DOMAIN, STATUS_CONFIGMAP_LABEL, ModelKey
from servingops.clients.kube.calls import call, create_unless_exists, get_or_none, patch_if_present

log = logging.getLogger("servingops.agent.report")


class NodeState(StrEnum):
    """Upstream OME's model states on a node (pkg/modelagent: ModelStatusReady/Updating/Failed)."""

    READY = "Ready"
    UPDATING = "Updating"
    FAILED = "Failed"


class Reporter:
    def __init__(self, api_client: client.ApiClient, node_name: str, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.namespace = namespace
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] | None = None
        self._labels: dict[str, str] = {}

    # -- what is there ---------------------------------------------------------------------------

    def observe_node(self, node: dict[str, Any] | None) -> None:
        """The Node as the watch last saw it: labels already right are not patched again."""
        with self._lock:
            self._labels = dict(((node or {}).get("metadata") or {}).get("labels") or {})

    def _load_entries(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            cm = get_or_none(self.core.read_namespaced_config_map, self.node_name, self.namespace)
            data = (cm.data or {}) if cm is not None else {}
            entries = {}
            for key, raw in data.items():
                try:
                    entries[key] = json.loads(raw)
                except ValueError:
                    entries[key] = {}
            self._entries = entries
        return self._entries

    def reload(self) -> None:
        """Forget the cached report: the next write or prune reads the ConfigMap again (periodic resync)."""
        with self._lock:
            self._entries = None

    def entry(self, key: ModelKey) -> dict[str, Any] | None:
        with self._lock:
            return self._load_entries().get(key.configmap_key)

    # -- writes ----------------------------------------------------------------------------------

    def set(self, key: ModelKey, state: NodeState, *, digest: str = "", message: str = "") -> None:
        """The node's label first, then its report: whoever reads the report (the BaseModel workflow,
        which makes the model Ready from it) finds the label that pods schedule by already in place."""
        with self._lock:
            if self._labels.get(key.label_key) != state.value:
                self._patch_labels({key.label_key: state.value})
            entries = self._load_entries()
            current = entries.get(key.configmap_key) or {}
            if (current.get("status"), current.get("digest", ""), current.get("message", "")) != (
                    state.value, digest, message):
                entry = {"name": key.name, "kind": key.kind.value, "namespace": key.namespace, "status": state.value,
                         "digest": digest, "message": message[:1024],
                         "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
                self._patch_configmap({key.configmap_key: json.dumps(entry, sort_keys=True)})
                entries[key.configmap_key] = entry
                log.info("%s on %s: %s %s %s", key, self.node_name, state.value, digest, message)

    def clear(self, key: ModelKey) -> None:
        """The label first, as in set: no new pod is placed by it while the report still names the copy."""
        with self._lock:
            if key.label_key in self._labels:
                self._patch_labels({key.label_key: None})
            entries = self._load_entries()
            if key.configmap_key in entries:
                self._patch_configmap({key.configmap_key: None})
                entries.pop(key.configmap_key, None)
                log.info("%s on %s: report removed", key, self.node_name)

    def prune(self, keep: Iterable[ModelKey]) -> None:
        """Remove labels and entries of models that are not `keep` (gone while the agent was down)."""
        keep = list(keep)
        labels = {k.label_key for k in keep}
        cm_keys = {k.configmap_key for k in keep}
        with self._lock:
            entries = self._load_entries()
            stale_entries: dict[str, str | None] = {k: None for k in entries if k not in cm_keys}
            if stale_entries:
                self._patch_configmap(stale_entries)
                for k in stale_entries:
                    entries.pop(k, None)
            stale_labels: dict[str, str | None] = {
                k: None for k in self._labels if k.startswith(LABEL_DOMAIN + "/") and k not in labels}
            if stale_labels:
                self._patch_labels(stale_labels)

    def _patch_labels(self, labels: dict[str, str | None]) -> None:
        if patch_if_present(self.core.patch_node, self.node_name, {"metadata": {"labels": labels}}) is None:
            return  # the Node is gone
        for k, v in labels.items():
            if v is None:
                self._labels.pop(k, None)
            else:
                self._labels[k] = v

    def _patch_configmap(self, data: dict[str, str | None]) -> None:
        if patch_if_present(self.core.patch_namespaced_config_map, self.node_name, self.namespace,
                            {"data": data}) is not None:
            return
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=self.node_name, namespace=self.namespace,
                labels={STATUS_CONFIGMAP_LABEL: "true", "node": self.node_name},
                annotations={"models.ome.io/node-name": self.node_name, "models.ome.io/managed-by": "model-agent"}),
            data={k: v for k, v in data.items() if v is not None})
        if create_unless_exists(self.core.create_namespaced_config_map, self.namespace, body) is None:
            call(self.core.patch_namespaced_config_map, self.node_name, self.namespace, {"data": data})
