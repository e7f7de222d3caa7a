"""RedisBus: the Bus protocol on Redis Streams, for several processes sharing one stream.

A :class:`~toolstream._core.brokerbus.BrokerBus` over :class:`RedisBroker`: publishing
appends to a local outbox and returns at once; a flusher task writes the outbox to Redis
in pipelined, idempotent batches (one Lua script call each). A subscription reads its
session's stream with blocking XREAD on a connection of its own, into a private log that
the shared subscription machinery serves (filters, coalescing, cut-on-slow, batches), so
every broker bus behaves the same to a consumer.
"""

from __future__ import annotations

import time
from typing import Any

from toolstream._core.brokerbus import BrokerBus, BrokerBusStats, BrokerSubscription
from toolstream._core.outbox import OutboxOverflow
from toolstream._core.payload import PayloadPolicy
from toolstream._core.snapshots import DEFAULT_RESET_BYTES

from ._driver import RedisBroker

__all__ = ["OutboxOverflow", "RedisBus", "RedisBusStats", "RedisSubscription"]

#: A subscription of a :class:`RedisBus` (fed by blocking XREADs on a connection of its
#: own; it survives Redis restarts and releases its connection when closed or cut).
RedisSubscription = BrokerSubscription


class RedisBusStats(BrokerBusStats):
    """Counters of a :class:`RedisBus` in this process (read with ``bus.stats``)."""


class RedisBus(BrokerBus):
    """A :class:`~toolstream.Bus` on Redis Streams: every process using the same Redis
    and ``prefix`` shares one live, resumable stream per session.

    - ``url``: a ``redis://`` / ``rediss://`` / ``unix://`` URL (standalone Redis 7+).
    - ``replay``: events kept per session for resuming (the stream is trimmed past it,
      after a checkpoint of the session's state is stored).
    - ``session_ttl``: a session with no new event for this long is deleted from Redis.
    - ``outbox``: events kept locally while Redis is unreachable; past it
      ``outbox_overflow`` applies.
    - ``lease``: seconds a process may go without renewing its lease before another
      process closes its open calls as ``cancelled`` with reason ``"worker lost"``.
    - ``reap``: whether this process closes the calls of lost writers (any process can).
    - ``connect_timeout``: how long construction and a subscription's first read may
      wait for Redis before :class:`~toolstream.BusUnavailable`.
    - ``reset_bytes``: the most a ``stream.reset`` holds (as on ``EventBus``).
    - ``payload``: shapes what a decision publishes (as on ``EventBus``).
    - ``cluster``: ``url`` names a node of a Redis Cluster (None: ask the server). Every
      key of a session is in one hash slot (``{prefix:session}``), the shared keys in
      another (``{prefix}``), so sessions spread over the masters.

    Approvals are arbitrated in Redis (one script per decision): whichever process
    decides first wins, every other gets ``ApprovalAlreadyResolved``.

    Construction talks to Redis once (synchronously) to learn the keyspace's epoch.
    Runs on asyncio only. Use as ``async with RedisBus(url) as bus:`` (or ``await
    bus.start()`` in your main loop and ``await bus.aclose()`` at the end).
    """

    _stats_type = RedisBusStats

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "toolstream",
        replay: int = 1_000,
        session_ttl: float = 3600.0,
        outbox: int = 100_000,
        outbox_overflow: OutboxOverflow = "drop-deltas",
        lease: float = 10.0,
        reap: bool = True,
        connect_timeout: float = 5.0,
        batch: int = 512,
        clock: Any = time.time,
        max_finished: int = 500,
        reset_bytes: int = DEFAULT_RESET_BYTES,
        payload: PayloadPolicy | None = None,
        cluster: bool | None = None,
    ) -> None:
        driver = RedisBroker(
            url,
            prefix=prefix,
            session_ttl=session_ttl,
            connect_timeout=connect_timeout,
            cluster=cluster,
        )
        self._driver = driver
        self.url = url
        self.prefix = prefix
        self.session_ttl = session_ttl
        super().__init__(
            driver,
            replay=replay,
            outbox=outbox,
            outbox_overflow=outbox_overflow,
            lease=lease,
            reap=reap,
            connect_timeout=connect_timeout,
            batch=batch,
            clock=clock,
            max_finished=max_finished,
            reset_bytes=reset_bytes,
            payload=payload,
        )
        #: Whether ``url`` is a Redis Cluster.
        self.cluster = bool(driver.cluster)

    def __repr__(self) -> str:
        return (
            f"<RedisBus {self._driver.where[len('Redis at ') :]} prefix={self.prefix!r} "
            f"epoch={self.epoch} outbox={len(self.outbox)}>"
        )
