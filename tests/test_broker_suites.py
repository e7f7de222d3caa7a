"""The broker checks (tests/broker_checks.py) on every driver: BrokerBus over
MemoryBroker, RedisBus, PostgresBus and NatsBus, each on a server the tests start. A
driver's own test module holds only what that broker alone has."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from tests import broker_checks
from tests.test_memory_broker_bus import MemoryServer

pytestmark = pytest.mark.timeout(90)

DRIVERS = ["memory", "redis", "postgres", "nats"]


@pytest.fixture
def anyio_backend() -> str:
    # The broker clients run on asyncio only.
    return "asyncio"


def _harness(driver: str, kind: str, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """``(make, server)`` for ``driver`` as a check of ``kind`` needs them."""
    if driver == "memory":
        memory = MemoryServer()
        return memory.make, memory
    if driver == "redis":
        from tests.test_redis_bus import make_bus, make_hooked_bus
    elif driver == "postgres":
        from tests.test_postgres_bus import make_bus, make_hooked_bus  # type: ignore[assignment]
    else:
        from tests.test_nats_bus import make_bus, make_hooked_bus  # type: ignore[assignment]
    if kind == "outage":  # a server of the check's own, which it stops and starts
        server = request.getfixturevalue(f"own_{driver}")
        return partial(make_bus, server), server
    server = request.getfixturevalue(f"{driver}_server")
    return partial(make_hooked_bus if kind == "hooked" else make_bus, server), None


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    ("check", "kind"), broker_checks.CHECKS, ids=[c.__name__ for c, _ in broker_checks.CHECKS]
)
async def test_broker_check(
    driver: str,
    check: Callable[..., Awaitable[None]],
    kind: str,
    request: pytest.FixtureRequest,
) -> None:
    make, server = _harness(driver, kind, request)
    if kind == "outage":
        await check(make, server)
    else:
        await check(make)


def test_every_broker_check_is_listed() -> None:
    checks = {
        name
        for name, check in vars(broker_checks).items()
        if not name.startswith("_")
        and inspect.iscoroutinefunction(check)
        and check.__module__ == broker_checks.__name__
    }
    listed = {check.__name__ for check, _ in broker_checks.CHECKS}
    assert checks == listed, f"not in broker_checks.CHECKS: {sorted(checks - listed)}"
