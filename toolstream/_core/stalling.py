"""Test hooks of a broker driver: hold an operation (``stall``), run a callback after one
(``after``). :class:`~toolstream._core.memory_broker.MemoryBroker` has them built in;
:class:`StallingBroker` adds them to any driver (a ``RedisBroker``...) by wrapping it."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import attrs

from .driver import (
    Appended,
    ApprovalState,
    Broker,
    BrokerReader,
    Chunk,
    Decide,
    Record,
    Resolution,
    StoredState,
)

__all__ = ["OPERATIONS", "AfterHook", "OperationHooks", "StallingBroker"]

T = TypeVar("T")

#: The operations a driver's hooks can hold or follow: the :class:`Broker` methods that
#: talk to the broker (``"read"`` and ``"wait"`` are a reader's).
# fmt: off
OPERATIONS = frozenset((
    "epoch", "append", "read_state", "read_state_sync", "checkpoint", "read", "wait", "hold",
    "lost", "claim", "reap", "release", "drop_lease", "trim_due", "expire", "approval",
    "approval_sync", "resolve", "resolve_sync", "wait_approval",
))
# fmt: on

#: What :meth:`OperationHooks.after` runs with an operation's result: for an async
#: operation it may be a coroutine function (awaited before the caller gets the result).
AfterHook = Callable[[Any], "Awaitable[None] | None"]


@attrs.define(eq=False)
class _Stall:
    op: str
    token: str | None
    over: threading.Event = attrs.Factory(threading.Event)
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = attrs.Factory(list)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _check(op: str) -> None:
    if op not in OPERATIONS:
        raise ValueError(f"no operation {op!r} to hook (one of {sorted(OPERATIONS)})")


class OperationHooks:
    """The stalls and after-callbacks of one driver, safe from any thread and loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stalls: list[_Stall] = []
        self._after: list[tuple[str, AfterHook]] = []

    @contextlib.contextmanager
    def stall(self, op: str, token: str | None = None) -> Iterator[None]:
        """Hold operation ``op`` for the ``with`` block: its calls (every one, or only
        those whose ``token`` argument is ``token``) wait until the block ends, then run
        (``*_sync`` ones block their thread). The block may end in any thread."""
        _check(op)
        held = _Stall(op, token)
        with self._lock:
            self._stalls.append(held)
        try:
            yield
        finally:
            with self._lock:
                self._stalls.remove(held)
                held.over.set()
                waiters, held.waiters = held.waiters, []
            for loop, future in waiters:
                try:
                    loop.call_soon_threadsafe(_settle, future)
                except RuntimeError:  # its loop is closed: nobody waits any more
                    pass

    @contextlib.contextmanager
    def after(self, op: str, callback: AfterHook) -> Iterator[None]:
        """For the ``with`` block, run ``callback(result)`` after each call of ``op``
        completes, before its caller gets the result (awaited when it returns an
        awaitable, which only an async operation allows). Not run when ``op`` raises."""
        _check(op)
        hook = (op, callback)
        with self._lock:
            self._after.append(hook)
        try:
            yield
        finally:
            with self._lock:
                self._after.remove(hook)

    def _stalled(self, op: str, token: str | None) -> _Stall | None:
        return next((h for h in self._stalls if h.op == op and h.token in (None, token)), None)

    async def enter(self, op: str, token: str | None = None) -> None:
        """Wait until no stall holds ``op`` (for ``token``)."""
        while True:
            with self._lock:
                held = self._stalled(op, token)
                if held is None:
                    return
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                waiter = (asyncio.get_running_loop(), future)
                held.waiters.append(waiter)
            try:
                await future
            finally:
                with self._lock:
                    if waiter in held.waiters:
                        held.waiters.remove(waiter)

    def enter_sync(self, op: str) -> None:
        """:meth:`enter` for a synchronous operation: blocks the thread."""
        while True:
            with self._lock:
                held = self._stalled(op, None)
            if held is None:
                return
            held.over.wait()

    async def done(self, op: str, result: T) -> T:
        """Run the callbacks following ``op`` with its ``result``; returns it."""
        with self._lock:
            hooks = [callback for name, callback in self._after if name == op]
        for callback in hooks:
            ran = callback(result)
            if inspect.isawaitable(ran):
                await ran
        return result

    def done_sync(self, op: str, result: T) -> T:
        """:meth:`done` for a synchronous operation (a callback may not be async)."""
        with self._lock:
            hooks = [callback for name, callback in self._after if name == op]
        for callback in hooks:
            ran = callback(result)
            if inspect.isawaitable(ran):
                if inspect.iscoroutine(ran):
                    ran.close()
                raise TypeError(f"{op} is synchronous: its after-callback cannot be async")
        return result


