"""PostgresBroker: the :class:`~toolstream._core.driver.Broker` protocol on PostgreSQL
(psycopg 3).

Every operation is one transaction (:mod:`toolstream.postgres._plans` holds what each
does, :mod:`toolstream.postgres._schema` the tables and the append function). Writers NOTIFY
``<prefix>_events`` (payload: the session) inside the transaction that wrote, so the
wake-up goes out on commit; one listening connection per broker fans it out to the
readers of that session. Readers run their ``SELECT`` on a small pool of connections
shared by every operation, not one connection each: a gateway may hold thousands of
subscriptions.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

from toolstream._core.driver import (
    Appended,
    ApprovalState,
    Chunk,
    Decide,
    Record,
    Resolution,
    StoredState,
)
from toolstream._core.jsonenc import loads
from toolstream._core.outbox import Refused

from . import _plans
from ._connections import (
    RETRYABLE,
    Pool,
    SchemaLost,
    Watch,
    connect_options,
    drive,
    drive_sync,
    psycopg,
    reusable,
    wake_all,
    where,
)
from ._plans import SCALE, Plan, Query
from ._schema import Statements

logger = logging.getLogger("toolstream.postgres")

__all__ = ["PostgresBroker", "PostgresReader", "check_prefix"]

T = TypeVar("T")

_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}")
#: How often the listening connection proves it is alive when nothing is notified.
_PING = 5.0
#: How often history is trimmed and idle sessions deleted at most (seconds), across
#: every process sharing the tables.
_TRIM_EVERY = 30.0
_EXPIRE_EVERY = 300.0


def check_prefix(prefix: object) -> str:
    """``prefix`` if it names tables and channels well: letters, digits and ``_``,
    starting with a letter, at most 32 characters; else ``ValueError``."""
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ValueError(
            "prefix names the tables and the NOTIFY channel: letters, digits and '_', "
            f"starting with a letter, at most 32 characters; got {prefix!r}"
        )
    return prefix


class PostgresBroker:
    """The broker protocol on PostgreSQL: tables named ``<prefix>_...`` in the database
    ``dsn`` names (any libpq connection string, given to psycopg unchanged).

    History is kept by time: :meth:`trim_due` names the sessions with events older than
    ``retention`` seconds (the bus stores a checkpoint there, which deletes them), and
    :meth:`expire` deletes the sessions not written to for ``retention`` seconds.
    ``pool``: the most connections the async operations share (reads, writes); one more
    listens for wake-ups and one serves the synchronous methods."""

    name = "PostgresBus"
    retryable = RETRYABLE

    def __init__(
        self,
        dsn: str,
        *,
        prefix: str = "toolstream",
        retention: float = 604800.0,
        connect_timeout: float = 5.0,
        pool: int = 8,
    ) -> None:
        check_prefix(prefix)
        if not retention > 0:
            raise ValueError(f"retention must be positive (seconds), got {retention}")
        if pool < 1:
            raise ValueError(f"pool must be at least 1, got {pool}")
        self.dsn = dsn
        self.prefix = prefix
        self.retention = float(retention)
        self.connect_timeout = connect_timeout
        self.pool_size = pool
        #: The server in messages (never its password).
        self.where = where(dsn)
        self._options = connect_options(dsn, connect_timeout)
        self._s = Statements(prefix)
        self._pool: Pool | None = None
        self._sync: psycopg.Connection[Any] | None = None
        self._sync_lock = threading.Lock()
        self._schema_lost = False
        self._listener: asyncio.Task[None] | None = None
        #: Whether the listening connection is up (LISTENing) now.
        self.listening = False
        self._watches: dict[str, Watch] = {}
        self._approval_watches: dict[tuple[str, str], Watch] = {}

    def __repr__(self) -> str:
        return f"<PostgresBroker {self.where} prefix={self.prefix!r}>"

    # -- running plans -----------------------------------------------------------------

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, **self._options)

    def _pool_here(self) -> Pool:
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.loop is not loop:
            if pool is not None:
                pool.close()
            pool = self._pool = Pool(self._connect, self.pool_size, loop)
        return pool

    async def _run(self, plan: Plan[T], *, tx: bool = True) -> T:
        if self._schema_lost:
            await self._recreate()
        try:
            async with self._pool_here().connection() as conn:
                return await drive(conn, plan, tx=tx)
        except psycopg.errors.UndefinedTable as exc:
            self._schema_lost = True
            raise SchemaLost(f"the tables of prefix {self.prefix!r} are gone: {exc}") from exc

    def _run_sync(self, plan: Plan[T], *, tx: bool = True) -> T:
        with self._sync_lock:
            conn = self._sync
            if conn is None or not reusable(conn):
                if conn is not None:
                    conn.close()
                self._sync = None
                conn = self._sync = psycopg.Connection.connect(self.dsn, **self._options)
            try:
                if self._schema_lost:
                    drive_sync(conn, _plans.ensure_schema(self._s))
                    self._schema_lost = False
                return drive_sync(conn, plan, tx=tx)
            except psycopg.errors.UndefinedTable as exc:
                self._schema_lost = True
                raise SchemaLost(f"the tables of prefix {self.prefix!r} are gone: {exc}") from exc
            except BaseException:
                if not reusable(conn):
                    conn.close()
                    self._sync = None
                raise

    async def _recreate(self) -> None:
        async with self._pool_here().connection() as conn:
            if await drive(conn, _plans.ensure_schema(self._s)):
                logger.warning(
                    "%s: the tables of prefix %r were created again", self.where, self.prefix
                )
        self._schema_lost = False

    # -- the protocol: setup -----------------------------------------------------------

    def open(self, connect_timeout: float) -> str:
        """Connect (synchronously), create the tables if missing and return the epoch
        (created once and stored: a restart keeps it)."""
        if connect_timeout != self.connect_timeout:
            self.connect_timeout = connect_timeout
            self._options = connect_options(self.dsn, connect_timeout)
        # A connection of its own, closed at once: a bus that is never closed (or only
        # ever used asynchronously) holds no synchronous connection.
        with psycopg.Connection.connect(self.dsn, **self._options) as conn:
            drive_sync(conn, _plans.ensure_schema(self._s))
            epoch = drive_sync(conn, _plans.ensure_epoch(self._s, secrets.token_hex(6)))
        self._schema_lost = False
        return epoch

    async def epoch(self) -> str:
        """The epoch now (the tables created again, with a new one, if they are gone)."""
        try:
            return await self._run(_plans.ensure_epoch(self._s, secrets.token_hex(6)))
        except SchemaLost:
            return await self._run(_plans.ensure_epoch(self._s, secrets.token_hex(6)))

    def next_seq(self, last: int, now: float) -> int:
        """``ms * 1,000,000 + n`` of ``now``, after ``last``."""
        return max(int(now * 1000) * SCALE, last + 1)

    async def start(self) -> None:
        """Bind the connection pool to the running loop (connections open when needed)."""
        self._pool_here()

    async def aclose(self) -> None:
        """Stop listening and close every connection."""
        task, self._listener = self._listener, None
        if task is not None and not task.done():
            loop = task.get_loop()
            if loop is asyncio.get_running_loop():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            elif not loop.is_closed():  # closed from another loop than the bus ran in
                loop.call_soon_threadsafe(task.cancel)
        if self._pool is not None:
            self._pool.close()
        with self._sync_lock:
            if self._sync is not None:
                self._sync.close()
                self._sync = None

    # -- writing and reading -----------------------------------------------------------

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """Write ``records`` in one transaction (see :func:`_plans.append`);
        :class:`~toolstream._core.outbox.Refused` for an error retrying cannot cure."""
        plan = _plans.append(self._s, session, token, records, secrets.token_hex(6))
        try:
            return await self._run(plan, tx=False)  # one statement: atomic on its own
        except RETRYABLE:
            raise
        except psycopg.Error as exc:
            raise Refused(f"{self.where} refused the batch: {exc}") from exc

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        """The session as stored, in one statement."""
        return await self._run(_plans.read_state(self._s, session, upto), tx=False)

    def read_state_sync(self, session: str) -> StoredState:
        """:meth:`read_state` on the synchronous connection."""
        return self._run_sync(_plans.read_state(self._s, session, None), tx=False)

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """Store the checkpoint unless a newer one is, and delete what it covers (one
        statement)."""

        def plan() -> Plan[None]:
            yield [(self._s.q["checkpoint"], (seq, state, seq, session, seq, seq), False)]

        await self._run(plan(), tx=False)

    def reader(self, session: str) -> PostgresReader:
        """A reader of ``session``: reads on the shared pool, woken by the listener."""
        return PostgresReader(self, session)

    async def _read_after(self, session: str, after: int, count: int) -> Chunk:
        def plan() -> Plan[Chunk]:
            got = yield [(self._s.q["read_after"], (after, count, session), True)]
            rows = got[0] or []
            if not rows:
                return Chunk("", 0, [])
            events = [(seq, blob) for _, _, seq, blob in rows if seq is not None]
            return Chunk(str(rows[0][0]), int(rows[0][1]), events)

        return await self._run(plan(), tx=False)

    # -- wake-ups ----------------------------------------------------------------------

    def _watch(self, table: dict[Any, Watch], key: Any) -> Watch:
        w = table.get(key)
        if w is None:
            w = table[key] = Watch()
        w.refs += 1
        return w

    def _unwatch(self, table: dict[Any, Watch], key: Any) -> None:
        w = table.get(key)
        if w is not None:
            w.refs -= 1
            if w.refs <= 0:
                del table[key]

    def _listen_here(self) -> None:
        """Start the listening connection in the running loop, unless it runs there."""
        task = self._listener
        loop = asyncio.get_running_loop()
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        if task is not None and not task.done():
            task.cancel()
        self._listener = loop.create_task(self._listen(), name="toolstream-postgres-listener")

    async def _listen(self) -> None:
        """LISTEN on one connection, for ever: reconnect after any failure, and wake
        every waiter once listening again (they read again: nothing is missed)."""
        delay = 0.05
        while True:
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                conn = await self._connect()
                for statement in self._s.listen:
                    await conn.execute(statement)
                self.listening = True
                delay = 0.05
                wake_all(self._watches.values())
                wake_all(self._approval_watches.values())
                while True:
                    async for note in conn.notifies(timeout=_PING):
                        self._dispatch(note.channel, note.payload)
                    await conn.execute(b"SELECT 1")  # still there?
            except Exception as exc:
                level = logging.DEBUG if isinstance(exc, RETRYABLE) else logging.ERROR
                logger.log(level, "%s: listening connection lost: %r", self.where, exc)
            finally:
                self.listening = False
                if conn is not None:
                    await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _dispatch(self, channel: str, payload: str) -> None:
        if channel == self._s.events_channel:
            if not payload:
                wake_all(self._watches.values())
                return
            w = self._watches.get(payload)
            if w is not None:
                w.wake()
        elif channel == self._s.approvals_channel:
            if not payload:
                wake_all(self._approval_watches.values())
                return
            try:
                session, approval_id = loads(payload)
            except (ValueError, TypeError):
                return
            w = self._approval_watches.get((session, approval_id))
            if w is not None:
                w.wake()

    # -- leases ------------------------------------------------------------------------

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        """Hold (renew) ``token``'s lease for ``lease`` seconds by the database's clock,
        and file ``sessions`` under it."""
        q = self._s.q

        def plan() -> Plan[None]:
            step: list[Query] = [(q["hold"], (token, lease), False)]
            if sessions:
                step.append((q["file_sessions"], (token, list(sessions)), False))
            yield step

        await self._run(plan())

    async def lost(self, token: str) -> list[str]:
        """The writers other than ``token`` whose lease ran out or whose reaping was
        claimed and not finished."""

        def plan() -> Plan[list[str]]:
            got = yield [(self._s.q["lost"], (token,), True)]
            return [str(r[0]) for r in got[0] or []]

        return await self._run(plan(), tx=False)

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """Claim ``token`` for reaping: the sessions it wrote to, or None (its lease is
        held and not ``force``, or it was reaped)."""
        return await self._run(_plans.claim(self._s, token, force))

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """Close what ``token`` left open in ``session``, once; how many events that
        wrote."""
        return await self._run(_plans.reap(self._s, session, token, reason, now))

    async def release(self, token: str) -> None:
        """Forget writer ``token`` (reaped everywhere)."""
        q = self._s.q

        def plan() -> Plan[None]:
            yield [
                (q["forget_sessions"], (token,), False),
                (q["forget_writer"], (token,), False),
                (q["unclaim"], (token,), False),
            ]

        await self._run(plan())

    async def drop_lease(self, token: str) -> None:
        """End ``token``'s lease now."""

        def plan() -> Plan[None]:
            yield [(self._s.q["drop_lease"], (token,), False)]

        await self._run(plan(), tx=False)

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        """The sessions with events older than ``retention`` (by the database's clock),
        each with the newest such seq; ``[]`` when any process looked less than
        ``min(retention, 30 s) / 2`` ago."""
        q = self._s.q
        every = min(self.retention, _TRIM_EVERY) / 2

        def plan() -> Plan[list[tuple[str, int]]]:
            got = yield [(q["trim_gate"], (every,), True)]
            if not got[0]:
                return []
            got = yield [(q["trim_due"], (self.retention,), True)]
            return [(str(s), int(seq)) for s, seq in got[0] or []]

        return await self._run(plan())

    async def expire(self, now: float) -> int:
        """Delete the sessions not written to for ``retention`` seconds (their events,
        checkpoint, approvals...); how many. Looks at most every ``min(retention,
        300 s) / 2``, across processes."""
        q = self._s.q
        every = min(self.retention, _EXPIRE_EVERY) / 2

        def plan() -> Plan[int]:
            got = yield [(q["expire_gate"], (every,), True)]
            if not got[0]:
                return 0
            got = yield [(q["expire"], (self.retention,), True)]
            return int((got[0] or [(0,)])[0][0])

        return await self._run(plan())

    # -- approvals ---------------------------------------------------------------------

    def _approval_plan(self, session: str, approval_id: str) -> Plan[ApprovalState | None]:
        got = yield [(self._s.q["approval"], (session, approval_id), True)]
        rows = got[0] or []
        if not rows:
            return None
        status, meta, decision = rows[0]
        return ApprovalState(
            status="r" if status == "r" else "p",
            meta=loads(meta),
            decision=loads(decision) if decision else None,
        )

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval, or None when unknown (or another session's)."""
        return await self._run(self._approval_plan(session, approval_id), tx=False)

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        """:meth:`approval` on the synchronous connection."""
        return self._run_sync(self._approval_plan(session, approval_id), tx=False)

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """Decide the approval in one transaction (the session's row locked: of every
        process deciding at once, exactly one wins)."""
        plan = _plans.resolve(self._s, session, decide)
        return await self._run(plan)

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        """:meth:`resolve` on the synchronous connection."""
        plan = _plans.resolve(self._s, session, decide)
        return self._run_sync(plan)

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        """Return when the approval was resolved (a NOTIFY), or after ``timeout``."""
        self._listen_here()
        key = (session, approval_id)
        w = self._watch(self._approval_watches, key)
        try:
            seen = w.count
            try:  # resolved between the caller's read and this wait?
                state = await self.approval(session, approval_id)
            except RETRYABLE:
                state = None
            if state is not None and state.status == "r":
                return
            await w.wait(seen, timeout)
        finally:
            self._unwatch(self._approval_watches, key)


class PostgresReader:
    """One subscription's reads of one session: a ``SELECT`` on the broker's shared pool
    per read; :meth:`wait` returns when the session was notified since the last read
    began (so a write committed during the read is never slept through)."""

    def __init__(self, broker: PostgresBroker, session: str) -> None:
        self._broker = broker
        self._session = session
        self._w = broker._watch(broker._watches, session)
        self._seen = self._w.count
        self._closed = False

    async def read(self, after: int, count: int) -> Chunk:
        """Up to ``count`` events after ``after``, with the session's incarnation and
        checkpoint, in one statement."""
        self._broker._listen_here()
        self._seen = self._w.count
        return await self._broker._read_after(self._session, after, count)

    async def wait(self, after: int, timeout: float) -> None:
        """Return when the session was written to since the last read began (or the
        listener reconnected), or after ``timeout`` seconds."""
        self._broker._listen_here()
        await self._w.wait(self._seen, timeout)
        self._seen = self._w.count

    async def aclose(self) -> None:
        """Stop being woken (the reader holds no connection between reads)."""
        if not self._closed:
            self._closed = True
            self._broker._unwatch(self._broker._watches, self._session)
