"""Least privilege: the chart's roles are exactly what the code calls, and what each identity may
not do is refused by the real apiserver.

The end-to-end tests run the worker, its upload endpoint and the bridge as the chart's
ServiceAccounts (tests/fixtures/kube.py), so a call the roles lack fails them. This module holds
the roles to the code from the other side, and shows the refusals:

- rules: every (group, resource, verb) the chart grants an identity is one its code asks for
  (tests/rbac_calls.py reads the calls from the code), and nothing the code asks for is missing;
  no rule has a `*`.
- the bridge cannot write a status, a Secret or any object, nor read a Secret;
- the worker reads Secrets by name only (no list, no watch: it never learns which Secrets exist)
  and cannot change RBAC beyond the per-upload grant, create namespaces or escalate;
- the upload endpoint holds nothing cluster-wide: it cannot list or read a Secret anywhere (a
  model's upload Secret included) but the signing key, write any object, or read outside the
  controller namespace; it reads a session's record there by name, and an upload still goes
  through end to end under it (tests/test_uploads.py, tests/test_model_import_e2e.py);
- the upload Secret: only those who may read the Model may read it (two users, impersonated).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from temporalio.testing import ActivityEnvironment

from devstack import identities
from devstack.identities import Identities
from servingops.activities.uploads.sessions import UploadActivities, secret_name
from servingops.activities.uploads.types import CloseUploadInput, OpenUploadInput
from servingops.api_models.deckhouse import ClusterModel, Model
from servingops.api_models.refs import ObjectRef
from servingops.clients.upload_sessions import SIGNING_KEY_SECRET, record_name
from testkit.waiting import wait_until
from tests import rbac_calls
from tests.crd_helpers import create, manifest, new_namespace
from tests.fixtures.kube import api_as

PROCESSES = ("worker", "uploads", "bridge", "agent", "webhook", "placement-member", "catalog-endpoint", "admission")
MEMBER = {"placementMember": {"enabled": True},
          "catalogEndpoint": {"enabled": True, "tls": {"secretName": "catalog-tls"}}}
"""Rendered in both: the placement-member identity exists only where a cluster is a member, the catalog
endpoint's only where it is on."""
RENDERINGS = {"defaults": MEMBER, "secret-namespaces": {"rbac": {"secretNamespaces": ["team-a"]}, **MEMBER}}


# -- the rules against the code ----------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("rendering", RENDERINGS)
@pytest.mark.parametrize("process", PROCESSES)
def test_each_identity_is_granted_exactly_what_its_code_calls(process: str, rendering: str) -> None:
    docs = identities.render(values=RENDERINGS[rendering])
    granted, _ = rbac_calls.granted(docs, (identities.NAMESPACE, f"{identities.RELEASE}-{process}"))
    used = rbac_calls.used(process)
    assert not used - granted, f"{process} calls what the chart does not grant: {sorted(used - granted)}"
    assert not granted - used, f"the chart grants {process} what its code never calls: {sorted(granted - used)}"


@pytest.mark.unit
def test_the_call_reader_tells_the_processes_apart() -> None:
    """A control for the test above: the reader attributes each call to the identity that makes it."""
    worker, uploads, bridge, agent, webhook, member, catalog, admission = (rbac_calls.used(p) for p in PROCESSES)
    assert admission == {("ome.io", "acceleratorquotas", "list"), ("kueue.x-k8s.io", "clusterqueues", "get")}
    assert catalog == {("ai.deckhouse.io", "clustermodels", "list"), ("", "secrets", "get")}
    assert ("ome.io", "inferenceservices", "delete") in member, \
        "a member's derived service is deleted as the placement-member identity"
    # The worker deletes two kinds of the product's own: an InferenceService whose ttlSecondsAfterCreation passed
    # (serving.delete_expired) and the TrafficMap of a service no longer routed (routing.delete_map, the
    # publisher's unpublish), each named by literal group and plural so this reader sees which.
    assert {(g, r) for g, r, v in worker if v == "delete" and g in ("ome.io", "ai.deckhouse.io")} == {
        ("ome.io", "inferenceservices"), ("ome.io", "trafficmaps")}
    assert webhook == {("ai.deckhouse.io", "models", "get"), ("ai.deckhouse.io", "clustermodels", "get")}
    assert ("", "nodes", "patch") in agent and ("", "nodes", "patch") not in worker
    assert ("ome.io", "clusterbasemodels", "watch") in agent and not any(r == "secrets" for _, r, _ in agent)
    assert ("", "configmaps", "get") in uploads and ("", "configmaps", "create") in worker
    assert ("", "secrets", "create") in worker and ("", "secrets", "create") not in uploads
    assert ("", "configmaps", "create") not in uploads and ("", "configmaps", "delete") not in uploads
    assert ("ome.io", "inferenceservices", "watch") in bridge and not any(v == "watch" for *_, v in worker)
    assert ("coordination.k8s.io", "leases", "update") in bridge
    assert not any(resource == "secrets" for _, resource, _ in bridge)