class StallingBroker:
    """A :class:`~toolstream.broker.Broker` driver that wraps another (``inner``), doing
    every operation through it, with :class:`MemoryBroker`'s test hooks: ``stall(op,
    token=None)`` holds an operation, ``after(op, callback)`` runs a callback after one.

    For tests of a broker bus on a real broker::

        bus = BrokerBus(StallingBroker(RedisBroker(...)), lease=0.6)
        with bus.broker.stall("hold", bus.token):   # the lease is not renewed
            ...

    ``where``, ``retryable`` and ``name`` are the inner driver's; ``start`` and
    ``aclose`` reach it (a driver serves one bus). Safe from any thread and loop.
    """

    def __init__(self, inner: Broker) -> None:
        if not isinstance(inner, Broker):
            raise TypeError(f"inner must be a toolstream Broker driver, got {inner!r}")
        #: The driver every operation goes through.
        self.inner = inner
        self.where = inner.where
        self.retryable = inner.retryable
        self.name = inner.name
        self._hooks = OperationHooks()

    def __repr__(self) -> str:
        return f"<StallingBroker {self.inner!r}>"

    # -- test hooks ----------------------------------------------------------------------

    def stall(self, op: str, token: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold operation ``op`` (a method's name; a reader's are ``"read"`` and
        ``"wait"``) for the ``with`` block: its calls, by the bus or only those whose
        ``token`` argument is ``token`` (``append``, ``hold``, ``lost``, ``claim``,
        ``reap``, ``release``, ``drop_lease``), wait until the block ends, then run
        (``*_sync`` ones block their thread). ``stall("append", bus.token)``: a hung
        writer; ``stall("hold", bus.token)``: a lease not renewed; ``stall("read")``:
        readers left behind."""
        return self._hooks.stall(op, token)

    def after(self, op: str, callback: AfterHook) -> contextlib.AbstractContextManager[None]:
        """For the ``with`` block, call ``callback(result)`` after each call of ``op``
        completed, before the bus gets the result (an async operation's callback may be
        a coroutine function: awaited). ``after("approval", ...)``: something happens
        between a read and the bus acting on it."""
        return self._hooks.after(op, callback)

    # -- the driver ------------------------------------------------------------------------

    async def _run(self, op: str, token: str | None, call: Callable[[], Awaitable[T]]) -> T:
        await self._hooks.enter(op, token)
        return await self._hooks.done(op, await call())

    def _run_sync(self, op: str, call: Callable[[], T]) -> T:
        self._hooks.enter_sync(op)
        return self._hooks.done_sync(op, call())

    def open(self, connect_timeout: float) -> str:
        """The inner driver's :meth:`~toolstream.broker.Broker.open`."""
        return self.inner.open(connect_timeout)

    async def epoch(self) -> str:
        """The inner driver's epoch."""
        return await self._run("epoch", None, self.inner.epoch)

    def next_seq(self, last: int, now: float) -> int:
        """The inner driver's numbering (never held: it runs under the bus's lock)."""
        return self.inner.next_seq(last, now)

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """The inner driver's append."""
        return await self._run("append", token, lambda: self.inner.append(session, token, records))

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        """The inner driver's read_state."""
        return await self._run("read_state", None, lambda: self.inner.read_state(session, upto))

    def read_state_sync(self, session: str) -> StoredState:
        """The inner driver's read_state_sync."""
        return self._run_sync("read_state_sync", lambda: self.inner.read_state_sync(session))

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """The inner driver's checkpoint."""
        await self._run("checkpoint", None, lambda: self.inner.checkpoint(session, seq, state))

    def reader(self, session: str) -> BrokerReader:
        """The inner driver's reader, its ``read`` and ``wait`` hooked."""
        return _Reader(self._hooks, self.inner.reader(session))

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        """The inner driver's hold."""
        await self._run("hold", token, lambda: self.inner.hold(token, sessions, lease))

    async def lost(self, token: str) -> list[str]:
        """The inner driver's lost."""
        return await self._run("lost", token, lambda: self.inner.lost(token))

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """The inner driver's claim."""
        return await self._run("claim", token, lambda: self.inner.claim(token, force=force))

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """The inner driver's reap."""
        return await self._run("reap", token, lambda: self.inner.reap(session, token, reason, now))

    async def release(self, token: str) -> None:
        """The inner driver's release."""
        await self._run("release", token, lambda: self.inner.release(token))

    async def drop_lease(self, token: str) -> None:
        """The inner driver's drop_lease."""
        await self._run("drop_lease", token, lambda: self.inner.drop_lease(token))

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        """The inner driver's trim_due."""
        return await self._run("trim_due", None, lambda: self.inner.trim_due(now))

    async def expire(self, now: float) -> int:
        """The inner driver's expire."""
        return await self._run("expire", None, lambda: self.inner.expire(now))

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The inner driver's approval."""
        return await self._run("approval", None, lambda: self.inner.approval(session, approval_id))

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        """The inner driver's approval_sync."""
        return self._run_sync(
            "approval_sync", lambda: self.inner.approval_sync(session, approval_id)
        )

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """The inner driver's resolve."""
        return await self._run(
            "resolve",
            None,
            lambda: self.inner.resolve(session, decide),
        )

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        """The inner driver's resolve_sync."""
        return self._run_sync(
            "resolve_sync",
            lambda: self.inner.resolve_sync(session, decide),
        )

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        """The inner driver's wait_approval."""
        await self._run(
            "wait_approval", None, lambda: self.inner.wait_approval(session, approval_id, timeout)
        )

    async def start(self) -> None:
        """The inner driver's start."""
        await self.inner.start()

    async def aclose(self) -> None:
        """The inner driver's aclose."""
        await self.inner.aclose()


class _Reader:
    """A reader whose ``read`` and ``wait`` go through the hooks."""

    def __init__(self, hooks: OperationHooks, inner: BrokerReader) -> None:
        self._hooks = hooks
        self._inner = inner

    async def read(self, after: int, count: int) -> Chunk:
        await self._hooks.enter("read")
        return await self._hooks.done("read", await self._inner.read(after, count))

    async def wait(self, after: int, timeout: float) -> None:
        await self._hooks.enter("wait")
        await self._inner.wait(after, timeout)
        await self._hooks.done("wait", None)

    async def aclose(self) -> None:
        await self._inner.aclose()
