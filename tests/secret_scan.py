"""The tokens the suite hands the product, and a scan of everything the stack stores for them.

What is scanned (issue 10, "Secrets stay out of Temporal"):

- Temporal: every workflow of every namespace of a server (open and closed), each history event
  as its raw protobuf bytes (payloads are the converter's JSON, so a token in an input, result,
  failure, memo or a timed-out attempt's last heartbeat appears verbatim), and each description
  (pending activities' current heartbeat details and last failures);
- the stack's files: every `*.log` (each process the suite starts logs to `<dir>/<name>.log`) and
  every Temporal SQLite file under the given roots, as bytes;
- Kubernetes: the status of every object of the project's kinds, and every Event's message.

Tokens come from three places: `register_token` (a test that makes one up says so), every Secret
the session's cluster ever held (tests/fixtures/secrets.py watches them: upload tokens, Hub tokens,
registry passwords, Prometheus bearer tokens) and the Hub server's known tokens.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.api.workflowservice.v1 import ListNamespacesRequest
from temporalio.client import Client

MIN_LENGTH = 8
"""Shorter strings would match by chance; a test registering one is told to pick a longer one."""
PROJECT_GROUPS = ("ai.deckhouse.io", "ome.io")
_SECRET_KEY_WORDS = ("token", "password", "passwd", "secret", "key", "auth", "credential")

_lock = threading.Lock()
_registered: set[str] = set()


def register_token(*tokens: str) -> None:
    """Declare strings the product must never store outside their Secret."""
    for token in tokens:
        if len(token) < MIN_LENGTH:
            raise ValueError(f"a scanned token needs at least {MIN_LENGTH} characters, got {len(token)}")
    with _lock:
        _registered.update(tokens)


def registered_tokens() -> frozenset[str]:
    with _lock:
        return frozenset(_registered)


def _docker_config_tokens(raw: str) -> set[str]:
    try:
        config = json.loads(raw)
    except ValueError:
        return set()
    auths = config.get("auths", config) if isinstance(config, dict) else {}
    found = set()
    for entry in auths.values() if isinstance(auths, dict) else []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("password"), str):
            found.add(entry["password"])
        if isinstance(entry.get("auth"), str):
            found.add(entry["auth"])
            try:
                found.add(base64.b64decode(entry["auth"]).decode().partition(":")[2])
            except (ValueError, UnicodeDecodeError):
                pass
    return found


def secret_tokens(data: Mapping[str, str] | None) -> set[str]:
    """The credential values of one Secret's (base64) data: keys that name a credential, and the
    passwords inside docker configs. URLs are not credentials (an upload URL names no token)."""
    found: set[str] = set()
    for key, encoded in (data or {}).items():
        try:
            value = base64.b64decode(encoded).decode().strip()
        except (ValueError, UnicodeDecodeError):
            continue
        if key in (".dockerconfigjson", ".dockercfg"):
            found |= _docker_config_tokens(value)
        elif any(word in key.lower() for word in _SECRET_KEY_WORDS) and "://" not in value:
            found.add(value)
    return {token for token in found if len(token) >= MIN_LENGTH}


@dataclass(frozen=True)
class Finding:
    where: str
    token: str

    def __str__(self) -> str:
        # Print where, and only enough of the token to tell which one.
        return f"{self.where}: {self.token[:4]}... ({len(self.token)} chars)"


def _hits(where: str, data: bytes, tokens: Iterable[str]) -> list[Finding]:
    return [Finding(where, token) for token in tokens if token.encode() in data]


async def scan_temporal(address: str, tokens: frozenset[str]) -> tuple[list[Finding], int]:
    """Findings in every workflow of every user namespace; also how many workflows were read."""
    findings: list[Finding] = []
    read = 0
    connection = await Client.connect(address)
    namespaces = await connection.workflow_service.list_namespaces(ListNamespacesRequest())
    for info in namespaces.namespaces:
        name = info.namespace_info.name
        if name == "temporal-system":
            continue
        scoped = await Client.connect(address, namespace=name)
        async for execution in scoped.list_workflows(""):
            read += 1
            handle = scoped.get_workflow_handle(execution.id, run_id=execution.run_id)
            where = f"temporal {name}/{execution.id}/{execution.run_id}"
            async for event in handle.fetch_history_events():
                findings += _hits(f"{where} history event {event.event_id}", event.SerializeToString(), tokens)
            description = await handle.describe()
            findings += _hits(f"{where} description (pending activities, heartbeats)",
                              description.raw_description.SerializeToString(), tokens)
    return findings, read


def stored_files(roots: Iterable[Path]) -> Iterator[Path]:
    """Every process log and Temporal SQLite file (with its WAL) under the roots."""
    for root in roots:
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if path.is_file() and (path.suffix == ".log" or ".sqlite" in path.name):
                yield path


def scan_files(paths: Iterable[Path], tokens: frozenset[str]) -> tuple[list[Finding], int]:
    findings: list[Finding] = []
    read = 0
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # removed while we looked (a test's own temporary log)
        read += 1
        findings += _hits(f"file {path}", data, tokens)
    return findings, read


def _project_kinds(api: client.ApiClient) -> list[tuple[str, str, str]]:
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    kinds = []
    for crd in crds:
        if crd.spec.group in PROJECT_GROUPS:
            served = next(v.name for v in crd.spec.versions if v.storage)
            kinds.append((crd.spec.group, served, crd.spec.names.plural))
    return kinds


def scan_cluster(api: client.ApiClient, tokens: frozenset[str]) -> tuple[list[Finding], int]:
    """Findings in the status of every object of the project's kinds and in every Event."""
    findings: list[Finding] = []
    read = 0
    custom = client.CustomObjectsApi(api)
    for group, version, plural in _project_kinds(api):
        try:
            items: list[dict[str, Any]] = custom.list_cluster_custom_object(group, version, plural)["items"]
        except ApiException:
            continue
        for obj in items:
            read += 1
            meta = obj["metadata"]
            where = f"status of {plural}/{meta.get('namespace', '')}/{meta['name']}"
            findings += _hits(where, json.dumps(obj.get("status") or {}).encode(), tokens)
    for event in client.CoreV1Api(api).list_event_for_all_namespaces().items:
        read += 1
        text = f"{event.reason} {event.message or ''}".encode()
        findings += _hits(f"Event {event.metadata.namespace}/{event.metadata.name}", text, tokens)
    return findings, read
