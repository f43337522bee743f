"""What every fake-versus-real conformance suite does alike (docs/testing.md, "Real, fake, and
conformance"): run each case on both backends, start the stack only for the real one, and call an
activity the way a workflow's worker does (by its registered name, its payloads through the data
converter)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

B = TypeVar("B")

FAKE_UNIT_AND_REAL = [pytest.param("fake", marks=pytest.mark.unit),
                      pytest.param("real", marks=pytest.mark.integration)]
"""`@pytest.fixture(params=...)` of a suite whose fake answers at once (unit tier)."""
FAKE_TIMESKIP_AND_REAL = [pytest.param("fake", marks=pytest.mark.timeskip),
                          pytest.param("real", marks=pytest.mark.integration)]
"""... and of one whose fake runs on a time-skipping test server's clock (timeskip tier)."""


def chosen_backend(request: pytest.FixtureRequest, fake: Callable[[], B]) -> B:
    """The fake (made only on its side) or the module's `real_backend` fixture, asked for only on
    the real side, so that the fake side never starts or waits for the stack (the fast tier's rule,
    tests/fixtures/tiers.py)."""
    if request.param == "fake":
        return fake()
    real: B = request.getfixturevalue("real_backend")
    return real


def wire(value: Any, kind: Any) -> Any:
    """`value` as the data converter carries it, read back as `kind` (an activity's input or answer)."""
    converter = pydantic_data_converter.payload_converter
    return converter.from_payloads(converter.to_payloads([value]), [kind])[0]


def activity_name(fn: Any) -> str:
    """The name an activity method is registered under (what a workflow calls it by)."""
    return str(fn.__temporal_activity_definition.name)
