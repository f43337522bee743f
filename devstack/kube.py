"""A real local Kubernetes cluster for tests and `./dev up`.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as plain processes on
loopback; kwok plays the kubelets of a few fake nodes, so pods get scheduled, Running and
Ready without a container runtime. Every version is pinned in
deploy/local/kube/build-binaries.sh, which builds the binaries from their upstream Go
modules when they are not already on this machine.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import ipaddress
import json
import logging
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from devstack.process import ManagedProcess, ProcessFailed, cache_dir, find_binary, free_port, http_ok

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "deploy" / "local" / "kube" / "build-binaries.sh"
STORAGE_BINARIES = ("etcd", "kube-apiserver")
CONTROLLER_BINARIES = ("kube-controller-manager", "kube-scheduler", "kwok")
"""What turns objects into pods: controllers=False clusters run without them, and `./dev up` on a
new machine builds them after the examples are Ready (LocalKubeCluster.start_controllers)."""
BINARIES = STORAGE_BINARIES + CONTROLLER_BINARIES
BIN_DIR_ENV = "SERVINGOPS_KUBE_BIN_DIR"

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"  # kwok hands out pod IPs from here
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FIELD_MANAGER = "servingops-devstack"

# What one fake node offers; GPUs so that `nvidia.com/gpu` requests schedule.
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}

# kwok's own default stages (what kwokctl installs): nodes become Ready and keep their
# lease, pods become Running/Ready, complete, and go away when deleted.
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

POD_UNREADY_ANNOTATION = "devstack.servingops.io/unready"
"""A pod annotated with this set to "true" runs but never turns Ready (its containers report not
ready), as a pod whose readiness probe fails; in a component's `annotations` it holds every pod of
the revision, on one pod it holds that pod alone. Removing it lets the pod turn Ready."""

POD_FAIL_ANNOTATION = "devstack.servingops.io/fail"
"""A pod annotated with this set to "true" fails: phase Failed, every container terminated with
exit code 1 (reason Error), as a container that crashed under restartPolicy Never. Set at create
it never turns Ready; set on a running pod it fails that pod."""
POD_RESTART_ANNOTATION = "devstack.servingops.io/restart"
"""A pod annotated with this set to "<n>" reports that its first container restarted n times, the
last time killed for memory (lastState.terminated: exit code 137, reason OOMKilled), and runs on,
Ready. Raising n later reports the further restarts."""

_NOT_HELD = {"key": f'.metadata.annotations["{POD_UNREADY_ANNOTATION}"]', "operator": "NotIn", "values": ["true"]}
_NOT_FAILING = {"key": f'.metadata.annotations["{POD_FAIL_ANNOTATION}"]', "operator": "NotIn", "values": ["true"]}
_FAILING = {"key": f'.metadata.annotations["{POD_FAIL_ANNOTATION}"]', "operator": "In", "values": ["true"]}
# Whether every readiness gate of the pod has its condition True (true when it has none).
_GATES_OPEN = (". as $pod | all(($pod.spec.readinessGates // [])[]; .conditionType as $gate | "
               'any(($pod.status.conditions // [])[]; .type == $gate and .status == "True"))')
# The restart count the annotation asks for is not yet the one the first container reports.
_RESTARTS_BEHIND = {
    "key": (f'(.metadata.annotations["{POD_RESTART_ANNOTATION}"] // "0") == '
            '(((.status.containerStatuses // [])[0].restartCount // 0) | tostring)'),
    "operator": "In", "values": ["false"]}
_HELD = {"key": f'.metadata.annotations["{POD_UNREADY_ANNOTATION}"]', "operator": "In", "values": ["true"]}
_ALIVE = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_NOT_A_JOB = {"key": ".metadata.ownerReferences.[].kind", "operator": "NotIn", "values": ["Job"]}

ANSWERED_POD_LABEL = "ome.io/inferenceservice"
"""In a cluster whose pods answer (LocalKubeCluster answering=True), the pods carrying this label (an
InferenceService's) are devstack/pod_runtime.py's: kwok starts them (address, Running) but never says
they are Ready; the runtime does, from their server's /health, as a kubelet would from a probe."""
_ANSWERED = {"key": f'.metadata.labels["{ANSWERED_POD_LABEL}"]', "operator": "Exists"}
_NOT_ANSWERED = {"key": f'.metadata.labels["{ANSWERED_POD_LABEL}"]', "operator": "DoesNotExist"}
BENCHMARK_POD_LABEL = "ome.io/benchmarkjob-uid"
"""In an answering cluster, a BenchmarkJob's pods (this label) are run by devstack/bench_runner.py: kwok neither
starts nor completes them (its pod-ready stage would say every init container terminated with 0 at once, a
state the apiserver allows no way back from, and pod-complete Succeeded); the runner reports their phases
and containers' states, as a kubelet would."""
_NOT_BENCHMARK = {"key": f'.metadata.labels["{BENCHMARK_POD_LABEL}"]', "operator": "DoesNotExist"}

UNREADY_NODE_SUFFIX = "-unready"
"""A node whose name ends with this runs the pods bound to it but none ever turns Ready, as a node
with a broken device driver (LocalKubeCluster.add_unready_node). kwok's stages see only the pod,
never its node's labels, so the mark is in the name the pod carries (spec.nodeName)."""
UNREADY_NODE_TAINT = "devstack.servingops.io/unready"
"""NoSchedule taint on such a node: only pods that tolerate it (a test's own) land there."""
_ON_UNREADY_NODE = f'(.spec.nodeName // "") | endswith("{UNREADY_NODE_SUFFIX}")'
_NOT_ON_UNREADY_NODE = {"key": _ON_UNREADY_NODE, "operator": "In", "values": ["false"]}

_RUNNING_NOT_READY = (
    "{{ $now := Now }}\n"
    "conditions:\n"
    "- lastTransitionTime: {{ $now | Quote }}\n  status: \"True\"\n  type: Initialized\n"
    "- lastTransitionTime: {{ $now | Quote }}\n  status: \"False\"\n  type: Ready\n"
    "  reason: ContainersNotReady\n"
    "- lastTransitionTime: {{ $now | Quote }}\n  status: \"False\"\n  type: ContainersReady\n"
    "  reason: ContainersNotReady\n"
    "phase: Running\n"
    "startTime: {{ $now | Quote }}\n")
"""A running pod whose containers are not ready (the status a stage that holds a pod unready sets)."""


_METRIC_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _condition(kind: str) -> str:
    return f'.status.conditions.[] | select( .type == "{kind}" ) | .status'


# Stages of our own, beside kwok's. A kubelet re-reports its pods' readiness on every status sync,
# so a pod that the node lifecycle controller marked NotReady (NodeNotReady, after the apiserver or
# the node's lease was away) turns Ready again once its node is back; kwok's pod-ready stage only
# moves Pending pods and would leave it NotReady for good. Only Ready is reset to what the
# containers say: the controller sets Ready False and leaves ContainersReady True, which is what
# `pod-ready-again` matches. The 1 s delay paces the back and forth with that controller while the
# node itself is still NotReady (it marks an updated pod again until the node's lease is fresh).
_KWOK_OWN_STAGES: list[dict[str, Any]] = [
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-ready-again"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE, _NOT_A_JOB, _NOT_HELD, _NOT_FAILING, _NOT_ON_UNREADY_NODE,
             {"key": ".status.phase", "operator": "In", "values": ["Running"]},
             {"key": _condition("Ready"), "operator": "NotIn", "values": ["True"]},
             {"key": _GATES_OPEN, "operator": "In", "values": ["true"]},
         ]},
         "delay": {"durationMilliseconds": 1000},
         "next": {"statusTemplate": (
             "{{ $now := Now }}\n"
             "conditions:\n"
             "- lastTransitionTime: {{ $now | Quote }}\n  status: \"True\"\n  type: Ready\n"
             "- lastTransitionTime: {{ $now | Quote }}\n  status: \"True\"\n  type: ContainersReady\n")},
     }},
    # A held pod runs with its containers not ready, like a failing readiness probe.
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-held-unready"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE, _HELD,
             {"key": ".spec.nodeName", "operator": "Exists"},
             {"key": _condition("ContainersReady"), "operator": "NotIn", "values": ["False"]},
         ]},
         "next": {"statusTemplate": _RUNNING_NOT_READY},
     }},
    # A pod on an unready node (UNREADY_NODE_SUFFIX) runs with its containers not ready, for good.
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-on-unready-node"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE,
             {"key": _ON_UNREADY_NODE, "operator": "In", "values": ["true"]},
             {"key": _condition("ContainersReady"), "operator": "NotIn", "values": ["False"]},
         ]},
         "next": {"statusTemplate": _RUNNING_NOT_READY},
     }},
    # A kubelet reports a pod Ready only when its containers are and every readiness gate's
    # condition is True (ReadinessGatesNotReady otherwise). pod-ready starts a pod with gates unready
    # (_unready_behind_gates); a Ready pod whose gate closes later is set back here, and
    # pod-ready-again makes it Ready when the gate opens. Ready's lastTransitionTime then moves as a
    # kubelet's would.
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-gates-not-ready"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE,
             {"key": ".status.phase", "operator": "In", "values": ["Running"]},
             {"key": _condition("Ready"), "operator": "In", "values": ["True"]},
             {"key": _GATES_OPEN, "operator": "In", "values": ["false"]},
         ]},
         "next": {"statusTemplate": (
             "{{ $now := Now }}\n"
             "conditions:\n"
             "- lastTransitionTime: {{ $now | Quote }}\n  status: \"False\"\n  type: Ready\n"
             "  reason: ReadinessGatesNotReady\n"
             "  message: the status of pod readiness gates is not \"True\"\n")},
     }},
    # A failing pod: its containers exit 1 and, restartPolicy aside, the pod ends Failed.
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-fail"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE, _FAILING,
             {"key": ".spec.nodeName", "operator": "Exists"},
             {"key": ".status.phase", "operator": "NotIn", "values": ["Failed"]},
         ]},
         "next": {"statusTemplate": (
             "{{ $now := Now }}\n"
             "conditions:\n"
             "- lastTransitionTime: {{ $now | Quote }}\n  status: \"False\"\n  type: Ready\n  reason: PodFailed\n"
             "- lastTransitionTime: {{ $now | Quote }}\n  status: \"False\"\n  type: ContainersReady\n"
             "  reason: PodFailed\n"
             "containerStatuses:\n"
             "{{ range .spec.containers }}\n"
             "- image: {{ .image | Quote }}\n"
             "  name: {{ .name | Quote }}\n"
             "  ready: false\n"
             "  started: false\n"
             "  restartCount: 0\n"
             "  state:\n"
             "    terminated:\n"
             "      exitCode: 1\n"
             "      reason: Error\n"
             "      startedAt: {{ $now | Quote }}\n"
             "      finishedAt: {{ $now | Quote }}\n"
             "{{ end }}\n"
             "phase: Failed\n"
             "{{ if not .status.startTime }}startTime: {{ $now | Quote }}{{ end }}\n")},
     }},
    # A restarting pod: its first container was OOM-killed n times and runs again, Ready; only a
    # pod that is already Running (pod-ready went first) and reports fewer restarts than asked.
    {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-restarted"},
     "spec": {
         "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
         "selector": {"matchExpressions": [
             _ALIVE, _NOT_FAILING, _RESTARTS_BEHIND,
             {"key": f'.metadata.annotations["{POD_RESTART_ANNOTATION}"]', "operator": "Exists"},
             {"key": ".status.phase", "operator": "In", "values": ["Running"]},
         ]},
         "next": {"statusTemplate": (
             "{{ $now := Now }}\n"
             f'{{{{ $restarts := index .metadata.annotations "{POD_RESTART_ANNOTATION}" }}}}\n'
             "containerStatuses:\n"
             "{{ range $i, $c := .spec.containers }}\n"
             "- image: {{ $c.image | Quote }}\n"
             "  name: {{ $c.name | Quote }}\n"
             "  ready: true\n"
             "  started: true\n"
             "{{ if eq $i 0 }}\n"
             "  restartCount: {{ $restarts }}\n"
             "  lastState:\n"
             "    terminated:\n"
             "      exitCode: 137\n"
             "      reason: OOMKilled\n"
             "      startedAt: {{ $now | Quote }}\n"
             "      finishedAt: {{ $now | Quote }}\n"
             "{{ else }}\n"
             "  restartCount: 0\n"
             "{{ end }}\n"
             "  state:\n"
             "    running:\n"
             "      startedAt: {{ $now | Quote }}\n"
             "{{ end }}\n")},
     }},
]

