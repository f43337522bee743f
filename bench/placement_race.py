"""Single placement race over member clusters, and the same race run by Kueue's MultiKueue (issue 14).

    .venv/bin/python -m bench.placement_race [--members 3,10,30] [--races 3] [--full-members 3] [--keep]

What is measured, for each fleet size N (the members are started once and grown: 3, then 10, ...):

servingops: an InferenceService with spec.placement (policy ClusterAffinity, mode Single, a
    clusterAffinity term every registered member matches) is created in the control plane; timed
    from the create to status.placement.phase == "Placed" (the winner committed, every loser's copy
    deleted; docs/placement.md). Only member `m01` has Kueue quota (cpu 100; every other member's
    ClusterQueue has 0), so exactly one member can admit and the race is decided by Kueue, not by
    luck: the figure is the cost of fanning out to N members, watching them and removing N-1 copies,
    not of waiting for a lucky first admission. m01 is second in race order (by name), as in
    tests/test_placement_e2e.py.
MultiKueue: Kueue v0.17.0's own multi-cluster dispatch over the same members. The control plane's
    cluster is the manager: its Kueue (batch/job integration) holds a ClusterQueue whose
    AdmissionCheck is `kueue.x-k8s.io/multikueue`, a MultiKueueConfig listing the same N members and a
    MultiKueueCluster per member (kubeconfig Secret in kueue-system). A batch/v1 Job (one pod, cpu 1)
    labelled with the manager's LocalQueue is created; MultiKueue copies its Workload to every worker
    and, once one worker admits it, deletes the others and creates the Job there. Timed from the Job's
    create to the manager's Workload having the AdmissionCheck Ready and condition Admitted. Kueue
    v0.17's MultiKueueConfig lists at most 20 clusters (spec.clusters maxItems): beyond that the
    apiserver refuses it, the refusal is printed, and only the servingops half runs at that size.

Writes per race: each apiserver's own `apiserver_request_total`, verbs POST / PUT / PATCH / DELETE /
DELETECOLLECTION / APPLY, any response code (the refused ones, e.g. a 404 deleting what is already
gone, are shown apart as `[code]`), read before the create and again `--settle` seconds after the
result (so the losers' clean-up a race causes is counted). Not counted: Leases (every kubelet and controller renews
one, race or not) and the reviews that store nothing (SelfSubjectReview, TokenReview,
SubjectAccessReview, ServiceAccount tokens). An idle window of the same length is read first and
printed, so the background the remaining counts still hold is visible.

Members: the first `--full-members` are whole clusters (etcd, kube-apiserver, controller-manager,
scheduler, kwok, Kueue, the servingops chart and their own servingops worker and bridge,
devstack/members.py). Every other member is lean: kube-apiserver (storing in one etcd shared by all
lean members, each under its own --etcd-prefix), our CRDs and Kueue's (not Gateway API's nor KEDA's),
the chart's identities and Kueue; no controllers, no kwok, no servingops worker or bridge. A lean
member never admits (nothing turns its derived InferenceService into pods), which is what a loser does
anyway; it is where the fan-out and the loser's clean-up land (but not the loser's own InferenceReplica,
gated pods and Kueue Workload a full loser writes: the table shows full and lean losers apart). The
winner is always a full member. The RSS of every process is printed.

Exits 1 (bench/goals.py) when a race was not won by m01 or did not finish; nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.client import Client

from bench import placement_timeline
from bench.goals import Goals
from bench.replica_scale import proc_kb, ratio
from bench.stack import Servers, admin_identities, start_servers, wait_for
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster, SharedEtcd, apply_objects
from devstack.kueue import NAMESPACE as KUEUE_NAMESPACE
from devstack.kueue import KueueProcess, label_namespace
from devstack.members import PLACEMENT_QUEUE, MemberCluster
from devstack.process import ManagedProcess, ProcessFailed
from devstack.product import BridgeLauncher, start_worker
from servingops.api_models.contract import (
    inference_service_workflow_id,
    placement_workflow_id,
    replica_workflow_id,
)

GROUP, VERSION = "ome.io", "v1beta1"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
NAMESPACE = "bench-placement"
FLEET_LABEL = "placement-race.bench/fleet"
WINNER = "m01"
MK_CHECK, MK_CONFIG, MK_QUEUE, MK_FLAVOR = "bench-multikueue", "bench-multikueue", "bench-multikueue", "bench-mk"
MK_CONTROLLER = "kueue.x-k8s.io/multikueue"
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
NOT_COUNTED = frozenset({"leases", "selfsubjectreviews", "tokenreviews", "subjectaccessreviews",
                         "selfsubjectaccessreviews", "localsubjectaccessreviews", "selfsubjectrulesreviews"})


# -- counting writes -------------------------------------------------------------------------------


def apiserver_writes(cluster: LocalKubeCluster) -> Counter[str]:
    """The apiserver's write requests so far, by resource[/subresource], as its /metrics counts them."""
    counts: Counter[str] = Counter()
    for labels, value in cluster.request_counts():
        resource, sub = labels.get("resource", ""), labels.get("subresource", "")
        if labels.get("verb") not in WRITE_VERBS or resource in NOT_COUNTED or sub == "token":
            continue
        key = f"{resource}/{sub}" if sub else resource
        # A refused write (404 deleting what is gone, 409 on a conflict) is a request but stores nothing.
        code = labels.get("code", "")
        counts[key if code.startswith("2") else f"{key} [{code}]"] += value
    return counts


