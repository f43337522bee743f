"""The backend traffic policy of an InferenceService: spec.traffic and its ome.io/* traffic annotations
as Envoy Gateway's BackendTrafficPolicy (rendering/backend_traffic_policy.py), kept what they say, and
status.traffic as it should read.

One call does it all, level-triggered from the object as it is now, so a retry or a repeat costs
nothing: with intent declared the policy is server-side applied (field manager `servingops-traffic`,
a controller ownerReference and the managed-by label saying it is ours) unless a policy that is not
ours has its name or targets one of the service's HTTPRoutes; then that one wins, ours is not written
(a live one of ours is deleted so the two never fight over a route), and the conflict is reported.
With no intent left, ours is deleted. A cluster that serves no BackendTrafficPolicy (no Envoy Gateway)
is a condition, not an error: the workflow does not retry what only an install can change.

The apply is not forced: a hand-authored object that appeared between the list and the apply makes it
a 409, read as the same conflict.

With the operator's ingress.trafficTranslator `traefik`, each route names its component's weighted
TraefikService instead (activities/serving/traefik_traffic.py, written first by set_traffic with the
weights): this call keeps its children's settings in line with spec.traffic and deletes ours no route
names. The BackendTrafficPolicy is kept
as above all the same; but where Traefik is what reports on the routes, status.traffic says what Traefik
does: BackendPolicyDataPlane (HonoredByDataPlane once Traefik resolved the routes' TraefikServices),
BackendPolicyReady following it, and BackendPolicyUnsupportedFields naming what Traefik cannot honour.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, ValidationError
from temporalio import activity

from servingops.activities.operator_config import IngressSource, current_ingress
from servingops.activities.serving.traefik_traffic import TraefikServices, selected
from servingops.activities.serving.types import ObserveInput
from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.ome.enums import ComponentType
from servingops.api_models.ome.traffic import TrafficCondition, TrafficReason, TrafficSpec
from servingops.api_models.operator_config import IngressConfig, OperatorConfigError
from servingops.api_models.refs import ConditionUpdate
from servingops.clients.kube.calls import apply, call, delete_if_present, get_or_none, list_items
from servingops.clients.kube.errors import absent, apply_refused, conflict
from servingops.rendering import backend_traffic_policy as btp
from servingops.rendering import render
from servingops.rendering import traefik_traffic as tt
from servingops.rendering.names import route_name
from servingops.rendering.render import Owner

FIELD_MANAGER = "servingops-traffic"
# Literals at each call (not variables), so tests/rbac_calls.py reads the kinds and verbs from the code.
_BTP_GROUP, _BTP_VERSION, _BTP_PLURAL = "gateway.envoyproxy.io", "v1alpha1", "backendtrafficpolicies"
_ROUTE_GROUP, _ROUTE_VERSION, _ROUTE_PLURAL = "gateway.networking.k8s.io", "v1", "httproutes"
assert (_BTP_GROUP, _BTP_VERSION, _BTP_PLURAL) == (btp.GROUP, btp.VERSION, btp.PLURAL)


class TrafficPolicyObservation(BaseModel):
    status: dict[str, Any] | None = None
    """status.traffic as it should read (API form); None: no intent declared, status.traffic absent."""


class BackendPolicyActivities:
    """Bound to one ApiClient for the life of the worker."""

    def __init__(self, api_client: client.ApiClient,
                 ingress: IngressSource | None = None) -> None:
        """`ingress`: the operator's ingress block (its trafficTranslator), fixed or read on each call
        (the worker passes the serving activities' IngressConfigReader). None: the defaults."""
        self.custom = client.CustomObjectsApi(api_client)
        self._ingress = ingress if ingress is not None else IngressConfig()
        self.traefik = TraefikServices(api_client)

    def _translator(self) -> IngressConfig | OperatorConfigError:
        return current_ingress(self._ingress)

    # -- reads ------------------------------------------------------------------------------------

    def served(self, group: str, version: str, plural: str) -> bool:
        """Whether the apiserver serves `plural` in group/version (discovery, which every client may read)."""
        try:
            listed = call(self.custom.get_api_resources, group, version)
        except ApiException as exc:
            if absent(exc):
                return False
            raise
        resources = listed.resources if listed is not None else None
        return any(r.name == plural for r in resources or [])

    def _routes(self, owner: Owner) -> list[dict[str, Any]]:
        """The HTTPRoutes the product emitted for the service (one per served component), as they are."""
        found = []
        for component in ComponentType:
            route = get_or_none(self.custom.get_namespaced_custom_object, _ROUTE_GROUP, _ROUTE_VERSION,
                                owner.namespace, _ROUTE_PLURAL, route_name(owner.name, component.value))
            if route is not None and btp.ours(cast(dict[str, Any], route), owner):
                found.append(cast(dict[str, Any], route))
        return found

    def _policies(self, namespace: str) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], list_items(self.custom.list_namespaced_custom_object,
                                                     _BTP_GROUP, _BTP_VERSION, namespace, _BTP_PLURAL))

    def _delete(self, policy: dict[str, Any]) -> None:
        meta = policy["metadata"]
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"]))
        try:
            delete_if_present(self.custom.delete_namespaced_custom_object, _BTP_GROUP, _BTP_VERSION,
                              meta["namespace"], _BTP_PLURAL, meta["name"], body=body)
        except ApiException as exc:
            if not conflict(exc):  # the uid precondition failed: the name now belongs to another object
                raise

    def _delete_ours(self, owner: Owner) -> None:
        live = get_or_none(self.custom.get_namespaced_custom_object, _BTP_GROUP, _BTP_VERSION, owner.namespace,
                           _BTP_PLURAL, btp.policy_name(owner.name))
        if live is not None and btp.ours(cast(dict[str, Any], live), owner):
            self._delete(cast(dict[str, Any], live))

    # -- the activity -----------------------------------------------------------------------------

    @activity.defn(name="serving.ensure_backend_policy")
    def ensure(self, inp: ObserveInput) -> TrafficPolicyObservation:
        """Keep the service's BackendTrafficPolicy what its intent says, and say what status.traffic reads."""
        ref = inp.isvc
        if not ref.namespace:
            raise application_error(ErrorType.INVALID_INPUT, f"{ref.describe()}: no namespace given")
        obj = cast(dict[str, Any] | None, get_or_none(self.custom.get_namespaced_custom_object, ref.group,
                                                      ref.version, ref.namespace, ref.plural, ref.name))
        if obj is None or (ref.uid and obj["metadata"].get("uid") != ref.uid):
            raise application_error(ErrorType.OBJECT_GONE, f"{ref.describe()} is gone")
        meta, spec = obj["metadata"], obj.get("spec") or {}
        owner = Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        generation = int(meta.get("generation") or 0)
        previous = (obj.get("status") or {}).get("traffic")
        try:
            traffic = TrafficSpec.model_validate(spec["traffic"]) if spec.get("traffic") else None
        except ValidationError as exc:  # the CRD's schema admits only what parses; kept for a stale schema
            raise application_error(ErrorType.INVALID_SPEC, f"{ref.describe()}: spec.traffic: {exc}") from exc
        declared = btp.intent(traffic, meta.get("annotations"))
        traefik = selected(self._translator())
        served = self.served(_BTP_GROUP, _BTP_VERSION, _BTP_PLURAL)
        if declared is None or spec.get("placement"):
            # No intent (or member clusters serve it: no route of ours here): nothing of ours stays.
            if served:
                self._delete_ours(owner)
            if traefik and self.traefik.served():
                ours = self._routes(owner)
                self._rebalance(owner, ours, None)
                self.traefik.delete_stale(owner, ours)
            return TrafficPolicyObservation()

        def status(emitted: str | None, routes: list[str], updates: list[ConditionUpdate]) -> TrafficPolicyObservation:
            return TrafficPolicyObservation(status=btp.traffic_status(
                declared, emitted, routes, updates, previous, generation, dt.datetime.now(dt.UTC)))

        live_routes = self._routes(owner) if served or traefik else []
        emitted, routes, updates = self._envoy(owner, declared, served, live_routes)
        if traefik and tt.served_by_traefik(live_routes):
            updates = self._traefik(owner, traffic, meta.get("annotations"), live_routes, updates)
        return status(emitted, routes, updates)

    def _envoy(self, owner: Owner, declared: btp.Intent, served: bool, live_routes: list[dict[str, Any]]
               ) -> tuple[str | None, list[str], list[ConditionUpdate]]:
        """The BackendTrafficPolicy kept: (the policy's name if written, the routes it targets, the conditions)."""
        if not served:
            return None, [], [btp.not_served(
                f"this cluster serves no {btp.API_VERSION} {btp.KIND} (Envoy Gateway is not installed): "
                f"the declared traffic policy is not applied")]
        routes = [str(r["metadata"]["name"]) for r in live_routes]
        plane = btp.data_plane(live_routes)
        extra = [btp.unsupported_condition(keys)] if (keys := btp.unsupported(declared.annotations)) else []
        policies = self._policies(owner.namespace)
        found = btp.conflicts(policies, owner, routes)
        if found:
            mine = [p for p in policies if btp.ours(p, owner)]
            for policy in mine:
                self._delete(policy)
            return None, [], [btp.failed(TrafficReason.CONFLICTING_POLICY,
                                         "; ".join(c.message(owner.namespace) for c in found)), plane]
        if not routes:
            return None, [], [btp.waiting("no HTTPRoute of the service exists yet")]
        try:
            body = btp.render_policy(owner, routes, declared)
        except btp.TranslationError as exc:
            return None, [], [btp.failed(TrafficReason.TRANSLATION_FAILED, str(exc)), plane, *extra]
        name = body["metadata"]["name"]
        try:
            apply(self.custom.patch_namespaced_custom_object, _BTP_GROUP, _BTP_VERSION, owner.namespace,
                  _BTP_PLURAL, name, body, field_manager=FIELD_MANAGER, force=False)
        except ApiException as exc:
            if conflict(exc):
                return None, [], [btp.failed(TrafficReason.CONFLICTING_POLICY, (
                    f"{btp.KIND} {owner.namespace}/{name} is written by another manager: "
                    f"it wins, OME's policy is not written")), plane]
            if apply_refused(exc):
                return None, [], [btp.failed(TrafficReason.TRANSLATION_FAILED,
                                             f"the apiserver refused the policy: {exc.body}"), plane, *extra]
            raise
        # The Gateway's verdict is on the live object (an apply's answer does not always carry it back).
        live = get_or_none(self.custom.get_namespaced_custom_object, _BTP_GROUP, _BTP_VERSION, owner.namespace,
                           _BTP_PLURAL, name)
        return name, routes, [btp.acceptance(cast(dict[str, Any], live or {})), plane, *extra]

    def _traefik(self, owner: Owner, traffic: TrafficSpec | None, annotations: dict[str, str] | None,
                 live_routes: list[dict[str, Any]], envoy: list[ConditionUpdate]) -> list[ConditionUpdate]:
        """Routes Traefik serves, under the Traefik translation: their TraefikServices kept, and the conditions
        as Traefik honours spec.traffic (a BackendTrafficPolicy's verdict, if any, would come from a controller
        that does not serve these routes)."""
        translation = tt.translate(traffic, annotations)
        available = self.traefik.served()
        if available:
            self._rebalance(owner, live_routes, translation.balancing)
            self.traefik.delete_stale(owner, live_routes)
        plane = tt.data_plane(translation, live_routes, available)
        unsupported = tt.unsupported_condition(translation)
        conflicting = [u for u in envoy if u.type == TrafficCondition.BACKEND_POLICY_READY.value
                       and u.reason == TrafficReason.CONFLICTING_POLICY.value]
        return [*(conflicting or [tt.ready(translation, plane)]), plane, *([unsupported] if unsupported else [])]

    def _rebalance(self, owner: Owner, routes: list[dict[str, Any]], balancing: tt.Balancing | None) -> None:
        """The components' weighted TraefikServices (of the routes that name one) with spec.traffic's settings
        for every child, their weights as they are: applied only over the version read (set_traffic writes
        the weights; a 409 when it wrote since, retried)."""
        for route in routes:
            component = ComponentType(route["metadata"]["labels"][render.LABEL_COMPONENT])
            if not tt.names_component(route, owner.name, component):
                continue
            live = self.traefik.read(owner.namespace, tt.component_name(owner.name, component))
            if live is None:
                continue  # set_traffic writes it (observe's drift)
            weights = tt.service_weights(live, owner.name, component)
            desired = tt.weighted_service(owner, component, weights, balancing)
            if desired["spec"] != live.get("spec"):
                self.traefik.apply_weighted(owner, component, weights, balancing,
                                            resource_version=live["metadata"].get("resourceVersion"))

    def all(self) -> list[Any]:
        return [self.ensure]


__all__ = ["BackendPolicyActivities", "TrafficPolicyObservation"]
