"""One apiserver call with the timeout policy, and the shapes the product's calls take.

Each helper takes the generated client's method and its arguments, as the site would pass them, and adds
`_request_timeout` (timeouts.REQUEST_TIMEOUT unless the site names another) and one answer to one status code.
Anything else an ApiException says is raised as it is: the site's retry and error contract decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from servingops.clients.kube.errors import absent, conflict
from servingops.clients.kube.timeouts import REQUEST_TIMEOUT, Timeout

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Method = Callable[..., Any]
"""A method of a generated API class (CoreV1Api.read_namespaced_secret, ...): untyped, as the client is."""


def call(method: Method, *args: Any, timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> Any:
    """`method(*args, **kwargs)` under the timeout policy."""
    return method(*args, _request_timeout=timeout, **kwargs)


def get_or_none(method: Method, *args: Any, timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> Any:
    """A read that answers None when the object is not there (404) instead of raising."""
    try:
        return method(*args, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        if absent(exc):
            return None
        raise


def list_items(method: Method, *args: Any, label_selector: str | None = None, field_selector: str | None = None,
               timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> list[Any]:
    """The items of a list call (one page: a site that pages passes `limit` and `_continue` and reads the
    response through `call`), narrowed by label and field selectors. Typed lists (CoreV1Api.list_node) give
    their model objects, custom-object lists their dicts."""
    if label_selector is not None:
        kwargs["label_selector"] = label_selector
    if field_selector is not None:
        kwargs["field_selector"] = field_selector
    listed = method(*args, _request_timeout=timeout, **kwargs)
    if isinstance(listed, dict):
        return list(listed.get("items") or [])
    return list(listed.items or [])


def patch_if_present(method: Method, *args: Any, timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> Any:
    """A patch of an object that may be gone: None when it is (404), the patched object otherwise."""
    return get_or_none(method, *args, timeout=timeout, **kwargs)


def delete_if_present(method: Method, *args: Any, timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> bool:
    """A delete that is done when the object is already gone: False then, True when this call deleted it."""
    try:
        method(*args, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        if absent(exc):
            return False
        raise
    return True


def create_unless_exists(method: Method, *args: Any, timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> Any:
    """A create whose name may be taken already (409): None then, the created object otherwise. Whether the
    object under that name is the one we meant is the site's question."""
    try:
        return method(*args, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        if conflict(exc):
            return None
        raise


def apply(method: Method, *args: Any, field_manager: str, force: bool = True,
          timeout: Timeout = REQUEST_TIMEOUT, **kwargs: Any) -> Any:
    """Server-side apply through a patch method (its last argument the manifest): the fields the manifest
    sets become `field_manager`'s, taken from any other manager when `force`. It creates a missing object,
    which RBAC checks as `create` too."""
    return method(*args, field_manager=field_manager, force=force, _content_type=APPLY_PATCH,
                  _request_timeout=timeout, **kwargs)
