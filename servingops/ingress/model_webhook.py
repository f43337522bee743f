"""The model admission webhook: `servingops webhook`, an HTTPS server the apiserver calls (AdmissionReview v1 in
and out, a JSONPatch in the answer) for Pods and pod-template workloads that name a Deckhouse model by
annotation. The rules (which model, whether it may be used, the patch) are ingress/model_mount.py; this module
reads the model as the webhook's own ServiceAccount (get on models and clustermodels, nothing else:
deploy/chart/templates/rbac-webhook.yaml) and serves.

Paths: `POST /mutate` (the review), `GET /healthz`. An UPDATE that changes neither the pod template nor the
annotations (a scale, a label, a finalizer, a deletion in progress) is admitted as it is, without reading the
model: a model deleted later must not block the workloads that already use it from being scaled or removed.
The chart's matchConditions keep those requests, and every unannotated object, from reaching the webhook at
all (docs/models.md, "Using a model from a workload").
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from servingops.api_models.deckhouse.model import ClusterModel, Model
from servingops.clients.kube.calls import get_or_none
from servingops.clients.kube.timeouts import ADMISSION_READ_TIMEOUT
from servingops.ingress.model_mount import (
    POD_SPEC_PATHS,
    ModelRequest,
    Refused,
    annotation_sources,
    artifact_reference,
    mounted_spec,
    own_annotations,
    pod_spec,
    requested,
    skipped_containers,
    spec_patch,
)
from servingops.runtime.kube import load_api_client
from servingops.runtime.process import Flags, Process, listen_address, run_threaded
from servingops.runtime.review_server import ReviewServer

log = logging.getLogger("servingops.webhook")

MUTATE_PATH = "/mutate"

ModelLookup = Callable[[ModelRequest], Mapping[str, Any] | None]
"""The model as stored (a dict), or None when it does not exist."""


class LookupFailed(Exception):
    """The model could not be read (not: it does not exist)."""


class KubeModelLookup:
    """Reads a Model or ClusterModel by name: one GET, the webhook's only call to the apiserver."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)

    def __call__(self, request: ModelRequest) -> Mapping[str, Any] | None:
        try:
            if request.namespace is not None:
                found = get_or_none(
                    self.custom.get_namespaced_custom_object,
                    Model.crd.group, Model.crd.version, request.namespace, Model.crd.plural, request.name,
                    timeout=ADMISSION_READ_TIMEOUT)
            else:
                found = get_or_none(
                    self.custom.get_cluster_custom_object,
                    ClusterModel.crd.group, ClusterModel.crd.version, ClusterModel.crd.plural, request.name,
                    timeout=ADMISSION_READ_TIMEOUT)
        except ApiException as exc:  # anything but absent (that is None)
            raise LookupFailed(f"could not read {request}: {exc.status} {exc.reason}") from exc
        except (Urllib3Error, OSError) as exc:
            raise LookupFailed(f"could not read {request}: {exc}") from exc
        return found if isinstance(found, dict) else None


# -- the review ----------------------------------------------------------------------------------------


def review(body: Mapping[str, Any], lookup: ModelLookup, registry: str, repository: str) -> dict[str, Any]:
    """The AdmissionReview answering `body`."""
    request = body.get("request") or {}
    response: dict[str, Any] = {"uid": request.get("uid", "")}
    try:
        patch = _patch_for(request, lookup, registry, repository)
    except Refused as refused:
        response.update(allowed=False, status={"code": 403, "reason": "Forbidden", "message": refused.message})
    except LookupFailed as failed:
        response.update(allowed=False, status={"code": 500, "reason": "InternalError",
                                               "message": f"{failed}; try again"})
    else:
        response["allowed"] = True
        if patch:
            response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _patch_for(request: Mapping[str, Any], lookup: ModelLookup, registry: str,
               repository: str) -> list[dict[str, Any]]:
    kind = (request.get("kind") or {}).get("kind", "")
    obj = request.get("object") or {}
    if kind not in POD_SPEC_PATHS or request.get("operation") not in ("CREATE", "UPDATE"):
        return []
    if request.get("operation") == "UPDATE" and _unchanged(kind, obj, request.get("oldObject") or {}):
        return []
    namespace = request.get("namespace") or (obj.get("metadata") or {}).get("namespace") or ""
    sources = annotation_sources(kind, obj)
    what = _describe(kind, obj, namespace)
    try:
        model = requested(sources, namespace)
        if model is None:
            return []
        reference = artifact_reference(model, lookup(model), registry, repository)
        spec = pod_spec(kind, obj)
        patch = spec_patch(POD_SPEC_PATHS[kind], spec, mounted_spec(spec, model, reference,
                                                                    skipped_containers(sources)))
    except Refused as refused:
        log.info("refused %s: %s", what, refused.message)
        raise
    log.info("%s uses %s (%s): %s", what, model, reference, "mounted" if patch else "already mounted")
    return patch


