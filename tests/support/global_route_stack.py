"""A control plane and answering member clusters whose Gateways the control plane's Gateway reaches: the world
of the TrafficMap's global route (issue 30).

Each member is an answering MemberCluster (devstack/members.py: its own apiserver, kwok, Kueue, pod runtime and
Traefik) started with `gateway_port`: a relay in the member's network namespace makes its Gateway reachable at a
non-loopback address of the stack, on the same port for every member, and the Gateway's status.addresses report
that address. Members get ingress domains of their own (`<member>.example.com`), so their routes match only
their own hostnames and the global route must rewrite Host per backend, as in a real fleet.

What routes on the control plane (found on Traefik 3.7.15, tests/support/global_route_dataplane.py): a
selectorless backend Service per home with an EndpointSlice of the member Gateway's address
(servingops/rendering/global_route.py, `endpoint_slices=True` and render_backend_endpoint_slices), weighted in
one HTTPRoute on the control plane's Gateway, each backend with a URLRewrite filter setting Host to the
member's hostname. The control plane's Traefik needs no flag for it.

For a product test (routing workflow and publisher), on the traffic stack:

    @pytest.fixture(scope="module")
    def fleet(traffic_stack, stack_logs, tmp_path_factory):
        with answering_members(2, tmp_path_factory.mktemp("homes"), stack_logs, servingops=True,
                               temporal_address=traffic_stack.live.temporal_address, worker_env=...) as homes:
            yield GlobalRouteFleet(traffic_stack.live.api, traffic_stack.traefik, homes)

then register each member (MemberCluster.register) and put `fleet.endpoint_block()` under the operator
ConfigMap's `endpoint` key.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from devstack.members import MemberCluster
from devstack.traefik import GATEWAY_API, GATEWAY_NAME, GATEWAY_NAMESPACE, Traefik
from servingops.api_models.operator_config import EndpointConfig

GLOBAL_BACKEND_PORT = 80
"""The port every member's Gateway is reached at from the control plane (endpoint.backendPort). Each member's
relay listens in its own network namespace, so one port serves them all."""
GLOBAL_DOMAIN = "global.example.com"
GLOBAL_HOST_TEMPLATE = "{{ .Name }}.{{ .Namespace }}." + GLOBAL_DOMAIN


@dataclass(frozen=True)
class GlobalRouteFleet:
    """The control plane's API and Traefik (whose Gateway the global routes attach to) and the started homes."""

    control_api: client.ApiClient
    control_traefik: Traefik
    members: tuple[MemberCluster, ...]
    backend_port: int = GLOBAL_BACKEND_PORT
    rewrite_hostname: bool = field(default=True)

    def endpoint_block(self) -> str:
        """The operator ConfigMap's `endpoint` value (upstream OME's multicluster.config.endpoint names)."""
        return yaml.safe_dump({"globalGateway": self.control_traefik.gateway, "backendPort": self.backend_port,
                               "globalHostTemplate": GLOBAL_HOST_TEMPLATE,
                               "gatewayBackend": {"rewriteHostname": self.rewrite_hostname}})

    def endpoint_config(self) -> EndpointConfig:
        """endpoint_block() as the publisher parses it."""
        return EndpointConfig.model_validate(yaml.safe_load(self.endpoint_block()))

    def global_host(self, namespace: str, isvc: str) -> str:
        host = self.endpoint_config().global_host(isvc, namespace)
        assert host is not None
        return host

    def member(self, name: str) -> MemberCluster:
        return next(m for m in self.members if m.name == name)

    def gateway_addresses(self) -> dict[str, list[str]]:
        """Each member's Gateway status.addresses of type IPAddress, by member name: what the publisher's
        EndpointSlice fallback reads."""
        group, version = GATEWAY_API
        found = {}
        for member in self.members:
            gateway: dict[str, Any] = client.CustomObjectsApi(member.api).get_namespaced_custom_object(  # type: ignore[assignment]
                group, version, GATEWAY_NAMESPACE, "gateways", GATEWAY_NAME)
            addresses = (gateway.get("status") or {}).get("addresses") or []
            found[member.name] = [a["value"] for a in addresses if a.get("type", "IPAddress") == "IPAddress"]
        return found


def answering_members(count: int, workdir: Path, log_dir: Path, *, servingops: bool = False,
                      temporal_address: str = "", worker_env: Mapping[str, str] | None = None,
                      backend_port: int = GLOBAL_BACKEND_PORT, cpu_quota: str = "4",
                      labels: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[
                          tuple[MemberCluster, ...]]:  # fmt: skip
    """`count` answering members with reachable Gateways on `backend_port`, started one after the other (each is
    heavy on two cores) and stopped on exit. `servingops`: each also runs its own worker and bridge (on Temporal
    at `temporal_address`), which a placed InferenceService needs; without, a test serves its own pods."""
    return _members(count, workdir, log_dir, servingops, temporal_address, dict(worker_env or {}), backend_port,
                    cpu_quota, dict(labels or {}))


@contextlib.contextmanager
def _members(count: int, workdir: Path, log_dir: Path, servingops: bool, temporal_address: str,
             worker_env: dict[str, str], backend_port: int, cpu_quota: str,
             labels: dict[str, str]) -> Iterator[tuple[MemberCluster, ...]]:  # fmt: skip
    started: list[MemberCluster] = []
    try:
        for index in range(count):
            name = f"home{index}-{uuid.uuid4().hex[:5]}"
            member = MemberCluster(name, workdir / name, log_dir, labels=labels, cpu_quota=cpu_quota,
                                   servingops=servingops, answering=True, gateway_port=backend_port,
                                   ingress_domain=f"{name}.example.com")
            started.append(member)
            member.start(temporal_address, worker_env)
        yield tuple(started)
    finally:
        for member in reversed(started):
            member.stop()


def running_weights(traefik: Traefik, namespace: str) -> dict[str, int]:
    """The weights Traefik's router runs now for the backends of the global routes in `namespace`, by backend
    Service name (`tmb-...`); needs Traefik's API (`api=True`). Traefik names a route backend's service
    `<route key>-svc-<namespace>-<Service>-<index>`, inside the route's weighted service."""
    weights: dict[str, int] = {}
    for service in traefik.services(namespace):
        for backend in (service.get("weighted") or {}).get("services") or []:
            marker = f"-svc-{namespace}-"
            name = str(backend.get("name", ""))
            if marker in name:
                weights[name.split(marker, 1)[1].rsplit("-", 1)[0]] = int(backend.get("weight", 1))
    return weights
