"""The one loop that turns a subscription into a transport's output.

A :class:`Pump` reads a subscription in batches, encodes each event with the stream's
dialect (:class:`Encoder`: frame ids, resume skips) and formats every frame for its
transport (:class:`WireFormat`: SSE bytes, a WebSocket text, the frame itself).
``SSEApp``, ``sse.frames``, ``WebSocketApp`` and :func:`toolstream.dialects.render`
all pump through it, so what one sends the others send too.

Encodings of stateless dialects can be shared between the clients of one transport
(:class:`FrameCache`): an event sent to 100 clients is encoded once. Whether an event
may be shared is the encoder's decision (:meth:`Encoder.shares`), never the cache's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Generic, Protocol, TypeVar

import anyio

from toolstream import Event, StreamReset, Subscription
from toolstream._core.wake import current_backend

from ._base import EncodedFrame, Encoder
from .native import Native

__all__ = ["FrameCache", "Pump", "WireFormat", "beats"]

T = TypeVar("T")
#: (dialect name, session, event id): a broker bus's ids are per session.
CacheKey = tuple[str, str, str]
T_co = TypeVar("T_co", covariant=True)


class WireFormat(Protocol[T_co]):
    """How a transport writes one frame (SSE: bytes, WebSocket: a text message)."""

    def frame(self, frame: EncodedFrame) -> T_co:
        """One frame, as the transport sends it."""
        ...

    def native(self, event: Event) -> T_co | None:
        """The native dialect's one frame for ``event`` written directly (cheaper than
        through ``frame``), or None to go through ``frame``."""
        ...


class FrameCache(Generic[T]):
    """Formatted encodings shared by the clients of one transport, by (dialect, session,
    event id): bounded by count (``size``) and by bytes (``max_bytes``), oldest out
    first. ``users`` is the number of streams that may read it, ``readers`` how many
    of them read each session (:meth:`join`, :meth:`leave`). A session with fewer than
    two readers has nobody to share with: its encodings are not stored (a gateway whose
    clients each watch their own session stores nothing), and the cache is emptied when
    fewer than two streams are left."""

    def __init__(self, size: int = 4096, max_bytes: int = 8 * 2**20) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.users = 0
        #: Streams reading each session through this cache.
        self.readers: dict[str | None, int] = {}
        #: The characters (or bytes) the encodings stored take.
        self.nbytes = 0
        self._items: dict[CacheKey, tuple[T, ...]] = {}

    def get(self, key: CacheKey) -> tuple[T, ...] | None:
        """The encoding stored under ``key``, if any."""
        return self._items.get(key)

    def put(self, key: CacheKey, value: tuple[T, ...]) -> None:
        """Store an encoding (dropping the oldest quarter, as often as needed, when full)."""
        items = self._items
        size = _weight(value)
        while items and (len(items) >= self.size or self.nbytes + size > self.max_bytes):
            for old in list(items)[: max(1, len(items) // 4)]:
                self.nbytes -= _weight(items.pop(old))
        if size <= self.max_bytes:
            items[key] = value
            self.nbytes += size

    def join(self, session: str | None) -> None:
        """A stream of ``session`` reads through it from now on."""
        self.users += 1
        self.readers[session] = self.readers.get(session, 0) + 1

    def leave(self, session: str | None = None) -> None:
        """A stream (of ``session``) that used it ended: with fewer than two left, its
        encodings go."""
        self.users -= 1
        left = self.readers.get(session, 0) - 1
        if left > 0:
            self.readers[session] = left
        else:
            self.readers.pop(session, None)
        if self.users < 2 and self._items:
            self._items.clear()
            self.nbytes = 0


def _weight(value: tuple[Any, ...]) -> int:
    """The characters or bytes of an encoding (frames of other kinds count 64 each)."""
    return sum(len(part) if isinstance(part, (bytes, str)) else 64 for part in value)


class Pump(Generic[T]):
    """One stream: its ``subscription``, its ``encoder``, the ``initial`` frames to send
    first (a reset re-encoded for a client cut inside it), written in ``fmt``."""

    def __init__(
        self,
        subscription: Subscription[Any],
        encoder: Encoder,
        fmt: WireFormat[T],
        *,
        initial: list[EncodedFrame] | None = None,
        cache: FrameCache[T] | None = None,
    ) -> None:
        self.subscription = subscription
        self.encoder = encoder
        self.fmt = fmt
        self.initial = initial or []
        self.cache = cache if cache is not None and encoder.dialect.stateless else None
        self._native = type(encoder.dialect) is Native

    def opening(self) -> list[T]:
        """The dialect's preamble and the initial frames."""
        fmt = self.fmt
        return [fmt.frame(f) for f in (*self.encoder.open(), *self.initial)]

    def closing(self) -> list[T]:
        """The dialect's epilogue."""
        fmt = self.fmt
        return [fmt.frame(f) for f in self.encoder.close()]

    def encode(self, batch: list[Event]) -> list[T]:
        """A batch of events, encoded and formatted."""
        encoder = self.encoder
        fmt = self.fmt
        cache = self.cache
        if cache is not None and cache.readers.get(self.subscription.session, 0) < 2:
            cache = None  # nobody to share this session's events with: no bookkeeping
        native = fmt.native if self._native else None
        if cache is None and native is None:
            return [fmt.frame(f) for event in batch for f in encoder.encode(event)]
        # The hot path of a stream: what Encoder.shares() decides, checked inline (a
        # stateless dialect was checked once; no skip pending; not a reset), then the
        # shared encoding or the native shortcut. tests/test_pump.py checks it against
        # the plain path.
        name = encoder.dialect.name
        items = cache._items if cache is not None else None
        out: list[T] = []
        passed: Event | None = None
        for event in batch:
            if encoder.skipping or type(event) is StreamReset:
                out += [fmt.frame(f) for f in encoder.encode(event)]
                passed = None
                continue
            passed = event
            if items is None:
                assert native is not None  # no cache: only the native shortcut gets here
                written = native(event)
                if written is None:
                    out += [fmt.frame(f) for f in encoder.encode(event)]
                    passed = None
                else:
                    out.append(written)
                continue
            key = (name, event.session, event.id)
            found = items.get(key)
            if found is None:
                found = self._encode(event)
                assert cache is not None
                cache.put(key, found)
            out += found
        if passed is not None:
            encoder.passed(passed)
        return out

    def _encode(self, event: Event) -> tuple[T, ...]:
        encoder = self.encoder
        if self._native:
            written = self.fmt.native(event)
            if written is not None:
                return (written,)
        fmt = self.fmt
        return tuple(fmt.frame(f) for f in encoder.encode(event))

    async def chunks(self, heartbeat: float | None = None) -> AsyncGenerator[list[T] | None, None]:
        """Everything to send, a chunk per batch of events: the opening first, the
        closing when the subscription ends; ``None`` after ``heartbeat`` idle seconds.

        ``SlowConsumer`` (the subscription was cut) and ``DialectError`` propagate.
        Use with ``contextlib.aclosing`` so that stopping early releases it at once.
        The heartbeat costs nothing per event on asyncio (see :func:`beats`).
        """
        first = self.opening()
        if first:
            yield first
        batches = self.subscription.batches()
        if heartbeat is None:
            async for batch in batches:
                chunk = self.encode(batch)
                if chunk:
                    yield chunk
        else:
            interval = heartbeat
            paced = beats(self.subscription, batches, lambda: interval)
            async with aclosing(paced):
                async for part in paced:
                    if part is None:
                        yield None
                        continue
                    chunk = self.encode(part)
                    if chunk:
                        yield chunk
        last = self.closing()
        if last:
            yield last


