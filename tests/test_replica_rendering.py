"""The pure parts of the InferenceReplica activities: pod rendering, the revision hash, the
in-place diff and the reading of a pod (activities/replica/{pods,revisions,in_place,observe}.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servingops.activities.replica import in_place, pods
from servingops.activities.replica.observe import pod_view
from servingops.activities.replica.revisions import revision_hash
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.enums import TopologySpreadPolicy
from servingops.api_models.ome.replica import Runner
from servingops.rendering.render import DRAIN_SECONDS

pytestmark = pytest.mark.unit

OWNER = pods.Owner(name="chat-engine", namespace="team", uid="uid-1")


def _template(image: str = "r.invalid/engine:v1", **container: Any) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "chat"}, "annotations": {"note": "x"}},
            "spec": {"containers": [{"name": "main", "image": image, "env": [{"name": "A", "value": "1"}],
                                     **container}]}}


def _single(image: str = "r.invalid/engine:v1") -> pods.RevisionData:
    return pods.RevisionData(name="chat-engine-abc",
                             runners=[Runner(name="default", size=1, template=_template(image))])


def _gang(workers: int = 2) -> pods.RevisionData:
    return pods.RevisionData(name="chat-engine-def", pairing_protocol="nixl-v1", runners=[
        Runner(name="leader", size=1, template=_template()),
        Runner(name="worker", size=workers, template=_template("r.invalid/worker:v1"))])


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_single_pod_instance_renders_its_names_labels_gate_and_env() -> None:
    revision = _single()
    [pod] = pods.render_instance(OWNER, "engine", "chat-engine", revision, pods.InstanceKey(3, incarnation=2, slot=1),
                                 pods.InstancePlacement())
    assert pod["metadata"]["name"] == "chat-engine-3-s1"
    assert pod["metadata"]["labels"] == {
        "app": "chat", keys.REPLICA_LABEL: "chat-engine", keys.COMPONENT_LABEL: "engine", keys.INSTANCE_LABEL: "3",
        keys.INCARNATION_LABEL: "2", keys.RUNNER_LABEL: "default", keys.SLOT_LABEL: "1",
        keys.REVISION_LABEL: "chat-engine-abc"}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True
    assert pod["spec"]["readinessGates"] == [{"conditionType": keys.SERVING_GATE}]
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("chat-engine-3-s1", "chat-engine")
    assert _env(pod) == {"A": "1", keys.RUNNER_ENV: "default"}
    assert "affinity" not in pod["spec"] and "topologySpreadConstraints" not in pod["spec"]
    assert revision.runners[0].template == _template(), "the revision's template is not edited"


def test_a_gang_renders_leader_first_and_workers_follow_it() -> None:
    placement = pods.InstancePlacement(topology_key="rack", topology_spread=TopologySpreadPolicy.REQUIRED,
                                       topology_spread_key="zone")
    rendered = pods.render_instance(OWNER, "engine", "chat-engine", _gang(), pods.InstanceKey(0, incarnation=4),
                                    placement)
    assert [p["metadata"]["name"] for p in rendered] == ["chat-engine-0", "chat-engine-0-w1", "chat-engine-0-w2"]
    leader, worker = rendered[0], rendered[2]
    assert leader["metadata"]["labels"][keys.PAIRING_LABEL] == "nixl-v1"
    assert keys.WORKER_LABEL not in leader["metadata"]["labels"]
    assert worker["metadata"]["labels"][keys.WORKER_LABEL] == "2"
    assert _env(leader)[keys.RUNNER_ENV] == "leader" and keys.LEADER_ADDRESS_ENV not in _env(leader)
    lws = {keys.LWS_LEADER_ADDRESS_ENV: "chat-engine-0.chat-engine", keys.LWS_GROUP_SIZE_ENV: "3"}
    assert _env(worker) == {"A": "1", keys.RUNNER_ENV: "worker", keys.LEADER_ADDRESS_ENV: "chat-engine-0.chat-engine",
                            **lws, keys.LWS_WORKER_INDEX_ENV: "2"}
    assert {k: _env(leader)[k] for k in [*lws, keys.LWS_WORKER_INDEX_ENV]} == {**lws, keys.LWS_WORKER_INDEX_ENV: "0"}
    assert _env(rendered[1])[keys.LWS_WORKER_INDEX_ENV] == "1"
    [term] = worker["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"topologyKey": "rack", "labelSelector": {"matchLabels": {
        keys.REPLICA_LABEL: "chat-engine", keys.INSTANCE_LABEL: "0", keys.RUNNER_LABEL: "leader",
        keys.INCARNATION_LABEL: "4"}}}
    assert "affinity" not in leader["spec"], "the leader has no one to follow"
    [spread] = leader["spec"]["topologySpreadConstraints"]
    assert spread == {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {keys.REPLICA_LABEL: "chat-engine",
                                                        keys.COMPONENT_LABEL: "engine", keys.RUNNER_LABEL: "leader"}}}
    assert "topologySpreadConstraints" not in worker["spec"], "only the anchor spreads"


def _pre_stop(pod: dict[str, Any]) -> Any:
    return pod["spec"]["containers"][0].get("lifecycle", {}).get("preStop")


def test_the_pod_that_takes_requests_drains_before_it_stops_and_workers_do_not() -> None:
    """A deleted serving pod keeps answering DRAIN_SECONDS (a preStop sleep) while the Gateway
    learns it is gone, as a Deployment's pods do; a gang's workers take no requests."""
    drain = {"sleep": {"seconds": DRAIN_SECONDS}}
    [single] = pods.render_instance(OWNER, "engine", "b", _single(), pods.InstanceKey(0), pods.InstancePlacement())
    assert _pre_stop(single) == drain
    leader, *workers = pods.render_instance(OWNER, "engine", "b", _gang(), pods.InstanceKey(0),
                                            pods.InstancePlacement())
    assert _pre_stop(leader) == drain
    assert [_pre_stop(w) for w in workers] == [None, None]

    own = {"exec": {"command": ["/bin/flush"]}}
    kept = pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=_template(
        lifecycle={"preStop": own}))])
    assert _pre_stop(_render(kept)) == own, "a template's own preStop is its own"
    short = _template()
    short["spec"]["terminationGracePeriodSeconds"] = 3
    assert _pre_stop(_render(pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=short)]))) \
        == {"sleep": {"seconds": 2}}, "the drain ends before the grace period does"


def test_spread_defaults_to_the_topology_key_and_needs_one() -> None:
    preferred = pods.InstancePlacement(topology_key="rack", topology_spread=TopologySpreadPolicy.PREFERRED)
    [pod] = pods.render_instance(OWNER, "engine", "b", _single(), pods.InstanceKey(0), preferred)
    assert pod["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "rack"
    assert pod["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "ScheduleAnyway"
    with pytest.raises(pods.RenderError, match="topologySpreadKey"):
        pods.render_instance(OWNER, "engine", "b", _single(), pods.InstanceKey(0),
                             pods.InstancePlacement(topology_spread=TopologySpreadPolicy.PREFERRED))


def test_migration_hints_become_node_affinity_in_every_term() -> None:
    template = _template()
    template["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                              {"matchExpressions": [{"key": "tpu", "operator": "Exists"}]}]}}}
    revision = pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=template)])
    [pod] = pods.render_instance(OWNER, "engine", "b", revision, pods.InstanceKey(0),
                                 pods.InstancePlacement(preferred_nodes=["n1", "n2"], avoid_node="n0"))
    node = pod["spec"]["affinity"]["nodeAffinity"]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 100, "preference": {
        "matchExpressions": [{"key": pods.HOSTNAME_KEY, "operator": "In", "values": ["n1", "n2"]}]}}]
    avoid = {"key": pods.HOSTNAME_KEY, "operator": "NotIn", "values": ["n0"]}
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchExpressions"][-1] for t in terms] == [avoid, avoid] and len(terms[0]["matchExpressions"]) == 2


def test_runner_shapes() -> None:
    assert pods.runner_sizes(_gang(3).runners) == {"leader": 1, "worker": 3}
    assert pods.runner_sizes(_single().runners) == {"default": 1}
    with pytest.raises(pods.RenderError):
        pods.runner_sizes([Runner(name="leader", size=1, template=_template())])


def test_the_hash_follows_runners_pairing_and_salt_only() -> None:
    base = pods.revision_payload(_single().runners, None)
    assert revision_hash(base, 0) == revision_hash(copy.deepcopy(base), 0)
    assert len(revision_hash(base, 0)) == 10
    assert revision_hash(base, 1) != revision_hash(base, 0)
    assert revision_hash(pods.revision_payload(_single().runners, "p2"), 0) != revision_hash(base, 0)
    assert revision_hash(pods.revision_payload(_single("r.invalid/engine:v2").runners, None), 0) != \
        revision_hash(base, 0)


def _live(pod: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver hands back: defaults and the ServiceAccount admission's additions."""
    live = copy.deepcopy(pod)
    spec = live["spec"]
    spec.update({"dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
                 "volumes": [*spec.get("volumes", []), {"name": "kube-api-access-x1", "projected": {}}]})
    for container in spec["containers"]:
        container.update({"imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
                          "volumeMounts": [{"name": "kube-api-access-x1",
                                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]})
    live["metadata"]["uid"] = "pod-uid"
    return live


def _render(revision: pods.RevisionData) -> dict[str, Any]:
    return pods.render_instance(OWNER, "engine", "b", revision, pods.InstanceKey(0), pods.InstancePlacement())[0]


def test_in_place_allows_images_and_labels_only() -> None:
    live = _live(_render(_single()))
    same = in_place.diff(_render(_single()), live)
    assert same.possible and not same.images and not same.labels

    image = in_place.diff(_render(pods.RevisionData(name="r2", runners=_single("r.invalid/engine:v2").runners)), live)
    assert image.possible and image.images == {("containers", "main"): "r.invalid/engine:v2"}
    assert image.labels == {keys.REVISION_LABEL: "r2"}
    assert image.patch("42") == {"metadata": {"labels": {keys.REVISION_LABEL: "r2"}, "resourceVersion": "42"},
                                 "spec": {"containers": [{"name": "main", "image": "r.invalid/engine:v2"}]}}

    env = Runner(name="default", size=1, template=_template(env=[{"name": "A", "value": "2"}]))
    refused = in_place.diff(_render(pods.RevisionData(name="r3", runners=[env])), live)
    assert not refused.possible and refused.reason() == "env of container main differs"

    removed = _template()
    del removed["spec"]["containers"][0]["env"]
    dropped = in_place.diff(_render(pods.RevisionData(name="r4", runners=[
        Runner(name="default", size=1, template=removed)])), live)
    # Our own env stays (OME_RUNNER), the template's A is gone: the env lists differ.
    assert dropped.reason() == "env of container main differs"

    command = in_place.diff(_render(pods.RevisionData(name="r5", runners=[
        Runner(name="default", size=1, template=_template(command=["serve"]))])), live)
    assert command.reason() == "command of container main differs"


def test_a_pod_made_before_the_drain_still_updates_in_place() -> None:
    """Pods made by a version without the drain have no lifecycle; the apiserver cannot add one in
    place, so only our own drain is let through, never a template's preStop."""
    live = _live(_render(_single()))
    del live["spec"]["containers"][0]["lifecycle"]
    image = in_place.diff(_render(pods.RevisionData(name="r2", runners=_single("r.invalid/engine:v2").runners)), live)
    assert image.possible and image.images == {("containers", "main"): "r.invalid/engine:v2"}

    own = Runner(name="default", size=1, template=_template(lifecycle={"preStop": {"sleep": {"seconds": 30}}}))
    refused = in_place.diff(_render(pods.RevisionData(name="r3", runners=[own])), live)
    assert refused.reason() == "lifecycle of container main differs"


def test_in_place_refuses_another_container_set_and_pod_fields() -> None:
    live = _live(_render(_single()))
    sidecar = _template()
    sidecar["spec"]["containers"].append({"name": "proxy", "image": "p:v1"})
    assert "spec.containers differ" in in_place.diff(
        _render(pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=sidecar)])), live).reason()
    volumes = _template()
    volumes["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}]
    assert in_place.diff(_render(pods.RevisionData(name="r", runners=[
        Runner(name="default", size=1, template=volumes)])), live).reason().startswith("spec.volumes differs")


def test_in_place_compares_quantities_by_value() -> None:
    template = _template(resources={"limits": {"cpu": "1000m", "memory": "1Gi"}})
    revision = pods.RevisionData(name="r", runners=[Runner(name="default", size=1, template=template)])
    live = _live(_render(revision))
    live["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"},
                                                  "requests": {"cpu": "1", "memory": "1Gi"}}
    assert in_place.diff(_render(revision), live).possible


