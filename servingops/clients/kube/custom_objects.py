"""One custom object by ObjectRef, for every reader and writer of the served kinds: a read that says None when
the object is gone (or its name now belongs to another uid), and an optimistic update (read, change, replace
under the read resourceVersion, start over on 409).

The group and plural come from the ref, so RBAC reads these calls as acting on any kind the process is given
(tests/rbac_calls.py): a site that acts on one fixed kind calls the generated client through `calls` instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.refs import ObjectRef
from servingops.clients.kube.calls import call, get_or_none
from servingops.clients.kube.errors import absent, conflict, conflicts_outlasted, rejected_write

CONFLICT_RETRIES = 10
"""Re-reads an update makes on 409 before it gives up with a (retried) Conflict: each lost race is one
concurrent writer, so ten in a row means a writer that keeps up with us; Temporal's backoff spaces them."""


class CustomObjects:
    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        if ref.namespace:
            obj = get_or_none(self.custom.get_namespaced_custom_object,
                              ref.group, ref.version, ref.namespace, ref.plural, ref.name)
        else:
            obj = get_or_none(self.custom.get_cluster_custom_object, ref.group, ref.version, ref.plural, ref.name)
        if obj is None:
            return None
        obj = cast(dict[str, Any], obj)
        if ref.uid and obj["metadata"].get("uid") != ref.uid:
            return None  # the name belongs to a newer object now
        return dict(obj)

    def replace(self, ref: ObjectRef, body: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        if ref.namespace:
            method = (self.custom.replace_namespaced_custom_object_status if status
                      else self.custom.replace_namespaced_custom_object)
            return dict(cast(dict[str, Any], call(method, ref.group, ref.version, ref.namespace, ref.plural, ref.name,
                                                  body)))
        cluster_method = (self.custom.replace_cluster_custom_object_status if status
                          else self.custom.replace_cluster_custom_object)
        return dict(cast(dict[str, Any], call(cluster_method, ref.group, ref.version, ref.plural, ref.name, body)))

    def update(self, ref: ObjectRef, mutate: Callable[[dict[str, Any]], bool], *,
               status: bool = False) -> dict[str, Any] | None:
        """Read, `mutate` (False: nothing to write), replace with the read resourceVersion; on 409
        start over. None when the object is gone. A 422 is permanent (INVALID_OBJECT); conflicts that
        outlast CONFLICT_RETRIES re-reads are transient (CONFLICT)."""
        return update_optimistically(ref, lambda: self.get(ref), lambda obj: self.replace(ref, obj, status=status),
                                     mutate)


def update_optimistically(ref: ObjectRef, read: Callable[[], dict[str, Any] | None],
                          replace: Callable[[dict[str, Any]], dict[str, Any]],
                          mutate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The optimistic update loop of any object: `read` it (None: gone), `mutate` it (False: nothing to write),
    `replace` it under the read resourceVersion; on 409 start over. A site that names its kind literally (so
    tests/rbac_calls.py sees which) passes its own read and replace."""
    for _ in range(CONFLICT_RETRIES):
        obj = read()
        if obj is None:
            return None
        if not mutate(obj):
            return obj
        try:
            return replace(obj)
        except ApiException as exc:
            if conflict(exc):
                continue
            if absent(exc):
                return None
            if exc.status == 422:
                # The apiserver rejected what we wrote: retrying cannot help.
                raise rejected_write(ref.describe(), exc) from exc
            raise
    raise conflicts_outlasted(ref.describe(), CONFLICT_RETRIES)
