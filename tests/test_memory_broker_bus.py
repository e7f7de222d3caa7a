"""BrokerBus over MemoryBroker, with no server: the Bus conformance suite here; every broker
check runs in tests/test_broker_suites.py through :class:`MemoryServer` (the buses of one
check share one MemoryBroker as processes share a broker; its hooks make it misbehave)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from toolstream.broker import BrokerBus
from toolstream.testing import BusFactory, MemoryBroker, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # BrokerBus runs on asyncio only.
    return "asyncio"


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_memory_broker_bus_conforms(check: Callable[[BusFactory], Awaitable[None]]) -> None:
    await check(lambda: BrokerBus(MemoryBroker()))


class MemoryServer:
    """The test's broker "server": one MemoryBroker per ``prefix`` (buses made with one
    prefix share it, as processes share a broker; a bus made without one gets a broker
    of its own, as a fresh prefix would), stopped and started with ``down()`` and
    ``up()`` (the broker checks' ``Server``)."""

    def __init__(self) -> None:
        self.brokers: dict[str, MemoryBroker] = {}
        self.stopped = False

    def make(self, *, prefix: str | None = None, **options: Any) -> BrokerBus:
        key = prefix if prefix is not None else uuid.uuid4().hex
        broker = self.brokers.get(key)
        if broker is None:
            broker = self.brokers[key] = MemoryBroker()
            if self.stopped:
                broker.down()
        return BrokerBus(broker, **options)

    def stop(self) -> None:
        self.stopped = True
        for broker in self.brokers.values():
            broker.down()

    def start(self) -> None:
        self.stopped = False
        for broker in self.brokers.values():
            broker.up()


@pytest.fixture
def server() -> MemoryServer:
    return MemoryServer()


def test_buses_made_with_one_prefix_share_a_broker(server: MemoryServer) -> None:
    one, two = server.make(prefix="p"), server.make(prefix="p")
    assert one.broker is two.broker
    assert server.make().broker is not one.broker
    assert server.make().broker is not server.make().broker
    assert one.epoch == two.epoch
