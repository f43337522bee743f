"""rendering/expiry.py: when spec.ttlSecondsAfterCreation deletes an InferenceService."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from servingops.api_models.ome.placement import ORIGIN_LABEL
from servingops.rendering.expiry import expires_at

pytestmark = pytest.mark.unit


def obj(ttl: object = None, labels: dict[str, str] | None = None) -> dict[str, object]:
    spec = {} if ttl is None else {"ttlSecondsAfterCreation": ttl}
    return {"metadata": {"creationTimestamp": "2026-12-06T10:00:00Z", "labels": labels or {}}, "spec": spec}


def test_creation_plus_the_ttl() -> None:
    assert expires_at(obj(90)) == datetime(2026, 12, 6, 10, 1, 30, tzinfo=UTC)


@pytest.mark.parametrize("ttl", [None, 0, -5, True, "60"])
def test_no_usable_ttl_no_deadline(ttl: object) -> None:
    assert expires_at(obj(ttl)) is None


def test_a_placement_copy_ignores_it() -> None:
    assert expires_at(obj(90, {ORIGIN_LABEL: "uid-of-the-source"})) is None


def test_not_yet_created_has_none() -> None:
    assert expires_at({"metadata": {}, "spec": {"ttlSecondsAfterCreation": 5}}) is None