# kwok's pod-ready sets every readiness gate's condition True along with Ready. A kubelet never
# writes a readiness gate: its owner does (the replica engine owns ome.io/serving, and reads a
# gate nobody set as "not decided yet"), so that part of the template is cut out.
_READINESS_GATES_BLOCK = re.compile(r"\{\{ range \.spec\.readinessGates \}\}.*?\{\{ end \}\}\n", re.DOTALL)


def kwok_stages(module_root: Path, answering: bool = False) -> list[dict[str, Any]]:
    """kwok's default stages (pod-ready leaving held and failing pods alone, and readiness gates
    to their owners) and ours. answering: the pods a pod runtime answers for are started unready
    (`pod-start-answered`) and kwok never makes them Ready (the runtime does)."""
    stages = [doc for rel in KWOK_STAGE_FILES for doc in yaml.safe_load_all((module_root / rel).read_text()) if doc]
    own = copy.deepcopy(_KWOK_OWN_STAGES)
    for stage in stages:
        if stage["metadata"]["name"] == "pod-ready":
            stage["spec"]["selector"]["matchExpressions"].extend([_NOT_HELD, _NOT_FAILING, _NOT_ON_UNREADY_NODE])
            template, cut = _READINESS_GATES_BLOCK.subn("", stage["spec"]["next"]["statusTemplate"])
            if cut != 1:  # a kwok upgrade changed the template: look again rather than run it as is
                raise RuntimeError("kwok's pod-ready stage no longer has the readiness-gates block we cut")
            stage["spec"]["next"]["statusTemplate"] = template
            if answering:
                own.append(_start_answered(stage))
                stage["spec"]["selector"]["matchExpressions"].append(_NOT_ANSWERED)
            stage["spec"]["next"]["statusTemplate"] = _unready_behind_gates(template)
    if answering:
        for stage in stages:
            if stage["metadata"]["name"] in ("pod-ready", "pod-complete"):
                stage["spec"]["selector"]["matchExpressions"].append(_NOT_BENCHMARK)
        # The runtime decides these pods' readiness, holds included (it honours POD_UNREADY_ANNOTATION).
        for stage in own:
            if stage["metadata"]["name"] in ("pod-ready-again", "pod-held-unready"):
                stage["spec"]["selector"]["matchExpressions"].append(_NOT_ANSWERED)
    return [*stages, *own]