def _unchanged(kind: str, obj: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """An UPDATE that leaves the pod template and the annotations as they were, or one of an object being
    deleted: nothing to mount, nothing to check."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return True
    path = POD_SPEC_PATHS[kind]
    return bool(old) and _at(obj, path[:-1]) == _at(old, path[:-1]) and \
        own_annotations(annotation_sources(kind, obj)) == own_annotations(annotation_sources(kind, old))


def _at(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _describe(kind: str, obj: Mapping[str, Any], namespace: str) -> str:
    meta = obj.get("metadata") or {}
    return f"{kind} {namespace}/{meta.get('name') or (meta.get('generateName', '') + '*')}"


# -- the server ----------------------------------------------------------------------------------------


class ModelWebhookServer(ReviewServer):
    """The webhook's HTTPS server (runtime/review_server.py); start() and stop() from main (or a test)."""

    def __init__(self, host: str, port: int, cert_file: Path, key_file: Path, lookup: ModelLookup, *,
                 registry: str, repository: str) -> None:
        super().__init__(host, port, cert_file, key_file, path=MUTATE_PATH, answer=self._review,
                         name="servingops-webhook", log=log)
        self.lookup = lookup
        self.registry = registry
        self.repository = repository

    def _review(self, body: dict[str, Any]) -> Mapping[str, Any]:
        return review(body, self.lookup, self.registry, self.repository)

    def start(self) -> Self:
        super().start()
        log.info("model webhook listening on https://%s:%d%s (registry %s/%s)", self.host, self.port, MUTATE_PATH,
                 self.registry, self.repository)
        return self


# -- the process ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookSettings:
    listen: str
    cert_file: Path
    key_file: Path
    kubeconfig: str | None
    registry: str
    repository: str

    @property
    def host_port(self) -> tuple[str, int]:
        return listen_address(self.listen)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    flags = Flags(parser)
    flags.https_listener("SERVINGOPS_WEBHOOK", "0.0.0.0:8443", "/etc/servingops/webhook-tls")
    flags.kubeconfig()
    flags.registry(help="host:port of the registry as the nodes' container runtime reaches it")
    flags.registry_repository()


def from_arguments(args: argparse.Namespace) -> WebhookSettings:
    return WebhookSettings(listen=args.listen, cert_file=Path(args.tls_cert), key_file=Path(args.tls_key),
                           kubeconfig=args.kubeconfig, registry=args.registry, repository=args.registry_repository)


def run(settings: WebhookSettings, stop: threading.Event) -> None:
    """Serve until `stop` is set."""
    api_client = load_api_client(settings.kubeconfig)
    host, port = settings.host_port
    server = ModelWebhookServer(host, port, settings.cert_file, settings.key_file, KubeModelLookup(api_client),
                                registry=settings.registry, repository=settings.repository).start()
    try:
        stop.wait()
    finally:
        server.stop()
        api_client.close()  # type: ignore[no-untyped-call]
        log.info("model webhook stopped")


PROCESS = Process("webhook", __doc__ or "", add_arguments, from_arguments)


def main(argv: list[str] | None = None) -> None:
    run_threaded(PROCESS, argv, run)


if __name__ == "__main__":
    main()
