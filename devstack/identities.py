"""The chart's identities for the processes that run outside the cluster (tests, `./dev up`).

In a cluster the worker and the bridge run in pods as their ServiceAccounts, and the worker's
upload endpoint as a third one (deploy/chart). Here they run as local processes, and still talk
to the apiserver as those ServiceAccounts: the chart is installed (or its ServiceAccounts and
RBAC are rendered with `helm template` and applied), a token is requested for each account
(TokenRequest), and each identity gets a kubeconfig of its own. A call the chart's roles do not
allow is refused by the apiserver here exactly as it would be in production, so the chart is the
one source of what the processes may do, and the tests exercise it.
"""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from devstack.kube import BIN_DIR_ENV, BUILD_SCRIPT, REPO_ROOT, LocalKubeCluster, apply_objects
from devstack.process import built_binary, cache_dir

log = logging.getLogger(__name__)

CHART = REPO_ROOT / "deploy" / "chart"
RELEASE = "servingops"
NAMESPACE = "servingops-system"
FIELD_MANAGER = "servingops-devstack"
IDENTITY_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})
PROCESSES = ("worker", "bridge", "uploads", "agent", "webhook", "admission")
TOKEN_SECONDS = 24 * 3600
"""Long enough for a test session; `./dev up` asks for more (a token is not renewed here)."""


def helm_binary() -> str:
    """The pinned helm (deploy/local/kube/build-binaries.sh builds it when missing)."""
    return built_binary("helm", BUILD_SCRIPT, BIN_DIR_ENV)


def helm(*args: str, kubeconfig: Path | None = None, timeout: float = 300) -> str:
    """Run helm; its stdout, or an error carrying its stderr."""
    argv = [helm_binary(), *args]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({proc.returncode}):\n{proc.stderr}\n{proc.stdout}")
    return proc.stdout


LOCAL_IMAGE: dict[str, Any] = {"repository": "servingops.local/servingops", "tag": "dev", "digest": "",
                               "pullPolicy": "Never"}
"""The image values of a local release: the chart names no default repository (a user names where they pushed
the image), and no image is ever pulled here (kwok plays the kubelets)."""


def built_image_file() -> Path:
    """Where `./dev image` (deploy/image/build.py --record) writes what it last pushed to the local registry:
    under the cache, so building the image rewrites nothing tracked (the next build stays clean)."""
    return cache_dir() / "image" / "pushed.json"


def built_image_values() -> dict[str, Any]:
    """The image values for `./dev up`: the image `./dev image` last pushed (repository, tag, digest), or
    LOCAL_IMAGE when none was built. kwok still pulls nothing; the release names what a real node would run."""
    try:
        pushed = json.loads(built_image_file().read_text())
    except (OSError, ValueError):
        return dict(LOCAL_IMAGE)
    return {"repository": str(pushed["repository"]), "tag": str(pushed["tag"]), "digest": str(pushed["digest"]),
            "pullPolicy": LOCAL_IMAGE["pullPolicy"]}


def local_values(**blocks: Any) -> dict[str, Any]:
    """Values for the local cluster: no image is ever pulled (kwok plays the kubelets), a small
    spool, and no default Prometheus (each test names its own); `blocks` replace top-level keys."""
    values: dict[str, Any] = {
        "image": dict(LOCAL_IMAGE),
        "worker": {"spool": {"size": "1Gi"}},
        "operatorConfig": {"canaryAnalysis": {"bundledPrometheusAddress": ""}},
        # Locally the node agents run as processes, one per kwok node (its own directory as the node's
        # disk), under the chart's agent identity; a DaemonSet would only add pods kwok pretends to run.
        "agent": {"enabled": False},
        # Likewise the model webhook is a process on loopback TLS (devstack/webhook.py registers it); the
        # chart's configuration would send annotated objects to a Service no real pod serves.
        "webhook": {"enabled": False},
        # The validating admission webhook too (devstack/admission.py registers it where it runs).
        "admission": {"enabled": False},
    }
    values.update(blocks)
    return values


