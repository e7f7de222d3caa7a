"""PostgresBus against a real PostgreSQL server the tests start: the Bus conformance
suite, the broker checks every broker bus passes, and what is PostgreSQL's own (history
kept by time, the epoch kept across restarts, few connections for many readers)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import psycopg
import pytest

import toolstream as ts
from tests import broker_checks
from tests.postgres_server import PostgresServer
from tests.servers import eventually, take
from toolstream.broker import BrokerBus
from toolstream.postgres import PostgresBroker, PostgresBus
from toolstream.testing import BusFactory, StallingBroker, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async connections run on asyncio; test_trio_is_refused checks the error.
    return "asyncio"


def make_bus(server: PostgresServer, **options: Any) -> PostgresBus:
    options.setdefault("prefix", f"t{uuid.uuid4().hex[:10]}")
    return PostgresBus(server.dsn, **options)


def make_hooked_bus(server: PostgresServer, **options: Any) -> BrokerBus:
    """A PostgresBus with test hooks, for the broker checks that need a broker to
    misbehave: ``BrokerBus`` over ``StallingBroker(PostgresBroker(...))``, as PostgresBus
    is built (``replay=None`` unless the check asks for count-based trimming)."""
    driver = PostgresBroker(
        server.dsn,
        prefix=options.pop("prefix", None) or f"t{uuid.uuid4().hex[:10]}",
        retention=options.pop("retention", 604800.0),
        connect_timeout=options.get("connect_timeout", 5.0),
    )
    options.setdefault("replay", None)
    return BrokerBus(StallingBroker(driver), **options)


def stored(server: PostgresServer, prefix: str, session: str) -> list[tuple[int, str]]:
    """The (seq, blob) rows of ``session``, read with psycopg directly."""
    with psycopg.connect(server.dsn) as conn:
        rows = conn.execute(
            f'SELECT seq, blob FROM "{prefix}_events" WHERE session = %s ORDER BY seq',
            (session,),
        ).fetchall()
    return [(int(seq), str(blob)) for seq, blob in rows]


def connections(server: PostgresServer) -> int:
    """The connections toolstream holds to the server now."""
    with psycopg.connect(server.dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'toolstream'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_postgres_bus_conforms(
    postgres_server: PostgresServer, check: Callable[[BusFactory], Awaitable[None]]
) -> None:
    await check(partial(make_bus, postgres_server))


def test_public_names_are_pinned() -> None:
    import toolstream.postgres

    assert sorted(toolstream.postgres.__all__) == [
        "OutboxOverflow",
        "PostgresBroker",
        "PostgresBus",
        "PostgresBusStats",
        "PostgresSubscription",
    ]
    for name in toolstream.postgres.__all__:
        assert getattr(toolstream.postgres, name).__doc__ or name == "OutboxOverflow"


def test_bad_arguments(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.dsn
    for prefix in ("", "9lives", "has-dash", "x" * 33, "a.b"):
        with pytest.raises(ValueError, match="prefix"):
            PostgresBus(dsn, prefix=prefix)
    with pytest.raises(ValueError, match="retention"):
        PostgresBus(dsn, retention=0)
    with pytest.raises(ValueError, match="outbox_overflow"):
        PostgresBus(dsn, outbox_overflow="drop-all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease"):
        PostgresBus(dsn, lease=0.01)
    with pytest.raises(ValueError, match="connect_timeout"):
        PostgresBus(dsn, connect_timeout=0)


def test_unreachable_postgres_is_a_clear_error() -> None:
    from tests.redis_server import free_port

    dsn = f"postgresql://me:hunter2@127.0.0.1:{free_port()}/app"
    with pytest.raises(ts.BusUnavailable, match=r"cannot reach PostgreSQL at 127\.0\.0\.1") as info:
        PostgresBus(dsn, connect_timeout=0.5)
    assert "hunter2" not in str(info.value), "the password must not be echoed"


async def test_postgres_bus_is_a_broker_bus_over_its_driver(
    postgres_server: PostgresServer,
) -> None:
    from toolstream.broker import Broker, BrokerBus

    async with make_bus(postgres_server, retention=3600) as bus:
        assert isinstance(bus, BrokerBus)
        assert isinstance(bus.broker, Broker)
        assert bus.replay is None, "history is kept by time, not by count"
        assert bus.retention == 3600.0
        assert bus.broker.where == f"PostgreSQL at 127.0.0.1:{postgres_server.port}/postgres"
        assert repr(bus).startswith(f"<PostgresBus 127.0.0.1:{postgres_server.port}/postgres")


async def test_subscription_survives_a_postgres_restart(own_postgres: PostgresServer) -> None:
    """SIGKILLed mid-stream and started again: the epoch is the same (it is stored), the
    subscription reconnects and continues exactly, no reset."""
    bus = make_bus(own_postgres)
    epoch = bus.epoch
    try:
        async with bus.subscribe(session="s", snapshot=True) as sub:
            published: list[ts.Event] = []
            got: list[ts.Event] = []
            for i in range(20):
                published.append(
                    bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                )
            got += await take(sub, 21)
            own_postgres.restart(kill=True)
            for i in range(20, 40):
                published.append(
                    bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                )
            got += await take(sub, 20, within=20)
            assert isinstance(got[0], ts.StreamReset)
            assert [e.id for e in got[1:]] == [e.id for e in published]
            # (Whether its reads failed depends on which of the pool's dead connections
            # they drew: the flusher's failure may have dropped them all first.)
        cursor = published[9].id
        async with bus.subscribe(session="s", after=cursor) as again:
            more = await take(again, 30)
            assert [e.id for e in more] == [e.id for e in published[10:]], "resumed exactly"
        assert bus.epoch == epoch and await bus.refresh_epoch() == epoch
        assert bus.stats.resets == 0
    finally:
        await bus.aclose()


async def test_lost_tables_give_a_reset_not_a_silent_gap(postgres_server: PostgresServer) -> None:
    bus = make_bus(postgres_server, lease=0.3)
    try:
        async with bus.subscribe(session="s", snapshot=True) as sub:
            bus.publish(ts.ToolStarted, session="s", call_id="old", tool="t")
            got = await take(sub, 2)
            cursor = got[-1].id
            with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
                for table in ("meta", "sessions", "events"):
                    conn.execute(f'DROP TABLE "{bus.prefix}_{table}"')
            await eventually(lambda: bus.epoch != cursor.rpartition("-")[0], within=20)
            bus.publish(ts.ToolStarted, session="s", call_id="new", tool="t")
            late = await take(sub, 1, within=20)
            assert isinstance(late[0], ts.StreamReset), late
        async with bus.subscribe(session="s", after=cursor) as sub:
            first = await take(sub, 1)
            assert isinstance(first[0], ts.StreamReset), "an old cursor is from another epoch"
    finally:
        await bus.aclose()


async def test_many_subscriptions_share_a_few_connections(
    postgres_server: PostgresServer,
) -> None:
    """A gateway holding hundreds of subscriptions: reads share the bus's pool, one
    connection listens; cancelled reads leave no connection behind."""
    bus = make_bus(postgres_server, pool=4)
    try:
        await bus.start()
        bus.publish(ts.ToolStarted, session="s0", call_id="c", tool="t")
        await bus.flush(timeout=5)
        subs = [bus.subscribe(session=f"s{i % 50}") for i in range(300)]
        for sub in subs:
            await sub.prepare()
        await anyio.sleep(0.3)
        assert connections(postgres_server) <= 4 + 1 + 1  # the pool, the listener, snapshot
        done = [
            bus.publish(ts.ToolProgress, session=f"s{i}", call_id="c", tool="t") for i in range(50)
        ]
        for sub in subs[:50]:
            got = await take(sub, 1)
            assert got[0].id == done[int((sub.session or "")[1:])].id
        for sub in subs:
            await sub.aclose()
        for _ in range(5):
            sub = bus.subscribe(session="s0")
            with anyio.move_on_after(0.2):  # cancelled while waiting
                async for _event in sub:
                    pass
            sub.close()
        assert connections(postgres_server) <= 4 + 1
        async with bus.subscribe(session="s0", snapshot=True) as sub:
            end = bus.publish(ts.ToolCompleted, session="s0", call_id="c", tool="t")
            got = await take(sub, 2)
            assert got[-1].id == end.id
        assert bus.driver._watches.keys() <= {"s0"}
    finally:
        await bus.aclose()
    assert connections(postgres_server) == 0


async def test_history_is_kept_by_time_and_resumes_exact(postgres_server: PostgresServer) -> None:
    """Events older than ``retention`` are deleted (after a checkpoint of the session's
    state); a cursor from before that gets a reset holding every call as it stands, a
    later cursor gets exactly what followed it."""
    bus = make_bus(postgres_server, retention=1.0, lease=0.3)
    try:
        await bus.start()
        early = bus.publish(ts.ToolStarted, session="s", call_id="early", tool="t")
        old = [early] + [
            bus.publish(ts.ToolProgress, session="s", call_id="early", tool="t", current=i)
            for i in range(50)
        ]
        bus.publish(ts.ToolStarted, session="s", call_id="mid", tool="t")
        bus.publish(ts.ToolCompleted, session="s", call_id="mid", tool="t", result=1)
        await bus.flush(timeout=5)
        await anyio.sleep(0.6)
        recent = [
            bus.publish(ts.ToolProgress, session="s", call_id="early", tool="t", current=i)
            for i in range(50, 60)
        ]
        await bus.flush(timeout=5)
        # Before the retention is over, a resume from the first event replays exactly.
        async with bus.subscribe(session="s", after=early.id) as sub:
            got = await take(sub, 62)
            assert [e.id for e in got[:50]] == [e.id for e in old[1:]]
        await eventually(lambda: len(stored(postgres_server, bus.prefix, "s")) == 10, within=10)
        async with bus.subscribe(session="s", after=early.id) as sub:
            reset = (await take(sub, 1))[0]
            assert isinstance(reset, ts.StreamReset)
            states = {c.call_id: c.state.value for c in reset.snapshot.calls}
            assert states == {"early": "running", "mid": "completed"}, states
        async with bus.subscribe(session="s", after=recent[4].id) as sub:
            got = await take(sub, 5)
            assert [e.id for e in got] == [e.id for e in recent[5:]]
        other = make_bus(postgres_server, prefix=bus.prefix)
        assert other.snapshot("s") == bus.snapshot("s")
        await other.aclose()
        # A session not written to for the retention is deleted entirely.
        await eventually(lambda: stored(postgres_server, bus.prefix, "s") == [], within=10)
        await eventually(lambda: bus.stats.expired >= 1, within=10)
        assert bus.snapshot("s").calls == ()
    finally:
        await bus.aclose()


async def test_a_reader_left_behind_by_retention_is_cut_not_gapped(
    postgres_server: PostgresServer,
) -> None:
    """A subscriber whose reader stalls while history older than the retention is
    deleted is cut with SlowConsumer (never silently handed a gap); resuming gives the
    reset it needs. (``reap=False``: this bus does not also delete the idle session.)"""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    bus = make_hooked_bus(postgres_server, prefix=prefix, retention=0.5, lease=0.3, reap=False)
    try:
        sub = bus.subscribe(session="s", buffer=10_000)
        await sub.prepare()
        with broker_checks.hooks(bus).stall("read"):  # the reader stalls
            published = [
                bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                for i in range(100)
            ]
            await bus.flush(timeout=5)
            await eventually(lambda: stored(postgres_server, prefix, "s") == [], within=10)
        got: list[ts.Event] = []

        async def read_all() -> None:
            async for event in sub:
                got.append(event)

        with pytest.raises(ts.SlowConsumer) as info, anyio.fail_after(10):
            await read_all()
        assert [e.id for e in got] == [e.id for e in published[: len(got)]], "no gap"
        async with bus.subscribe(session="s", after=info.value.last_id or sub.start_after) as again:
            first = await take(again, 1)
            assert isinstance(first[0], ts.StreamReset)
        await sub.aclose()
    finally:
        await bus.aclose()
