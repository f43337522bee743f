"""Reads the operator's ConfigMap (api_models/operator_config.py says what it holds).

A missing ConfigMap means "built-in defaults"; one that does not parse is reported, not raised,
so the workflow can park its run with the message (retrying would read the same bad text).
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio import activity

from servingops.api_models.operator_config import (
    DEFAULT_CONFIGMAP,
    OperatorConfig,
    OperatorConfigError,
    OperatorDefaults,
    parse_configmap_data,
    resolve,
)


class OperatorConfigActivities:
    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = DEFAULT_CONFIGMAP) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name

    @activity.defn(name="operator.config")
    def read(self) -> OperatorDefaults:
        where = f"{self.namespace}/{self.name}"
        try:
            configmap = self.core.read_namespaced_config_map(self.name, self.namespace, _request_timeout=30)
        except ApiException as exc:
            if exc.status == 404:
                return resolve(OperatorConfig(), self.namespace)
            raise
        try:
            config = parse_configmap_data(configmap.data)
        except OperatorConfigError as error:
            activity.logger.warning("operator ConfigMap %s is invalid: %s", where, error)
            return OperatorDefaults(source=where, error=f"ConfigMap {where}: {error}")
        return resolve(config, self.namespace, source=where)

    def all(self) -> list[object]:
        return [self.read]
