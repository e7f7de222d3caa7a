"""NatsBus against a real nats-server -js: the Bus conformance suite and the broker parts."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

import toolstream as ts
from tests.nats_server import NatsServer, require_nats
from toolstream.testing import BusFactory, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # nats-py has no trio support; test_trio_is_refused checks the error trio gets.
    return "asyncio"


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    require_nats()
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


def make_bus(server: NatsServer, **options: Any) -> Any:
    from toolstream.nats import NatsBus

    options.setdefault("prefix", f"t{uuid.uuid4().hex[:10]}")
    return NatsBus(server.url, **options)


def bus_factory(server: NatsServer, **options: object) -> BusFactory:
    async def make() -> Any:
        bus = make_bus(server, **options)
        await bus.start()
        return bus

    return make


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_nats_bus_conforms(
    nats_server: NatsServer, check: Callable[[BusFactory], Awaitable[None]]
) -> None:
    await check(bus_factory(nats_server))


async def take(sub: ts.Subscription[Any], count: int, within: float = 10.0) -> list[ts.Event]:
    out: list[ts.Event] = []
    with anyio.fail_after(within):
        async for event in sub:
            out.append(event)
            if len(out) >= count:
                break
    return out