@pytest.mark.unit
@pytest.mark.parametrize("rendering", RENDERINGS)
def test_no_rule_has_a_wildcard_or_an_escalating_verb(rendering: str) -> None:
    docs = identities.render(values=RENDERINGS[rendering])
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(key) or []), f"{role['metadata']['name']}: {rule}"
            assert "nonResourceURLs" not in rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
            if "secrets" in rule["resources"]:
                assert not {"list", "watch"} & set(rule["verbs"]), f"{role['metadata']['name']}: {rule}"


@pytest.mark.unit
@pytest.mark.parametrize("rendering", RENDERINGS)
def test_the_upload_identity_holds_nothing_cluster_wide(rendering: str) -> None:
    """Every binding of the upload endpoint's ServiceAccount is a RoleBinding of the release namespace."""
    docs = identities.render(values=RENDERINGS[rendering])
    account = {"kind": "ServiceAccount", "name": f"{identities.RELEASE}-uploads", "namespace": identities.NAMESPACE}
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and any({k: s.get(k) for k in account} == account for s in d.get("subjects") or [])]
    assert bindings
    for binding in bindings:
        assert (binding["kind"], binding["metadata"].get("namespace")) == ("RoleBinding", identities.NAMESPACE)
        assert binding["roleRef"]["kind"] == "Role", binding


# -- refusals on the real apiserver -------------------------------------------------------------------