def _values_file(values: Mapping[str, Any], directory: Path) -> Path:
    path = Path(tempfile.mkstemp(prefix="values-", suffix=".yaml", dir=directory)[1])
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def render(release: str = RELEASE, namespace: str = NAMESPACE, values: Mapping[str, Any] | None = None,
           *, extra_args: Iterable[str] = ()) -> list[dict[str, Any]]:
    """`helm template` of the chart: every object it would install (CRDs only with --include-crds). Values that
    name no image get LOCAL_IMAGE (the one value the chart has no default for); the rest are the chart's."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["template", release, str(CHART), "--namespace", namespace, *extra_args,
                "--values", str(_values_file({"image": LOCAL_IMAGE, **(values or {})}, Path(tmp)))]
        out = helm(*args)
    return [doc for doc in yaml.safe_load_all(out) if isinstance(doc, dict) and doc]


def _spool_volumes(api: client.ApiClient, release: str, namespace: str, replicas: int, size: str) -> None:
    """One PersistentVolume per worker replica, bound ahead to its claim: the local cluster has no
    provisioner, and the StatefulSet's pods are scheduled only once their spool claim is bound."""
    core = client.CoreV1Api(api)
    for ordinal in range(replicas):
        claim = f"spool-{release}-worker-{ordinal}"
        volume = client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"{namespace}-{claim}",
                                         labels={"app.kubernetes.io/part-of": "servingops"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": size}, access_modes=["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Delete", storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=f"/var/lib/servingops/{namespace}/{claim}"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
        try:
            core.create_persistent_volume(volume)
        except ApiException as exc:
            if exc.status != 409:
                raise


def install(cluster: LocalKubeCluster, values: Mapping[str, Any], *, release: str = RELEASE,
            namespace: str = NAMESPACE, timeout: str = "180s", wait: bool = True) -> str:
    """`helm upgrade --install` into the local cluster, waiting until every workload is Ready
    (kwok makes the pods Ready; no image is pulled). Returns helm's output. wait=False: for a cluster
    whose controllers have not joined yet (wait_workloads once they have)."""
    api = cluster.api_client()
    try:
        rendered = render(release, namespace, values)
        [statefulset] = [d for d in rendered if d["kind"] == "StatefulSet"]
        storage = statefulset["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
        _spool_volumes(api, release, namespace, int(statefulset["spec"]["replicas"]), storage)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    with tempfile.TemporaryDirectory() as tmp:
        return helm("upgrade", "--install", release, str(CHART), "--namespace", namespace, "--create-namespace",
                    "--values", str(_values_file(values, Path(tmp))),
                    *(["--wait", "--timeout", timeout] if wait else []), kubeconfig=cluster.kubeconfig_path)


def wait_workloads(cluster: LocalKubeCluster, namespace: str = NAMESPACE, timeout: float = 180) -> None:
    """Wait until every Deployment, StatefulSet and DaemonSet in `namespace` has all its pods Ready
    (what `helm --wait` checks), failing with the ones still short."""
    api = cluster.api_client()
    apps = client.AppsV1Api(api)

    def short() -> list[str]:
        # Plain dicts: every status field may be absent until its controller first writes it.
        behind = []
        for kind, items, want, have in (
            ("Deployment", apps.list_namespaced_deployment(namespace).items, "replicas", "readyReplicas"),
            ("StatefulSet", apps.list_namespaced_stateful_set(namespace).items, "replicas", "readyReplicas"),
            ("DaemonSet", apps.list_namespaced_daemon_set(namespace).items, "desiredNumberScheduled", "numberReady"),
        ):
            for item in items:
                obj = api.sanitize_for_serialization(item)  # type: ignore[no-untyped-call]
                status = obj.get("status") or {}
                # A DaemonSet wants nothing until its controller has counted the nodes.
                wanted = status.get(want) if kind == "DaemonSet" else obj["spec"].get(want, 1)
                if wanted is None or (status.get(have) or 0) < wanted:
                    behind.append(f"{kind}/{obj['metadata']['name']}")
        return behind

    try:
        deadline = time.monotonic() + timeout
        while behind := short():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not Ready after {timeout:.0f}s in {namespace}: {', '.join(behind)}")
            time.sleep(1)
    finally:
        api.close()  # type: ignore[no-untyped-call]


def ensure_namespace(api: client.ApiClient, namespace: str) -> None:
    """Create `namespace` unless it exists."""
    try:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except ApiException as exc:
        if exc.status != 409:
            raise


def apply_identities(api: client.ApiClient, release: str, namespace: str,
                     values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Only the ServiceAccounts and RBAC of the chart, rendered for `release` in `namespace` and
    applied: the identities of a stack whose controller namespace is its own (its cluster-scoped
    roles are named after the release, so they stand beside the installed release's)."""
    ensure_namespace(api, namespace)
    docs = [d for d in render(release, namespace, values or local_values()) if d["kind"] in IDENTITY_KINDS]
    apply_objects(api, docs)
    return docs


def delete_identities(api: client.ApiClient, docs: Iterable[dict[str, Any]]) -> None:
    """Remove what apply_identities applied (the cluster-scoped roles would outlive the namespace)."""
    dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        try:
            dynamic.delete(  # type: ignore[no-untyped-call]
                resource, name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
        except ApiException as exc:
            if exc.status != 404:
                raise


CATALOG_ENDPOINT = "catalog-endpoint"
"""The catalog endpoint's identity: only in a release with catalogEndpoint.enabled (a cluster that publishes),
so it is issued on its own (`issue_catalog_endpoint`), not with PROCESSES."""


def catalog_endpoint_values(clients_secret: str) -> dict[str, Any]:
    """Local values with the catalog endpoint on: its ServiceAccount and roles, its Role naming `clients_secret`.
    The TLS Secret is only named (the endpoint runs as a process here, with a test CA's files)."""
    return local_values(catalogEndpoint={"enabled": True, "tls": {"secretName": "unused"},
                                         "clientsSecretName": clients_secret})


def issue_catalog_endpoint(cluster: LocalKubeCluster, directory: Path, *, release: str, namespace: str,
                           clients_secret: str, seconds: int = TOKEN_SECONDS) -> tuple[Path, list[dict[str, Any]]]:
    """The chart's catalog endpoint ServiceAccount and RBAC for `release` in `namespace`, applied (only those),
    and a kubeconfig with its token: what the endpoint's pod would run as. Returns the kubeconfig and the
    applied objects (for delete_identities)."""
    docs = [d for d in render(release, namespace, catalog_endpoint_values(clients_secret))
            if d["kind"] in IDENTITY_KINDS
            and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == CATALOG_ENDPOINT]
    [name] = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    api = cluster.api_client()
    try:
        ensure_namespace(api, namespace)
        apply_objects(api, docs)
        token = request_token(api, namespace, name, seconds)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    return write_kubeconfig(directory / f"{name}.kubeconfig", cluster, name, token, namespace), docs


def operator_config_name(release: str = RELEASE) -> str:
    """The chart's operator ConfigMap (templates/configmap.yaml, `servingops.config`)."""
    return f"{release}-config"


@dataclass(frozen=True)
class Identities:
    """A kubeconfig per process, and where the chart put their namespaced objects."""

    namespace: str
    """The controller namespace: the bridge's Lease, the operator ConfigMap, ClusterModel sessions."""
    worker: Path
    bridge: Path
    uploads: Path
    operator_config: str
    lease_name: str
    agent: Path | None = None
    """The node agents' identity (one ServiceAccount for every node's agent, as in the DaemonSet)."""
    webhook: Path | None = None
    """The model admission webhook's identity."""
    admission: Path | None = None
    """The validating admission webhook's identity."""

    def worker_env(self) -> dict[str, str]:
        """What a worker process needs to run as the worker, its upload endpoint as the uploads identity."""
        return {"KUBECONFIG": str(self.worker), "SERVINGOPS_UPLOAD_KUBECONFIG": str(self.uploads),
                "SERVINGOPS_NAMESPACE": self.namespace, "SERVINGOPS_OPERATOR_CONFIG": self.operator_config}

    def bridge_env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.bridge), "POD_NAMESPACE": self.namespace}

    @classmethod
    def admin(cls, kubeconfig: Path, namespace: str = NAMESPACE) -> Identities:
        """Every process as the cluster admin: for benchmarks only, which measure, not check."""
        return cls(namespace, kubeconfig, kubeconfig, kubeconfig, operator_config_name(), f"{RELEASE}-bridge",
                   agent=kubeconfig, webhook=kubeconfig, admission=kubeconfig)


def request_token(api: client.ApiClient, namespace: str, service_account: str,
                  seconds: int = TOKEN_SECONDS) -> str:
    """A ServiceAccount token from the TokenRequest API, for the apiserver's own audience."""
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=seconds))
    response = client.CoreV1Api(api).create_namespaced_service_account_token(service_account, namespace, request)
    if response.status is None or not response.status.token:
        raise RuntimeError(f"no token issued for ServiceAccount {namespace}/{service_account}")
    return str(response.status.token)


def write_kubeconfig(path: Path, cluster: LocalKubeCluster, user: str, token: str, namespace: str) -> Path:
    ca = base64.b64encode((cluster.pki / "ca.crt").read_bytes()).decode()
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": cluster.api_url, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user, "namespace": namespace}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def issue(cluster: LocalKubeCluster, directory: Path, *, release: str = RELEASE, namespace: str = NAMESPACE,
          operator_config: str | None = None, seconds: int = TOKEN_SECONDS) -> Identities:
    """Tokens for the release's ServiceAccounts, each written as a kubeconfig in `directory`."""
    api = cluster.api_client()
    try:
        paths = {
            who: write_kubeconfig(directory / f"{release}-{who}.kubeconfig", cluster, f"{release}-{who}",
                                  request_token(api, namespace, f"{release}-{who}", seconds), namespace)
            for who in PROCESSES
        }
    finally:
        api.close()  # type: ignore[no-untyped-call]
    return Identities(namespace, paths["worker"], paths["bridge"], paths["uploads"],
                      operator_config or operator_config_name(release), f"{release}-bridge", agent=paths["agent"],
                      webhook=paths["webhook"], admission=paths["admission"])