async def beats(
    sub: Subscription[Any], batches: AsyncIterator[list[Event]], wait: Callable[[], float]
) -> AsyncGenerator[list[Event] | None, None]:
    """The batches of ``sub`` (``batches``: its ``batches()``), and ``None`` whenever
    ``wait()`` seconds go by without one (asked when each wait begins: after the last
    batch or ``None`` was handled).

    On asyncio this costs nothing per batch: one timer per stream, moved on only when
    it fires early, which nudges the subscription when the wait is due (its wait under
    way hands out ``[]``, see ``Subscription._nudge``) — rather than a cancel scope and
    a timer per wait, which at 10,000 clients of one event a second each were a
    stream's largest cost after the write itself. On trio, a cancel scope per wait.
    """
    if current_backend() != "asyncio":
        while True:
            batch: list[Event] | None = None
            with anyio.move_on_after(wait()):
                try:
                    batch = await batches.__anext__()
                except StopAsyncIteration:
                    return
            yield batch
    loop = asyncio.get_running_loop()
    due = loop.time() + wait()  # when the wait under way (or the next) is due
    # The timer pending, if any (None once it nudged, until the nudge is seen).
    timer: list[asyncio.TimerHandle | None] = [None]

    def beat() -> None:
        if loop.time() < due:
            timer[0] = loop.call_at(due, beat)
        else:
            timer[0] = None
            sub._nudge()

    timer[0] = loop.call_at(due, beat)
    try:
        async for batch in batches:
            if not batch:  # nudged: the wait is due, or was when the timer fired
                if loop.time() >= due:
                    yield None
                    due = loop.time() + wait()
                if timer[0] is None:
                    timer[0] = loop.call_at(due, beat)
                continue
            yield batch
            due = loop.time() + wait()
    finally:
        pending = timer[0]
        if pending is not None:
            pending.cancel()


class FrameFormat:
    """Frames as they are (what :func:`toolstream.dialects.render` yields)."""

    def frame(self, frame: EncodedFrame) -> EncodedFrame:
        """The frame itself."""
        return frame

    def native(self, event: Event) -> EncodedFrame | None:
        """No shortcut: frames go through the encoder."""
        return None
