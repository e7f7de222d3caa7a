"""Every async test runs on asyncio and on trio, through anyio's pytest plugin."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.nats_server import NatsServer
    from tests.postgres_server import PostgresServer
    from tests.redis_server import RedisServer


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark async tests before anyio's own hook sees them, so it parametrizes the backend.
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)


def require(available: bool, reason: str) -> None:
    """Skip a test whose component is missing, or fail under TOOLSTREAM_REQUIRE_ALL=1 (CI)."""
    if available:
        return
    if os.environ.get("TOOLSTREAM_REQUIRE_ALL") == "1":
        pytest.fail(f"required component missing (TOOLSTREAM_REQUIRE_ALL=1): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server shared by a test module (each test uses its own key prefix)."""
    from tests.redis_server import RedisServer, require_redis

    require_redis()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own (append-only file on), for tests that stop,
    restart or wipe it."""
    from tests.redis_server import RedisServer, require_redis

    require_redis()
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server shared by a test module (each test uses its own prefix)."""
    from tests.postgres_server import PostgresServer, require_postgres

    require_postgres()
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    server.start()
    yield server
    server.close()


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, for tests that stop or restart it."""
    from tests.postgres_server import PostgresServer, require_postgres

    require_postgres()
    server = PostgresServer(tmp_path)
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server (JetStream) shared by a test module (each test uses its own prefix)."""
    from tests.nats_server import NatsServer, require_nats

    require_nats()
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server of the test's own, for tests that stop, restart or wipe it."""
    from tests.nats_server import NatsServer, require_nats

    require_nats()
    server = NatsServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium shared by a test module (each test opens its pages in a fresh
    context: ``tests.browser.new_page(browser)``)."""
    from tests.browser import chromium

    with chromium() as shared:
        yield shared
