"""RedisBus against a real redis-server: the Bus conformance suite and the broker parts."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import redis

import toolstream as ts
from tests.redis_server import RedisClusterServers, RedisServer
from tests.servers import eventually, take
from toolstream.broker import BrokerBus
from toolstream.redis import RedisBus
from toolstream.redis._driver import RedisBroker
from toolstream.testing import BusFactory, StallingBroker, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # redis-py has no trio support; test_trio_is_refused checks the error trio gets.
    return "asyncio"


def bus_factory(server: RedisServer, **options: object) -> BusFactory:
    def make() -> RedisBus:
        return RedisBus(server.url, prefix=f"t{uuid.uuid4().hex[:10]}", **options)  # type: ignore[arg-type]

    return make


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_redis_bus_conforms(
    redis_server: RedisServer, check: Callable[[BusFactory], Awaitable[None]]
) -> None:
    await check(bus_factory(redis_server))


def make_bus(server: RedisServer, **options: Any) -> RedisBus:
    options.setdefault("prefix", f"t{uuid.uuid4().hex[:10]}")
    return RedisBus(server.url, **options)


def make_hooked_bus(server: RedisServer | RedisClusterServers, **options: Any) -> BrokerBus:
    """A RedisBus with test hooks, for the broker checks that need a broker to misbehave:
    ``BrokerBus`` over ``StallingBroker(RedisBroker(...))``, as RedisBus is built."""
    driver = RedisBroker(
        server.url,
        prefix=options.pop("prefix", None) or f"t{uuid.uuid4().hex[:10]}",
        session_ttl=options.pop("session_ttl", 3600.0),
        connect_timeout=options.get("connect_timeout", 5.0),
        cluster=None,
    )
    return BrokerBus(StallingBroker(driver), **options)


def raw(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


def test_bad_arguments(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="prefix"):
        RedisBus(redis_server.url, prefix="")
    with pytest.raises(ValueError, match="replay"):
        RedisBus(redis_server.url, replay=0)
    with pytest.raises(ValueError, match="outbox_overflow"):
        RedisBus(redis_server.url, outbox_overflow="drop-all")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease"):
        RedisBus(redis_server.url, lease=0.01)


async def test_redis_bus_is_a_broker_bus_over_its_driver(redis_server: RedisServer) -> None:
    from toolstream.broker import Broker, BrokerBus

    async with make_bus(redis_server) as bus:
        assert isinstance(bus, BrokerBus)
        assert isinstance(bus.broker, Broker)
        assert bus.broker.where.startswith("Redis at redis://127.0.0.1:")


def test_unreachable_redis_is_a_clear_error() -> None:
    from tests.redis_server import free_port

    url = f"redis://user:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(ts.BusUnavailable, match="cannot reach Redis") as info:
        RedisBus(url, connect_timeout=0.5)
    assert "hunter2" not in str(info.value), "the password must not be echoed"


async def test_subscription_survives_a_redis_restart(own_redis: RedisServer) -> None:
    bus = make_bus(own_redis)
    try:
        async with bus.subscribe(session="s", snapshot=True) as sub:
            published: list[ts.Event] = []
            got: list[ts.Event] = []
            for i in range(20):
                published.append(
                    bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                )
            got += await take(sub, 21)
            own_redis.restart(kill=True)  # appendfsync always: nothing acknowledged is lost
            for i in range(20, 40):
                published.append(
                    bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                )
            got += await take(sub, 20, within=20)
            assert isinstance(got[0], ts.StreamReset)
            assert [e.id for e in got[1:]] == [e.id for e in published]
            assert sub.reconnects >= 1
    finally:
        await bus.aclose()


async def test_data_loss_gives_a_reset_not_a_silent_gap(own_redis: RedisServer) -> None:
    bus = make_bus(own_redis)
    try:
        async with bus.subscribe(session="s", snapshot=True) as sub:
            bus.publish(ts.ToolStarted, session="s", call_id="old", tool="t")
            got = await take(sub, 2)
            cursor = got[-1].id
            own_redis.restart(kill=True, wipe=True)  # Redis comes back empty
            with anyio.fail_after(20):
                while True:
                    try:
                        await bus.flush(timeout=0)
                    except TimeoutError:
                        pass
                    if bus.epoch != cursor.rpartition("-")[0]:
                        break
                    bus.publish(ts.ToolProgress, session="x", call_id="c", tool="t")
                    await anyio.sleep(0.1)
            late = await take(sub, 1, within=20)
            assert isinstance(late[0], ts.StreamReset), late
        async with bus.subscribe(session="s", after=cursor) as sub:
            first = await take(sub, 1)
            assert isinstance(first[0], ts.StreamReset), "an old cursor is from another epoch"
    finally:
        await bus.aclose()


async def test_cancelled_reads_do_not_poison_connections(redis_server: RedisServer) -> None:
    bus = make_bus(redis_server)
    r = raw(redis_server)

    def connections() -> int:
        return len(r.client_list())

    try:
        await bus.start()
        bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
        await bus.flush(timeout=5)
        baseline = connections()
        for _ in range(5):
            sub = bus.subscribe(session="s")
            with anyio.move_on_after(0.2):  # cancelled while blocked in XREAD
                async for _event in sub:
                    pass
            await sub.aclose()
        await eventually(lambda: connections() <= baseline)
        for _ in range(5):  # closed without waiting (what a transport's finally does)
            sub = bus.subscribe(session="s")
            with anyio.move_on_after(0.2):
                async for _event in sub:
                    pass
            sub.close()
        await eventually(lambda: connections() <= baseline, within=2.0)
        async with bus.subscribe(session="s", snapshot=True) as sub:
            done = bus.publish(ts.ToolCompleted, session="s", call_id="c", tool="t")
            got = await take(sub, 2)
            assert got[-1].id == done.id
        assert bus.snapshot("s").calls[0].state.value == "completed"
    finally:
        await bus.aclose()
        r.close()


async def test_trimming_keeps_memory_bounded_and_resumes_exact(redis_server: RedisServer) -> None:
    bus = make_bus(redis_server, replay=20)
    r = raw(redis_server)
    try:
        early = bus.publish(ts.ToolStarted, session="s", call_id="early", tool="t")
        events: list[ts.Event] = [early]
        for i in range(300):
            events.append(
                bus.publish(ts.ToolProgress, session="s", call_id="early", tool="t", current=i)
            )
            if i == 150:
                bus.publish(ts.ToolStarted, session="s", call_id="mid", tool="t")
                bus.publish(ts.ToolCompleted, session="s", call_id="mid", tool="t", result=1)
        await bus.flush(timeout=5)
        length = r.xlen(f"{{{bus.prefix}:s}}:s")
        assert 20 <= length <= 20 + 5 + 512, length
        # A cursor trimmed away: a reset whose snapshot has every call as it stands.
        async with bus.subscribe(session="s", after=early.id) as sub:
            reset = (await take(sub, 1))[0]
            assert isinstance(reset, ts.StreamReset)
            states = {c.call_id: c.state.value for c in reset.snapshot.calls}
            assert states == {"early": "running", "mid": "completed"}, states
        # A recent cursor: exactly the events after it.
        async with bus.subscribe(session="s", after=events[-5].id) as sub:
            got = await take(sub, 4)
            assert [e.id for e in got] == [e.id for e in events[-4:]]
        # Another process computes the same snapshot.
        other = RedisBus(redis_server.url, prefix=bus.prefix)
        assert other.snapshot("s") == bus.snapshot("s")
        await other.aclose()
    finally:
        await bus.aclose()
        r.close()


async def test_session_ttl_expires_keys(redis_server: RedisServer) -> None:
    bus = make_bus(redis_server, session_ttl=1)
    r = raw(redis_server)
    try:
        bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
        await bus.flush(timeout=5)
        assert r.exists(f"{{{bus.prefix}:s}}:s")
        assert 0 < r.ttl(f"{{{bus.prefix}:s}}:s") <= 1
        await eventually(lambda: not r.exists(f"{{{bus.prefix}:s}}:s"))
    finally:
        await bus.aclose()
        r.close()


async def test_outbox_overflow_drops_deltas_and_keeps_lifecycle(own_redis: RedisServer) -> None:
    bus = make_bus(own_redis, outbox=10)
    try:
        await bus.start()
        own_redis.stop()
        bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
        for i in range(50):
            bus.publish(ts.ToolOutputDelta, session="s", call_id="c", tool="t", text=str(i))
        done = bus.publish(ts.ToolCompleted, session="s", call_id="c", tool="t")
        assert bus.stats.dropped >= 40
        own_redis.start()
        await bus.flush(timeout=10)
        snap = bus.snapshot("s")
        assert snap.calls[0].state.value == "completed"
        async with bus.subscribe(session="s", after=f"{bus.epoch}-0") as sub:
            got = await take(sub, 11)
            assert got[0].type == "tool.started" and got[-1].id == done.id
    finally:
        await bus.aclose()


async def test_malformed_entries_are_skipped(redis_server: RedisServer) -> None:
    bus = make_bus(redis_server)
    r = raw(redis_server)
    try:
        async with bus.subscribe(session="s", snapshot=True) as sub:
            await take(sub, 1)
            r.xadd(f"{{{bus.prefix}:s}}:s", {"e": "{not json"})
            r.xadd(f"{{{bus.prefix}:s}}:s", {"other": "field"})
            bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
            got = await take(sub, 1)
            # The foreign entries used Redis's clock: ours comes after them, renumbered.
            assert [(e.type, e.call_id) for e in got] == [("tool.started", "c")]
    finally:
        await bus.aclose()
        r.close()
