"""RedisBus on a real Redis Cluster (three masters, one replica each, created by the
tests with ``redis-cli --cluster create``): the conformance suite, sessions spread over
the masters, and a master lost mid-stream."""

from __future__ import annotations

import gc
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import anyio
import pytest

import toolstream as ts
from tests import broker_checks
from tests.redis_server import RedisClusterServers, require_redis
from tests.servers import take
from tests.test_redis_bus import make_hooked_bus
from toolstream.redis import RedisBus
from toolstream.testing import BusFactory, bus_conformance_checks

# redis-py 8.1's asyncio cluster client can drop its node objects without closing them
# (a command cancelled while it rediscovers the cluster: RedisBus then closes the nodes
# it still knows, see RedisBus.aclose). What the garbage collector finds of them warns
# here; these tests ignore those warnings, and collect before leaving the module.
pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore:Unclosed ClusterNode object:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Unclosed RedisCluster client:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed Connection <redis:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:loop is closed:ResourceWarning"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py has no trio support


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    require_redis()
    cluster = RedisClusterServers(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_redis_bus_on_a_cluster_conforms(
    redis_cluster: RedisClusterServers, check: Callable[[BusFactory], Awaitable[None]]
) -> None:
    def make() -> RedisBus:
        bus = RedisBus(redis_cluster.url, prefix=f"t{uuid.uuid4().hex[:10]}")
        assert bus.cluster, "a cluster is detected"
        return bus

    await check(make)


async def test_sessions_spread_over_the_masters(redis_cluster: RedisClusterServers) -> None:
    """Each session's keys sit in one slot; different sessions land on different masters
    (that is the point of a cluster), and every script ran without a cross-slot error."""
    bus = RedisBus(redis_cluster.url, prefix=f"t{uuid.uuid4().hex[:10]}")
    try:
        tracker_sessions = [f"chat-{i}" for i in range(12)]
        for session in tracker_sessions:
            tracker = ts.Tracker(bus, session)
            async with tracker.call("search", {"q": session}, approval=None) as call:
                call.complete(1)
        await bus.flush(timeout=10)
        nodes = {redis_cluster.owner(f"{{{bus.prefix}:{s}}}:s").port for s in tracker_sessions}
        assert len(nodes) >= 2, nodes
        for session in tracker_sessions:
            snap = await bus.fetch_snapshot(session)
            assert [c.state.value for c in snap.calls] == ["completed"]
        assert bus.stats.refused == 0 and bus.stats.dropped == 0
    finally:
        await bus.aclose()


async def test_a_master_lost_mid_stream(tmp_path: Any) -> None:
    """A master is SIGKILLed while a session on it streams; its replica is promoted. The
    writer and the subscriber carry on: every event published after the failover is
    delivered, ids strictly increasing, nothing twice. Redis replication is
    asynchronous: events acknowledged by the old master in its last moments may be
    missing from the promoted replica's history (counted here, not promised away)."""
    require_redis()
    cluster = RedisClusterServers(tmp_path)
    cluster.start()
    bus = RedisBus(cluster.url, prefix=f"t{uuid.uuid4().hex[:10]}", connect_timeout=10)
    try:
        session = "s"
        key = f"{{{bus.prefix}:{session}}}:s"
        victim = cluster.owner(key)
        other = next(n for n in cluster.nodes if n is not victim)
        reader = RedisBus(f"redis://127.0.0.1:{other.port}/0", prefix=bus.prefix)
        async with reader.subscribe(session=session, snapshot=True) as sub:
            before = [
                bus.publish(ts.ToolProgress, session=session, call_id="c", tool="t", current=i)
                for i in range(50)
            ]
            await bus.flush(timeout=10)
            got = await take(sub, 51)
            # Replication is asynchronous: what the replica has not received when its
            # master dies is lost (subscribers then get a reset, never a silent gap).
            # Here the replica has caught up, so nothing is lost.
            assert victim.command(b"WAIT 1 200").startswith(b":1")
            victim.stop(kill=True)
            after = []
            for i in range(50, 100):
                after.append(
                    bus.publish(ts.ToolProgress, session=session, call_id="c", tool="t", current=i)
                )
                await anyio.sleep(0.02)
            await bus.flush(timeout=30)
            got += await take(sub, 50, within=30)
        seen = [e for e in got if not isinstance(e, ts.StreamReset)]
        seqs = [int(e.id.rpartition("-")[2]) for e in seen]
        assert seqs == sorted(set(seqs)), "strictly increasing, nothing twice"
        assert [e.id for e in seen[-50:]] == [e.id for e in after], "all after the failover"
        assert [e.id for e in seen[:50]] == [e.id for e in before]
        snap = await reader.fetch_snapshot(session)
        assert [c.call_id for c in snap.calls] == ["c"]
        assert bus.stats.dropped == 0
        await reader.aclose()
    finally:
        await bus.aclose()
        cluster.stop()


def _cluster_bus(cluster: RedisClusterServers, **options: Any) -> RedisBus:
    options.setdefault("prefix", f"t{uuid.uuid4().hex[:10]}")
    return RedisBus(cluster.url, **options)


#: The broker checks on a cluster: all but those that stop the broker (a whole cluster
#: stopped is the single server's case; a lost master is tested above).
CLUSTER_CHECKS = [(c, kind) for c, kind in broker_checks.CHECKS if kind != "outage"]


@pytest.mark.parametrize(
    ("check", "kind"), CLUSTER_CHECKS, ids=[c.__name__ for c, _ in CLUSTER_CHECKS]
)
async def test_broker_check_on_a_cluster(
    redis_cluster: RedisClusterServers, check: Callable[..., Awaitable[None]], kind: str
) -> None:
    make = make_hooked_bus if kind == "hooked" else _cluster_bus
    await check(partial(make, redis_cluster))
