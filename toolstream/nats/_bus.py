"""NatsBus: the Bus protocol on NATS JetStream, for several processes sharing one stream.

One stream holds every session (subject ``<prefix>.<session token>``); an event's id is
``"<epoch>-<stream sequence>"``, the epoch naming the stream's creation. Publishing
appends to the shared outbox (:mod:`toolstream._core.outbox`) and returns at once; the
flusher publishes batches pipelined, each message asking for its exact sequence
(``Nats-Expected-Last-Sequence``), so the stream's order is the publisher's order even
across a lost connection, and a retried message is recognised by its ``Nats-Msg-Id``
at the sequence it asked for. Three KV buckets hold what must be decided once:
``<prefix>_ck`` the sessions' checkpoints, ``<prefix>_ap`` the approvals (compare-and-
swap: one decision wins), ``<prefix>_w`` the writers' leases and open calls (compare-
and-swap: one reaper per lost writer, and a fenced writer finds out before it writes).
docs/decisions.md records each mapping.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
from typing_extensions import Self

from toolstream._core.approvals import Decision, check_decision
from toolstream._core.broker import SessionState, expire_due, retry_until, stop_task
from toolstream._core.build import prepare
from toolstream._core.errors import BusClosed, BusUnavailable
from toolstream._core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    Snapshot,
)
from toolstream._core.ids import compare_ids
from toolstream._core.jsonenc import dumpb, dumps
from toolstream._core.outbox import CheckpointMarks, Outbox, OutboxOverflow, Refused
from toolstream._core.payload import PayloadPolicy, default_policy
from toolstream._core.snapshots import DEFAULT_RESET_BYTES, bound_snapshot
from toolstream._core.start import Overflow, StartRequest, resume_request, subscribe_request
from toolstream._core.subscription import FeederStats
from toolstream._core.wake import current_backend

from ._approvals import NatsArbiter, event_json
from ._common import (
    EXPECTATION_FAILED,
    NATS_ERRORS,
    RETRYABLE,
    JetStreamContext,
    KeyValue,
    Names,
    NatsClient,
    Pipeline,
    api_code,
    epoch_of,
    js_api,
    kv_handle,
    nats,
)
from ._leases import NatsLeases
from ._reading import NatsReader
from ._subscription import NatsSubscription

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsBus", "NatsBusStats"]

E = TypeVar("E", bound=Event)
T = TypeVar("T")

_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}")


@attrs.define
class NatsBusStats:
    """Counters of a :class:`NatsBus` in this process (read with ``bus.stats``)."""

    #: Events published in this process.
    published: int = 0
    #: Events written to the stream.
    flushed: int = 0
    #: Events found already written when a batch was retried (not written twice).
    duplicates: int = 0
    #: Events written at another sequence than the one they asked for (another writer's
    #: messages came first): subscribers see the final id, ``publish`` returned the asked.
    renumbered: int = 0
    #: Events dropped because their call was closed elsewhere (a reaper after this
    #: process's lease ran out, or a denial).
    fenced: int = 0
    #: Events the outbox dropped (NATS unreachable too long, or refused).
    dropped: int = 0
    #: Events NATS refused with an error retrying cannot cure.
    refused: int = 0
    #: Events waiting in the outbox now.
    outbox: int = 0
    #: Failed attempts to write a batch (each retried).
    flush_errors: int = 0
    #: Calls and runs this process closed for writers whose lease ran out.
    reaped: int = 0
    #: Sessions this process purged after ``session_ttl`` without an event.
    expired: int = 0
    #: Subscriptions cut with ``SlowConsumer``.
    cut: int = 0
    #: Events merged away by ``overflow="coalesce"`` subscriptions.
    coalesced: int = 0
    #: Resets delivered because a cursor could not be served.
    resets: int = 0


class NatsBus:
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
        if not lease >= 0.3:
            raise ValueError(f"lease must be at least 0.3 seconds, got {lease}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        if not request_timeout > 0:
            raise ValueError(f"request_timeout must be positive, got {request_timeout}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.servers = servers
        self.prefix = prefix
        self.names = Names(prefix)
        self.replicas = replicas
        self.replay = replay
        self.session_ttl = session_ttl
        self.lease = lease
        self.reap = reap
        self.connect_timeout = connect_timeout
        self.request_timeout = min(request_timeout, connect_timeout)
        self.batch = batch
        self.outbox_limit = outbox
        self.outbox_overflow: OutboxOverflow = outbox_overflow
        self._clock = clock
        self._max_finished = max_finished
        self.reset_bytes = reset_bytes
        #: What a decision publishes goes through this policy.
        self.payload = payload if payload is not None else default_policy()
        #: This process's writer token: its lease and open calls are filed under it.
        self.token = secrets.token_hex(8)
        self._outbox = Outbox(
            outbox, outbox_overflow, broker=f"NATS at {self._where}", start=self._start_here
        )
        self._lock = self._outbox.lock  # also guards the ids assigned here
        self._stats = NatsBusStats()
        self._sub_stats = FeederStats()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._subs: set[NatsSubscription[Any]] = set()
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._pipeline: Pipeline | None = None
        self._kv: dict[str, KeyValue] = {}
        self._up: asyncio.Event | None = None
        self._reconnected = asyncio.Event()  # replaced (and set) at each reconnection
        self._epoch_stale = False
        self._generation = 0  # connections re-established so far
        self._marks = CheckpointMarks(replay)
        # writing
        self._next = 0  # the sequence the flusher asks for next (0: ask the stream)
        self._asked: dict[str, int] = {}  # message id -> sequence it asked for, unsettled
        try:
            epoch, last = self._in_thread(self._setup)
        except BusUnavailable:
            raise
        except RETRYABLE as exc:
            raise BusUnavailable(f"cannot reach NATS at {self._where}: {exc}") from exc
        #: The stream's epoch: every event id carries it.
        self.epoch = epoch
        self._last = last  # the newest sequence predicted here
        self._arbiter = NatsArbiter(self)
        self._leases = NatsLeases(self)
        self._reader = NatsReader(self)

    @property
    def _where(self) -> str:
        return ", ".join(_redact(s) for s in self.servers)

    def __repr__(self) -> str:
        return (
            f"<NatsBus {self._where} prefix={self.prefix!r} epoch={self.epoch} "
            f"outbox={len(self._outbox)}>"
        )

    # -- connecting and creating what is missing --------------------------------------------

    async def _connect(self, *, main: bool, closed: asyncio.Event | None = None) -> NatsClient:
        async def quiet(exc: Exception) -> None:
            logger.debug("NATS: %s", exc)

        async def gone() -> None:
            if closed is not None:
                closed.set()

        async def reconnected() -> None:
            self._epoch_stale = True
            self._generation += 1
            event, self._reconnected = self._reconnected, asyncio.Event()
            event.set()  # wakes the subscriptions' long polls
            logger.info("NATS connection re-established")

        return await nats.connect(
            self.servers,
            connect_timeout=self.connect_timeout,
            allow_reconnect=main,
            max_reconnect_attempts=-1 if main else 1,
            reconnect_time_wait=0.25,
            ping_interval=max(1, int(self.lease)),
            max_outstanding_pings=2,
            pending_size=0,  # never buffer while reconnecting: the caller retries
            error_cb=quiet,
            reconnected_cb=reconnected if main else None,
            closed_cb=gone if closed is not None else None,
        )

    def _in_thread(self, work: Callable[[JetStreamContext], Awaitable[T]]) -> T:
        """Run ``work(js)`` on a connection of its own in a thread of its own (for the
        synchronous parts of the Bus protocol: construction, ``snapshot()``)."""
        result: list[Any] = []

        async def main() -> None:
            try:
                nc = await self._connect(main=False)
            except Exception as exc:
                result.append(exc)
                return
            try:
                result.append(
                    await asyncio.wait_for(
                        work(nc.jetstream(timeout=self.request_timeout)), self.connect_timeout
                    )
                )
            except BaseException as exc:
                result.append(exc)
            finally:
                await nc.close()

        thread = threading.Thread(target=lambda: asyncio.run(main()), name="toolstream-nats")
        thread.start()
        thread.join()
        out = result[0]
        if isinstance(out, BaseException):
            if isinstance(out, nats.errors.NoServersError | TimeoutError | OSError):
                raise BusUnavailable(f"cannot reach NATS at {self._where}: {out}") from out
            raise out
        return out  # type: ignore[no-any-return]

    async def _setup(self, js: JetStreamContext) -> tuple[str, int]:
        """Create the stream and buckets if missing; the epoch and the last sequence.
        Retried while JetStream is not ready (a cluster electing its leaders)."""
        delay = 0.05
        while True:
            try:
                return await self._create(js)
            except RETRYABLE as exc:
                logger.debug("JetStream not ready (%r); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def _create(self, js: JetStreamContext) -> tuple[str, int]:
        names = self.names
        try:
            info = await js.stream_info(names.stream)
        except nats.js.errors.NotFoundError:
            try:
                info = await js.add_stream(
                    name=names.stream,
                    subjects=[names.subjects],
                    storage=js_api.StorageType.FILE,
                    num_replicas=self.replicas,
                    allow_direct=True,
                    duplicate_window=120.0,
                )
                logger.info("created JetStream stream %s", names.stream)
            except nats.js.errors.BadRequestError as exc:
                raise BusUnavailable(
                    f"cannot create stream {names.stream!r} for subjects {names.subjects!r} "
                    f"(another stream has them?): {exc.description}"
                ) from exc
        for bucket in (names.checkpoints, names.approvals, names.writers):
            await self._bucket(js, bucket)
        return epoch_of(info), info.state.last_seq

    async def _bucket(self, js: JetStreamContext, bucket: str) -> KeyValue:
        try:
            return await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            ttl = self.session_ttl if bucket == self.names.approvals else None
            return await js.create_key_value(
                bucket=bucket,
                history=1,
                replicas=self.replicas,
                ttl=ttl,
                storage=js_api.StorageType.FILE,
            )

    async def _ready(self, deadline: float | None = None) -> JetStreamContext:
        """The main connection's JetStream context, once connected (``BusUnavailable``
        at ``deadline``)."""
        self._start_here()
        up = self._up
        assert up is not None
        if not up.is_set():
            if deadline is None:
                await up.wait()
            else:
                try:
                    await asyncio.wait_for(up.wait(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    raise BusUnavailable(f"cannot reach NATS at {self._where}") from None
        js = self._js
        assert js is not None
        if self._epoch_stale:
            await self._refresh_epoch(js)
        return js

    async def _refresh_epoch(self, js: JetStreamContext) -> str:
        """Ask the stream's epoch again (after a reconnection: a server that lost its
        store, or a stream created anew, has another); recreate what is missing."""
        try:
            info = await js.stream_info(self.names.stream)
        except nats.js.errors.NotFoundError:
            epoch, last = await self._create(js)
            self._kv.clear()
        else:
            epoch, last = epoch_of(info), info.state.last_seq
        self._epoch_stale = False
        if epoch != self.epoch:
            logger.warning(
                "stream %s has a new epoch (%s, was %s): its data was lost; "
                "clients resuming get a reset",
                self.names.stream,
                epoch,
                self.epoch,
            )
            with self._lock:
                self.epoch = epoch
                self._last = last + len(self._outbox)  # predict in the new numbering
            self._next = 0
        return epoch

    async def kv(self, bucket: str) -> KeyValue:
        """One of this bus's KV buckets on the main connection. Construction made sure
        they exist: no stream-info request here (it needs the cluster's meta leader,
        which a cluster that lost a server may be electing for many seconds)."""
        kv = self._kv.get(bucket)
        if kv is None:
            js = await self._ready()
            kv = self._kv[bucket] = kv_handle(js, bucket)
        return kv

    # -- state -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    @property
    def stats(self) -> NatsBusStats:
        """Counters of this process: published, flushed, renumbered, dropped..."""
        stats = self._stats
        counts = self._outbox.counts
        stats.published = counts.published
        stats.dropped = counts.dropped
        stats.refused = counts.refused
        stats.flush_errors = counts.flush_errors
        stats.outbox = len(self._outbox)
        stats.cut = self._sub_stats.cut
        stats.coalesced = self._sub_stats.coalesced
        return stats

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as id ``a`` is before, equal to or after ``b``; ``ValueError`` for
        ids of different epochs or strings that are not ids."""
        return compare_ids(a, b)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start the flusher and lease tasks in the running asyncio loop
        (done for you by ``async with``, and by the first publish or subscription in a
        loop). ``BusUnavailable`` if NATS cannot be reached in ``connect_timeout``."""
        _require_asyncio("start()")
        if self._closed:
            raise BusClosed("the bus is closed")
        await self._ready(time.monotonic() + self.connect_timeout)

    def _start_here(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            if self._tasks and not any(task.done() for task in self._tasks):
                return
        elif self._loop is not None and self._loop.is_running():
            return  # the tasks live in the loop that started first
        for task in self._tasks:
            task.cancel()
        self._loop = loop
        self._up = asyncio.Event()
        self._reconnected = asyncio.Event()
        self._nc = None
        self._js = None
        self._kv.clear()
        self._outbox.bind(loop)
        self._tasks = [loop.create_task(self._main(), name="toolstream-nats")]

    async def _main(self) -> None:
        """Connect (retrying), run the flusher and the lease task, and connect again
        whenever the connection is closed for good: nats-py reconnects after a network
        failure, but closes the connection when the server answers ``-ERR`` (a control
        line over its limit, a permission...), and a bus must never stay dead — the
        outbox waits and is written once the new connection is up."""
        up = self._up
        assert up is not None
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        nc: NatsClient | None = None
        watch: asyncio.Task[Any] | None = None
        try:
            while True:
                closed = asyncio.Event()
                delay = 0.1
                while True:
                    try:
                        nc = await self._connect(main=True, closed=closed)
                        break
                    except Exception as exc:
                        logger.warning("cannot reach NATS at %s (%s); retrying", self._where, exc)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 2.0)
                self._nc = nc
                self._js = nc.jetstream(timeout=self.request_timeout)
                self._pipeline = Pipeline(nc)
                self._kv.clear()
                self._epoch_stale = True
                if tasks:  # a connection made again: what waits on the old one moves on
                    self._generation += 1
                    event, self._reconnected = self._reconnected, asyncio.Event()
                    event.set()
                    logger.warning("NATS connection made again after it was closed")
                up.set()
                if not tasks:
                    flusher = self._outbox.run(self._write, RETRYABLE, batch=self.batch)
                    tasks = [
                        loop.create_task(flusher, name="toolstream-nats-flusher"),
                        loop.create_task(self._leases.run(), name="toolstream-nats-leases"),
                    ]
                # Until the connection is closed for good, or a task ends (they never do
                # on their own: an error in one ends this task, which a publish restarts).
                watch = loop.create_task(closed.wait())
                done, _ = await asyncio.wait([watch, *tasks], return_when=asyncio.FIRST_COMPLETED)
                if watch not in done:
                    watch.cancel()
                    for task in done:
                        task.result()
                    return
                up.clear()
                self._pipeline.fail(nats.errors.ConnectionClosedError())
                logger.warning(
                    "NATS connection closed (%s); connecting again", nc.last_error or "no reason"
                )
        finally:
            if watch is not None:
                watch.cancel()
            for task in tasks:
                await stop_task(task)
            # The connection belongs to this task: a bus started again (another loop, or
            # after its tasks were stopped) makes a new one.
            if nc is not None:
                await asyncio.shield(nc.close())

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
        here = self._loop is asyncio.get_running_loop() and self._tasks
        if here:
            try:
                await self._flush(wait)
            except (TimeoutError, BusUnavailable):
                logger.error(
                    "closing with %d events not written to NATS (unreachable)", len(self._outbox)
                )
        subs = list(self._subs)
        for sub in subs:
            sub.close()
        for sub in subs:
            await sub.aclose()
        if here and self._leases.registered:
            try:
                await asyncio.wait_for(self._leases.stop_writing(), wait)
            except Exception as exc:
                logger.warning("could not give up the lease: %s", exc)
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []
        if self._nc is not None and here:
            await self._nc.close()

    # -- publishing --------------------------------------------------------------------

    def publish(self, event_type: type[E], /, **fields: Any) -> E:
        """Build the event (its id, its ``ts``), put it in the outbox and return it.

        Never waits for NATS; safe from any thread. The id is the stream sequence the
        event will ask for; a subscriber sees the sequence it was written at, which is
        the same unless another process wrote to the stream in between (see
        ``stats.renumbered`` and docs/decisions.md).
        """
        build = prepare(event_type, fields)[0]
        with self._lock:
            if self._closed:
                raise BusClosed("the bus is closed")
            self._last += 1
            event = build(fields, f"{self.epoch}-{self._last}", self._clock())[0]
            kick = self._outbox.append(event)
        if kick:
            self._outbox.kick("NatsBus publish()")
        return event  # type: ignore[return-value]  # built from event_type

    async def flush(self, *, timeout: float | None = None) -> None:
        """Wait until every event published before this call reached NATS (or was
        dropped by the outbox policy). ``TimeoutError`` after ``timeout`` seconds;
        ``BusUnavailable`` if NATS refused events meanwhile (dropped, logged)."""
        _require_asyncio("flush()")
        if not self._closed:
            self._start_here()
        await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        refused = self._outbox.counts.refused
        deadline = None if timeout is None else time.monotonic() + timeout
        await self._outbox.settle(self._outbox.published, deadline)
        if self._outbox.counts.refused > refused:
            raise BusUnavailable(
                f"NATS at {self._where} refused "
                f"{self._outbox.counts.refused - refused} events (dropped; see the log)"
            )

    async def _write(self, batch: list[Event]) -> None:
        """Write one batch: register what it opens (the lease, compare-and-swap), drop
        what is fenced, then publish each event at the sequence it asks for."""
        js = await self._ready()
        await self._leases.guard(batch)
        wanted: list[Event] = []
        for ev in batch:
            if self._leases.is_fenced(ev):
                self._stats.fenced += 1
                logger.warning(
                    "dropped %s of call %s (session %s): the call was closed elsewhere",
                    ev.type,
                    ev.call_id,
                    ev.session,
                )
                continue
            if isinstance(ev, ApprovalRequested):
                await self._arbiter.record(ev)
            elif isinstance(ev, ApprovalResolved) and not await self._arbiter.own(ev):
                self._stats.fenced += 1
                continue
            wanted.append(ev)
        if await self._leases.denied(wanted):
            wanted = [ev for ev in wanted if not self._leases.is_fenced(ev)]
        seqs = await self._publish_all(js, wanted)
        due: dict[str, int] = {}
        for ev, seq in zip(wanted, seqs, strict=True):
            self._leases.track(ev)
            self._marks.add(ev.session, seq, due)
            if isinstance(ev, ApprovalResolved):
                await self._arbiter.written(ev, seq)
        self._stats.flushed += len(wanted)
        with self._lock:
            # Later predictions start after what the stream holds now.
            self._last = max(self._last, self._next - 1 + len(self._outbox) - len(batch))
        for session, seq in due.items():
            try:
                await self._reader.checkpoint(session, seq)
            except NATS_ERRORS as exc:
                logger.info("checkpoint of %s skipped: %s", session, exc)

    async def _publish_all(self, js: JetStreamContext, events: list[Event]) -> list[int]:
        """Publish ``events`` in order, pipelined; returns the sequence of each. Each
        message asks for one sequence, so it can only land there: a retry checks that
        sequence for its message id rather than writing it twice."""
        out: list[int] = []
        payloads = []
        for ev in events:
            payloads.append((self.names.subject(ev.session), dumpb(event_json(ev)), ev.id))
        i = 0
        while i < len(payloads):
            if not self._next:
                info = await js.stream_info(self.names.stream)
                self._next = info.state.last_seq + 1
            # A message asked for a sequence before and it is unclear whether it landed.
            subject, blob, eid = payloads[i]
            msg_id = f"{self.token}:{eid}"
            asked = self._asked.get(msg_id)
            if asked is not None and await self._landed(js, asked, msg_id):
                self._asked.pop(msg_id, None)
                self._stats.duplicates += 1
                out.append(asked)
                self._next = max(self._next, asked + 1)
                i += 1
                continue
            futures = []
            start = self._next
            pipeline = self._pipeline
            assert pipeline is not None
            try:
                previous = ""
                for k, (subject, blob, eid) in enumerate(payloads[i:]):
                    msg_id = f"{self.token}:{eid}"
                    self._asked[msg_id] = start + k
                    headers = {
                        "Nats-Msg-Id": msg_id,
                        "Nats-Expected-Last-Sequence": str(start + k - 1),
                    }
                    if previous:
                        # And the message before it is ours: had it failed while another
                        # writer's message took its sequence, this one must fail too,
                        # or it would be stored before its predecessor's retry.
                        headers["Nats-Expected-Last-Msg-Id"] = previous
                    previous = msg_id
                    futures.append(await pipeline.send(subject, blob, headers))
                results = await asyncio.wait_for(
                    asyncio.gather(*futures, return_exceptions=True), self.connect_timeout
                )
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
            failure: BaseException | None = None
            for (_, _, eid), res in zip(payloads[i:], results, strict=False):
                if isinstance(res, BaseException):
                    failure = res
                    break
                msg_id = f"{self.token}:{eid}"
                self._asked.pop(msg_id, None)
                if res.duplicate:
                    self._stats.duplicates += 1
                elif str(res.seq) != eid.rpartition("-")[2]:
                    self._stats.renumbered += 1
                out.append(res.seq)
                self._next = res.seq + 1
                i += 1
            if failure is None:
                continue
            if api_code(failure) in EXPECTATION_FAILED:
                # Another writer's message took the sequence (or one of ours did not
                # land before this one): ask the stream where it stands and go on.
                self._next = 0
                continue
            if isinstance(failure, nats.js.errors.APIError) and not isinstance(failure, RETRYABLE):
                raise Refused(f"{failure.description or failure!r}")
            self._next = 0
            raise failure
        return out

    async def _publish_raw(
        self, js: JetStreamContext, session: str, data: dict[str, Any], msg_id: str | None
    ) -> int:
        """Publish an event's stored JSON to ``session`` directly (not through the
        outbox); its sequence."""
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        ack = await js.publish(self.names.subject(session), dumps(data).encode(), headers=headers)
        return int(ack.seq)

    async def _landed(self, js: JetStreamContext, seq: int, msg_id: str) -> bool:
        """Whether the message ``msg_id`` is stored at sequence ``seq``."""
        try:
            msg = await js.get_msg(self.names.stream, seq=seq, direct=True)
        except nats.js.errors.NotFoundError:
            return False
        return bool(msg.headers and msg.headers.get("Nats-Msg-Id") == msg_id)

    async def fetch_snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand, read from NATS plus this
        process's events not yet written (the async form of :meth:`snapshot`)."""
        _require_asyncio("fetch_snapshot()")

        async def read() -> SessionState:
            return await retry_until(
                lambda: self._reader.read_state(session),
                RETRYABLE,
                time.monotonic() + self.connect_timeout,
                f"NATS at {self._where}",
            )

        state = await read()
        if await self._expire_due(session, state):
            state = await read()
        return self._snapshot_of(session, state, run)

    async def _expire_due(self, session: str, state: SessionState) -> bool:
        """Resolve by ``"timeout"`` the approvals of ``state`` past their expiry (a
        snapshot or a subscription's start touches them); True if there were any."""
        return await expire_due(
            state, self._clock(), lambda approval_id: self._arbiter.decision(session, approval_id)
        )

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now.

        Blocks while a connection of its own reads NATS (the Bus protocol makes this
        call synchronous); in async code prefer ``await bus.fetch_snapshot(session)``.
        """

        async def read(js: JetStreamContext) -> SessionState:
            async def kv_of(bucket: str) -> KeyValue:
                return kv_handle(js, bucket)

            async def js_of() -> JetStreamContext:
                return js

            async def state() -> SessionState:
                return await retry_until(
                    lambda: self._reader.state_with(js, session, None, kv_of),
                    RETRYABLE,
                    time.monotonic() + self.connect_timeout,
                    f"NATS at {self._where}",
                )

            got = await state()
            # Approvals past their expiry are touched: resolved by timeout (on this
            # thread's connection), then the session is read again.
            arbiter = NatsArbiter(self, kv_of=kv_of, js_of=js_of)
            if await expire_due(got, self._clock(), lambda aid: arbiter.decision(session, aid)):
                got = await state()
            return got

        return self._snapshot_of(session, self._in_thread(read), run)

    def _snapshot_of(self, session: str, state: SessionState, run: str | None) -> Snapshot:
        view = state.folded()
        for ev in self._outbox.pending(session):  # not yet written: apply them too
            view.apply(ev)
        return bound_snapshot(view.snapshot(run_id=run), self.reset_bytes)

    # -- leases and reaping (toolstream.nats._leases) -------------------------------------

    async def reap_lost(self) -> int:
        """Close (``tool.cancelled``, reason ``"worker lost"``) the open calls and runs of
        every writer whose lease ran out; returns how many events that wrote. A writer
        is lost when its lease entry has not changed for its ``lease`` seconds as this
        process's clock measures (no clocks are compared across hosts); exactly one
        process reaps it (compare-and-swap on the entry). Runs every ``lease / 3``
        seconds on its own when ``reap=True``."""
        _require_asyncio("reap_lost()")
        return await self._leases.reap_lost()

    async def expire_sessions(self) -> int:
        """Purge every session with no event for ``session_ttl`` seconds (its messages
        and checkpoint); returns how many. Runs on its own when ``reap=True``."""
        _require_asyncio("expire_sessions()")
        return await self._leases.expire_sessions()

    # -- approvals (arbitrated by toolstream.nats._approvals) ----------------------------

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
        """Decide an approval, by compare-and-swap on its KV entry: the first decision
        from any process wins (see :meth:`toolstream.EventBus.resolve_approval`)."""
        _require_asyncio("resolve_approval()")
        edited = check_decision(approved, by, reason, args, self.payload.max_bytes)
        return await self._arbiter.resolve(
            session, approval_id, approved, by, reason, edited, ends_call
        )

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first. ``ApprovalNotFound`` for an
        unknown id or another session's."""
        _require_asyncio("decision()")
        return await self._arbiter.decision(session, approval_id)

    async def wait_decision(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on an approval, woken by a watch on its KV entry; bound
        it with a cancel scope. It goes on while NATS is away (nobody can decide
        meanwhile), and waits for a request this bus has not written yet.
        ``ApprovalNotFound`` as for :meth:`decision`."""
        _require_asyncio("wait_decision()")
        return await self._arbiter.wait(session, approval_id)

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
    ) -> NatsSubscription[Any]:
        """Subscribe to one session's events, as :meth:`toolstream.EventBus.subscribe`.

        The subscription learns where it starts on its first read (or ``await
        sub.prepare()``): after this process's events published before this call are
        in NATS, so a process reads its own writes. ``session`` is required.
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
    ) -> NatsSubscription[Any]:
        """Continue a client exactly where it was, as :meth:`toolstream.EventBus.resume`
        (``sub.origin`` is final once ``await sub.prepare()`` returned)."""
        request = resume_request(
            types, session=session, after=after, at=at, run=run, buffer=buffer, overflow=overflow
        )
        return self._open(request)

    def _open(self, request: StartRequest) -> NatsSubscription[Any]:
        if request.session is None:
            raise ValueError(
                "NatsBus subscriptions need session=: each session is one subject "
                "(see docs/scaling.md)"
            )
        _require_asyncio("subscribe()")
        if self._closed:
            raise BusClosed("the bus is closed")
        self._start_here()
        sub: NatsSubscription[Any] = NatsSubscription(
            self,
            request.session,
            request=request,
            since=self._clock(),
            barrier=self._outbox.published,
        )
        self._subs.add(sub)
        return sub


def _redact(url: str) -> str:
    """``url`` with its password or token hidden, for messages."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        return f"{scheme}://***@{rest.rpartition('@')[2]}"
    return url


def _require_asyncio(what: str) -> None:
    """``RuntimeError`` unless running on asyncio (nats-py has no trio support)."""
    if current_backend() != "asyncio":
        raise RuntimeError(
            f"NatsBus {what} runs on asyncio only (nats-py has no trio support); "
            "use EventBus under trio, or run the gateway on asyncio"
        )