def _unready_behind_gates(template: str) -> str:
    """kwok's pod-ready template with Ready False (ReadinessGatesNotReady) for a pod that has readiness
    gates, as a kubelet reports a pod whose gates nobody opened yet; pod-ready-again makes it Ready once
    they are. Saying Ready first and correcting it after (pod-gates-not-ready) let the EndpointSlice
    controller list such a pod as a ready endpoint for a moment."""
    template, n = re.subn(r'status: "True"(\s+)type: Ready\n',
                          r'{{ if .spec.readinessGates }}status: "False"\1reason: ReadinessGatesNotReady'
                          r'{{ else }}status: "True"{{ end }}\1type: Ready\n', template)
    if n != 1:
        raise RuntimeError("kwok's pod-ready stage no longer sets Ready as expected")
    return template


def _start_answered(pod_ready: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-ready for the answered pods, but running with containers not ready: the same address,
    phase and container states, Ready and ContainersReady False until the pod runtime's probe passes."""
    stage = copy.deepcopy(pod_ready)
    stage["metadata"]["name"] = "pod-start-answered"
    stage["spec"]["selector"]["matchExpressions"] = [
        e for e in stage["spec"]["selector"]["matchExpressions"] if e != _NOT_HELD] + [_ANSWERED]
    template = stage["spec"]["next"]["statusTemplate"]
    for kind in ("Ready", "ContainersReady"):
        template, n = re.subn(rf'status: "True"(\s+)type: {kind}\n',
                              rf'status: "False"\1type: {kind}\1reason: ContainersNotReady\n', template)
        if n != 1:
            raise RuntimeError(f"kwok's pod-ready stage no longer sets {kind} as expected")
    template, n = re.subn(r"(containerStatuses:\n\{\{ range \.spec\.containers \}\}.*?)ready: true",
                          r"\1ready: false", template, count=1, flags=re.DOTALL)
    if n != 1:
        raise RuntimeError("kwok's pod-ready stage no longer lists containerStatuses as expected")
    stage["spec"]["next"]["statusTemplate"] = template
    return stage

# name in the cache -> (Go module, pin in build-binaries.sh, folder in the module, glob)
UPSTREAM_CRDS = {
    "gateway-api": ("sigs.k8s.io/gateway-api", "GATEWAY_API_VERSION", "config/crd/standard", "*.yaml"),
    "kueue": ("sigs.k8s.io/kueue", "KUEUE_VERSION", "config/components/crd/bases", "*.yaml"),
    # So a rendered ScaledObject is validated against KEDA's own schema in every cluster; KEDA itself runs only
    # where a test asks (devstack/keda.py, which applies the rest of KEDA's CRDs there).
    "keda": ("github.com/kedacore/keda/v2", "KEDA_VERSION", "config/crd/bases", "keda.sh_scaledobjects.yaml"),
    # So a rendered BackendTrafficPolicy (spec.traffic) meets Envoy Gateway's own schema and CEL rules; Envoy
    # Gateway itself does not run (the local data plane is Traefik, devstack/traefik.py).
    "envoy-gateway": ("github.com/envoyproxy/gateway", "ENVOY_GATEWAY_VERSION",
                      "charts/gateway-helm/charts/crds/crds/generated",
                      "gateway.envoyproxy.io_backendtrafficpolicies.yaml"),
}


def pinned_versions() -> dict[str, str]:
    """The `*_VERSION=` pins at the top of build-binaries.sh: the one place versions live."""
    text = BUILD_SCRIPT.read_text()
    return dict(re.findall(r"^([A-Z_]+_VERSION)=(\S+)", text, flags=re.MULTILINE))


def go_module_dir(module: str, version: str) -> Path:
    """Download module@version into the Go module cache (a no-op when there) and return its folder."""
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        cwd=cache_dir(),  # outside any Go module, so no go.mod is consulted or changed
        check=False,
    )
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version} failed: {info.get('Error') or proc.stderr}")
    return Path(info["Dir"])


