"""The Bus conformance suite from toolstream.testing, run against EventBus."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import toolstream as ts
from toolstream.testing import BusFactory, bus_conformance_checks


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_event_bus_conforms(check: Callable[[BusFactory], Awaitable[None]]) -> None:
    await check(ts.EventBus)
