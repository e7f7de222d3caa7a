"""Watching the streams a server holds: the end of a write that does not return in time
(:class:`WriteDeadline`) and the server's exit (:func:`server_exiting`), both looked at by
one watch per event loop (:func:`watched`), so an idle stream costs nothing."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import anyio

logger = logging.getLogger("toolstream.serving")

__all__ = ["WATCH_INTERVAL", "WriteDeadline", "asyncio_loop", "server_exiting", "watched"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class WriteDeadline:
    """An ASGI ``send`` whose writes are timed, for :func:`watched` to end the
    stream when one has not returned within ``timeout`` seconds.

    A server's ``send`` waits while the connection's buffers are full (its flow
    control): to a client that stopped reading, for ever, holding whatever waits to be
    written and whatever is queued behind it. The watch runs in its own task, so it
    does not depend on the writer; ``expired`` is True once it ended the stream. A
    write under way is filed with the watch (``writing``) while it lasts, so the watch
    looks at those alone, not at every stream it watches.
    """

    __slots__ = ("_send", "expired", "since", "timeout", "writing")

    def __init__(self, send: Send, timeout: float) -> None:
        self._send = send
        self.timeout = timeout
        #: When the write under way began (``time.monotonic()``), or None.
        self.since: float | None = None
        self.expired = False
        #: Where a write under way is filed (set by :func:`watched`), or None.
        self.writing: dict[WriteDeadline, None] | None = None

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        self.since = time.monotonic()
        writing = self.writing
        if writing is not None:
            writing[self] = None
        try:
            await self._send(message)
        finally:
            self.since = None
            if writing is not None:
                writing.pop(self, None)

    def left(self) -> float | None:
        """Seconds until the write under way is overdue (<= 0: it is), or None."""
        since = self.since
        return None if since is None else since + self.timeout - time.monotonic()


def server_exiting() -> bool:
    """True when the server this process runs is shutting down.

    uvicorn does not disconnect streaming responses on shutdown: it waits for them to
    end, and tells the application (lifespan) only after that. Its signal handler is
    a bound method of the server, whose ``should_exit`` flag says it is exiting; an
    open stream that sees it ends, so Ctrl-C never hangs on open streams.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):  # pragma: no cover - exotic platforms
            continue
        server = getattr(handler, "__self__", None)
        if server is not None and getattr(server, "should_exit", False) is True:
            return True
    return False


#: How often the shared watch looks at the server and the writes under way.
WATCH_INTERVAL = 0.25


class _Watch:
    """The one watch of an event loop: every :data:`WATCH_INTERVAL` (sooner when a
    write under way is due), it ends every registered stream if the server is exiting,
    and each stream whose write has been under way past its deadline. One task for all
    of a loop's streams, which runs only while some are registered, and looks only at
    the writes under way (``writing``): an idle stream costs nothing, not even a look
    (10,000 idle streams looked at four times a second took a tenth of a core)."""

    def __init__(self, key: object) -> None:
        self.key = key
        #: Every stream watched (its cancel scope).
        self.entries: set[anyio.CancelScope] = set()
        #: The writes under way now (filed by their :class:`WriteDeadline`).
        self.writing: dict[WriteDeadline, None] = {}
        #: The stream of each write deadline.
        self.scopes: dict[WriteDeadline, anyio.CancelScope] = {}
        self.running = False

    def start(self) -> None:
        self.running = True
        loop = asyncio_loop()
        if loop is None:
            sys.modules["trio"].lowlevel.spawn_system_task(self.run, name="toolstream-watch")
        else:
            self.task = loop.create_task(self.run(), name="toolstream-watch")

    async def run(self) -> None:
        try:
            wait = WATCH_INTERVAL
            while self.entries:
                await anyio.sleep(wait)
                wait = self.look()
        except Exception:  # pragma: no cover - never let the watch die silently
            logger.exception("the stream watch failed")
        finally:
            self.running = False
            if _WATCHES.get(self.key) is self:
                del _WATCHES[self.key]

    def look(self) -> float:
        """End what is due; how long until the next look."""
        if server_exiting():
            for scope in list(self.entries):
                scope.cancel()
            return WATCH_INTERVAL
        wait = WATCH_INTERVAL
        if not self.writing:
            return wait
        now = time.monotonic()
        for deadline in list(self.writing):
            since = deadline.since
            if since is None:
                continue
            left = since + deadline.timeout - now
            if left <= 0:
                stream = self.scopes.get(deadline)
                if stream is not None:
                    deadline.expired = True
                    stream.cancel()
            else:
                wait = min(wait, left)
        return wait


_WATCHES: dict[object, _Watch] = {}


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None under trio."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _loop_key() -> object:
    """What names the running event loop: the asyncio loop, or trio's token."""
    loop = asyncio_loop()
    return loop if loop is not None else sys.modules["trio"].lowlevel.current_trio_token()


@contextmanager
def watched(scope: anyio.CancelScope, deadline: WriteDeadline | None = None) -> Iterator[None]:
    """Cancel ``scope`` while the block runs when :func:`server_exiting` says so, or when
    a write through ``deadline`` is overdue (then ``deadline.expired`` is set). Costs no
    task and no wake-up per stream: one watch per event loop looks at them all."""
    key = _loop_key()
    watch = _WATCHES.get(key)
    if watch is None:
        watch = _WATCHES[key] = _Watch(key)
    watch.entries.add(scope)
    if deadline is not None:
        watch.scopes[deadline] = scope
        deadline.writing = watch.writing
        if deadline.since is not None:  # a write already under way
            watch.writing[deadline] = None
    if not watch.running:
        watch.start()
    try:
        yield
    finally:
        watch.entries.discard(scope)
        if deadline is not None:
            watch.scopes.pop(deadline, None)
            watch.writing.pop(deadline, None)
            deadline.writing = None