def _refused(call: Callable[[], Any]) -> None:
    """`call` must be refused by authorization (403), not fail otherwise."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body


@pytest.fixture(scope="module")
def world(kube_api: client.ApiClient) -> dict[str, Any]:
    """A namespace with a Secret nobody named to servingops, a Model and a ClusterModel."""
    ns = new_namespace(kube_api, "rights")
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="someone-elses"), string_data={"password": "p"}))
    model = create(kube_api, Model, manifest(Model, {"source": {"upload": {}}}), ns)
    cluster_model = create(kube_api, ClusterModel, manifest(ClusterModel, {"source": {"upload": {}}}))
    return {"ns": ns, "model": model, "cluster_model": cluster_model}


@pytest.fixture(scope="module")
def apis(chart_identities: Identities) -> Iterator[dict[str, client.ApiClient]]:
    with (api_as(chart_identities.worker) as worker, api_as(chart_identities.uploads) as uploads,
          api_as(chart_identities.bridge) as bridge):
        yield {"worker": worker, "uploads": uploads, "bridge": bridge}


def _status_body(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "status": {"phase": "Ready"}}


@pytest.mark.integration
def test_the_bridge_cannot_write_status_objects_or_secrets(apis: dict[str, client.ApiClient],
                                                           world: dict[str, Any]) -> None:
    bridge = apis["bridge"]
    custom, core = client.CustomObjectsApi(bridge), client.CoreV1Api(bridge)
    ns, model = world["ns"], world["model"]
    name = model["metadata"]["name"]
    # What it does need works: the token is valid and bound.
    listed = cast(dict[str, Any], custom.list_cluster_custom_object("ai.deckhouse.io", "v1alpha1", "models"))
    assert listed["items"]
    _refused(lambda: custom.replace_namespaced_custom_object_status(
        "ai.deckhouse.io", "v1alpha1", ns, "models", name, _status_body(model)))
    _refused(lambda: custom.patch_namespaced_custom_object_status(
        "ai.deckhouse.io", "v1alpha1", ns, "models", name, {"status": {"phase": "Ready"}}))
    _refused(lambda: custom.patch_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", name,
                                                           {"metadata": {"labels": {"x": "y"}}}))
    _refused(lambda: custom.get_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models", name))
    _refused(lambda: core.read_namespaced_secret("someone-elses", ns))
    _refused(lambda: core.list_namespaced_secret(ns))
    _refused(lambda: core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="b"))))
    _refused(lambda: core.patch_namespaced_secret("someone-elses", ns, {"metadata": {"labels": {"x": "y"}}}))
    _refused(lambda: client.AppsV1Api(bridge).list_namespaced_deployment(ns))
    # Its Lease lives in the release namespace only.
    _refused(lambda: client.CoordinationV1Api(bridge).create_namespaced_lease(ns, client.V1Lease(
        metadata=client.V1ObjectMeta(name="elsewhere"))))


@pytest.mark.integration
def test_the_worker_reads_secrets_only_by_name(apis: dict[str, client.ApiClient], world: dict[str, Any]) -> None:
    """The worker's Secret rule: get, create, update, delete; never list or watch, never patch.

    It needs `get` on Secrets a spec names in any namespace where Models and InferenceServices
    live (a Hugging Face token, registry and Prometheus credentials) and writes upload-session
    Secrets there; without list and watch it can only reach a Secret whose name it was given.
    `rbac.secretNamespaces` narrows even that to the listed namespaces.
    """
    core = client.CoreV1Api(apis["worker"])
    ns = world["ns"]
    assert core.read_namespaced_secret("someone-elses", ns).data  # by name: yes
    _refused(lambda: core.list_namespaced_secret(ns))
    _refused(lambda: core.list_secret_for_all_namespaces())
    _refused(lambda: core.list_namespaced_secret(ns, watch=True, timeout_seconds=1))
    _refused(lambda: core.patch_namespaced_secret("someone-elses", ns, {"metadata": {"labels": {"x": "y"}}}))
    # Only its own operator ConfigMap, only read; no namespaces, no pod logs, no cluster RBAC.
    _refused(lambda: core.read_namespaced_config_map("kube-root-ca.crt", ns))
    # ConfigMaps of its own namespace (upload-session records): read, create and delete, never change one.
    _refused(lambda: core.patch_namespaced_config_map(f"{identities.RELEASE}-config", identities.NAMESPACE,
                                                      {"metadata": {"labels": {"x": "y"}}}))
    _refused(lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-ns"))))
    # Pods: the replica engine creates, patches and deletes them, and never reads what they log.
    _refused(lambda: core.read_namespaced_pod_log("p", ns))
    rbac = client.RbacAuthorizationV1Api(apis["worker"])
    _refused(lambda: rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="w-crb"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"))))
    # It may write Roles (the per-upload grant), but not grant what it does not hold itself.
    _refused(lambda: rbac.create_namespaced_role(ns, client.V1Role(
        metadata=client.V1ObjectMeta(name="w-escalate"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["secrets"], verbs=["list"])])))
    _refused(lambda: rbac.delete_namespaced_role("anything", ns))


@pytest.mark.integration
def test_the_upload_endpoint_reads_only_session_records_and_the_signing_key(
        apis: dict[str, client.ApiClient], world: dict[str, Any], tmp_path: Any) -> None:
    core = client.CoreV1Api(apis["uploads"])
    ns, model = world["ns"], world["model"]
    # A live session, opened as the worker opens it: its Secret in the model's namespace, its record
    # in the controller namespace.
    ref = ObjectRef.of(Model, model["metadata"]["name"], ns, model["metadata"]["uid"])
    acts = UploadActivities(apis["worker"], tmp_path / "spool", "http://uploads.example", identities.NAMESPACE)
    info = ActivityEnvironment().run(acts.open_session, OpenUploadInput(model=ref))
    assert ref.uid
    try:
        # What it needs: the session's record by name, and the signing key by name.
        record = core.read_namespaced_config_map(record_name(ref.uid), identities.NAMESPACE)
        assert (record.data or {}).get("session")
        assert core.read_namespaced_secret(SIGNING_KEY_SECRET, identities.NAMESPACE).data

        # No Secret but the key: not the session's own, not by listing, in no namespace.
        _refused(lambda: core.read_namespaced_secret(info.secret_name, ns))
        _refused(lambda: core.read_namespaced_secret("someone-elses", ns))
        _refused(lambda: core.list_secret_for_all_namespaces())
        _refused(lambda: core.list_namespaced_secret(ns))
        _refused(lambda: core.list_namespaced_secret(identities.NAMESPACE))
        _refused(lambda: core.list_namespaced_secret(ns, watch=True, timeout_seconds=1))
        _refused(lambda: core.patch_namespaced_secret(info.secret_name, ns, {"metadata": {"labels": {"x": "y"}}}))
        _refused(lambda: core.create_namespaced_secret(ns, client.V1Secret(metadata=client.V1ObjectMeta(name="u"))))
        _refused(lambda: core.replace_namespaced_secret("someone-elses", ns, client.V1Secret(
            metadata=client.V1ObjectMeta(name="someone-elses"), string_data={"password": "q"})))
        _refused(lambda: core.delete_namespaced_secret("someone-elses", ns))
        _refused(lambda: core.create_namespaced_secret(identities.NAMESPACE, client.V1Secret(
            metadata=client.V1ObjectMeta(name=SIGNING_KEY_SECRET), string_data={"key": "forged"})))
        # Records are read, never listed, written or forged, and only in the controller namespace.
        _refused(lambda: core.list_namespaced_config_map(identities.NAMESPACE))
        _refused(lambda: core.patch_namespaced_config_map(record_name(str(ref.uid)), identities.NAMESPACE,
                                                          {"data": {"session": "{}"}}))
        _refused(lambda: core.delete_namespaced_config_map(record_name(str(ref.uid)), identities.NAMESPACE))
        _refused(lambda: core.create_namespaced_config_map(identities.NAMESPACE, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=record_name(str(uuid.uuid4()))), data={"session": "{}"})))
        _refused(lambda: core.read_namespaced_config_map("kube-root-ca.crt", ns))
        # Nothing else at all.
        _refused(lambda: client.CustomObjectsApi(apis["uploads"]).list_cluster_custom_object(
            "ai.deckhouse.io", "v1alpha1", "models"))
        _refused(lambda: core.create_namespaced_event(ns, client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="u"), involved_object=client.V1ObjectReference(name="x"))))
    finally:
        ActivityEnvironment().run(acts.close_session, CloseUploadInput(model=ref))


@pytest.mark.integration
def test_the_webhook_reads_models_by_name_and_nothing_else(chart_identities: Identities,
                                                           world: dict[str, Any]) -> None:
    assert chart_identities.webhook is not None
    ns, model, cluster_model = world["ns"], world["model"], world["cluster_model"]
    with api_as(chart_identities.webhook) as webhook:
        custom, core = client.CustomObjectsApi(webhook), client.CoreV1Api(webhook)
        # What it needs: the model a workload names, by name, in any namespace; a ClusterModel likewise.
        assert custom.get_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models",
                                                   model["metadata"]["name"])["metadata"]["uid"]
        assert custom.get_cluster_custom_object("ai.deckhouse.io", "v1alpha1", "clustermodels",
                                                cluster_model["metadata"]["name"])["metadata"]["uid"]
        # No listing (it never learns which models exist), no write, no status, no Secret, no workload.
        _refused(lambda: custom.list_namespaced_custom_object("ai.deckhouse.io", "v1alpha1", ns, "models"))
        _refused(lambda: custom.list_cluster_custom_object("ai.deckhouse.io", "v1alpha1", "clustermodels"))
        _refused(lambda: custom.patch_namespaced_custom_object_status(
            "ai.deckhouse.io", "v1alpha1", ns, "models", model["metadata"]["name"], _status_body(model)))
        _refused(lambda: custom.delete_cluster_custom_object("ai.deckhouse.io", "v1alpha1", "clustermodels",
                                                             cluster_model["metadata"]["name"]))
        _refused(lambda: core.read_namespaced_secret("someone-elses", ns))
        _refused(lambda: core.list_namespaced_pod(ns))
        _refused(lambda: client.AppsV1Api(webhook).list_namespaced_deployment(ns))


# -- the upload Secret: only the Model's readers ------------------------------------------------------


def _as_user(kube_api: client.ApiClient, user: str, groups: tuple[str, ...] = ()) -> client.ApiClient:
    """The admin's client, impersonating `user` (and `groups`): the apiserver authorizes as them."""
    api = client.ApiClient(kube_api.configuration)
    api.set_default_header("Impersonate-User", user)  # type: ignore[no-untyped-call]
    for group in groups:
        api.set_default_header("Impersonate-Group", group)  # type: ignore[no-untyped-call]  # one value only
    return api


