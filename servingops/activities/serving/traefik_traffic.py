"""The Traefik translation of spec.traffic (rendering/traefik_traffic.py) against the apiserver: the
component's weighted TraefikService (the weights between its revisions) and whether a service's routes are to
name it.

Used by the route's writer (activities.py set_traffic: the TraefikService the route names is applied first,
with the weights, so Traefik never sees a route naming a missing one), by observe (the weights read back from
it; a route whose backendRefs are not what the translation says now is drift: the workflow applies it again
with the split it carries), by delete_revision (a revision's child goes out of it before its Service goes),
and by the backend-policy activity (traffic_policy.py: keeps the children's settings in line with
spec.traffic, deletes ours no route names, and says in status.traffic what the data plane does).

The routes name the component's TraefikService only when the operator selects the translation
(ingress.trafficTranslator traefik) and the cluster serves traefik.io/v1alpha1 TraefikServices; otherwise
they name the revisions' Services with the weights, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError
from servingops.api_models.serving import TrafficWeight
from servingops.clients.kube.calls import apply, call, delete_if_present, get_or_none, list_items
from servingops.clients.kube.errors import absent, conflict
from servingops.rendering import traefik_traffic as tt
from servingops.rendering.render import LABEL_MANAGED_BY, MANAGED_BY, Owner

FIELD_MANAGER = "servingops-traffic"
"""The backend-policy activity's manager: whichever activity applies a TraefikService, it is the same object."""
DISCOVERY_TTL = 30.0
"""How long whether the cluster serves TraefikServices is remembered (its CRD is installed with Traefik)."""
# Literals at each call (not variables), so tests/rbac_calls.py reads the kinds and verbs from the code.
assert (tt.GROUP, tt.VERSION, tt.PLURAL) == ("traefik.io", "v1alpha1", "traefikservices")


def selected(config: IngressConfig | OperatorConfigError | None) -> bool:
    """The operator selected the Traefik translation (an ingress block that does not parse selects none)."""
    return isinstance(config, IngressConfig) and config.traffic_translator == tt.TRAEFIK


class TraefikServices:
    def __init__(self, api_client: client.ApiClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self._clock = clock
        self._lock = threading.Lock()
        self._served: tuple[float, bool] | None = None

    def served(self) -> bool:
        """Whether the apiserver serves traefik.io/v1alpha1 traefikservices (discovery, remembered a while)."""
        with self._lock:
            if self._served is not None and self._clock() - self._served[0] < DISCOVERY_TTL:
                return self._served[1]
        try:
            listed = call(self.custom.get_api_resources, "traefik.io", "v1alpha1")
            found = any(r.name == "traefikservices" for r in (listed.resources if listed is not None else None) or [])
        except ApiException as exc:
            if not absent(exc):
                raise
            found = False
        with self._lock:
            self._served = (self._clock(), found)
        return found

    def weighted(self, config: IngressConfig | OperatorConfigError | None) -> bool:
        """Whether a component's weights go into its weighted TraefikService (the route names that one): the
        operator selected the translation and the cluster serves TraefikServices."""
        return selected(config) and self.served()

    def apply_weighted(self, owner: Owner, component: ComponentType, weights: Iterable[TrafficWeight],
                       balancing: tt.Balancing | None, resource_version: str | None = None) -> None:
        """The component's weighted TraefikService with these weights; `resource_version`: only over that one
        (a 409 when it changed since it was read)."""
        body = tt.weighted_service(owner, component, weights, balancing)
        if resource_version is not None:
            body["metadata"]["resourceVersion"] = resource_version
        apply(self.custom.patch_namespaced_custom_object, "traefik.io", "v1alpha1", owner.namespace,
              "traefikservices", body["metadata"]["name"], body, field_manager=FIELD_MANAGER)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = get_or_none(self.custom.get_namespaced_custom_object, "traefik.io", "v1alpha1", namespace,
                            "traefikservices", name)
        return cast(dict[str, Any], found) if found is not None else None

    def drop_child(self, live: dict[str, Any], service: str) -> None:
        """A weighted TraefikService as read (`live`) without its child `service`, applied only over that
        version of it (a 409 when it changed since); nothing when it has no such child."""
        spec = (live.get("spec") or {}).get("weighted") or {}
        children = spec.get("services") or []
        kept = [c for c in children if c.get("name") != service]
        if len(kept) == len(children):
            return
        meta = live["metadata"]
        body = {"apiVersion": tt.API_VERSION, "kind": tt.KIND,
                "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences", "resourceVersion")
                             if k in meta},
                "spec": {"weighted": {"services": kept}}}
        apply(self.custom.patch_namespaced_custom_object, "traefik.io", "v1alpha1", meta["namespace"],
              "traefikservices", meta["name"], body, field_manager=FIELD_MANAGER)

    def listed(self, owner: Owner) -> list[dict[str, Any]]:
        """Ours (by label; ownership checked by the caller) in the service's namespace."""
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{tt.LABEL_ISVC}={owner.name}"
        return cast(list[dict[str, Any]], list_items(self.custom.list_namespaced_custom_object, "traefik.io",
                                                     "v1alpha1", owner.namespace, "traefikservices",
                                                     label_selector=selector))

    def delete(self, namespace: str, name: str, uid: str | None = None) -> None:
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        try:
            delete_if_present(self.custom.delete_namespaced_custom_object, "traefik.io", "v1alpha1", namespace,
                              "traefikservices", name, body=body)
        except ApiException as exc:
            if not conflict(exc):  # the uid precondition failed: the name now belongs to another object
                raise

    def delete_stale(self, owner: Owner, routes: Iterable[dict[str, Any] | None]) -> None:
        """Delete ours that no live route names."""
        live = self.listed(owner)
        uids = {str(s["metadata"]["name"]): s["metadata"].get("uid") for s in live}
        for name in tt.stale(live, owner, list(routes)):
            self.delete(owner.namespace, name, uids.get(name))


__all__ = ["FIELD_MANAGER", "TraefikServices", "selected"]