def refused(counts: Counter[str]) -> int:
    return sum(v for k, v in counts.items() if k.endswith("]"))


@dataclass
class Snapshot:
    control: Counter[str]
    members: dict[str, Counter[str]]


def snapshot(control: LocalKubeCluster, members: list[MemberCluster]) -> Snapshot:
    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(lambda m: apiserver_writes(m.cluster), members))
    return Snapshot(apiserver_writes(control), {m.name: c for m, c in zip(members, counts, strict=True)})


def delta(after: Snapshot, before: Snapshot) -> Snapshot:
    return Snapshot(after.control - before.control,
                    {name: after.members[name] - before.members.get(name, Counter()) for name in after.members})


# -- reading objects (plain JSON: the client's custom-object calls are typed `object`) ----------------


def items(api: client.ApiClient, group: str, version: str, plural: str, **kwargs: Any) -> list[dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(group, version, NAMESPACE, plural, **kwargs)
    return list(cast(dict[str, Any], listed)["items"])


def cluster_object(api: client.ApiClient, group: str, version: str, plural: str, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], client.CustomObjectsApi(api).get_cluster_custom_object(group, version, plural, name))


def service(api: client.ApiClient, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "inferenceservices", name))


# -- one race --------------------------------------------------------------------------------------


@dataclass
class Race:
    seconds: float
    winner: str
    writes: Snapshot


@dataclass
class Fleet:
    servers: Servers
    worker: ManagedProcess
    bridge: ManagedProcess
    members: list[MemberCluster] = field(default_factory=list)
    """Registered, in name order."""
    started: list[MemberCluster] = field(default_factory=list)
    """Every member whose start was asked (what the clean-up stops)."""
    manager: KueueProcess | None = None
    multikueue_error: str | None = None
    """Why MultiKueue cannot race over this fleet (the error seen), or None."""
    timeline_pending: bool = False
    """Print the next servingops race's timeline (bench/placement_timeline.py), once per fleet size."""

    @property
    def api(self) -> client.ApiClient:
        return self.servers.api

    def member(self, name: str) -> MemberCluster:
        return next(m for m in self.members if m.name == name)