def _grant_model_readers(kube_api: client.ApiClient, ns: str, subject: client.RbacV1Subject, name: str) -> None:
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(ns, client.V1Role(
        metadata=client.V1ObjectMeta(name=name),
        rules=[client.V1PolicyRule(api_groups=["ai.deckhouse.io"], resources=["models"], verbs=["get", "list"])]))
    rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=name), subjects=[subject],
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name)))


def _can_get(api: client.ApiClient, ns: str, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_secret(name, ns)
    except ApiException as exc:
        if exc.status in (403, 404):
            return False
        raise
    return True


@pytest.mark.integration
def test_only_those_who_may_read_the_model_may_read_its_upload_secret(
        kube_api: client.ApiClient, apis: dict[str, client.ApiClient], tmp_path: Any) -> None:
    ns = new_namespace(kube_api, "upload-readers")
    group = "rbac.authorization.k8s.io"
    # alice may read Models in the namespace; the team-ml group too (carol is in it); bob may only
    # read ConfigMaps there, so he is a known user with some rights, just not on Models.
    _grant_model_readers(kube_api, ns, client.RbacV1Subject(kind="User", name="alice", api_group=group), "alice")
    _grant_model_readers(kube_api, ns, client.RbacV1Subject(kind="Group", name="team-ml", api_group=group), "ml")
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(ns, client.V1Role(metadata=client.V1ObjectMeta(name="bob"), rules=[
        client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get"])]))
    rbac.create_namespaced_role_binding(ns, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="bob"), subjects=[client.RbacV1Subject(kind="User", name="bob",
                                                                                  api_group=group)],
        role_ref=client.V1RoleRef(api_group=group, kind="Role", name="bob")))
    client.CoreV1Api(kube_api).create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name="unrelated"), string_data={"k": "v"}))

    model = create(kube_api, Model, manifest(Model, {"source": {"upload": {}}}), ns)
    ref = ObjectRef.of(Model, model["metadata"]["name"], ns, model["metadata"]["uid"])
    # The session opens as the worker would open it: as the chart's worker identity.
    acts = UploadActivities(apis["worker"], tmp_path / "spool", "http://uploads.example")
    info = ActivityEnvironment().run(acts.open_session, OpenUploadInput(model=ref))
    assert info.secret_name == secret_name(ref)

    alice, bob = _as_user(kube_api, "alice"), _as_user(kube_api, "bob")
    carol = _as_user(kube_api, "carol", ("team-ml",))
    try:
        assert _can_get(alice, ns, info.secret_name)
        assert _can_get(carol, ns, info.secret_name)
        assert not _can_get(bob, ns, info.secret_name)
        # The grant names that one Secret: alice reads no other Secret, and lists none.
        assert not _can_get(alice, ns, "unrelated")
        with pytest.raises(ApiException) as listing:
            client.CoreV1Api(alice).list_namespaced_secret(ns)
        assert listing.value.status == 403
        binding = rbac.read_namespaced_role_binding(info.secret_name, ns)
        bound = {(s.kind, s.name) for s in binding.subjects or []}
        assert {("User", "alice"), ("Group", "team-ml")} <= bound and ("User", "bob") not in bound
        assert ("Group", "system:masters") not in bound  # cluster-admin reads Secrets anyway

        # Closed with the session: the garbage collector removes the Role and RoleBinding the Secret owns.
        ActivityEnvironment().run(acts.close_session, CloseUploadInput(model=ref))

        def left() -> list[str]:
            return [kind for kind, read in (("role", rbac.read_namespaced_role),
                                            ("binding", rbac.read_namespaced_role_binding))
                    if _exists(read, info.secret_name, ns)]

        wait_until("the session's Role and RoleBinding collected", lambda: not left(), timeout=60,
                   detail=lambda: f"still there after the session closed: {left()}")
    finally:
        for api in (alice, bob, carol):
            api.close()  # type: ignore[no-untyped-call]


