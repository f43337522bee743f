"""Who may read an upload's Secret: exactly those RBAC lets read the Model it belongs to.

The session Secret holds the upload URL and its bearer token, so reading it is the right to
upload. The seed gives that right to those allowed to read the upload, that is the Model (or
ClusterModel). Kubernetes has no "readers of X may read Y", so when a session opens the worker
asks RBAC itself who may `get` the model: every ClusterRoleBinding, and for a Model every
RoleBinding of its namespace, whose role has a rule granting `get` on it. It then writes a Role
naming that one Secret (resourceNames, verb get) and a RoleBinding of it to those subjects, both
owned by the Secret, so the garbage collector removes them with the session.

Subjects whose granting rule already covers Secrets (a `*` resource in the core or `*` group:
cluster-admin, the garbage collector) are left out: they need no grant. Those who may read every
Secret of the namespace still can, as RBAC allows; the grant adds no one else. It is a snapshot
taken when the session opens or is renewed: a RoleBinding added later gives the upload only from
the next session on, and one removed later is not taken back (the session expires within its TTL).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client

from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import apply, list_items

FIELD_MANAGER = "servingops-uploads"
_RBAC = "rbac.authorization.k8s.io"


def _grants(rule: client.V1PolicyRule, group: str, resource: str, name: str | None, verb: str) -> bool:
    groups, resources, verbs = rule.api_groups or [], rule.resources or [], rule.verbs or []
    return ((group in groups or "*" in groups) and (resource in resources or "*" in resources)
            and (verb in verbs or "*" in verbs)
            and (not rule.resource_names or (name is not None and name in rule.resource_names)))


def _rules_granting(rules: Iterable[client.V1PolicyRule] | None, ref: ObjectRef) -> list[client.V1PolicyRule]:
    return [rule for rule in rules or () if _grants(rule, ref.group, ref.plural, ref.name, "get")]


def _needs_grant(granting: list[client.V1PolicyRule], secret: str) -> bool:
    """False when a rule that lets the subject read the model lets it read the Secret already."""
    return bool(granting) and not any(_grants(rule, "", "secrets", secret, "get") for rule in granting)


def _subject_key(subject: client.RbacV1Subject) -> tuple[str, str, str]:
    return subject.kind, subject.namespace or "", subject.name


def model_readers(rbac: client.RbacAuthorizationV1Api, ref: ObjectRef, secret: str) -> list[client.RbacV1Subject]:
    """The subjects RBAC lets `get` the model and who cannot read `secret` by the same rule, sorted."""
    cluster_roles = {role.metadata.name: role.rules for role in list_items(rbac.list_cluster_role) if role.metadata}
    bindings: list[tuple[list[client.V1PolicyRule], list[client.RbacV1Subject]]] = []
    for cluster_binding in list_items(rbac.list_cluster_role_binding):
        if cluster_binding.role_ref.kind == "ClusterRole":
            bindings.append((_rules_granting(cluster_roles.get(cluster_binding.role_ref.name), ref),
                             cluster_binding.subjects or []))
    if ref.namespace:
        roles = {role.metadata.name: role.rules for role in list_items(rbac.list_namespaced_role, ref.namespace)
                 if role.metadata}
        for binding in list_items(rbac.list_namespaced_role_binding, ref.namespace):
            source = cluster_roles if binding.role_ref.kind == "ClusterRole" else roles
            bindings.append((_rules_granting(source.get(binding.role_ref.name), ref), binding.subjects or []))
    readers: dict[tuple[str, str, str], client.RbacV1Subject] = {}
    for granting, subjects in bindings:
        if _needs_grant(granting, secret):
            for subject in subjects:
                readers.setdefault(_subject_key(subject), subject)
    return [readers[key] for key in sorted(readers)]


def grant_readers(api_client: client.ApiClient, ref: ObjectRef, secret: client.V1Secret) -> list[client.RbacV1Subject]:
    """Apply the session Secret's Role and RoleBinding (named after the Secret, owned by it): `get`
    on that one Secret for the model's readers. Idempotent; returns the subjects bound."""
    meta = secret.metadata
    assert meta is not None and meta.name and meta.namespace and meta.uid
    rbac = client.RbacAuthorizationV1Api(api_client)
    subjects = model_readers(rbac, ref, meta.name)
    owner = {"apiVersion": "v1", "kind": "Secret", "name": meta.name, "uid": meta.uid,
             "controller": True, "blockOwnerDeletion": False}
    labels = dict(meta.labels or {})
    common: dict[str, Any] = {"name": meta.name, "namespace": meta.namespace, "labels": labels,
                              "ownerReferences": [owner]}
    role = {"apiVersion": f"{_RBAC}/v1", "kind": "Role", "metadata": common,
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [meta.name],
                       "verbs": ["get"]}]}
    binding = {"apiVersion": f"{_RBAC}/v1", "kind": "RoleBinding", "metadata": common,
               "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": meta.name},
               "subjects": [api_client.sanitize_for_serialization(s) for s in subjects]}  # type: ignore[no-untyped-call]
    # The Role first: a RoleBinding to a missing Role would grant nothing, but is confusing to read.
    apply(rbac.patch_namespaced_role, meta.name, meta.namespace, role, field_manager=FIELD_MANAGER)
    apply(rbac.patch_namespaced_role_binding, meta.name, meta.namespace, binding, field_manager=FIELD_MANAGER)
    return subjects
