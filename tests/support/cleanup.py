"""Tidying up after a test on a real apiserver: a delete whose object may already be gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException


def ignore_404(call: Callable[[], Any]) -> None:
    """Run `call` (a delete, usually); an object already gone (404) is what was wanted."""
    try:
        call()
    except ApiException as exc:
        if exc.status != 404:
            raise


__all__ = ["ignore_404"]
