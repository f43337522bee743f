"""Which workflows and activities one worker process serves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client

from activities.kubernetes import KubernetesActivities


def workflows() -> Sequence[type]:
    """Workflow classes; each process issue adds its own here."""
    return []


def activities(api_client: client.ApiClient) -> Sequence[Callable[..., Any]]:
    return [*KubernetesActivities(api_client).all()]
