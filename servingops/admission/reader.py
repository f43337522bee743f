"""The tree as the webhook reads it: every AcceleratorQuota (list, paged) and, for a leaf turned grouping, the
Kueue ClusterQueue of its name (get). Both through the access layer, under ADMISSION_READ_TIMEOUT, as the
webhook's own ServiceAccount: read-only rights on those two kinds and nothing else
(deploy/chart/templates/rbac-admission.yaml; tests/test_identities.py holds the chart to these calls)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from servingops.admission.review import ReadFailed
from servingops.clients.kube.calls import call, get_or_none
from servingops.clients.kube.errors import absent
from servingops.clients.kube.timeouts import ADMISSION_READ_TIMEOUT

QUOTA_GROUP, QUOTA_VERSION, QUOTA_PLURAL = "ome.io", "v1beta1", "acceleratorquotas"
KUEUE_GROUP, KUEUE_VERSION, CLUSTER_QUEUES = "kueue.x-k8s.io", "v1beta2", "clusterqueues"
PAGE = 500
MAX_PAGES = 20
"""10,000 nodes: far past any real tree; a list that never ends is a failed read, not a hang."""


class KubeTreeReader:
    def __init__(self, api_client: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api_client)

    def quotas(self) -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        try:
            for _ in range(MAX_PAGES):
                listed = call(self._custom.list_cluster_custom_object, QUOTA_GROUP, QUOTA_VERSION, QUOTA_PLURAL,
                              limit=PAGE, _continue=token, timeout=ADMISSION_READ_TIMEOUT)
                items.extend(listed.get("items") or [])
                token = (listed.get("metadata") or {}).get("continue") or None
                if token is None:
                    return items
        except ApiException as exc:
            raise ReadFailed(f"could not list acceleratorquotas: {exc.status} {exc.reason}") from exc
        except (Urllib3Error, OSError) as exc:
            raise ReadFailed(f"could not list acceleratorquotas: {exc}") from exc
        raise ReadFailed(f"more than {PAGE * MAX_PAGES} acceleratorquotas")

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        try:
            found = get_or_none(self._custom.get_cluster_custom_object, KUEUE_GROUP, KUEUE_VERSION, CLUSTER_QUEUES,
                                name, timeout=ADMISSION_READ_TIMEOUT)
        except ApiException as exc:
            if absent(exc):  # get_or_none answers a missing object; this is a missing kind (Kueue not served)
                return None
            raise ReadFailed(f"could not read ClusterQueue {name}: {exc.status} {exc.reason}") from exc
        except (Urllib3Error, OSError) as exc:
            raise ReadFailed(f"could not read ClusterQueue {name}: {exc}") from exc
        return found if isinstance(found, dict) else None
