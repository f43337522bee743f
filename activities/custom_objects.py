"""Reading and writing one custom object by ObjectRef, for every activity that does: a read that
says None when the object is gone (or its name now belongs to another uid), and an optimistic
update (read, change, replace under the read resourceVersion, start over on 409)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from servingops.api_models.errors import ErrorType, application_error
from servingops.api_models.refs import ObjectRef

CONFLICT_RETRIES = 10


class CustomObjects:
    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom

    def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        try:
            if ref.namespace:
                obj = cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                    ref.group, ref.version, ref.namespace, ref.plural, ref.name))
            else:
                obj = cast(dict[str, Any], self.custom.get_cluster_custom_object(
                    ref.group, ref.version, ref.plural, ref.name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if ref.uid and obj["metadata"].get("uid") != ref.uid:
            return None  # the name belongs to a newer object now
        return dict(obj)

    def replace(self, ref: ObjectRef, body: dict[str, Any], *, status: bool = False) -> dict[str, Any]:
        if ref.namespace:
            call = (self.custom.replace_namespaced_custom_object_status if status
                    else self.custom.replace_namespaced_custom_object)
            return dict(cast(dict[str, Any], call(ref.group, ref.version, ref.namespace, ref.plural, ref.name, body)))
        cluster_call = (self.custom.replace_cluster_custom_object_status if status
                        else self.custom.replace_cluster_custom_object)
        return dict(cast(dict[str, Any], cluster_call(ref.group, ref.version, ref.plural, ref.name, body)))

    def update(self, ref: ObjectRef, mutate: Callable[[dict[str, Any]], bool], *,
               status: bool = False) -> dict[str, Any] | None:
        """Read, `mutate` (False: nothing to write), replace with the read resourceVersion; on 409
        start over. None when the object is gone."""
        for _ in range(CONFLICT_RETRIES):
            obj = self.get(ref)
            if obj is None:
                return None
            if not mutate(obj):
                return obj
            try:
                return self.replace(ref, obj, status=status)
            except ApiException as exc:
                if exc.status == 409:
                    continue
                if exc.status == 404:
                    return None
                if exc.status == 422:
                    # The apiserver rejected what we wrote: retrying cannot help.
                    raise application_error(ErrorType.INVALID_OBJECT, f"{ref.describe()}: {exc.body}") from exc
                raise
        raise application_error(ErrorType.CONFLICT,
                                f"{ref.describe()}: still conflicting after {CONFLICT_RETRIES} tries")
