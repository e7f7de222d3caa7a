"""NatsBus: the Bus protocol on NATS JetStream, for several processes sharing one stream.

A :class:`~toolstream._core.brokerbus.BrokerBus` over :class:`NatsBroker`. One stream
holds every session (subject ``<prefix>.<session token>``); an event's id is
``"<epoch>-<stream sequence>"``, the epoch naming the stream's creation. Publishing
appends to the shared outbox and returns at once; the flusher publishes batches
pipelined, each message asking for its exact sequence (``Nats-Expected-Last-
Sequence``), so the stream's order is the publisher's order even across a lost
connection, and a retried message is recognised by its ``Nats-Msg-Id`` at the sequence
it asked for. Three KV buckets hold what must be decided once: ``<prefix>_ck`` the
sessions' checkpoints, ``<prefix>_ap`` the approvals (compare-and-swap: one decision
wins), ``<prefix>_w`` the writers' leases and open calls (compare-and-swap: one reaper
per lost writer, and a fenced writer finds out before it writes). docs/decisions.md
records each mapping.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import attrs

from toolstream._core.broker import BrokerStart, SessionState
from toolstream._core.brokerbus import BrokerBus, BrokerBusStats, BrokerSubscription, bus_options
from toolstream._core.events import Event
from toolstream._core.outbox import OutboxOverflow
from toolstream._core.payload import PayloadPolicy
from toolstream._core.snapshots import DEFAULT_RESET_BYTES
from toolstream._core.start import StartRequest
from toolstream._core.wake import current_backend

from ._driver import NatsBroker

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsBus", "NatsBusStats", "NatsSubscription"]

_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}")

E_co = TypeVar("E_co", bound=Event, covariant=True)


class NatsSubscription(BrokerSubscription[E_co]):
    """A subscription of a :class:`NatsBus`: fed by an ephemeral JetStream pull consumer
    on the session's subject, made again from its cursor whenever it is lost; it
    notices a purge that overtook it and cuts rather than skip events, and a stream
    that lost its data and delivers a reset.

    Without a cursor it starts live after the events stamped at or before the
    ``subscribe`` call, whichever process published them: NATS numbers events by the
    publisher's prediction of the stream's sequence, which says nothing of when
    another process published (a sequence is a time on Redis, where ids come from the
    writer's clock)."""

    def __init__(
        self,
        bus: NatsBus,
        session: str,
        *,
        request: StartRequest,
        since: int,
        barrier: int,
    ) -> None:
        super().__init__(bus, session, request=request, since=since, barrier=barrier)
        self._since_ts = bus.clock()
        self._expired = False

    async def _read_touched(
        self,
        read: Callable[[], Awaitable[SessionState]],
        expire: Callable[[SessionState], Awaitable[bool]],
    ) -> tuple[SessionState, bool]:
        state, self._expired = await super()._read_touched(read, expire)
        return state, self._expired

    async def _read_start(self) -> BrokerStart:
        start = await super()._read_start()
        if self._expired:  # touched approvals: the start shows them resolved
            return start
        retained, since = start.retained, self._since_ts
        live = retained.floor
        seqs = retained.seqs
        for k, event in enumerate(retained.events):
            if event.ts <= since:
                live = seqs[k]
        if not retained.events or retained.events[-1].ts <= since:
            live = start.last_seq
        return attrs.evolve(start, live_seq=live)


class NatsBusStats(BrokerBusStats):
    """Counters of a :class:`NatsBus` in this process (read with ``bus.stats``); events
    are ``renumbered`` when another process wrote to the stream between their
    prediction and their write."""


class NatsBus(BrokerBus):
    """A :class:`~toolstream.Bus` on NATS JetStream: every process using the same NATS
    (server or cluster) and ``prefix`` shares one live, resumable stream per session.

    - ``servers``: a ``nats://`` URL or a list of them (a cluster's servers).
    - ``prefix``: names the stream, its subjects (``<prefix>.<session>``) and the KV
      buckets ``<prefix>_ck``, ``<prefix>_ap``, ``<prefix>_w``; two apps with different
      prefixes share one NATS without colliding. Letters, digits, ``_``, ``-``.
    - ``replicas``: the stream's and buckets' replicas (3 on a three-server cluster).
    - ``replay``: events kept per session for resuming (older ones are purged after a
      checkpoint of the session's state is stored).
    - ``session_ttl``: a session with no new event for this long is purged.
    - ``outbox`` / ``outbox_overflow``: events kept locally while NATS is unreachable.
    - ``lease``: seconds a process may go without renewing its lease before another
      process closes its open calls as ``cancelled`` with reason ``"worker lost"``.
    - ``reap``: whether this process closes the calls of lost writers and purges
      expired sessions (any process can).
    - ``connect_timeout``: how long construction and a subscription's first read may
      wait for NATS before :class:`~toolstream.BusUnavailable`.
    - ``request_timeout``: how long one JetStream request waits for its answer before
      it is asked again (a cluster electing a leader answers nothing at all, and a
      request sent then must not hold a read for the whole ``connect_timeout``).

    Construction connects once (on a thread of its own) to create what is missing —
    the stream and the buckets, with ``replicas`` — and to learn the stream's epoch;
    an existing stream is used as it is. Runs on asyncio only. Use as ``async with
    NatsBus(url) as bus:`` (or ``await bus.start()`` and ``await bus.aclose()``).
    """

    _stats_type = NatsBusStats
    _subscription_type = NatsSubscription

    def __init__(
        self,
        servers: str | Sequence[str] = "nats://127.0.0.1:4222",
        *,
        prefix: str = "toolstream",
        replicas: int = 1,
        replay: int = 1_000,
        session_ttl: float = 3600.0,
        outbox: int = 100_000,
        outbox_overflow: OutboxOverflow = "drop-deltas",
        lease: float = 10.0,
        reap: bool = True,
        connect_timeout: float = 5.0,
        request_timeout: float = 2.0,
        batch: int = 256,
        clock: Callable[[], float] = time.time,
        max_finished: int = 500,
        reset_bytes: int = DEFAULT_RESET_BYTES,
        payload: PayloadPolicy | None = None,
    ) -> None:
        if isinstance(servers, str):
            servers = [servers]
        servers = list(servers)
        if not servers or not all(isinstance(s, str) and s for s in servers):
            raise ValueError(f"servers must be a URL or a list of URLs, got {servers!r}")
        if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
            raise ValueError(
                f"prefix must be 1-32 letters, digits, '_' or '-' (it names a stream), "
                f"got {prefix!r}"
            )
        if replicas not in (1, 2, 3, 4, 5):
            raise ValueError(f"replicas must be 1 to 5, got {replicas!r}")
        if replay < 4:
            raise ValueError(f"replay must be at least 4, got {replay}")
        if not session_ttl >= 1:
            raise ValueError(f"session_ttl must be at least 1 second, got {session_ttl}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        if not request_timeout > 0:
            raise ValueError(f"request_timeout must be positive, got {request_timeout}")
        self.servers = servers
        self.prefix = prefix
        self.replicas = replicas
        self.session_ttl = session_ttl
        self.request_timeout = min(request_timeout, connect_timeout)
        driver = NatsBroker(
            servers,
            prefix=prefix,
            replicas=replicas,
            replay=replay,
            session_ttl=session_ttl,
            lease=lease,
            connect_timeout=connect_timeout,
            request_timeout=self.request_timeout,
        )
        #: The stream, subjects and buckets of ``prefix``.
        self.names = driver.names
        driver.on_new_epoch = self._new_epoch
        super().__init__(driver, **bus_options(locals()))
        self._driver = driver

    def __repr__(self) -> str:
        return (
            f"<NatsBus {self._driver.conn.where} prefix={self.prefix!r} epoch={self.epoch} "
            f"outbox={len(self.outbox)}>"
        )

    def _require_asyncio(self, what: str) -> None:
        """``RuntimeError`` unless running on asyncio (nats-py has no trio support)."""
        if current_backend() != "asyncio":
            raise RuntimeError(
                f"NatsBus {what} runs on asyncio only (nats-py has no trio support); "
                "use EventBus under trio, or run the gateway on asyncio"
            )

    def _new_epoch(self, epoch: str) -> None:
        """The stream was found made anew (a server that lost its store): event ids carry
        the new epoch, and sequences restart in its numbering, at once (clients resuming
        get a reset)."""
        logger.warning(
            "stream %s has a new epoch (%s, was %s): its data was lost; "
            "clients resuming get a reset",
            self.names.stream,
            epoch,
            self.epoch,
        )
        with self._lock:
            self.epoch = epoch
            self._last = 0

    async def reap_lost(self) -> int:
        """Close (``tool.cancelled``, reason ``"worker lost"``) the open calls and runs of
        every writer whose lease ran out; returns how many events that wrote. A writer
        is lost when its lease entry has not changed for its ``lease`` seconds as this
        process's clock measures (no clocks are compared across hosts); exactly one
        process reaps it (compare-and-swap on the entry). Runs every ``lease / 3``
        seconds on its own when ``reap=True``."""
        return await super().reap_lost()

    async def expire_sessions(self) -> int:
        """Purge every session with no event for ``session_ttl`` seconds (its messages
        and checkpoint); returns how many. Runs on its own when ``reap=True``."""
        self._require_asyncio("expire_sessions()")
        n = await self._driver.expire_now()
        self._stats.expired += n
        return n
