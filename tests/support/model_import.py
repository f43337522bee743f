"""The model-import stack of the end-to-end tests: the module fixture `stack` (testkit/model_import.py's
Stack: a worker as the chart's identity and a bridge for Model / ClusterModel, a namespace of its own)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from devstack.hub_server import HubServer
from devstack.identities import Identities
from devstack.kube import LocalKubeCluster
from devstack.product import BridgeLauncher, start_worker
from devstack.services import OciRegistry, TemporalDevServer
from servingops.runtime.temporal import TemporalSettings, connect
from testkit.model_import import Stack


@pytest.fixture(scope="module")
def stack(kube_cluster: LocalKubeCluster, kube_api: client.ApiClient, temporal_server: TemporalDevServer,
          oci_registry: OciRegistry, hub_server: HubServer, stack_logs: Path, chart_identities: Identities,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    task_queue = f"import-{uuid.uuid4().hex[:6]}"
    namespace = f"import-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    spool = tmp_path_factory.mktemp("spool")
    worker = start_worker(kube_cluster, temporal_server, oci_registry, hub_server, task_queue, spool, stack_logs,
                          host_id=f"host-{task_queue}", identities=chart_identities)
    launcher = BridgeLauncher(chart_identities, temporal_server.address, stack_logs)
    bridge = launcher.start(task_queue=task_queue, kinds="Model,ClusterModel")
    temporal = asyncio.run(connect(TemporalSettings(address=temporal_server.address)))
    yield Stack(kube_cluster, kube_api, oci_registry, hub_server, temporal, worker, bridge, task_queue, namespace)
    launcher.stop_all()
    worker.stop()
