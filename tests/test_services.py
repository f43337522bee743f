"""The Temporal dev server, the registry and Prometheus answer over real connections."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import oras.client
import pytest
from temporalio.client import Client

from devstack.services import OciRegistry, Prometheus, TemporalDevServer
from servingops.api_models.contract import search_attributes
from testkit.waiting import wait_until
from tests.metrics_exporter import Exporter

pytestmark = pytest.mark.integration


async def test_temporal_has_the_search_attributes(temporal_server: TemporalDevServer) -> None:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    client = await Client.connect(temporal_server.address)
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace="default")
    )
    for key in search_attributes.ALL:
        assert key.name in response.custom_attributes


def test_registry_round_trips_an_artifact(oci_registry: OciRegistry, tmp_path) -> None:  # type: ignore[no-untyped-def]
    blob = tmp_path / "weights.bin"
    blob.write_bytes(b"\x00\x01" * 4096)
    client = oras.client.OrasClient(hostname=oci_registry.address, insecure=True)
    target = f"{oci_registry.address}/smoke/model:v1"
    client.push(files=[str(blob)], target=target, disable_path_validation=True)
    out = tmp_path / "out"
    pulled = client.pull(target=target, outdir=str(out))
    assert [open(p, "rb").read() for p in pulled] == [blob.read_bytes()]


def test_prometheus_scrapes_a_target_the_test_sets(prometheus: Prometheus) -> None:
    exporter = Exporter()
    exporter.set({"servingops_smoke": 42.0})
    try:
        prometheus.set_targets([exporter.target])
        query = urllib.parse.urlencode({"query": "servingops_smoke"})

        def scraped() -> list[dict[str, object]]:
            with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as response:
                return list(json.load(response)["data"]["result"])

        result = wait_until("Prometheus holding a servingops_smoke sample", scraped, prometheus.process, timeout=60)
        assert result[0]["value"][1] == "42"  # type: ignore[index]
    finally:
        prometheus.set_targets([])
        exporter.stop()
