"""RedisBus against a real redis-server: the Bus conformance suite and the broker parts."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.redis_server import REDIS_SERVER, RedisServer
from toolstream.testing import BusFactory, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # redis-py has no trio support; test_trio_is_refused checks the error trio gets.
    return "asyncio"


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    require(REDIS_SERVER is not None, "redis-server not installed (Debian: apt install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def bus_factory(server: RedisServer, **options: object) -> BusFactory:
    from toolstream.redis import RedisBus

    def make() -> RedisBus:
        return RedisBus(server.url, prefix=f"t{uuid.uuid4().hex[:10]}", **options)  # type: ignore[arg-type]

    return make


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_redis_bus_conforms(
    redis_server: RedisServer, check: Callable[[BusFactory], Awaitable[None]]
) -> None:
    await check(bus_factory(redis_server))


def test_path_unused(tmp_path: Path) -> None:
    assert tmp_path.exists()
