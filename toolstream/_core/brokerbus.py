"""BrokerBus: the Bus protocol over a broker driver, for several processes sharing one
live, resumable stream per session.

Everything a broker-backed bus does is here, once: its options and their checks, the
outbox (publishing appends to it and returns at once; a flusher writes batches through
the driver, retrying while the broker is away), start and close, subscribe / resume /
snapshot, the approvals front, the lease and the reaping of lost writers, the stats.
The driver (:class:`~toolstream._core.driver.Broker`) holds the connection and what
differs between brokers: how ids are numbered, the atomic append, range reads, waiting
for more, the lease records, the atomic approval decision. ``RedisBus``, ``NatsBus``
and ``PostgresBus`` are this class over their drivers; ``BrokerBus(MemoryBroker())``
runs with no server.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar

import attrs
from typing_extensions import Self

from .approvals import Decision, check_decision
from .broker import SessionState, due_approvals, expire_due, stop_task
from .brokerapprovals import BrokerArbiter
from .brokerstate import parse_state, records
from .brokersub import BrokerSubscription
from .build import prepare
from .codec import to_dict
from .driver import Broker
from .errors import BusClosed, BusUnavailable
from .events import ApprovalResolved, Event, Snapshot, StreamReset
from .ids import compare_ids, event_seq, make_id
from .jsonenc import dumps
from .outbox import CheckpointMarks, Outbox, OutboxOverflow
from .payload import PayloadPolicy, default_policy
from .snapshots import DEFAULT_RESET_BYTES, bound_snapshot
from .start import Overflow, StartRequest, resume_request, subscribe_request
from .subscription import FeederStats
from .wake import current_backend

logger = logging.getLogger("toolstream.broker")

__all__ = [
    "BrokerBus",
    "BrokerBusStats",
    "BrokerSubscription",
    "BusOptions",
    "OutboxOverflow",
    "bus_options",
]

E = TypeVar("E", bound=Event)


#: The options of :class:`BrokerBus` (after its driver), as a driver's bus takes them.
BUS_OPTIONS = (
    "replay",
    "outbox",
    "outbox_overflow",
    "lease",
    "reap",
    "connect_timeout",
    "batch",
    "clock",
    "max_finished",
    "reset_bytes",
    "payload",
)


class BusOptions(TypedDict, total=False):
    """:class:`BrokerBus`'s options but ``replay``, for a driver's bus that takes them
    as ``**options`` (``PostgresBus``); each means what it means on ``BrokerBus``."""

    outbox: int
    outbox_overflow: OutboxOverflow
    lease: float
    reap: bool
    connect_timeout: float
    batch: int
    clock: Callable[[], float]
    max_finished: int
    reset_bytes: int
    payload: PayloadPolicy | None


def bus_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """:class:`BrokerBus`'s options among ``given`` (a driver's bus passes its
    ``locals()``: ``super().__init__(driver, **bus_options(locals()))``)."""
    return {name: given[name] for name in BUS_OPTIONS if name in given}


@attrs.define
class BrokerBusStats:
    """Counters of a broker-backed bus in this process (read with ``bus.stats``)."""

    #: Events published in this process.
    published: int = 0
    #: Events written to the broker.
    flushed: int = 0
    #: Events found already written when a batch was retried (not written twice).
    duplicates: int = 0
    #: Events written under another id because another writer's events were ahead.
    renumbered: int = 0
    #: Events dropped because their call was closed elsewhere (a reaper after this
    #: process's lease ran out, or a denial), or their approval was decided already.
    fenced: int = 0
    #: Events the outbox dropped while the broker was unreachable (``outbox_overflow``).
    dropped: int = 0
    #: Events waiting in the outbox now.
    outbox: int = 0
    #: Failed attempts to write a batch (retried, unless the broker refused it).
    flush_errors: int = 0
    #: Events the broker refused with an error retrying cannot cure (dropped, logged;
    #: the next ``flush()`` raises ``BusUnavailable`` saying so).
    refused: int = 0
    #: Calls and runs this process closed for writers whose lease ran out.
    reaped: int = 0
    #: Sessions this process deleted after their time to live without an event.
    expired: int = 0
    #: Subscriptions cut with ``SlowConsumer``.
    cut: int = 0
    #: Events merged away by ``overflow="coalesce"`` subscriptions.
    coalesced: int = 0
    #: Resets delivered because a cursor could not be served.
    resets: int = 0


class BrokerBus:
    """A :class:`~toolstream.Bus` over a broker ``driver``: every process whose driver
    reaches the same broker (and prefix) shares one live, resumable stream per session.

    - ``replay``: events kept per session for resuming (older ones are deleted after a
      checkpoint of the session's state is stored); None when the driver keeps history
      by time (``PostgresBus``'s ``retention``).
    - ``outbox``: events kept locally while the broker is unreachable; past it
      ``outbox_overflow`` applies.
    - ``lease``: seconds a process may go without renewing its lease before another
      process closes its open calls as ``cancelled`` with reason ``"worker lost"``.
    - ``reap``: whether this process closes the calls of lost writers (any process can)
      and deletes expired sessions.
    - ``connect_timeout``: how long construction and a subscription's first read may
      wait for the broker before :class:`~toolstream.BusUnavailable`.
    - ``batch``: the most events written in one step.
    - ``clock``: the wall clock events are stamped with.
    - ``max_finished``, ``reset_bytes``, ``payload``: as on ``EventBus``.

    Approvals are decided by the driver in one atomic step: whichever process decides
    first wins, every other gets ``ApprovalAlreadyResolved``.

    Construction talks to the broker once (synchronously) to learn its epoch. Runs on
    asyncio only. Use as ``async with bus:`` (or ``await bus.start()`` in your main
    loop and ``await bus.aclose()`` at the end).
    """

    _stats_type: type[BrokerBusStats] = BrokerBusStats
    #: What :meth:`subscribe` and :meth:`resume` make (a driver's bus may start live
    #: subscriptions its own way: ``NatsBus`` by the events' times).
    _subscription_type: type[BrokerSubscription[Any]] = BrokerSubscription

    def __init__(
        self,
        broker: Broker,
        *,
        replay: int | None = 1_000,
        outbox: int = 100_000,
        outbox_overflow: OutboxOverflow = "drop-deltas",
        lease: float = 10.0,
        reap: bool = True,
        connect_timeout: float = 5.0,
        batch: int = 512,
        clock: Callable[[], float] = time.time,
        max_finished: int = 500,
        reset_bytes: int = DEFAULT_RESET_BYTES,
        payload: PayloadPolicy | None = None,
    ) -> None:
        if not isinstance(broker, Broker):
            raise TypeError(f"broker must be a toolstream Broker driver, got {broker!r}")
        if replay is not None and replay < 1:
            raise ValueError(f"replay must be at least 1, got {replay}")
        if not lease >= 0.3:
            raise ValueError(f"lease must be at least 0.3 seconds, got {lease}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        #: The driver: the connection and what differs between brokers.
        self.broker = broker
        self.replay = replay
        self.outbox_limit = outbox
        self.outbox_overflow: OutboxOverflow = outbox_overflow
        self.lease = lease
        self.reap = reap
        self.connect_timeout = connect_timeout
        self.batch = batch
        #: The wall clock events are stamped with.
        self.clock = clock
        self._max_finished = max_finished
        self.reset_bytes = reset_bytes
        #: What a decision publishes goes through this policy.
        self.payload = payload if payload is not None else default_policy()
        #: This process's writer token: its lease and open calls are filed under it.
        self.token = secrets.token_hex(8)
        #: The outbox: events published and not yet written.
        self.outbox = Outbox(outbox, outbox_overflow, broker=broker.where, start=self.start_here)
        self._lock = self.outbox.lock  # also guards the ids assigned here
        try:
            #: The broker's epoch: every event id carries it.
            self.epoch = broker.open(connect_timeout)
        except broker.retryable as exc:
            raise BusUnavailable(f"cannot reach {broker.where}: {exc}") from exc
        self._last = 0  # the newest id number assigned here
        self._stats = self._stats_type()
        #: Counters the subscriptions share (cut, coalesced, resets).
        self.feeder_stats = FeederStats()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._started: asyncio.Event | None = None
        self._subs: set[BrokerSubscription[Any]] = set()
        self._registered = False  # this process wrote events (holds a lease)
        self._marks = CheckpointMarks(replay) if replay is not None else None
        self._wrote_to: set[str] = set()  # sessions registered under this writer
        self._arbiter = BrokerArbiter(self)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.broker.where} epoch={self.epoch} "
            f"outbox={len(self.outbox)}>"
        )

    def _require_asyncio(self, what: str) -> None:
        """``RuntimeError`` unless running on asyncio (broker clients are asyncio-only)."""
        if current_backend() != "asyncio":
            raise RuntimeError(
                f"{self.broker.name} {what} runs on asyncio only (its client has no trio "
                "support); use EventBus under trio, or run the gateway on asyncio"
            )

    # -- state -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    @property
    def stats(self) -> BrokerBusStats:
        """Counters of this process: published, flushed, duplicates skipped, dropped..."""
        stats = self._stats
        counts = self.outbox.counts
        stats.published = counts.published
        stats.dropped = counts.dropped
        stats.flush_errors = counts.flush_errors
        stats.refused = counts.refused
        stats.outbox = len(self.outbox)
        stats.cut = self.feeder_stats.cut
        stats.coalesced = self.feeder_stats.coalesced
        return stats

    def count_reset(self) -> None:
        """A subscription delivered a reset because the broker lost its data."""
        self._stats.resets += 1

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as id ``a`` is before, equal to or after ``b``; ``ValueError`` for
        ids of different epochs or strings that are not ids."""
        return compare_ids(a, b)

    async def refresh_epoch(self) -> str:
        """Ask the broker its epoch (a new one means its data was lost: clients resuming
        get a reset)."""
        epoch = await self.broker.epoch()
        if epoch != self.epoch:
            logger.warning(
                "%s has a new epoch (%s, was %s): its data was lost; clients resuming get a reset",
                self.broker.where,
                epoch,
                self.epoch,
            )
            with self._lock:
                self.epoch = epoch
        return epoch

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the flusher and lease tasks in the running asyncio loop (done for you
        by ``async with``, and by the first publish or subscription in a loop).
        ``BusUnavailable`` if the driver cannot connect in ``connect_timeout``."""
        self._require_asyncio("start()")
        if self._closed:
            raise BusClosed("the bus is closed")
        self.start_here()
        started = self._started
        if started is not None and not started.is_set():
            try:
                await asyncio.wait_for(started.wait(), self.connect_timeout)
            except TimeoutError:
                raise BusUnavailable(f"cannot reach {self.broker.where}") from None

    def start_here(self) -> None:
        """Start the bus's tasks in the running loop unless they run already."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            if self._tasks and not any(task.done() for task in self._tasks):
                return
        elif self._loop is not None and self._loop.is_running():
            return  # the tasks live in the loop that started first
        for task in self._tasks:
            task.cancel()
        self._loop = loop
        self._started = asyncio.Event()
        self.outbox.bind(loop)
        self._tasks = [loop.create_task(self._main(), name="toolstream-broker")]

    async def _main(self) -> None:
        """Connect the driver in this loop, then run the flusher and the lease task."""
        await self.broker.start()
        started = self._started
        if started is not None:
            started.set()
        await asyncio.gather(
            self.outbox.run(
                self._write, self.broker.retryable, batch=self.batch, written=self._checkpoints
            ),
            self._leases(),
        )

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self, *, timeout: float | None = None) -> None:
        """Flush what is in the outbox (up to ``timeout``, default ``connect_timeout``),
        end every subscription, give up this process's lease (its calls still open are
        closed as ``cancelled``, reason ``"worker stopped"``) and disconnect."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
        wait = self.connect_timeout if timeout is None else timeout
        here = self._loop is asyncio.get_running_loop() and bool(self._tasks)
        if here:
            try:
                await self._flush(wait)
            except (TimeoutError, BusUnavailable):
                logger.error(
                    "closing with %d events not written to %s (unreachable)",
                    len(self.outbox),
                    self.broker.where,
                )
        subs = list(self._subs)  # (closing one removes it from the set)
        for sub in subs:
            sub.close()
        for sub in subs:
            await sub.aclose()
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []
        if self._registered and here:
            errors: tuple[type[BaseException], ...] = (TimeoutError, *self.broker.retryable)
            try:
                await asyncio.wait_for(self._stop_writing(), wait)
            except errors as exc:
                logger.warning("could not give up the lease: %s", exc)
        await self.broker.aclose()

    async def _stop_writing(self) -> None:
        await self.broker.drop_lease(self.token)
        await self._reap_writer(self.token, "worker stopped", force=True)

    # -- publishing --------------------------------------------------------------------

    def publish(self, event_type: type[E], /, **fields: Any) -> E:
        """Build the event (its id, its ``ts``), put it in the outbox and return it.

        Never waits for the broker; safe from any thread. The id is the one the event
        is written under, except when another process's events for the same session are
        ahead of it (see ``stats.renumbered`` and docs/decisions.md).
        """
        build = prepare(event_type, fields)[0]
        with self._lock:
            if self._closed:
                raise BusClosed("the bus is closed")
            ts = self.clock()
            seq = self._last = self.broker.next_seq(self._last, ts)
            event = build(fields, f"{self.epoch}-{seq}", ts)[0]
            kick = self.outbox.append(event)
        if kick:
            self.outbox.kick(f"{self.broker.name} publish()")
        return event  # type: ignore[return-value]  # built from event_type

    async def flush(self, *, timeout: float | None = None) -> None:
        """Wait until every event published before this call reached the broker (or was
        dropped by the outbox policy). ``TimeoutError`` after ``timeout`` seconds;
        ``BusUnavailable`` if the broker refused events meanwhile (dropped, logged)."""
        self._require_asyncio("flush()")
        if not self._closed:
            self.start_here()
        await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        counts = self.outbox.counts
        refused = counts.refused
        deadline = None if timeout is None else time.monotonic() + timeout
        await self.outbox.settle(self.outbox.published, deadline)
        if counts.refused > refused:
            raise BusUnavailable(
                f"{self.broker.where} refused {counts.refused - refused} events "
                "(dropped; see the log)"
            )

    async def _write(self, batch: Sequence[Event]) -> None:
        """Write a batch: hold this writer's lease and file the sessions it writes to,
        then one atomic append per session (all at once)."""
        broker = self.broker
        by_session: dict[str, list[Event]] = {}
        for ev in batch:
            by_session.setdefault(ev.session, []).append(ev)
        new = [session for session in by_session if session not in self._wrote_to]
        if new or not self._registered:
            await broker.hold(self.token, new, self.lease)
            self._wrote_to.update(new)
            if len(self._wrote_to) > 100_000:
                self._wrote_to.clear()  # bounded: sessions are filed again (idempotent)
        token = self.token
        replies = await asyncio.gather(
            *(broker.append(s, token, records(evs, token)) for s, evs in by_session.items())
        )
        self._registered = True
        stats = self._stats
        for (session, evs), got in zip(by_session.items(), replies, strict=True):
            codes = got.codes
            stats.flushed += codes.count(0) + codes.count(3)
            stats.duplicates += codes.count(1)
            if 2 in codes:
                for ev, code in zip(evs, codes, strict=True):
                    if code == 2:
                        stats.fenced += 1
                        logger.warning(
                            "dropped %s of call %s (session %s): the call was closed "
                            "elsewhere (a reaper, after this process's lease ran out, or a "
                            "denial), or its approval was decided already",
                            ev.type,
                            ev.call_id,
                            session,
                        )
            if got.renumbered:
                stats.renumbered += len(got.renumbered)
                with self._lock:
                    self._last = max(self._last, *got.renumbered)

    async def _checkpoints(self, batch: list[Event]) -> None:
        """Every ``replay // 4`` events written to a session, store its state as of
        ``replay`` events back (which deletes what is before it)."""
        marks = self._marks
        if marks is None:
            return
        due: dict[str, int] = {}
        for ev in batch:
            marks.add(ev.session, event_seq(ev.id), due)
        for session, seq in due.items():
            try:
                await self._checkpoint(session, seq)
            except self.broker.retryable as exc:
                logger.info("checkpoint of %s skipped: %s", session, exc)

    async def _checkpoint(self, session: str, seq: int) -> None:
        state = await self.read_state(session, upto=seq)
        reset = StreamReset(
            id=make_id(state.epoch, seq),
            session=session,
            ts=self.clock(),
            snapshot=state.folded().snapshot(),
        )
        await self.broker.checkpoint(session, seq, dumps(to_dict(reset)))

    # -- leases --------------------------------------------------------------------------

    async def _leases(self) -> None:
        """Renew this process's lease; close the calls of writers whose lease ran out;
        delete what is past its time to live."""
        every = min(self.lease / 3, 30.0)  # history kept by time is trimmed at least as often
        broker = self.broker
        while True:
            await asyncio.sleep(every)
            try:
                if self._registered:
                    await broker.hold(self.token, (), self.lease)
                await self.refresh_epoch()  # a lost epoch: every cursor resets
                if self.reap:
                    await self.reap_lost()
                    self._stats.expired += await broker.expire(self.clock())
                for session, seq in await broker.trim_due(self.clock()):
                    await self._checkpoint(session, seq)
            except broker.retryable as exc:
                logger.debug("lease renewal failed: %s", exc)
            except Exception:
                # Never let the lease task die: a dead renewer gets a live worker
                # reaped as "worker lost". Logged, and tried again next round.
                logger.exception("lease renewal failed")

    async def reap_lost(self) -> int:
        """Close (``tool.cancelled``, reason ``"worker lost"``) the open calls and runs of
        every writer whose lease ran out; returns how many events that wrote. Each lost
        writer is reaped exactly once, whichever processes try. Runs every ``lease / 3``
        seconds on its own when ``reap=True``."""
        self._require_asyncio("reap_lost()")
        total = 0
        for writer in await self.broker.lost(self.token):
            n = await self._reap_writer(writer, "worker lost", force=False)
            if n > 0:
                logger.warning("writer %s lost its lease: closed %d open calls/runs", writer, n)
                total += n
        self._stats.reaped += total
        return total

    async def _reap_writer(self, token: str, reason: str, *, force: bool) -> int:
        """Claim writer ``token`` (once), close what it left open in each session it
        wrote to, then forget it."""
        broker = self.broker
        sessions = await broker.claim(token, force=force)
        if sessions is None:
            return 0
        n = 0
        for session in sessions:
            n += await broker.reap(session, token, reason, self.clock())
        await broker.release(token)
        return n

    # -- approvals (arbitrated by the driver) -------------------------------------------

    async def resolve_approval(
        self,
        session: str,
        approval_id: str,
        *,
        approved: bool,
        by: str | None = None,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
        ends_call: bool = True,
    ) -> ApprovalResolved:
        """Decide an approval, atomically in the broker: the first decision from any
        process wins (see :meth:`toolstream.EventBus.resolve_approval` for the errors)."""
        self._require_asyncio("resolve_approval()")
        edited = check_decision(approved, by, reason, args, self.payload.max_bytes)
        return await self._arbiter.resolve(
            session, approval_id, approved, by, reason, edited, ends_call
        )

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first. ``ApprovalNotFound`` for an
        unknown id or another session's."""
        self._require_asyncio("decision()")
        return await self._arbiter.decision(session, approval_id)

    async def wait_decision(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on an approval, woken by the broker when it is decided;
        bound it with a cancel scope. It goes on while the broker is away (nobody can
        decide meanwhile), and waits for a request this bus has not written yet.
        ``ApprovalNotFound`` as for :meth:`decision`."""
        self._require_asyncio("wait_decision()")
        return await self._arbiter.wait(session, approval_id)

    # -- reading -------------------------------------------------------------------------

    async def read_state(self, session: str, upto: int | None = None) -> SessionState:
        """The session as the broker holds it (its events up to ``upto``)."""
        stored = await self.broker.read_state(session, upto)
        return parse_state(
            stored, self.epoch, max_finished=self._max_finished, compare=self.compare
        )

    async def fetch_snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand, read from the broker plus
        this process's events not yet written (the async form of :meth:`snapshot`)."""
        self._require_asyncio("fetch_snapshot()")
        try:
            state = await self.read_state(session)
            if await self.expire_due(session, state):
                state = await self.read_state(session)
        except self.broker.retryable as exc:
            raise BusUnavailable(f"cannot reach {self.broker.where}: {exc}") from exc
        return self._snapshot_of(session, state, run)

    async def expire_due(self, session: str, state: SessionState) -> bool:
        """Resolve by ``"timeout"`` the approvals of ``state`` past their expiry (a
        snapshot or a subscription's start touches them); True if there were any."""
        return await expire_due(
            state, self.clock(), lambda approval_id: self._arbiter.decision(session, approval_id)
        )

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now.

        Blocks for a read of the broker (the Bus protocol makes this call synchronous);
        in async code prefer ``await bus.fetch_snapshot(session)``.
        """

        def read() -> SessionState:
            stored = self.broker.read_state_sync(session)
            return parse_state(
                stored, self.epoch, max_finished=self._max_finished, compare=self.compare
            )

        try:
            state = read()
            due = due_approvals(state, self.clock())
            if due:  # touched past their expiry: resolved by timeout, then read again
                for approval_id in due:
                    self._arbiter.expire_now(session, approval_id)
                state = read()
        except self.broker.retryable as exc:
            raise BusUnavailable(f"cannot reach {self.broker.where}: {exc}") from exc
        return self._snapshot_of(session, state, run)

    def _snapshot_of(self, session: str, state: SessionState, run: str | None) -> Snapshot:
        view = state.folded()
        top = state.events[-1][0] if state.events else 0
        for ev in self.outbox.pending(session):  # written meanwhile or not: what is missing
            if event_seq(ev.id) > top:
                view.apply(ev)
        return bound_snapshot(view.snapshot(run_id=run), self.reset_bytes)

    # -- subscribing ---------------------------------------------------------------------

    def subscribe(
        self,
        *types: type[Event],
        session: str | None = None,
        run: str | None = None,
        after: str | None = None,
        snapshot: bool = False,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
    ) -> BrokerSubscription[Any]:
        """Subscribe to one session's events, as :meth:`toolstream.EventBus.subscribe`.

        The subscription learns where it starts on its first read (or ``await
        sub.prepare()``): after this process's events published before this call are
        in the broker, so a process reads its own writes. ``session`` is required.
        """
        request = subscribe_request(
            types,
            session=session,
            run=run,
            after=after,
            snapshot=snapshot,
            buffer=buffer,
            overflow=overflow,
        )
        return self._open(request)

    def resume(
        self,
        *types: type[Event],
        session: str,
        after: str,
        at: bool = False,
        run: str | None = None,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
    ) -> BrokerSubscription[Any]:
        """Continue a client exactly where it was, as :meth:`toolstream.EventBus.resume`
        (``sub.origin`` is final once ``await sub.prepare()`` returned)."""
        request = resume_request(
            types, session=session, after=after, at=at, run=run, buffer=buffer, overflow=overflow
        )
        return self._open(request)

    def _open(self, request: StartRequest) -> BrokerSubscription[Any]:
        session = request.session
        if session is None:
            raise ValueError(
                f"{self.broker.name} subscriptions need session=: each session is read "
                "from the broker on its own (see docs/scaling.md)"
            )
        self._require_asyncio("subscribe()")
        if self._closed:
            raise BusClosed("the bus is closed")
        self.start_here()
        with self._lock:
            since = self.broker.next_seq(self._last, self.clock()) - 1
            barrier = self.outbox.published
        sub: BrokerSubscription[Any] = self._subscription_type(
            self, session, request=request, since=since, barrier=barrier
        )
        self._subs.add(sub)
        return sub

    def forget(self, sub: BrokerSubscription[Any]) -> None:
        """A subscription closed: the bus no longer ends it on close."""
        self._subs.discard(sub)