def service_body(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"deploymentMode": "OMENative",
                     "engine": {"minReplicas": 1, "runner": {
                         "name": "engine", "image": "vllm/vllm-openai:v0.9", "ports": [{"containerPort": 8000}],
                         "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}},
                     "placement": {"policy": "ClusterAffinity", "mode": "Single", "clusterAffinity": [
                         {"matchExpressions": [{"key": FLEET_LABEL, "operator": "In", "values": ["yes"]}]}]}}}


def placed(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    obj = service(api, name)
    placement = (obj.get("status") or {}).get("placement") or {}
    return placement if placement.get("phase") == "Placed" else None


def servingops_race(fleet: Fleet, settle: float, timeout: float) -> Race:
    custom = client.CustomObjectsApi(fleet.api)
    name = f"race-{uuid.uuid4().hex[:6]}"
    before = snapshot(fleet.servers.cluster, fleet.members)
    began, began_wall = time.monotonic(), time.time()
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferenceservices", service_body(name))
    placement = wait_for(f"InferenceService {name} Placed", lambda: placed(fleet.api, name), timeout, 0.1)
    seconds = time.monotonic() - began
    if fleet.timeline_pending:
        fleet.timeline_pending = False
        print_race_timeline(fleet, name, str(placement.get("cluster")), began_wall, began_wall + seconds)
    time.sleep(settle)
    writes = delta(snapshot(fleet.servers.cluster, fleet.members), before)
    withdraw_service(fleet, name)
    return Race(seconds, str(placement.get("cluster")), writes)


def print_race_timeline(fleet: Fleet, name: str, winner: str, began: float, placed_at: float) -> None:
    """The race's PlacementWorkflow and the winner's InferenceService and InferenceReplica workflows, on
    one clock from the create (they all run on the session's Temporal server)."""
    source_uid = service(fleet.api, name)["metadata"]["uid"]
    member = client.CustomObjectsApi(fleet.member(winner).api)
    derived_uid = member.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferenceservices", name)[
        "metadata"]["uid"]
    replica = f"{name}-engine"
    replica_uid = member.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferencereplicas", replica)[
        "metadata"]["uid"]

    async def fetch() -> list[placement_timeline.Line]:
        temporal = await Client.connect(fleet.servers.temporal.address)
        lines = []
        for workflow_id, short in ((placement_workflow_id(NAMESPACE, name, source_uid), "placement"),
                                   (inference_service_workflow_id(NAMESPACE, name, derived_uid), "member isvc"),
                                   (replica_workflow_id(NAMESPACE, replica, replica_uid), "member rep")):
            lines += await placement_timeline.workflow_lines(temporal, workflow_id, short)
        return lines

    print(f"  timeline of {name} (won by {winner}), seconds since its create; Placed seen at "
          f"{placed_at - began:.3f} s:", flush=True)
    placement_timeline.print_timeline(began, asyncio.run(fetch()), until=placed_at + 0.5)


def gone(probe: Callable[[], object]) -> bool:
    try:
        probe()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def withdraw_service(fleet: Fleet, name: str) -> None:
    """Delete the source and wait until it and everything it caused in the members is gone, so the next
    race starts from the same state (not timed, not counted)."""
    custom = client.CustomObjectsApi(fleet.api)
    custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferenceservices", name)
    wait_for(f"{name} deleted", lambda: gone(lambda: service(fleet.api, name)), 180, 0.5)
    wait_for("members clean", lambda: all(member_clean(m) for m in fleet.members), 180, 0.5)


def member_clean(member: MemberCluster) -> bool:
    """No derived service, pod or Kueue Workload left in the bench namespace."""
    if items(member.api, GROUP, VERSION, "inferenceservices") or items(member.api, *KUEUE, "workloads"):
        return False
    return not (member.cluster.controllers and client.CoreV1Api(member.api).list_namespaced_pod(NAMESPACE).items)


# -- MultiKueue ------------------------------------------------------------------------------------