def test_a_pod_reads_as_its_view() -> None:
    pod = _live(_render(pods.RevisionData(name="rev", runners=_gang().runners)))
    pod["metadata"].update({"creationTimestamp": "2026-01-01T00:00:00Z", "name": "b-0"})
    pod["spec"].update({"nodeName": "n1", "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]})
    pod["status"] = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "ContainersReady", "status": "True"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
        {"type": keys.SERVING_GATE, "status": "False"}],
        "containerStatuses": [
            {"name": "main", "restartCount": 2, "lastState": {"terminated": {
                "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-01-01T00:00:30Z"}}},
            {"name": "side", "restartCount": 1, "state": {"terminated": {
                "exitCode": 1, "reason": "Error", "finishedAt": "2026-01-01T00:00:40Z", "message": "boom"}}}]}
    view = pod_view(pod)
    assert view is not None
    assert (view.index, view.runner, view.worker, view.incarnation, view.revision) == (0, "leader", 0, 0, "rev")
    assert (view.node, view.phase, view.scheduled, view.gated, view.containers_ready, view.ready) == (
        "n1", "Running", True, True, True, True)
    assert view.ready_since is not None and view.ready_since.isoformat() == "2026-01-01T00:01:00+00:00"
    assert view.serving is False and view.restart_count == 3 and not view.deleting
    assert view.last_termination is not None
    assert (view.last_termination.container_name, view.last_termination.exit_code,
            view.last_termination.reason, view.last_termination.message) == ("side", 1, "Error", "boom")

    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pod["status"]["containerStatuses"] = []
    pending = pod_view(pod)
    assert pending is not None and pending.unschedulable and not pending.scheduled
    assert pending.serving is None and pending.ready_since is None and pending.last_termination is None
    del pod["metadata"]["labels"][keys.INSTANCE_LABEL]
    assert pod_view(pod) is None