def _exists(read: Callable[[str, str], Any], name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.mark.integration
def test_a_cluster_models_upload_secret_goes_to_its_cluster_wide_readers(
        kube_api: client.ApiClient, apis: dict[str, client.ApiClient], world: dict[str, Any], tmp_path: Any) -> None:
    group = "rbac.authorization.k8s.io"
    name = f"clustermodel-readers-{uuid.uuid4().hex[:6]}"
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name=name), rules=[
        client.V1PolicyRule(api_groups=["ai.deckhouse.io"], resources=["clustermodels"], verbs=["get"])]))
    rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name=name),
        subjects=[client.RbacV1Subject(kind="User", name="dana", api_group=group)],
        role_ref=client.V1RoleRef(api_group=group, kind="ClusterRole", name=name)))
    try:
        model = world["cluster_model"]
        ref = ObjectRef.of(ClusterModel, model["metadata"]["name"], None, model["metadata"]["uid"])
        acts = UploadActivities(apis["worker"], tmp_path / "spool", "http://uploads.example")
        info = ActivityEnvironment().run(acts.open_session, OpenUploadInput(model=ref))
        assert info.secret_namespace == identities.NAMESPACE
        dana, erin = _as_user(kube_api, "dana"), _as_user(kube_api, "erin")
        try:
            assert _can_get(dana, info.secret_namespace, info.secret_name)
            assert not _can_get(erin, info.secret_namespace, info.secret_name)
            assert not _can_get(dana, info.secret_namespace, SIGNING_KEY_SECRET)
        finally:
            dana.close()  # type: ignore[no-untyped-call]
            erin.close()  # type: ignore[no-untyped-call]
        ActivityEnvironment().run(acts.close_session, CloseUploadInput(model=ref))
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