def kueue_doc(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": metadata, "spec": spec}


def start_manager(fleet: Fleet, work: Path, logs: Path, cleanup: contextlib.ExitStack) -> None:
    """Kueue as the MultiKueue manager in the control plane's cluster: a ClusterQueue with room for every
    race whose admission check is MultiKueue's, and the LocalQueue the members have."""
    cluster = fleet.servers.cluster
    fleet.manager = KueueProcess(cluster, work / "kueue-manager", logs / "manager", frameworks=("batch/job",)).start()
    cleanup.callback(fleet.manager.stop)  # before the cluster's own stop (LIFO): it unregisters its webhooks
    apply_objects(fleet.api, [
        kueue_doc("ResourceFlavor", MK_FLAVOR, {}),
        kueue_doc("AdmissionCheck", MK_CHECK, {"controllerName": MK_CONTROLLER, "parameters": {
            "apiGroup": KUEUE[0], "kind": "MultiKueueConfig", "name": MK_CONFIG}}),
        kueue_doc("ClusterQueue", MK_QUEUE, {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": MK_FLAVOR, "resources": [{"name": "cpu", "nominalQuota": "1000"}]}]}],
            "admissionChecksStrategy": {"admissionChecks": [{"name": MK_CHECK}]}}),
        kueue_doc("LocalQueue", PLACEMENT_QUEUE, {"clusterQueue": MK_QUEUE}, NAMESPACE)])


def add_multikueue_clusters(fleet: Fleet, members: list[MemberCluster]) -> None:
    """A kubeconfig Secret (the member's admin kubeconfig, credentials inline as MultiKueue demands) and
    a MultiKueueCluster per new member."""
    docs: list[dict[str, Any]] = []
    for member in members:
        kubeconfig = member.cluster.kubeconfig_path.read_bytes()
        docs.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": f"mk-{member.name}", "namespace": KUEUE_NAMESPACE},
                     "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()}})
        docs.append({"apiVersion": "/".join(KUEUE), "kind": "MultiKueueCluster", "metadata": {"name": member.name},
                     "spec": {"clusterSource": {"kubeConfig": {"location": f"mk-{member.name}",
                                                               "locationType": "Secret"}}}})
    apply_objects(fleet.api, docs)


def set_multikueue_config(fleet: Fleet) -> str | None:
    """The MultiKueueConfig listing every member; the apiserver's refusal as text, or None."""
    doc = {"apiVersion": "/".join(KUEUE), "kind": "MultiKueueConfig", "metadata": {"name": MK_CONFIG},
           "spec": {"clusters": sorted(m.name for m in fleet.members)}}
    try:
        apply_objects(fleet.api, [doc])
    except ApiException as exc:
        return f"MultiKueueConfig with {len(fleet.members)} clusters refused: {exc.status} {exc.body}"
    for member in fleet.members:
        wait_for(f"MultiKueueCluster {member.name} Active", partial(active, fleet.api, "multikueueclusters",
                                                                    member.name), 120, 0.5)
    wait_for("AdmissionCheck Active", partial(active, fleet.api, "admissionchecks", MK_CHECK), 60, 0.5)
    return None


def active(api: client.ApiClient, plural: str, name: str) -> bool:
    return condition(cluster_object(api, *KUEUE, plural, name), "Active")


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def job_body(name: str) -> dict[str, Any]:
    """What a user writes: the LocalQueue label; suspend and managedBy come from Kueue's Job webhook."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"kueue.x-k8s.io/queue-name": PLACEMENT_QUEUE}},
            "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "engine", "image": "vllm/vllm-openai:v0.9",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}}}


def admitted_workload(api: client.ApiClient, job_uid: str) -> dict[str, Any] | None:
    """The manager's Workload of the Job once its MultiKueue check is Ready and it is Admitted."""
    for wl in items(api, *KUEUE, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={job_uid}"):
        checks = {c.get("name"): c.get("state") for c in (wl.get("status") or {}).get("admissionChecks") or []}
        if checks.get(MK_CHECK) == "Ready" and condition(wl, "Admitted"):
            return dict(wl)
    return None


def multikueue_race(fleet: Fleet, settle: float, timeout: float) -> Race:
    batch = client.BatchV1Api(fleet.api)
    name = f"mk-{uuid.uuid4().hex[:6]}"
    before = snapshot(fleet.servers.cluster, fleet.members)
    began = time.monotonic()
    job = batch.create_namespaced_job(NAMESPACE, cast(Any, job_body(name)))
    uid = str(job.metadata.uid) if job.metadata else ""
    workload = wait_for(f"Job {name}'s Workload admitted", lambda: admitted_workload(fleet.api, uid), timeout, 0.1)
    seconds = time.monotonic() - began
    time.sleep(settle)
    writes = delta(snapshot(fleet.servers.cluster, fleet.members), before)
    managed_by = job.spec.managed_by if job.spec else None
    if managed_by != MK_CONTROLLER:  # Kueue's Job webhook sets it; without it MultiKueue ignores the Job
        print(f"    note: Job {name} spec.managedBy = {managed_by!r}", flush=True)
    withdraw_job(fleet, name)
    return Race(seconds, str((workload.get("status") or {}).get("clusterName")), writes)


def withdraw_job(fleet: Fleet, name: str) -> None:
    batch = client.BatchV1Api(fleet.api)
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")
    wait_for(f"Job {name} deleted", lambda: gone(lambda: batch.read_namespaced_job(name, NAMESPACE)), 120, 0.5)
    wait_for("manager Workloads gone", lambda: not items(fleet.api, *KUEUE, "workloads"), 120, 0.5)
    wait_for("members clean", lambda: all(member_clean(m) and not client.BatchV1Api(m.api).list_namespaced_job(
        NAMESPACE).items for m in fleet.members), 180, 0.5)


# -- the fleet -------------------------------------------------------------------------------------


def start_control_plane(cleanup: contextlib.ExitStack, work: Path) -> Fleet:
    """Temporal, the control plane's cluster, its worker and bridge (InferenceService, WorkloadCluster),
    every process as the cluster admin (benchmarks measure; the e2e tests check the chart's roles)."""
    logs = work / "logs"
    servers = start_servers(cleanup, work, nodes=1)
    identities: Identities = admin_identities(servers.cluster, servers.api)
    label_namespace(servers.api, NAMESPACE)
    task_queue = f"bench-{uuid.uuid4().hex[:6]}"
    worker = start_worker(servers.cluster, servers.temporal, servers.registry, servers.hub, task_queue,
                          work / "spool", logs, host_id="bench-placement", identities=identities)
    cleanup.callback(worker.stop)
    launcher = BridgeLauncher(identities, servers.temporal.address, logs)
    cleanup.callback(launcher.stop_all)
    bridge = launcher.start(task_queue=task_queue, kinds="InferenceService,WorkloadCluster")
    return Fleet(servers, worker, bridge.process)


def new_member(index: int, work: Path, logs: Path, full: bool, shared: SharedEtcd | None) -> MemberCluster:
    name = f"m{index:02d}"
    quota = "100" if name == WINNER else "0"
    frameworks = ("pod", "batch/job")  # batch/job: the Job MultiKueue creates in the winner
    if full:
        return MemberCluster(name, work / name, logs, labels={FLEET_LABEL: "yes"}, cpu_quota=quota, nodes=1,
                             kueue_frameworks=frameworks)
    assert shared is not None
    return MemberCluster(name, work / name, logs, labels={FLEET_LABEL: "yes"}, cpu_quota=quota, servingops=False,
                         controllers=False, etcd_url=shared.url, kueue_frameworks=frameworks)


def start_member(member: MemberCluster, temporal: str, env: dict[str, str]) -> None:
    """Start a member, once more when a process of it failed to start (seen here: Kueue's certificate
    watcher refused with "too many open files" while many processes were starting at once)."""
    try:
        member.start(temporal, env)
    except ProcessFailed as exc:
        print(f"  {member.name} did not start ({str(exc).splitlines()[0]}); starting it again", flush=True)
        member.start(temporal, env)


def stop_members(fleet: Fleet) -> None:
    """Stop every member, eight at a time: each apiserver and Kueue takes seconds to shut down."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda m: m.stop(), fleet.started))


def registered(api: client.ApiClient, name: str) -> bool:
    return condition(cluster_object(api, GROUP, VERSION, "workloadclusters", name), "Ready")


def grow(fleet: Fleet, size: int, work: Path, full_members: int, shared: SharedEtcd | None) -> list[MemberCluster]:
    """Start members up to `size`, prepare the namespace and register them; returns the new ones."""
    logs = work / "logs"
    servers = fleet.servers
    env = {"HF_ENDPOINT": servers.hub.url, "SERVINGOPS_REGISTRY": servers.registry.address,
           "SERVINGOPS_OLLAMA_REGISTRY": servers.registry.url, "HF_HUB_DISABLE_TELEMETRY": "1"}
    new = [new_member(i, work / "members", logs, i < full_members, shared) for i in range(len(fleet.members), size)]
    fleet.started.extend(new)
    # Full members run helm and a worker each: two at a time; lean ones are an apiserver and Kueue.
    with ThreadPoolExecutor(2 if any(m.servingops for m in new) else 4) as pool:
        for started in [pool.submit(start_member, m, servers.temporal.address, env) for m in new]:
            started.result()
    for member in new:
        member.prepare_namespace(NAMESPACE)
        member.register(fleet.api, admin_identities(servers.cluster, servers.api).namespace)
    fleet.members.extend(new)
    for member in new:
        wait_for(f"WorkloadCluster {member.name} Ready", partial(registered, fleet.api, member.name), 120, 0.5)
    return new


# -- memory ----------------------------------------------------------------------------------------


def rss_mb(processes: Iterable[ManagedProcess | None]) -> float:
    total = 0
    for proc in processes:
        if proc is not None and proc.pid is not None and proc.alive:
            with contextlib.suppress(OSError, RuntimeError):
                total += proc_kb(proc.pid, "VmRSS")
    return total / 1024


def memory_lines(fleet: Fleet, shared: SharedEtcd | None) -> list[str]:
    servers = fleet.servers
    kueue = [fleet.manager.process] if fleet.manager else []
    control = [*servers.cluster._processes, servers.temporal.process, servers.registry.process, fleet.worker,
               fleet.bridge, *kueue]
    lines = [f"control plane: {rss_mb(control):.0f} MB (its cluster {rss_mb(servers.cluster._processes):.0f}, "
             f"Temporal {rss_mb([servers.temporal.process]):.0f}, worker {rss_mb([fleet.worker]):.0f}, "
             f"bridge {rss_mb([fleet.bridge]):.0f}, MultiKueue's Kueue {rss_mb(kueue):.0f})"]
    for kind, members in (("full", [m for m in fleet.members if m.servingops]),
                          ("lean", [m for m in fleet.members if not m.servingops])):
        if not members:
            continue
        per = [rss_mb(m.processes()) for m in members]
        apiserver = statistics.mean(rss_mb(p for p in m.cluster._processes if p.name == "kube-apiserver")
                                    for m in members)
        kueue_each = statistics.mean(rss_mb([m.kueue.process if m.kueue else None]) for m in members)
        servingops = statistics.mean(rss_mb([m.worker, m.bridge]) for m in members)
        lines.append(f"{len(members)} {kind} members: {sum(per):.0f} MB in all, {statistics.mean(per):.0f} MB each "
                     f"(kube-apiserver {apiserver:.0f}, Kueue {kueue_each:.0f}, servingops worker+bridge "
                     f"{servingops:.0f})")
    if shared is not None:
        lines.append(f"shared etcd of the lean members: {rss_mb([shared.process]):.0f} MB")
    available = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemAvailable:"))
    lines.append(f"machine MemAvailable now: {available / 1024 / 1024:.1f} GiB")
    return lines


# -- the report ------------------------------------------------------------------------------------


def total(counts: Counter[str]) -> int:
    return sum(counts.values())


@dataclass
class Summary:
    system: str
    races: list[Race]
    errors: list[str]

    def seconds(self) -> list[float]:
        return [r.seconds for r in self.races]

    def control_writes(self) -> float:
        return statistics.mean(total(r.writes.control) for r in self.races)

    def member_writes(self, names: Iterable[str]) -> float:
        """Mean writes per race summed over the members `names`."""
        chosen = set(names)
        return statistics.mean(sum(total(c) for n, c in r.writes.members.items() if n in chosen) for r in self.races)

    def top(self, counts_of: Callable[[Race], Counter[str]], k: int = 6) -> str:
        summed: Counter[str] = Counter()
        for race in self.races:
            summed.update(counts_of(race))
        n = len(self.races)
        return ", ".join(f"{res} {v / n:.1f}" for res, v in summed.most_common(k)) or "none"


def print_size(fleet: Fleet, summaries: list[Summary]) -> None:
    full = [m.name for m in fleet.members if m.servingops]
    lean = [m.name for m in fleet.members if not m.servingops]
    full_losers = [n for n in full if n != WINNER]
    every = [m.name for m in fleet.members]
    print(f"\n== {len(every)} members ({len(full)} full, {len(lean)} lean); winner {WINNER} ==", flush=True)
    print(f"{'system':<11} {'races':>5} {'p50 s':>7} {'max s':>7} {'cp writes':>10} {'member writes':>14} "
          f"{'winner':>7} {'full loser':>11} {'lean loser':>11}", flush=True)
    for s in summaries:
        if not s.races:
            print(f"{s.system:<11} {0:>5}  did not run: {'; '.join(s.errors) or 'no race'}", flush=True)
            continue
        per_full = s.member_writes(full_losers) / len(full_losers) if full_losers else float("nan")
        per_lean = s.member_writes(lean) / len(lean) if lean else float("nan")
        print(f"{s.system:<11} {len(s.races):>5} {statistics.median(s.seconds()):>7.2f} {max(s.seconds()):>7.2f} "
              f"{s.control_writes():>10.1f} {s.member_writes(every):>14.1f} {s.member_writes([WINNER]):>7.1f} "
              f"{per_full:>11.1f} {per_lean:>11.1f}", flush=True)
        for error in s.errors:
            print(f"    {s.system} error: {error}", flush=True)
    ours, theirs = summaries[0], summaries[1]
    if ours.races and theirs.races:
        print(f"ratio servingops / MultiKueue: time p50 {ratio(statistics.median(ours.seconds()), statistics.median(theirs.seconds()))}; "  # noqa: E501
              f"control-plane writes {ratio(ours.control_writes(), theirs.control_writes())}; member writes "
              f"{ratio(ours.member_writes(every), theirs.member_writes(every))}", flush=True)
    for s in summaries:
        if not s.races:
            continue
        print(f"  {s.system} writes per race by resource: control plane: {s.top(lambda r: r.writes.control)}",
              flush=True)
        print(f"    winner: {s.top(lambda r: r.writes.members.get(WINNER, Counter()))}", flush=True)
        loser = next((n for n in [*full_losers, *lean]), None)
        if loser:
            print(f"    a loser ({loser}): {s.top(partial(member_counts, loser))}", flush=True)


def member_counts(name: str, race: Race) -> Counter[str]:
    return race.writes.members.get(name, Counter())


def idle_writes(fleet: Fleet, seconds: float) -> str:
    before = snapshot(fleet.servers.cluster, fleet.members)
    time.sleep(seconds)
    writes = delta(snapshot(fleet.servers.cluster, fleet.members), before)
    members: Counter[str] = Counter()
    for counts in writes.members.values():
        members.update(counts)
    return (f"idle {seconds:.0f} s (no race): control plane {total(writes.control)} writes "
            f"({', '.join(f'{k} {v}' for k, v in writes.control.most_common(4)) or 'none'}); members "
            f"{total(members)} ({', '.join(f'{k} {v}' for k, v in members.most_common(4)) or 'none'})")


def run_races(fleet: Fleet, races: int, settle: float, timeout: float, warm: bool,
              timeline: bool = False) -> list[Summary]:
    ours, theirs = Summary("servingops", [], []), Summary("MultiKueue", [], [])
    if fleet.multikueue_error:
        theirs.errors.append(fleet.multikueue_error)
    if warm:  # the first race of each system pays for cold caches and fresh connections
        for summary, race in ((ours, servingops_race), (theirs, multikueue_race)):
            if summary.errors:
                continue
            try:
                warm_race = race(fleet, settle, timeout)
                print(f"  warm-up {summary.system}: {warm_race.seconds:.2f} s, won by {warm_race.winner} "
                      "(not counted)", flush=True)
            except (TimeoutError, ApiException) as exc:
                summary.errors.append(f"warm-up failed: {exc}")
    fleet.timeline_pending = timeline
    for _ in range(races):
        for summary, race in ((ours, servingops_race), (theirs, multikueue_race)):
            if summary.errors:
                continue
            try:
                result = race(fleet, settle, timeout)
            except (TimeoutError, ApiException) as exc:
                summary.errors.append(str(exc))
                continue
            summary.races.append(result)
            member_total = sum(total(c) for c in result.writes.members.values())
            member_refused = sum(refused(c) for c in result.writes.members.values())
            print(f"  {summary.system}: {result.seconds:.2f} s, won by {result.winner}, writes control plane "
                  f"{total(result.writes.control)} ({refused(result.writes.control)} refused), members "
                  f"{member_total} ({member_refused} refused)", flush=True)
    return [ours, theirs]


def setup_multikueue(fleet: Fleet, new: list[MemberCluster]) -> None:
    if fleet.manager is None:
        return
    try:
        add_multikueue_clusters(fleet, new)
        fleet.multikueue_error = set_multikueue_config(fleet)
    except (TimeoutError, ApiException) as exc:
        fleet.multikueue_error = f"MultiKueue setup over {len(fleet.members)} members failed: {exc}"


def run(args: argparse.Namespace) -> None:
    sizes = sorted({int(s) for s in args.members.split(",")})
    goals = Goals("bench.placement_race")
    work = Path(tempfile.mkdtemp(prefix="bench-placement-"))
    with contextlib.ExitStack() as cleanup:
        if args.keep:
            print(f"work directory (kept): {work}", flush=True)
        else:
            cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        began = time.monotonic()
        fleet = start_control_plane(cleanup, work)
        try:
            start_manager(fleet, work, work / "logs", cleanup)
        except Exception as exc:  # said, and the servingops half runs on
            fleet.multikueue_error = f"MultiKueue's manager did not start: {type(exc).__name__}: {exc}"
        shared: SharedEtcd | None = None
        if max(sizes) > args.full_members:
            shared = SharedEtcd(work / "shared-etcd", work / "logs").start()
            cleanup.callback(shared.stop)
        cleanup.callback(stop_members, fleet)  # before the shared etcd and the control plane (LIFO)
        print(f"control plane up in {time.monotonic() - began:.0f} s", flush=True)
        all_summaries: list[tuple[int, list[Summary]]] = []
        for index, size in enumerate(sizes):
            grew = time.monotonic()
            new = grow(fleet, size, work, args.full_members, shared)
            setup_multikueue(fleet, new)
            print(f"\n{size} members registered ({len(new)} started in {time.monotonic() - grew:.0f} s)", flush=True)
            for line in memory_lines(fleet, shared):
                print(f"  memory: {line}", flush=True)
            print(f"  {idle_writes(fleet, args.settle + 5)}", flush=True)
            summaries = run_races(fleet, args.races, args.settle, args.timeout, warm=index == 0,
                                  timeline=args.timeline)
            print_size(fleet, summaries)
            all_summaries.append((size, summaries))
    for size, (ours, _theirs) in all_summaries:
        goals.check(f"servingops races at {size} members won by {WINNER}",
                    sum(r.winner == WINNER for r in ours.races), ">=", args.races)
        if _theirs.races:  # MultiKueue is measured beside, not held to our goal; a wrong winner is said
            print(f"MultiKueue at {size} members: {sum(r.winner == WINNER for r in _theirs.races)} of "
                  f"{len(_theirs.races)} races won by {WINNER}", flush=True)
    goals.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="3,10,30", help="fleet sizes, comma separated (grown in order)")
    parser.add_argument("--races", type=int, default=3, help="timed races per system and size")
    parser.add_argument("--full-members", type=int, default=3,
                        help="members that are whole clusters with their own servingops; the rest are lean")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds after the result before the write counters are read again")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a race may take")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (the processes' logs)")
    parser.add_argument("--timeline", action="store_true",
                        help="print where the first timed servingops race of each size spent its time")
    args = parser.parse_args()
    if args.full_members < 2:
        parser.error("--full-members must be at least 2: the winner m01 is a full member")
    run(args)


if __name__ == "__main__":
    main()
