"""PostgresBroker's connections: a small pool of async connections that every operation
shares (a subscription holds one only while its read runs), the one listening
connection that fans the NOTIFY wake-ups out to the waiting readers, and how a plan
(:mod:`toolstream.postgres._plans`) runs on a connection, pipelined, in a transaction.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from toolstream._extras import require

require("psycopg", "postgres", "toolstream.postgres")

import psycopg  # noqa: E402 - after the check that names the extra
from psycopg.conninfo import conninfo_to_dict  # noqa: E402
from psycopg.pq import TransactionStatus  # noqa: E402

from ._plans import Plan, Rows  # noqa: E402

logger = logging.getLogger("toolstream.postgres")

__all__ = [
    "RETRYABLE",
    "SchemaLost",
    "Pool",
    "Watch",
    "connect_options",
    "drive",
    "drive_sync",
    "psycopg",
    "where",
]

T = TypeVar("T")


class SchemaLost(psycopg.OperationalError):
    """The tables are gone (dropped, or a database restored without them): they are
    created again, with a new epoch, before the next operation."""


#: What "cannot reach PostgreSQL now" looks like: a connection refused, reset or timed
#: out, a server shutting down or starting (``OperationalError`` and its subclasses:
#: ``AdminShutdown``, ``CannotConnectNow``, a serialization failure or deadlock), a
#: replica that does not take writes (after a failover), the tables being created
#: again. The bus retries these.
RETRYABLE: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.errors.ReadOnlySqlTransaction,
    OSError,
)


def where(dsn: str) -> str:
    """The server ``dsn`` names, for messages (never its password)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "PostgreSQL"
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = params.get("port")
    db = params.get("dbname")
    return f"PostgreSQL at {host}" + (f":{port}" if port else "") + (f"/{db}" if db else "")


def connect_options(dsn: str, timeout: float) -> dict[str, Any]:
    """The keyword arguments of every connection: autocommit (a plan opens its own
    transaction), ``connect_timeout`` (whole seconds, at least 2: libpq's rule) and an
    ``application_name``, unless ``dsn`` sets them."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a libpq connection string: {exc}") from exc
    options: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in params:
        options["connect_timeout"] = max(2, math.ceil(timeout))
    if "application_name" not in params:
        options["application_name"] = "toolstream"
    return options


async def drive(conn: psycopg.AsyncConnection[Any], plan: Plan[T], *, tx: bool = True) -> T:
    """Run ``plan`` on ``conn``: each step's statements pipelined (one round trip; a step
    whose rows nobody wants does not even wait), all in one transaction when ``tx``."""
    if not tx:  # a read: one statement per step, no transaction
        results: Rows | None = None
        try:
            while True:
                step = plan.send(results)  # type: ignore[arg-type]  # None primes it
                results = []
                for query, params, wanted in step:
                    cur = await conn.execute(query, params)
                    results.append(await cur.fetchall() if wanted else None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
    async with conn.pipeline() as pipe, conn.transaction():
        results = None
        while True:
            try:
                step = plan.send(results)  # type: ignore[arg-type]
            except StopIteration as stop:
                value: T = stop.value
                break
            cursors = [await conn.execute(query, params) for query, params, _ in step]
            if any(wanted for _, _, wanted in step):
                await pipe.sync()
                results = [
                    await cur.fetchall() if wanted else None
                    for cur, (_, _, wanted) in zip(cursors, step, strict=True)
                ]
            else:
                results = [None] * len(step)
    return value


def drive_sync(conn: psycopg.Connection[Any], plan: Plan[T], *, tx: bool = True) -> T:
    """:func:`drive` on a synchronous connection."""
    if not tx:
        results: Rows | None = None
        try:
            while True:
                step = plan.send(results)  # type: ignore[arg-type]
                results = [
                    conn.execute(query, params).fetchall() if wanted else None
                    for query, params, wanted in step
                ]
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
    with conn.pipeline() as pipe, conn.transaction():
        results = None
        while True:
            try:
                step = plan.send(results)  # type: ignore[arg-type]
            except StopIteration as stop:
                value: T = stop.value
                break
            cursors = [conn.execute(query, params) for query, params, _ in step]
            if any(wanted for _, _, wanted in step):
                pipe.sync()
                results = [
                    cur.fetchall() if wanted else None
                    for cur, (_, _, wanted) in zip(cursors, step, strict=True)
                ]
            else:
                results = [None] * len(step)
    return value


def reusable(conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> bool:
    """Whether ``conn`` is open and between transactions (not broken, not left in the
    middle of a statement by a cancelled task)."""
    return not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE


class Pool:
    """At most ``size`` async connections, opened when needed, shared by every
    operation of one event loop; a connection that failed or was left mid-statement
    is closed, not returned."""

    def __init__(
        self, connect: Callable[[], Any], size: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._connect = connect
        self._size = size
        self.loop = loop
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._open = 0  # connections open or being opened
        # Tasks waiting for a connection: each future gets one, or None (open one).
        self._waiters: deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = deque()
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await self._take()
        try:
            yield conn
        finally:
            self._give(conn)

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise psycopg.OperationalError("the connection pool is closed")
        if self._idle:
            return self._idle.pop()
        if self._open >= self._size:
            fut: asyncio.Future[psycopg.AsyncConnection[Any] | None] = self.loop.create_future()
            self._waiters.append(fut)
            try:
                conn = await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    got = fut.result()
                    if got is not None:
                        self._give(got)
                    else:
                        self._free_slot()
                raise
            if conn is not None:
                return conn
        else:
            self._open += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._free_slot()
            raise
        return conn  # type: ignore[no-any-return]

    def _give(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._closed or not reusable(conn):
            if conn.broken:  # the server went away: the idle ones are dead too
                self._drop_idle()
            if not conn.closed:
                conn.pgconn.finish()  # what close() does, without awaiting
            self._free_slot()
            return
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(conn)
                return
        self._idle.append(conn)

    def _free_slot(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the waiter opens a connection in this slot
                return
        self._open -= 1

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.pgconn.finish()
            self._free_slot()

    def close(self) -> None:
        """Close the idle connections now, the others when they come back."""
        self._closed = True
        self._drop_idle()
        for fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()


class Watch:
    """What waiters of one session (or one approval) wait on: a count of the wake-ups
    so far, and an event set (and replaced) at each."""

    __slots__ = ("count", "event", "refs")

    def __init__(self) -> None:
        self.count = 0
        self.refs = 0
        self.event = asyncio.Event()

    def wake(self) -> None:
        self.count += 1
        self.event.set()
        self.event = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return at once if woken since ``count`` was ``seen``, else when woken or
        after ``timeout`` seconds."""
        if self.count != seen:
            return
        try:
            await asyncio.wait_for(self.event.wait(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            pass


def wake_all(watches: Iterable[Watch]) -> None:
    for w in list(watches):
        w.wake()
