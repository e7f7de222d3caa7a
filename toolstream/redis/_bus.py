"""RedisBus: the Bus protocol on Redis Streams, for several processes sharing one stream.

Publishing appends to a local outbox and returns at once; a flusher task writes the
outbox to Redis in pipelined, idempotent batches (one Lua script call each). A
subscription reads its session's stream with blocking XREAD on a connection of its
own, into a private log that the shared subscription machinery serves (filters,
coalescing, cut-on-slow, batches: :mod:`toolstream._core.broker`), so both buses
behave the same to a consumer.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any, TypeVar, cast

import attrs
from typing_extensions import Self

from toolstream._core.approvals import (
    Decision,
    check_decision,
)
from toolstream._core.broker import (
    ENDS_CALL,
    OPENS_CALL,
    due_approvals,
    expire_due,
    stop_task,
)
from toolstream._core.build import prepare
from toolstream._core.codec import to_dict
from toolstream._core.errors import (
    BusClosed,
    BusUnavailable,
)
from toolstream._core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunFinished,
    RunStarted,
    Snapshot,
    StreamReset,
)
from toolstream._core.ids import compare_ids, event_seq, make_id
from toolstream._core.jsonenc import dumps
from toolstream._core.outbox import CheckpointMarks, Outbox, OutboxOverflow, Refused
from toolstream._core.payload import PayloadPolicy, default_policy
from toolstream._core.snapshots import DEFAULT_RESET_BYTES, bound_snapshot
from toolstream._core.start import (
    Overflow,
    StartRequest,
    resume_request,
    subscribe_request,
)
from toolstream._core.subscription import FeederStats
from toolstream._core.view import LiveView
from toolstream.redis import _scripts

from ._approvals import RedisArbiter
from ._common import (
    NETWORK_ERRORS,
    RETRYABLE,
    SCALE,
    AsyncScript,
    SessionState,
    aredis,
    entry_seq,
    global_base,
    parse_state,
    redact_url,
    redis,
    require_asyncio,
    seq_entry,
    session_base,
)
from ._subscription import RedisSubscription

logger = logging.getLogger("toolstream.redis")

__all__ = ["OutboxOverflow", "RedisBus", "RedisBusStats", "RedisSubscription"]

E = TypeVar("E", bound=Event)
E_co = TypeVar("E_co", bound=Event, covariant=True)

_KINDS: dict[type, str] = {
    **dict.fromkeys(OPENS_CALL, "o"),
    **dict.fromkeys(ENDS_CALL, "t"),
    RunStarted: "r",
    RunFinished: "f",
}


@attrs.define
class RedisBusStats:
    """Counters of a :class:`RedisBus` in this process (read with ``bus.stats``)."""

    #: Events published in this process.
    published: int = 0
    #: Events written to Redis.
    flushed: int = 0
    #: Events found already written when a batch was retried (not written twice).
    duplicates: int = 0
    #: Events written under another id because another writer's entries were ahead.
    renumbered: int = 0
    #: Events dropped because a reaper had already closed their call ("worker lost").
    fenced: int = 0
    #: Events the outbox dropped while Redis was unreachable (see ``outbox_overflow``).
    dropped: int = 0
    #: Events waiting in the outbox now.
    outbox: int = 0
    #: Failed attempts to write a batch (retried, unless Redis refused it).
    flush_errors: int = 0
    #: Events Redis refused with an error retrying cannot cure (dropped, logged; the
    #: next ``flush()`` raises ``BusUnavailable`` saying so).
    refused: int = 0
    #: Calls and runs this process closed for writers whose lease ran out.
    reaped: int = 0
    #: Subscriptions cut with ``SlowConsumer``.
    cut: int = 0
    #: Events merged away by ``overflow="coalesce"`` subscriptions.
    coalesced: int = 0
    #: Resets delivered because a cursor could not be served.
    resets: int = 0


class RedisBus:
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
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must be a non-empty string without braces, got {prefix!r}")
        if replay < 1:
            raise ValueError(f"replay must be at least 1, got {replay}")
        if not session_ttl >= 1:
            raise ValueError(f"session_ttl must be at least 1 second, got {session_ttl}")
        if not lease >= 0.3:
            raise ValueError(f"lease must be at least 0.3 seconds, got {lease}")
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.url = url
        self.prefix = prefix
        self.replay = replay
        self.session_ttl = session_ttl
        self.outbox_limit = outbox
        self.outbox_overflow: OutboxOverflow = outbox_overflow
        self.lease = lease
        self.reap = reap
        self.connect_timeout = connect_timeout
        self.batch = batch
        self._clock = clock
        self._max_finished = max_finished
        self.reset_bytes = reset_bytes
        #: What a decision publishes goes through this policy.
        self.payload = payload if payload is not None else default_policy()
        #: This process's writer token: its lease and open calls are filed under it.
        self.token = secrets.token_hex(8)
        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": connect_timeout,
            "socket_keepalive": True,
        }
        self._options = options
        self._global = global_base(prefix)
        try:
            if cluster is None:
                probe = redis.Redis.from_url(url, socket_timeout=connect_timeout, **options)
                try:
                    info = probe.info("cluster")
                finally:
                    probe.close()
                cluster = bool(info.get("cluster_enabled"))
            #: Whether ``url`` is a Redis Cluster.
            self.cluster = cluster
            # The synchronous parts (construction, snapshot()) use a plain client and, on a
            # cluster, follow MOVED replies to the node that owns the slot.
            self._sync = redis.Redis.from_url(url, socket_timeout=connect_timeout, **options)
            self._sync_nodes: dict[str, redis.Redis] = {}
            self._sync_state = self._sync.register_script(_scripts.READ_STATE)
            #: The keyspace's epoch: every event id carries it.
            self.epoch = self._ensure_epoch_sync()
        except RETRYABLE as exc:
            if hasattr(self, "_sync"):
                self._close_sync()
            raise BusUnavailable(f"cannot reach Redis at {redact_url(url)}: {exc}") from exc
        self._redis: Any = (
            aredis.cluster.RedisCluster.from_url(url, socket_timeout=30.0, **options)
            if cluster
            else aredis.Redis.from_url(url, socket_timeout=30.0, **options)
        )
        self._claim_script: AsyncScript = self._redis.register_script(_scripts.CLAIM)
        self._flush_script: AsyncScript = self._redis.register_script(_scripts.FLUSH)
        self._state_script: AsyncScript = self._redis.register_script(_scripts.READ_STATE)
        self._ck_script: AsyncScript = self._redis.register_script(_scripts.CHECKPOINT)
        self._reap_script: AsyncScript = self._redis.register_script(_scripts.REAP)
        self._after_script: AsyncScript = self._redis.register_script(_scripts.READ_AFTER)
        self._arbiter = RedisArbiter(self)
        self._outbox = Outbox(
            outbox, outbox_overflow, broker=f"Redis at {redact_url(url)}", start=self._start_here
        )
        self._lock = self._outbox.lock  # also guards the ids assigned here
        self._last = 0  # the newest id number assigned here
        self._stats = RedisBusStats()
        self._sub_stats = FeederStats()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._subs: set[RedisSubscription[Any]] = set()
        self._registered = False  # this process wrote events (holds a lease)
        self._marks = CheckpointMarks(replay)
        self._wrote_to: set[str] = set()  # sessions registered under this writer
        self._discovery: asyncio.Task[Any] | None = None  # a cluster client's first discovery

    def __repr__(self) -> str:
        return (
            f"<RedisBus {redact_url(self.url)} prefix={self.prefix!r} epoch={self.epoch} "
            f"outbox={len(self._outbox)}>"
        )

    def _ensure_epoch_sync(self) -> str:
        """The keyspace's epoch, created if there is none (SET NX GET: one round trip)."""
        token = secrets.token_hex(6)
        old = self._sync_run(
            lambda client: client.set(f"{self._global}:epoch", token, nx=True, get=True)
        )
        return str(old) if old is not None else token

    def _sync_run(self, call: Any) -> Any:
        """``call(client)`` on the synchronous client, following a cluster's ``MOVED``
        (and ``ASK``) replies to the node that owns the slot."""
        client = self._sync
        for _ in range(5):
            try:
                return call(client)
            except redis.exceptions.AskError as exc:  # MOVED is a kind of ASK here
                address = f"{exc.host}:{exc.port}"
                client = self._sync_nodes.get(address) or self._sync_node(address)
        raise BusUnavailable(f"Redis at {redact_url(self.url)} kept redirecting")

    def _sync_node(self, address: str) -> redis.Redis:
        host, _, port = address.rpartition(":")
        client = redis.Redis(
            host=host or "127.0.0.1",
            port=int(port),
            socket_timeout=self.connect_timeout,
            **self._options,
        )
        self._sync_nodes[address] = client
        return client

    def _close_sync(self) -> None:
        self._sync.close()
        for client in self._sync_nodes.values():
            client.close()
        self._sync_nodes.clear()

    async def _ensure_epoch(self) -> str:
        token = secrets.token_hex(6)
        old = await self._redis.set(f"{self._global}:epoch", token, nx=True, get=True)
        epoch = str(old) if old is not None else token
        self._set_epoch(epoch)
        return epoch

    def _set_epoch(self, epoch: str) -> None:
        if epoch != self.epoch:
            logger.warning(
                "Redis at %s has a new epoch (%s, was %s): its data was lost; "
                "clients resuming get a reset",
                redact_url(self.url),
                epoch,
                self.epoch,
            )
            self.epoch = epoch

    # -- state -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    @property
    def stats(self) -> RedisBusStats:
        """Counters of this process: published, flushed, duplicates skipped, dropped..."""
        stats = self._stats
        counts = self._outbox.counts
        stats.published = counts.published
        stats.dropped = counts.dropped
        stats.flush_errors = counts.flush_errors
        stats.refused = counts.refused
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
        """Start the flusher and lease tasks in the running asyncio loop (done for you
        by ``async with``, and by the first publish or subscription in a loop)."""
        require_asyncio("start()")
        if self._closed:
            raise BusClosed("the bus is closed")
        self._start_here()

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
        self._outbox.bind(loop)
        flusher = self._outbox.run(
            self._write, RETRYABLE, batch=self.batch, written=self._checkpoints
        )
        self._tasks = [
            loop.create_task(flusher, name="toolstream-redis-flusher"),
            loop.create_task(self._leases(), name="toolstream-redis-leases"),
        ]

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
        if self._loop is asyncio.get_running_loop() and self._tasks:
            try:
                await self.flush(timeout=wait)
            except TimeoutError:
                logger.error(
                    "closing with %d events not written to Redis (unreachable)",
                    len(self._outbox),
                )
        subs = list(self._subs)  # (closing one removes it from the set)
        for sub in subs:
            sub.close()
        for sub in subs:
            await sub.aclose()
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []
        if self._registered:
            try:
                await self._redis.delete(f"{self._global}:w:{self.token}")
                await self._reap_writer(self.token, "worker stopped", force=True)
            except RETRYABLE as exc:
                logger.warning("could not give up the lease: %s", exc)
        if self._discovery is not None and not self._discovery.done():
            await asyncio.wait([self._discovery], timeout=wait)
        if self.cluster and getattr(self._redis, "_initialize", False):
            # redis-py's aclose() skips a cluster client flagged for rediscovery (after a
            # cancelled or failed command) and leaks its connections: close its nodes.
            await self._redis.nodes_manager.aclose()
            await self._redis.nodes_manager.aclose("startup_nodes")
        else:
            await self._redis.aclose()
        self._close_sync()

    # -- publishing --------------------------------------------------------------------

    def publish(self, event_type: type[E], /, **fields: Any) -> E:
        """Build the event (its id, its ``ts``), put it in the outbox and return it.

        Never waits for Redis; safe from any thread. The id is final: the writer's
        clock in the ``ms-n`` form of a stream entry id, and the entry it is written
        under (except when another process's entries for the same session are ahead
        of this clock: see ``stats.renumbered`` and docs/decisions.md).
        """
        build = prepare(event_type, fields)[0]
        with self._lock:
            if self._closed:
                raise BusClosed("the bus is closed")
            ts = self._clock()
            seq = int(ts * 1000) * SCALE
            if seq <= self._last:
                seq = self._last + 1
            self._last = seq
            event = build(fields, f"{self.epoch}-{seq}", ts)[0]
            kick = self._outbox.append(event)
        if kick:
            self._outbox.kick("RedisBus publish()")
        return event  # type: ignore[return-value]  # built from event_type

    async def flush(self, *, timeout: float | None = None) -> None:
        """Wait until every event published before this call reached Redis (or was
        dropped by the outbox policy). ``TimeoutError`` after ``timeout`` seconds;
        ``BusUnavailable`` if Redis refused events meanwhile (dropped, logged)."""
        require_asyncio("flush()")
        if not self._closed:
            self._start_here()
        refused = self._outbox.counts.refused
        await self._settle(
            self._outbox.published, None if timeout is None else time.monotonic() + timeout
        )
        if self._outbox.counts.refused > refused:
            raise BusUnavailable(
                f"Redis at {redact_url(self.url)} refused "
                f"{self._outbox.counts.refused - refused} events (dropped; see the log)"
            )

    async def _settle(self, target: int, deadline: float | None) -> None:
        """Wait until ``target`` events left the outbox (see :meth:`Outbox.settle`)."""
        await self._outbox.settle(target, deadline)

    async def _write(self, batch: Sequence[Event]) -> None:
        """Write a batch: register this writer's lease and the sessions it writes to (the
        shared slot), then one script call per session (each on its own slot, all at
        once)."""
        await self._connected()
        by_session: dict[str, list[Event]] = {}
        for ev in batch:
            by_session.setdefault(ev.session, []).append(ev)
        new = [session for session in by_session if session not in self._wrote_to]
        try:
            if new or not self._registered:
                await self._register(new)
            replies = await asyncio.gather(
                *(self._write_session(session, evs) for session, evs in by_session.items())
            )
        except RETRYABLE:
            raise
        except redis.ResponseError as exc:
            # Not a connection problem: retrying the same batch would fail the same
            # way forever. The outbox drops it, counted, and flush() says so.
            raise Refused(str(exc)) from exc
        self._registered = True
        stats = self._stats
        for (session, evs), (codes, moved) in zip(by_session.items(), replies, strict=True):
            stats.flushed += codes.count("0") + codes.count("3")
            stats.duplicates += codes.count("1")
            if "2" in codes:
                for ev, code in zip(evs, codes, strict=True):
                    if code == "2":
                        stats.fenced += 1
                        logger.warning(
                            "dropped %s of call %s (session %s): the call was closed "
                            "elsewhere (a reaper, after this process's lease ran out, or a "
                            "denial), or its approval was decided already",
                            ev.type,
                            ev.call_id,
                            session,
                        )
            if moved:
                stats.renumbered += len(moved)
                seq = max(entry_seq(str(m)) for m in moved)
                with self._lock:
                    self._last = max(self._last, seq)

    async def _register(self, sessions: Sequence[str]) -> None:
        """Hold the lease and file ``sessions`` under this writer (where a reaper looks
        if this process is lost), before anything is written to them."""
        g = self._global
        await self._batch(
            [
                ("SET", f"{g}:w:{self.token}", "1", "PX", int(self.lease * 1000)),
                ("SADD", f"{g}:workers", self.token),
                *([("SADD", f"{g}:wsess:{self.token}", *sessions)] if sessions else []),
                ("EXPIRE", f"{g}:wsess:{self.token}", int(self.session_ttl)),
            ]
        )
        self._wrote_to.update(sessions)
        if len(self._wrote_to) > 100_000:
            self._wrote_to.clear()  # bounded: sessions are filed again (idempotent)

    async def _write_session(self, session: str, batch: Sequence[Event]) -> tuple[str, list[Any]]:
        """One FLUSH script call: ``batch`` (one session's events, in order)."""
        base = session_base(self.prefix, session)
        args: list[Any] = [base, self.token, secrets.token_hex(6), int(self.session_ttl)]
        kinds = _KINDS
        for ev in batch:
            data = to_dict(ev)
            del data["id"]
            entry = seq_entry(event_seq(ev.id))
            blob = dumps(data)
            kind = kinds.get(type(ev))
            if isinstance(ev, ApprovalRequested):
                meta = {
                    "s": ev.session,
                    "exp": ev.expires_at,
                    "running": ev.running,
                    "cid": ev.call_id,
                    "env": [ev.run_id, ev.call_id, ev.tool, ev.parent_call_id],
                    "w": self.token,
                }
                args += ("A", entry, ev.call_id, blob, ev.approval_id, dumps(meta))
            elif isinstance(ev, ApprovalResolved):
                args += ("R", entry, ev.call_id, blob, ev.approval_id)
            elif kind is None:
                args += ("-", entry, ev.call_id or "", blob)
            else:
                args += (kind, entry, ev.call_id or "", ev.run_id or "", ev.tool or "", blob)
        _, codes, moved = await self._flush_script(keys=[f"{base}:s"], args=args)
        return str(codes), list(moved)

    async def _checkpoints(self, batch: list[Event]) -> None:
        """Every ``replay // 4`` events written to a session, store its state as of
        ``replay`` events back and trim the stream up to there."""
        due: dict[str, int] = {}
        for ev in batch:
            self._marks.add(ev.session, event_seq(ev.id), due)
        for session, seq in due.items():
            try:
                await self._checkpoint(session, seq_entry(seq))
            except RETRYABLE as exc:
                logger.info("checkpoint of %s skipped: %s", session, exc)

    async def _checkpoint(self, session: str, entry: str) -> None:
        state = await self._read_state(session, upto=entry)
        reset = StreamReset(
            id=make_id(state.epoch, entry_seq(entry)),
            session=session,
            ts=self._clock(),
            snapshot=state.folded().snapshot(),
        )
        blob = dumps(to_dict(reset))
        trim = seq_entry(entry_seq(entry) + 1)  # the checkpoint covers ``entry`` itself
        base = session_base(self.prefix, session)
        await self._ck_script(
            keys=[f"{base}:s"], args=[base, entry, blob, int(self.session_ttl), trim]
        )

    # -- leases --------------------------------------------------------------------------

    async def _leases(self) -> None:
        """Renew this process's lease; close the calls of writers whose lease ran out."""
        every = self.lease / 3
        while True:
            await asyncio.sleep(every)
            try:
                if self._registered:
                    await self._register(())
                await self._ensure_epoch()  # a lost epoch key: every cursor resets
                if self.reap:
                    await self.reap_lost()
            except RETRYABLE as exc:
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
        g = self._global
        workers = cast("set[str]", await self._redis.smembers(f"{g}:workers"))
        lost = cast("set[str]", await self._redis.smembers(f"{g}:lost"))
        others = sorted((workers | lost) - {self.token})
        if not others:
            return 0
        alive = await self._batch([("EXISTS", f"{g}:w:{w}") for w in others])
        total = 0
        for w, held in zip(others, alive, strict=True):
            if held and w not in lost:
                continue
            n = await self._reap_writer(w, "worker lost", force=False)
            if n > 0:
                logger.warning("writer %s lost its lease: closed %d open calls/runs", w, n)
                total += n
        self._stats.reaped += total
        return total

    async def _reap_writer(self, token: str, reason: str, *, force: bool) -> int:
        """Claim writer ``token`` (once, in the shared slot), close what it left open in
        each session it wrote to (one script per session's slot), then release it."""
        g = self._global
        status, sessions = await self._claim_script(
            keys=[f"{g}:workers"], args=[g, token, "1" if force else "0"]
        )
        if status != "reap":
            return 0
        n = 0
        for session in sessions:
            base = session_base(self.prefix, session)
            n += int(
                await self._reap_script(
                    keys=[f"{base}:s"],
                    args=[base, session, token, reason, int(self.session_ttl)],
                )
            )
        await self._batch([("SREM", f"{g}:lost", token), ("DEL", f"{g}:wsess:{token}")])
        return n

    async def _batch(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Run commands on the shared slot: pipelined on a standalone Redis, one by one on
        a cluster (where each command finds a promoted master after a failover)."""
        if self.cluster:
            return [await self._redis.execute_command(*command) for command in commands]
        async with self._redis.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute())

    # -- approvals (arbitrated by toolstream.redis._approvals) ---------------------------

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
        """Decide an approval, atomically in Redis: the first decision from any process
        wins (see :meth:`toolstream.EventBus.resolve_approval` for the errors)."""
        require_asyncio("resolve_approval()")
        edited = check_decision(approved, by, reason, args, self.payload.max_bytes)
        return await self._arbiter.resolve(
            session, approval_id, approved, by, reason, edited, ends_call
        )

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first. ``ApprovalNotFound`` for an
        unknown id or another session's."""
        require_asyncio("decision()")
        return await self._arbiter.decision(session, approval_id)

    async def wait_decision(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on an approval, woken by the script that resolves it (a
        blocking pop on the approval's own key); bound it with a cancel scope. It goes on
        while Redis is away (nobody can decide meanwhile), and waits for a request this
        bus has not written yet. ``ApprovalNotFound`` as for :meth:`decision`."""
        require_asyncio("wait_decision()")
        return await self._arbiter.wait(session, approval_id)

    # -- reading -------------------------------------------------------------------------

    def _parse_state(self, raw: Sequence[Any]) -> SessionState:
        view = LiveView(max_finished=self._max_finished, compare=self.compare)
        return parse_state(raw, view, self.epoch)

    async def _read_state(self, session: str, upto: str = "+") -> SessionState:
        await self._connected()
        base = session_base(self.prefix, session)
        raw = await self._state_script(keys=[f"{base}:s"], args=[base, upto])
        return self._parse_state(raw)

    async def fetch_snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand, read from Redis plus
        this process's events not yet written (the async form of :meth:`snapshot`)."""
        require_asyncio("fetch_snapshot()")
        try:
            state = await self._read_state(session)
            if await self._expire_due(session, state):
                state = await self._read_state(session)
        except NETWORK_ERRORS as exc:
            raise BusUnavailable(f"cannot reach Redis at {redact_url(self.url)}: {exc}") from exc
        return self._snapshot_of(session, state, run)

    async def _expire_due(self, session: str, state: SessionState) -> bool:
        """Resolve by ``"timeout"`` the approvals of ``state`` past their expiry (a
        snapshot or a subscription's start touches them); True if there were any."""
        return await expire_due(
            state, self._clock(), lambda approval_id: self._arbiter.decision(session, approval_id)
        )

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now.

        Blocks for one round trip to Redis (the Bus protocol makes this call
        synchronous); in async code prefer ``await bus.fetch_snapshot(session)``.
        """
        base = session_base(self.prefix, session)

        def read() -> SessionState:
            raw = self._sync_run(
                lambda client: self._sync_state(keys=[f"{base}:s"], args=[base, "+"], client=client)
            )
            return self._parse_state(cast(Sequence[Any], raw))

        try:
            state = read()
            due = due_approvals(state, self._clock())
            if due:  # touched past their expiry: resolved by timeout, then read again
                for approval_id in due:
                    self._arbiter.expire_now(session, approval_id)
                state = read()
        except NETWORK_ERRORS as exc:
            raise BusUnavailable(f"cannot reach Redis at {redact_url(self.url)}: {exc}") from exc
        return self._snapshot_of(session, state, run)

    def _snapshot_of(self, session: str, state: SessionState, run: str | None) -> Snapshot:
        view = state.folded()
        top = state.events[-1][0] if state.events else 0
        pending = self._outbox.pending(session)
        for ev in pending:  # written meanwhile or not: apply what Redis did not show
            if event_seq(ev.id) > top:
                view.apply(ev)
        return bound_snapshot(view.snapshot(run_id=run), self.reset_bytes)

    async def _connected(self) -> None:
        """On a cluster, learn the topology once before any command that may be cancelled
        (a cancel in the middle of redis-py's first discovery would leak its nodes)."""
        if not self.cluster:
            return
        task = self._discovery
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._discovery = asyncio.get_running_loop().create_task(
                self._redis.initialize()
            )
        await asyncio.shield(task)

    def _reader(self) -> Any:
        """A client for one subscription's blocking reads: one connection of its own on a
        standalone Redis; on a cluster the bus's client (its per-node pools give each
        blocking read a connection, and it follows failovers for everyone)."""
        if self.cluster:
            return self._redis
        return aredis.Redis.from_url(self.url, single_connection_client=True, **self._options)

    def subscribe(
        self,
        *types: type[Event],
        session: str | None = None,
        run: str | None = None,
        after: str | None = None,
        snapshot: bool = False,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
    ) -> RedisSubscription[Any]:
        """Subscribe to one session's events, as :meth:`toolstream.EventBus.subscribe`.

        The subscription learns where it starts on its first read (or ``await
        sub.prepare()``): after this process's events published before this call are
        in Redis, so a process reads its own writes. ``session`` is required: each
        session is its own Redis stream.
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
    ) -> RedisSubscription[Any]:
        """Continue a client exactly where it was, as :meth:`toolstream.EventBus.resume`
        (``sub.origin`` is final once ``await sub.prepare()`` returned)."""
        request = resume_request(
            types, session=session, after=after, at=at, run=run, buffer=buffer, overflow=overflow
        )
        return self._open(request)

    def _open(self, request: StartRequest) -> RedisSubscription[Any]:
        session = request.session
        if session is None:
            raise ValueError(
                "RedisBus subscriptions need session=: each session is one Redis stream "
                "(see docs/scaling.md)"
            )
        require_asyncio("subscribe()")
        if self._closed:
            raise BusClosed("the bus is closed")
        self._start_here()
        with self._lock:
            since = max(self._last, int(self._clock() * 1000) * SCALE - 1)
            barrier = self._outbox.published
        sub: RedisSubscription[Any] = RedisSubscription(
            self, session, request=request, since=since, barrier=barrier
        )
        self._subs.add(sub)
        return sub
