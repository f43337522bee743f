"""A multi-node (leader/worker) component rendered into a gang, pure: the two templates and the
gang's revision (rendering/multinode.py), the projected replica's runners and the counting
of gang Instances (activities/serving/omenative.py), the model wired into both roles of a runtime's
leader/worker piece (rendering/resolution.py) and a replica rendered from such refs
(activities/replica/from_refs.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from servingops.activities.replica.from_refs import NotRenderable, render_runners
from servingops.activities.serving import omenative
from servingops.api_models.ome import instance_keys as keys
from servingops.api_models.ome.components import EngineSpec
from servingops.api_models.ome.enums import ComponentType, RunnerName
from servingops.api_models.ome.inference_service import InferenceServiceSpec
from servingops.api_models.ome.replica import InferenceReplicaSpec
from servingops.rendering import multinode, render
from servingops.rendering.resolution import resolve_service
from tests.support.serving_world import Cluster, ready_model, sample_service, sglang_runtime

pytestmark = pytest.mark.unit

ENGINE = ComponentType.ENGINE
MODEL_PATH = "/raid/models/meta/llama-3-2-1b-instruct"
MODEL_NODE_LABEL = "models.ome.io/clusterbasemodel.llama-3-2-1b-instruct"


def _gang_engine(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "minReplicas": 2,
        "labels": {"team": "llm"},
        "annotations": {"prometheus.io/scrape": "true", "note": "kept"},
        "nodeSelector": {"pool": "gpu"},
        "leader": {"nodeSelector": {"pool": "cpu", "rack": "r1"}, "tolerations": [{"operator": "Exists"}],
                   "containers": [{"name": "ome-container", "image": "base:v0", "env": [{"name": "A", "value": "1"}]}],
                   "runner": {"name": "ome-container", "image": "sglang:leader", "ports": [{"containerPort": 30000,
                                                                                              "name": "serve"}]}},
        "worker": {"size": 2, "runner": {"name": "ome-container", "image": "sglang:worker"}},
    }
    body.update(changes)
    return body


def _engine(body: dict[str, Any]) -> EngineSpec:
    spec = InferenceServiceSpec.model_validate({"engine": body})
    assert spec.engine is not None
    return spec.engine


def test_a_gang_renders_the_leader_and_the_workers_from_their_own_pieces() -> None:
    gang = multinode.render_gang("chat", ENGINE, _engine(_gang_engine()))
    leader, worker = gang.leader, gang.worker
    [main] = leader["spec"]["containers"]
    assert main == {"name": "ome-container", "image": "sglang:leader", "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 30000, "name": "serve"}]}, "the runner laid over its container"
    assert worker["spec"]["containers"] == [{"name": "ome-container", "image": "sglang:worker"}]
    assert leader["spec"]["tolerations"] == [{"operator": "Exists"}] and "tolerations" not in worker["spec"]
    assert leader["spec"]["nodeSelector"] == {"pool": "gpu", "rack": "r1"}, "the component's selector wins (upstream)"
    assert worker["spec"]["nodeSelector"] == {"pool": "gpu"}
    selector = render.selector_labels("chat", ENGINE)
    assert leader["metadata"]["labels"] == {"team": "llm", **selector, render.LABEL_REVISION: gang.revision}
    assert worker["metadata"]["labels"] == {"team": "llm", **selector}, "only the leader is selected for traffic"
    assert leader["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "note": "kept",
                                                 multinode.WORKERS_ANNOTATION: "2"}
    assert worker["metadata"]["annotations"] == {"note": "kept"}, "workers expose no metrics endpoint (upstream)"
    assert (gang.workers, gang.main_container) == (2, "ome-container")
    assert multinode.render_component("chat", ENGINE, _engine(_gang_engine())).template == leader


def test_the_gang_revision_moves_with_either_role_and_the_worker_count() -> None:
    base = multinode.render_gang("chat", ENGINE, _engine(_gang_engine())).revision
    assert multinode.render_gang("chat", ENGINE, _engine(_gang_engine())).revision == base, "stable"
    worker_image = _gang_engine()
    worker_image["worker"]["runner"]["image"] = "sglang:worker2"
    size = _gang_engine()
    size["worker"]["size"] = 3
    leader_env = _gang_engine()
    leader_env["leader"]["runner"]["env"] = [{"name": "B", "value": "2"}]
    replicas = _gang_engine(minReplicas=5)
    revisions = {multinode.render_gang("chat", ENGINE, _engine(body)).revision
                 for body in (worker_image, size, leader_env)}
    assert base not in revisions and len(revisions) == 3
    assert multinode.render_gang("chat", ENGINE, _engine(replicas)).revision == base, "replicas do not reach pods"


def test_a_single_pod_component_keeps_its_revision() -> None:
    cspec = _engine({"runner": {"name": "engine", "image": "vllm:v1"}})
    assert not multinode.is_multinode(cspec)
    assert multinode.render_component("chat", ENGINE, cspec) == render.render_revision("chat", ENGINE, cspec)
    assert multinode.serving_spec(cspec) is cspec


def test_a_missing_role_falls_back_to_the_component_and_one_worker() -> None:
    cspec = _engine({"runner": {"name": "engine", "image": "vllm:v1"},
                     "leader": {"runner": {"name": "engine", "image": "vllm:leader"}}})
    gang = multinode.render_gang("chat", ENGINE, cspec)
    assert gang.workers == 1, "seed: a declared leader gets one worker"
    assert gang.worker["spec"]["containers"] == [{"name": "engine", "image": "vllm:v1"}]
    assert gang.leader["spec"]["containers"] == [{"name": "engine", "image": "vllm:leader"}]
    only_workers = multinode.render_gang("chat", ENGINE, _engine({"runner": {"image": "vllm:v1"},
                                                                  "worker": {"size": 3}}))
    assert only_workers.leader["spec"]["containers"] == [{"name": render.MAIN_CONTAINER, "image": "vllm:v1"}]
    assert only_workers.workers == 3


@pytest.mark.parametrize(("body", "field"), [
    ({"leader": {"runner": {"image": "x"}}, "worker": {"size": 0, "runner": {"image": "x"}}},
     "spec.engine.worker.size"),
    ({"leader": {"nodeSelector": {"a": "b"}}, "worker": {"runner": {"image": "x"}}}, "spec.engine.leader"),
    ({"worker": {"size": 2}}, "spec.engine"),
])
def test_a_gang_without_a_container_or_a_worker_is_unservable(body: dict[str, Any], field: str) -> None:
    spec = InferenceServiceSpec.model_validate({"engine": body})
    assert spec.engine is not None
    with pytest.raises(render.Unservable) as caught:
        multinode.check_servable(spec, ENGINE, spec.engine)
    assert caught.value.field == field


def test_the_revision_service_reads_the_port_of_the_leaders_runner() -> None:
    cspec = _engine(_gang_engine())
    rendered = multinode.render_component("chat", ENGINE, cspec)
    owner = render.Owner(name="chat", namespace="team", uid="u1")
    service = render.service(owner, rendered, multinode.serving_spec(cspec))
    assert service["spec"]["ports"][0]["targetPort"] == 30000 and service["spec"]["ports"][0]["name"] == "serve"
    assert service["spec"]["selector"][render.LABEL_REVISION] == rendered.revision


def test_the_projected_replica_carries_a_leader_and_a_worker_runner() -> None:
    spec = InferenceServiceSpec.model_validate({"engine": _gang_engine(topologyKey="rack"),
                                                "rollout": {"pairingProtocol": "nixl-v2"}})
    assert spec.engine is not None
    rendered = multinode.render_component("chat", ENGINE, spec.engine)
    body = omenative.replica_spec(spec, ENGINE, spec.engine, rendered, isvc="chat", replicas=2)
    leader, worker = body["runners"]
    assert (leader["name"], leader["size"], worker["name"], worker["size"]) == ("leader", 1, "worker", 2)
    assert leader["template"]["metadata"]["labels"][keys.RUNNER_LABEL] == "leader"
    assert worker["template"]["metadata"]["labels"][keys.RUNNER_LABEL] == "worker"
    for runner in (leader, worker):
        assert runner["template"]["metadata"]["labels"]["ome.io/inferenceservice"] == "chat"
    assert leader["template"]["metadata"]["labels"][render.LABEL_REVISION] == rendered.revision
    assert render.LABEL_REVISION not in worker["template"]["metadata"]["labels"]
    assert body["replicas"] == 2, "one Instance is one gang"
    assert (body["pairingProtocol"], body["topologyKey"]) == ("nixl-v2", "rack")
    InferenceReplicaSpec.model_validate(body)


def _pod(name: str, runner: str, instance: int, *, ready: bool = True, revision: str | None = None,
         incarnation: int = 0, workers: int | None = None, deleting: bool = False) -> client.V1Pod:
    labels = {keys.RUNNER_LABEL: runner, keys.INSTANCE_LABEL: str(instance), keys.INCARNATION_LABEL: str(incarnation)}
    if revision:
        labels[render.LABEL_REVISION] = revision
    annotations = {multinode.WORKERS_ANNOTATION: str(workers)} if workers is not None else None
    status = "True" if ready else "False"
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations,
                                     deletion_timestamp="2026-01-01T00:00:00Z" if deleting else None),
        status=client.V1PodStatus(conditions=[client.V1PodCondition(type="ContainersReady", status=status),
                                              client.V1PodCondition(type=keys.SERVING_GATE, status=status)]))


def test_a_gang_instance_counts_once_and_is_ready_only_when_whole() -> None:
    pods = [
        _pod("e-0", "leader", 0, revision="r1", workers=2), _pod("e-0-w1", "worker", 0), _pod("e-0-w2", "worker", 0),
        _pod("e-1", "leader", 1, revision="r1", workers=2), _pod("e-1-w1", "worker", 1),
        _pod("e-1-w2", "worker", 1, ready=False),
        _pod("e-2", "leader", 2, revision="r2", workers=2, incarnation=1), _pod("e-2-w1", "worker", 2, incarnation=1),
        _pod("e-2-w2", "worker", 2, incarnation=0), _pod("e-2-w2x", "worker", 2, incarnation=1, deleting=True),
    ]
    counted = {r.revision: (r.replicas, r.ready_replicas) for r in omenative.count_instances(pods)}
    assert counted == {"r1": (2, 1), "r2": (1, 0)}, "a not-ready, an old-incarnation or a deleting worker holds"
    single = [_pod("s-0", "default", 0, revision="r1"), _pod("s-1", "default", 1, revision="r1", ready=False)]
    assert [(r.replicas, r.ready_replicas) for r in omenative.count_instances(single)] == [(2, 1)]


def _gang_runtime() -> dict[str, Any]:
    runtime = sglang_runtime()
    config = runtime["spec"]["engineConfig"]
    runner = config.pop("runner")
    config["leader"] = {"volumes": config.pop("volumes"), "runner": runner}
    config["worker"] = {"size": 2, "runner": {**copy.deepcopy(runner), "ports": [{"containerPort": 30001}]}}
    return runtime


def test_a_runtime_gang_gets_the_model_in_both_roles_and_the_services_worker_count() -> None:
    service = sample_service()
    service["spec"]["engine"]["worker"] = {"size": 3}
    resolved = resolve_service(Cluster(ready_model(), _gang_runtime()), service)
    engine = InferenceServiceSpec.model_validate(resolved.spec).engine
    assert engine is not None and multinode.is_multinode(engine)
    gang = multinode.render_gang("llama", ENGINE, engine)
    assert gang.workers == 3, "the service's worker.size over the runtime's (strategic merge)"
    for template in (gang.leader, gang.worker):
        pod = template["spec"]
        [container] = pod["containers"]
        assert {"name": "llama-3-2-1b-instruct", "mountPath": MODEL_PATH, "readOnly": True} in container["volumeMounts"]
        assert {"name": "MODEL_PATH", "value": MODEL_PATH} in container["env"]
        volume = {"name": "llama-3-2-1b-instruct", "hostPath": {"path": MODEL_PATH, "type": "Directory"}}
        assert volume in pod["volumes"]
        assert pod["nodeSelector"][MODEL_NODE_LABEL] == "Ready"
    assert gang.worker["spec"]["containers"][0]["ports"] == [{"containerPort": 30001}]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in gang.leader["spec"]["volumes"]
    assert gang.leader["metadata"]["labels"]["logging-forward"] == "enabled", "the runtime's component labels"


def test_a_replica_renders_leader_and_worker_runners_from_refs() -> None:
    runtime = _gang_runtime()
    reader = Cluster(ready_model(), runtime)
    name = runtime["metadata"]["name"]
    by_runtime = render_runners(reader, InferenceReplicaSpec.model_validate(
        {"component": "engine", "runtimeRef": {"name": name}}), name="r1", namespace="team", artifacts=None)
    assert [(r.name, r.size) for r in by_runtime] == [(RunnerName.LEADER, 1), (RunnerName.WORKER, 2)]
    leader, worker = by_runtime
    assert leader.template["metadata"]["labels"][keys.RUNNER_LABEL] == "leader"
    assert worker.template["metadata"]["labels"][keys.RUNNER_LABEL] == "worker"
    assert "volumeMounts" not in worker.template["spec"]["containers"][0] or all(
        m["mountPath"] != MODEL_PATH for m in worker.template["spec"]["containers"][0]["volumeMounts"]), \
        "a runtime alone mounts no model"
    by_model = render_runners(reader, InferenceReplicaSpec.model_validate(
        {"component": "engine", "runtimeRef": {"name": name}, "modelRef": {"name": "llama-3-2-1b-instruct"}}),
        name="r1", namespace="team", artifacts=None)
    for runner in by_model:
        env = runner.template["spec"]["containers"][0]["env"]
        assert {"name": "MODEL_PATH", "value": MODEL_PATH} in env, runner.name


def test_a_refs_gang_without_a_worker_container_is_not_renderable() -> None:
    runtime = _gang_runtime()
    del runtime["spec"]["engineConfig"]["worker"]["runner"]
    name = runtime["metadata"]["name"]
    with pytest.raises(NotRenderable, match="worker"):
        render_runners(Cluster(runtime), InferenceReplicaSpec.model_validate(
            {"component": "engine", "runtimeRef": {"name": name}}), name="r1", namespace="team", artifacts=None)


def test_a_decoder_gang_projects_like_an_engine_and_pairs() -> None:
    spec = InferenceServiceSpec.model_validate({"engine": {"runner": {"image": "e:v1"}}, "decoder": _gang_engine(),
                                                "rollout": {"pairingProtocol": "nixl-v2"}})
    assert spec.decoder is not None
    decoder = ComponentType.DECODER
    rendered = multinode.render_component("chat", decoder, spec.decoder)
    body = omenative.replica_spec(spec, decoder, spec.decoder, rendered, isvc="chat", replicas=1)
    assert [(r["name"], r["size"]) for r in body["runners"]] == [("leader", 1), ("worker", 2)]
    assert body["runners"][0]["template"]["metadata"]["labels"][render.LABEL_COMPONENT] == "decoder"
    assert body["pairingProtocol"] == "nixl-v2"
