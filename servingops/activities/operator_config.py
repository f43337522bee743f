"""Reads the operator's ConfigMap (api_models/operator_config.py says what it holds).

A missing ConfigMap means "built-in defaults"; one that does not parse is reported, not raised,
so the workflow can park its run with the message (retrying would read the same bad text).

`IngressConfigReader` reads the `ingress` block alone for the serving activities, which render
and observe routes on every pass: no workflow input carries it, so no workflow's commands change
when it does, and a new Gateway or domain reaches every route within `ttl` seconds.

`QuotaConfigReader` reads the `quota` block the same way for the AcceleratorQuota observe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from kubernetes import client
from temporalio import activity

from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    IngressConfig,
    OperatorConfig,
    OperatorConfigError,
    OperatorDefaults,
    QuotaDefaults,
    parse_configmap_data,
    parse_ingress,
    parse_quota,
    resolve,
)
from servingops.clients.kube.calls import get_or_none

B = TypeVar("B")

INGRESS_TTL = 10.0
"""Seconds one read of the ingress block serves: observe runs on every pass of every service, and
an operator changing the Gateway waits at most this long (plus the next pass) to see it applied."""


class OperatorConfigActivities:
    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = DEFAULT_CONFIGMAP) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name

    @activity.defn(name="operator.config")
    def read(self) -> OperatorDefaults:
        where = f"{self.namespace}/{self.name}"
        configmap = get_or_none(self.core.read_namespaced_config_map, self.name, self.namespace)
        if configmap is None:
            return resolve(OperatorConfig(), self.namespace)
        try:
            config = parse_configmap_data(configmap.data)
        except OperatorConfigError as error:
            activity.logger.warning("operator ConfigMap %s is invalid: %s", where, error)
            return OperatorDefaults(source=where, error=f"ConfigMap {where}: {error}")
        return resolve(config, self.namespace, source=where)

    def all(self) -> list[object]:
        return [self.read]


IngressSource = IngressConfig | Callable[[], IngressConfig]
"""A fixed ingress configuration, or a callable giving the current one (raising OperatorConfigError
when it does not parse): an IngressConfigReader."""


def current_ingress(source: IngressSource) -> IngressConfig | OperatorConfigError:
    """The ingress block as read now (cached by its reader), or why it does not parse."""
    try:
        return source() if callable(source) else source
    except OperatorConfigError as exc:
        return exc


class _BlockReader(Generic[B]):
    """One block of the ConfigMap, read at most every `ttl` seconds and shared by the activities' threads.
    Calling it returns the block (`default()` when the ConfigMap or the key is absent) or raises
    OperatorConfigError naming the ConfigMap when the block does not parse; an apiserver error is raised as
    is (the activity retries) and is not remembered."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str, ttl: float,
                 clock: Callable[[], float], parse: Callable[[dict[str, str] | None], B], default: Callable[[], B],
                 ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.name, self.ttl = namespace, name, ttl
        self._clock = clock
        self._parse, self._default = parse, default
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._result: B | OperatorConfigError = default()

    def __call__(self) -> B:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= self.ttl:
                self._result = self._read()
                self._read_at = now
            result = self._result
        if isinstance(result, OperatorConfigError):
            raise result
        return result

    def _read(self) -> B | OperatorConfigError:
        configmap = get_or_none(self.core.read_namespaced_config_map, self.name, self.namespace)
        if configmap is None:
            return self._default()
        try:
            return self._parse(configmap.data)
        except OperatorConfigError as error:
            return OperatorConfigError(f"ConfigMap {self.namespace}/{self.name}: {error}")


class IngressConfigReader(_BlockReader[IngressConfig]):
    """The `ingress` block, for the serving activities, which render and observe routes on every pass."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = DEFAULT_CONFIGMAP,
                 ttl: float = INGRESS_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(api_client, namespace, name, ttl, clock, parse_ingress, IngressConfig)


class QuotaConfigReader(_BlockReader[QuotaDefaults]):
    """The `quota` block: every AcceleratorQuota node's pass observes it."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = DEFAULT_CONFIGMAP,
                 ttl: float = INGRESS_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(api_client, namespace, name, ttl, clock, parse_quota, QuotaDefaults)