def upstream_crd_dirs() -> list[Path]:
    """Copy the upstream CRDs (UPSTREAM_CRDS: Gateway API's standard channel, Kueue, KEDA's ScaledObject, Envoy
    Gateway's BackendTrafficPolicy) into `<cache>/crds/<name>/`."""
    versions = pinned_versions()
    return [module_crds(name, module, versions[pin], folder, pattern)
            for name, (module, pin, folder, pattern) in UPSTREAM_CRDS.items()]


def module_crds(name: str, module: str, version: str, folder: str, pattern: str) -> Path:
    """`<cache>/crds/<name>/`: the files matching `pattern` in `folder` of the Go module `module@version`
    (downloaded through the module proxy), copied there once.

    Idempotent: a folder whose `.version` stamp matches `version` is left alone.
    """
    target = cache_dir() / "crds" / name
    stamp = target / ".version"
    if stamp.is_file() and stamp.read_text().strip() == version:
        return target
    # Fill a private folder, then rename it into place: clusters started in parallel
    # never see a half-copied set.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
    staging.chmod(0o755)
    for source in sorted((go_module_dir(module, version) / folder).glob(pattern)):
        shutil.copyfile(source, staging / source.name)  # copyfile: the cache copy is read-only
    (staging / ".version").write_text(version + "\n")
    shutil.rmtree(target, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:  # another process put its copy there first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def missing_binaries(names: Sequence[str] = BINARIES) -> list[str]:
    """Which of `names` are neither built nor on PATH."""
    return [name for name in names if find_binary(name, BIN_DIR_ENV) is None]


def ensure_binaries(names: Sequence[str] = BINARIES) -> dict[str, str]:
    """Paths of the named binaries; runs the build script for the missing ones only."""
    if missing := missing_binaries(names):
        log.info("building %s with %s (minutes on a cold cache)", " ".join(missing), BUILD_SCRIPT)
        subprocess.run(["bash", str(BUILD_SCRIPT), *missing], check=True)
    paths = {name: find_binary(name, BIN_DIR_ENV) for name in names}
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        raise RuntimeError(f"binaries still missing after {BUILD_SCRIPT}: {missing}")
    return {name: str(path) for name, path in paths.items()}


def condition_true(conditions: Sequence[Any] | None, kind: str) -> bool:
    """Whether a status condition list (any Kubernetes kind) has `kind` with status "True"."""
    return any(c.type == kind and c.status == "True" for c in conditions or ())


# --- certificates -------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    usage: x509.ObjectIdentifier | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def write_pki(pki: Path) -> None:
    """CA, apiserver serving cert, admin client cert and service-account keys (ECDSA P-256).

    Kept when present, so a dev cluster's etcd data stays readable across restarts.
    """
    if (pki / "admin.key").is_file():
        return
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(_name("servingops-local-ca"), ca_key, None)
    first_service_ip = ipaddress.IPv4Network(SERVICE_CIDR)[1]  # the `kubernetes` Service's ClusterIP
    sans: list[x509.GeneralName] = [
        x509.DNSName(dns)
        for dns in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")
    ]
    sans += [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(first_service_ip)]
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(_name("kube-apiserver"), server_key, (ca, ca_key),
                    usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans)
    # system:masters is bound to cluster-admin by RBAC's bootstrap policy.
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(_name("servingops-admin", "system:masters"), admin_key, (ca, ca_key),
                   usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "ca.key": _pem_key(ca_key),
        "apiserver.crt": server.public_bytes(serialization.Encoding.PEM),
        "apiserver.key": _pem_key(server_key),
        "sa.key": _pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        "admin.crt": admin.public_bytes(serialization.Encoding.PEM),
        "admin.key": _pem_key(admin_key),  # written last: its presence means "all done"
    }
    for filename, data in files.items():
        path = pki / filename
        path.write_bytes(data)
        path.chmod(0o600)


FRONT_PROXY_CLIENT = "front-proxy-client"


def write_front_proxy_pki(pki: Path) -> None:
    """The aggregation layer's front proxy: its own CA (what an aggregated apiserver such as
    prometheus-adapter trusts for the X-Remote-User headers) and the client cert kube-apiserver
    presents when it proxies to one. Kept when present; apart from write_pki so a dev cluster made
    before the aggregation layer gets them too."""
    if (pki / "front-proxy-client.key").is_file():
        return
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(_name("servingops-front-proxy-ca"), ca_key, None)
    client_key = ec.generate_private_key(ec.SECP256R1())
    proxy = _issue(_name(FRONT_PROXY_CLIENT), client_key, (ca, ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    files = {
        "front-proxy-ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.crt": proxy.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.key": _pem_key(client_key),  # last: its presence means "all done"
    }
    for filename, data in files.items():
        path = pki / filename
        path.write_bytes(data)
        path.chmod(0o600)


def issue_serving_cert(pki: Path, common_name: str, dns_names: list[str], ips: list[str]) -> tuple[bytes, bytes]:
    """(cert, key) PEM of a serving certificate signed by the cluster CA, for an aggregated
    apiserver whose APIService carries the CA as its caBundle."""
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = _issue(_name(common_name), key, (ca, ca_key), usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans)
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


# --- manifests ----------------------------------------------------------------------------


def apply_objects(api: client.ApiClient, docs: Iterable[dict[str, Any]]) -> None:
    """Server-side apply (FIELD_MANAGER, conflicts forced) of each object, namespaced or not: created
    when missing, brought to what is given when present (an older pin's or an earlier run's), with
    no read-modify-write race. Each doc carries apiVersion and kind."""
    dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        dynamic.server_side_apply(  # type: ignore[no-untyped-call]
            resource, body=doc, namespace=doc["metadata"].get("namespace"), field_manager=FIELD_MANAGER,
            force_conflicts=True)


def _kwok_node(name: str, taints: list[client.V1Taint] | None = None, labels: dict[str, str] | None = None,
               extended: dict[str, str] | None = None) -> client.V1Node:
    """A node kwok plays the kubelet of (it manages nodes carrying KWOK_NODE_ANNOTATION). `extended`:
    extended resources it advertises beside NODE_CAPACITY (`{"nvidia.com/gpu": "8"}`), which the
    scheduler and Kueue count as a device plugin's would be."""
    capacity = {**NODE_CAPACITY, **(extended or {})}
    return client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            annotations={KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            labels={"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", **(labels or {})},
        ),
        spec=client.V1NodeSpec(taints=taints) if taints else None,
        # Status is kept on create (it is how kubelets register); kwok's node stage keeps what is
        # set here and only fills in conditions and addresses.
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity),
    )


def _yaml_docs(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
        for file in files:
            for doc in yaml.safe_load_all(file.read_text()):
                if isinstance(doc, dict) and doc:
                    yield doc


def _etcd_client_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _etcd_argv(binary: str, data_dir: Path, client_url: str) -> list[str]:
    peer_url = f"http://127.0.0.1:{free_port()}"
    return [
        binary,
        "--name=local",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=local={peer_url}",
        # A throwaway local store: skipping fsync makes every write (and test) faster.
        "--unsafe-no-fsync",
        # Room for big CRDs (Kueue's Workload schema is ~1.4 MB of YAML) plus managedFields.
        "--max-request-bytes=8388608",
        "--log-level=warn",
    ]


class SharedEtcd:
    """One etcd that several LocalKubeClusters store in (each given `url` and an etcd_prefix of its
    own): many small clusters side by side without an etcd process each."""

    def __init__(self, workdir: Path, log_dir: Path) -> None:
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir)
        self.url = _etcd_client_url()
        self.process: ManagedProcess | None = None

    def start(self, timeout: float = 60.0) -> SharedEtcd:
        binary = ensure_binaries(("etcd",))["etcd"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = ManagedProcess("etcd-shared", _etcd_argv(binary, self.workdir / "etcd", self.url),
                                      self.log_dir).start()
        self.process.wait_ready(lambda: http_ok(f"{self.url}/health"), timeout)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


class LocalKubeCluster:
    """One local cluster; files (certs, etcd data, kubeconfig) under `workdir`, logs in `log_dir`."""

    def __init__(
        self,
        workdir: Path,
        log_dir: Path,
        *,
        nodes: int = 3,
        api_port: int | None = None,
        install_upstream_crds: bool = True,
        node_monitor_grace_period: str | None = None,
        feature_gates: str | None = None,
        etcd_url: str | None = None,
        etcd_prefix: str | None = None,
        controllers: bool = True,
        pod_cidr: str = POD_CIDR,
        answering: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.log_dir = Path(log_dir)
        self.nodes = nodes
        self.api_port = api_port
        self.install_upstream_crds = install_upstream_crds
        self.node_monitor_grace_period = node_monitor_grace_period
        """How long kube-controller-manager waits for a node's lease before marking it (and its
        pods) NotReady; None keeps its default (tests of an outage shorten it)."""
        self.feature_gates = feature_gates
        """--feature-gates of kube-apiserver and kube-controller-manager (e.g.
        "MaxUnavailableStatefulSet=true" for bench/replica_scale.py); None sets none."""
        self.etcd_url = etcd_url
        """An etcd already running (SharedEtcd.url) to store in instead of one of this cluster's own;
        with etcd_prefix (kube-apiserver's --etcd-prefix) so clusters sharing it never see each other."""
        self.etcd_prefix = etcd_prefix
        self.controllers = controllers
        self.pod_cidr = pod_cidr
        """Where kwok hands pod addresses out of (a pod runtime's range when pods answer)."""
        self.answering = answering
        """True: a pod runtime (devstack/pod_runtime.py) answers for the InferenceService pods and says
        when they are Ready; kwok only starts them (kwok_stages)."""
        """False: etcd and kube-apiserver only (no controller-manager, scheduler, kwok nor nodes), for
        a cluster whose objects nobody turns into pods (bench/placement_race.py's lean members)."""
        self.pki = self.workdir / "pki"
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self._processes: list[ManagedProcess] = []
        self._client: client.ApiClient | None = None

    @property
    def api_url(self) -> str:
        if self.api_port is None:
            raise RuntimeError("cluster not started")
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def node_names(self) -> list[str]:
        return [f"kwok-node-{i}" for i in range(self.nodes)]

    def __enter__(self) -> LocalKubeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle --

    def start(self, timeout: float = 180.0) -> LocalKubeCluster:
        began = time.monotonic()
        binaries = ensure_binaries(BINARIES if self.controllers else STORAGE_BINARIES)
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_pki(self.pki)
        write_front_proxy_pki(self.pki)
        self.api_port = self.api_port or free_port()
        self._write_kubeconfig()
        self._client = self.api_client()
        try:
            self._start_etcd_and_apiserver(binaries, timeout)
            if self.controllers:
                self._start_controllers(binaries)
                self._create_nodes()
            if self.install_upstream_crds:
                self.apply_crds(upstream_crd_dirs())
            if self.controllers:
                self._wait_controllers(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("local kube cluster at %s ready in %.1fs", self.api_url, time.monotonic() - began)
        return self

    def start_controllers(self, timeout: float = 180.0) -> list[ManagedProcess]:
        """Join kube-controller-manager, kube-scheduler and kwok (with its nodes) to a cluster started
        with controllers=False, building them first when missing; returns the processes started."""
        if self.controllers:
            raise RuntimeError("this cluster's controllers already run")
        binaries = ensure_binaries(CONTROLLER_BINARIES)
        before = len(self._processes)
        self.controllers = True
        self._start_controllers(binaries)
        self._create_nodes()
        self._wait_controllers(timeout)
        return self._processes[before:]

    def _wait_controllers(self, timeout: float) -> None:
        self._wait("nodes Ready", self._nodes_ready, timeout)
        self._wait("default ServiceAccount", self._default_service_account, timeout)

    def stop(self) -> None:
        # Reverse start order: clients first, etcd last.
        for proc in reversed(self._processes):
            proc.stop()
        self._processes.clear()
        if self._client is not None:
            self._client.close()  # type: ignore[no-untyped-call]
            self._client = None

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.log_dir).start()
        self._processes.append(proc)
        return proc

    def _start_etcd_and_apiserver(self, binaries: dict[str, str], timeout: float) -> None:
        if self.etcd_url is None:
            client_url = _etcd_client_url()
            etcd = self._spawn("etcd", _etcd_argv(binaries["etcd"], self.workdir / "etcd", client_url))
            etcd.wait_ready(lambda: http_ok(f"{client_url}/health"), timeout)
        else:
            client_url = self.etcd_url

        pki = self.pki
        apiserver = self._spawn("kube-apiserver", [
            binaries["kube-apiserver"],
            f"--etcd-servers={client_url}",
            *([f"--etcd-prefix={self.etcd_prefix}"] if self.etcd_prefix else []),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Real authorization, as in production: RBAC checks what our controllers may do.
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # The `kubernetes` Service's endpoints would be 127.0.0.1, which endpoint
            # validation rejects (loopback); nothing here dials the apiserver through it.
            "--endpoint-reconciler-type=none",
            # The aggregation layer (custom.metrics.k8s.io and external.metrics.k8s.io served by
            # prometheus-adapter, devstack/metrics_adapter.py). Nothing runs kube-proxy, so the
            # apiserver dials an APIService's endpoint address itself instead of its ClusterIP.
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            "--profiling=false",
            *([f"--feature-gates={self.feature_gates}"] if self.feature_gates else []),
        ])
        apiserver.wait_ready(lambda: http_ok(f"{self.api_url}/readyz", ssl_context=self._ssl_context()), timeout)

    def _start_controllers(self, binaries: dict[str, str]) -> None:
        pki, kubeconfig = self.pki, str(self.kubeconfig_path)
        self._spawn("kube-controller-manager", [
            binaries["kube-controller-manager"],
            f"--kubeconfig={kubeconfig}",
            "--secure-port=0",  # no health port: several clusters may run side by side
            "--controllers=*",
            "--leader-elect=false",
            # Each controller acts as its own ServiceAccount, so RBAC applies as in a real cluster.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=servingops-local",
            # The HPA controller looks every 2 s (default 15 s), so tests of a real HPA are quick.
            "--horizontal-pod-autoscaler-sync-period=2s",
            *([f"--node-monitor-grace-period={self.node_monitor_grace_period}"]
              if self.node_monitor_grace_period else []),
            *([f"--feature-gates={self.feature_gates}"] if self.feature_gates else []),
        ])
        self._spawn("kube-scheduler", [
            binaries["kube-scheduler"],
            f"--kubeconfig={kubeconfig}",
            "--secure-port=0",
            "--leader-elect=false",
        ])
        kwok_config = self.workdir / "kwok.yaml"
        kwok_config.write_text(self._kwok_stages(self.answering))
        self._spawn("kwok", [
            binaries["kwok"],
            f"--kubeconfig={kubeconfig}",
            f"--config={kwok_config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            f"--cidr={self.pod_cidr}",
            "--node-lease-duration-seconds=40",  # matches the heartbeat-with-lease stage
        ])

    @staticmethod
    def _kwok_stages(answering: bool = False) -> str:
        # kwok itself ships no default stages (kwokctl adds them); without any it refuses to run.
        root = go_module_dir("sigs.k8s.io/kwok", pinned_versions()["KWOK_VERSION"])
        return yaml.safe_dump_all(kwok_stages(root, answering), sort_keys=False)

    # -- failures, for tests of recovery --

    def _process(self, name: str) -> ManagedProcess:
        return next(proc for proc in self._processes if proc.name == name)

    def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver (etcd keeps the cluster's state; its clients start failing)."""
        self._process("kube-apiserver").kill()

    def start_apiserver(self, timeout: float = 120.0) -> None:
        """Start kube-apiserver again exactly as it was (same port, flags and etcd): clients that
        kept their address reconnect, as after a control-plane restart."""
        old = self._process("kube-apiserver")
        if old.alive:
            raise RuntimeError("kube-apiserver is still running")
        new = ManagedProcess(old.name, old.argv, self.log_dir).start()
        self._processes[self._processes.index(old)] = new
        new.wait_ready(lambda: http_ok(f"{self.api_url}/readyz", ssl_context=self._ssl_context()), timeout)

    def pause_kubelets(self) -> None:
        """SIGSTOP kwok: the nodes stop renewing their leases, as kubelets that cannot reach the
        apiserver (or are slower than it to come back) do."""
        self._signal_kwok(signal.SIGSTOP)

    def resume_kubelets(self) -> None:
        self._signal_kwok(signal.SIGCONT)

    def add_unready_node(self, name: str) -> str:
        """A kwok node, `<name>-unready`, Ready itself, on which no pod ever turns Ready (the
        pod-on-unready-node stage), tainted UNREADY_NODE_TAINT so other tests' pods stay off it.
        Not in node_names; remove it with remove_node."""
        node = f"{name}{UNREADY_NODE_SUFFIX}"
        client.CoreV1Api(self._api).create_node(_kwok_node(node, taints=[
            client.V1Taint(key=UNREADY_NODE_TAINT, value="true", effect="NoSchedule")]))
        self._wait(f"node {node} Ready", lambda: any(
            n.metadata.name == node and condition_true(n.status.conditions, "Ready")
            for n in client.CoreV1Api(self._api).list_node().items), 60)
        return node

    def add_accelerator_node(self, name: str, accelerators: dict[str, str], labels: dict[str, str],
                             taints: list[client.V1Taint] | None = None) -> str:
        """A kwok node advertising `accelerators` as extended resources (`{"nvidia.com/gpu": "8"}`) with
        `labels` (a GPU operator's `nvidia.com/gpu.product`, node-feature-discovery's
        `feature.node.kubernetes.io/pci-10de_2330.present`, ...), waited Ready. Not in node_names; remove it
        with remove_node."""
        client.CoreV1Api(self._api).create_node(_kwok_node(name, taints=taints, labels=labels, extended=accelerators))
        self._wait(f"node {name} Ready", lambda: any(
            n.metadata.name == name and condition_true(n.status.conditions, "Ready")
            for n in client.CoreV1Api(self._api).list_node().items), 60)
        return name

    def remove_node(self, name: str) -> None:
        try:
            client.CoreV1Api(self._api).delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _signal_kwok(self, signum: signal.Signals) -> None:
        kwok = self._process("kwok")
        if kwok.pid is None or not kwok.alive:
            raise RuntimeError("kwok is not running")
        os.killpg(kwok.pid, signum)  # its own process group (ManagedProcess starts a new session)

    def _write_kubeconfig(self) -> None:
        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.api_url, "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")}}],
            "contexts": [{"name": "servingops-local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "servingops-local",
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig))
        self.kubeconfig_path.chmod(0o600)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float, interval: float = 0.5) -> None:
        """Poll `probe`; fail at once with the log tail when one of our processes has died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self._processes:
                if not proc.alive:
                    raise ProcessFailed(f"{proc.name} exited while waiting for {what}:\n{proc.log_tail()}")
            if probe():
                return
            time.sleep(interval)
        raise TimeoutError(f"{what}: not reached in {timeout}s; logs in {self.log_dir}")

    # -- API --

    def request_counts(self) -> list[tuple[dict[str, str], int]]:
        """The apiserver's own `apiserver_request_total` samples so far: (labels: verb, resource,
        subresource, code, ...; count). What a test bounds when it says how much a process asks."""
        with urllib.request.urlopen(f"{self.api_url}/metrics", timeout=30, context=self._ssl_context()) as response:
            text = response.read().decode()
        samples = []
        for line in text.splitlines():
            if line.startswith("apiserver_request_total{"):
                labels_text, value = line[len("apiserver_request_total{"):].rsplit("} ", 1)
                samples.append((dict(_METRIC_LABEL.findall(labels_text)), int(float(value))))
        return samples

    def api_client(self) -> client.ApiClient:
        """A fresh ApiClient for the admin user (the same identity as the kubeconfig)."""
        configuration = client.Configuration(host=self.api_url)
        configuration.ssl_ca_cert = str(self.pki / "ca.crt")
        configuration.cert_file = str(self.pki / "admin.crt")
        configuration.key_file = str(self.pki / "admin.key")
        return client.ApiClient(configuration)

    @property
    def _api(self) -> client.ApiClient:
        if self._client is None:
            self._client = self.api_client()
        return self._client

    def _create_nodes(self) -> None:
        core = client.CoreV1Api(self._api)
        for name in self.node_names:
            try:
                core.create_node(_kwok_node(name))
            except ApiException as exc:
                if exc.status != 409:  # already there: a restarted dev cluster
                    raise

    def _nodes_ready(self) -> bool:
        nodes = client.CoreV1Api(self._api).list_node().items
        ready = {
            n.metadata.name for n in nodes if n.metadata and n.status and condition_true(n.status.conditions, "Ready")
        }
        return set(self.node_names) <= ready

    def _default_service_account(self) -> bool:
        try:
            client.CoreV1Api(self._api).read_namespaced_service_account("default", "default")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def apply_crds(self, paths: Iterable[Path], timeout: float = 120.0) -> list[str]:
        """Server-side apply every CustomResourceDefinition in `paths` (files or folders of
        YAML) and wait until each is Established. Returns the CRD names."""
        api = client.ApiextensionsV1Api(self._api)
        names = []
        for doc in _yaml_docs(paths):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            # Apply needs no resourceVersion, so it races with nothing (the CRD's own
            # controller writes its status meanwhile) and updates in place.
            api.patch_custom_resource_definition(
                name, doc, field_manager=FIELD_MANAGER, force=True,
                _content_type="application/apply-patch+yaml",
            )
            names.append(name)

        def established(name: str) -> bool:
            status = api.read_custom_resource_definition(name).status
            return status is not None and condition_true(status.conditions, "Established")

        for name in names:
            self._wait(f"CRD {name} Established", partial(established, name), timeout, 0.2)
        return names

    # -- `./dev up` --

    @classmethod
    def run_foreground(cls, workdir: Path | None = None, *, nodes: int = 3, api_port: int | None = None) -> None:
        """Run a cluster until SIGINT/SIGTERM. Its state (certs, etcd) persists in `workdir`."""
        workdir = workdir or cache_dir() / "dev" / "kube"
        cluster = cls(workdir, workdir / "logs", nodes=nodes, api_port=api_port)
        stopping = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopping.set())
        with cluster:
            print(f"kube-apiserver: {cluster.api_url}")
            print(f"export KUBECONFIG={cluster.kubeconfig_path}")
            print(f"logs: {cluster.log_dir}", flush=True)
            while not stopping.wait(1.0):
                dead = [p.name for p in cluster._processes if not p.alive]
                if dead:
                    raise ProcessFailed(f"exited: {dead}; logs in {cluster.log_dir}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    LocalKubeCluster.run_foreground()
