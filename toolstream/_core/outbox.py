"""The outbox of a broker bus: publishing appends here and returns at once; a flusher
task in the bus's asyncio loop writes batches to the broker, retrying with backoff
while it is unreachable. Bounded: past its limit the overflow policy drops events,
counted. ``RedisBus`` and ``NatsBus`` share it, so both keep the same promises."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

import attrs

from toolstream._core.errors import BusClosed
from toolstream._core.events import DELTA_EVENTS, ApprovalRequested, Event
from toolstream._core.wake import current_backend

logger = logging.getLogger("toolstream.outbox")

T = TypeVar("T")

__all__ = ["CheckpointMarks", "Outbox", "OutboxOverflow", "Refused"]

#: ``"drop-deltas"``: when the outbox is full, new progress, partial-output and text-delta
#: events are dropped; lifecycle events are kept up to twice the limit, past which the
#: oldest unsent events go. ``"drop-oldest"``: the oldest unsent event goes.
OutboxOverflow = Literal["drop-deltas", "drop-oldest"]


class Refused(Exception):
    """The broker answered a batch with an error that retrying cannot cure (raised by a
    bus's writer: the outbox drops the batch, counts it and logs the reason)."""


@attrs.define
class _Counters:
    published: int = 0
    dropped: int = 0
    refused: int = 0
    flush_errors: int = 0


class Outbox:
    """Events published but not yet written to the broker (``broker`` names it in
    messages). ``lock`` also guards what the bus assigns while appending (ids)."""

    def __init__(
        self,
        limit: int,
        overflow: OutboxOverflow,
        *,
        broker: str,
        start: Callable[[], None],
    ) -> None:
        if limit < 1:
            raise ValueError(f"outbox must be at least 1, got {limit}")
        if overflow not in ("drop-deltas", "drop-oldest"):
            raise ValueError(
                f"outbox_overflow must be 'drop-deltas' or 'drop-oldest', got {overflow!r}"
            )
        self.limit = limit
        self.overflow: OutboxOverflow = overflow
        self.broker = broker
        self._start = start  # starts the bus's tasks in the running loop
        self.lock = threading.Lock()
        self.events: deque[Event] = deque()
        self.counts = _Counters()
        self._inflight = 0  # events at the head being written now
        self._settled = 0  # events that left the outbox (written, or dropped)
        self._kick_pending = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._event: asyncio.Event | None = None
        self._progress: asyncio.Event | None = None  # set (and replaced) as events settle
        self.down_since: float | None = None

    def __len__(self) -> int:
        return len(self.events)

    @property
    def published(self) -> int:
        """Events appended so far (a barrier for :meth:`settle`)."""
        return self.counts.published

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The flusher runs in ``loop`` from now on."""
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._event = asyncio.Event()
        self._progress = asyncio.Event()
        if self.events:
            self._event.set()

    # -- publishing (any thread) ---------------------------------------------------------

    def append(self, event: Event) -> bool:
        """Add ``event`` (the caller holds :attr:`lock`); True when the caller must
        :meth:`kick` the flusher after releasing the lock."""
        events = self.events
        events.append(event)
        self.counts.published += 1
        if len(events) > self.limit:
            self._overflowed(event)
        if self._kick_pending:
            return False
        self._kick_pending = True
        return True

    def _overflowed(self, newest: Event) -> None:
        """Over the limit (the broker is away): apply the overflow policy."""
        events = self.events
        if self.overflow == "drop-deltas" and type(newest) in DELTA_EVENTS:
            events.pop()
        elif self.overflow == "drop-deltas" and len(events) <= 2 * self.limit:
            return
        elif len(events) > self._inflight:
            del events[self._inflight]
        else:  # pragma: no cover - the in-flight batch is never above the limit
            return
        self._settled += 1
        counts = self.counts
        if counts.dropped == 0 or counts.dropped % 10_000 == 0:
            logger.error(
                "outbox full (%d events, %s unreachable): dropping events (%s)",
                len(events),
                self.broker,
                self.overflow,
            )
        counts.dropped += 1

    def kick(self, what: str) -> None:
        """Wake the flusher (from any thread); ``what`` names the caller for the error
        trio gets (broker buses run on asyncio)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                if current_backend() == "trio":
                    raise RuntimeError(
                        f"{what} runs on asyncio only; use EventBus under trio"
                    ) from None
                return  # no loop yet: the outbox is flushed once one starts the bus
            self._start()
            return
        event = self._event
        assert event is not None
        if threading.get_ident() == self._loop_thread:
            event.set()
        else:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def pending(self, session: str) -> list[Event]:
        """The session's events not yet written (or being written)."""
        with self.lock:
            return [ev for ev in self.events if ev.session == session]

    # -- waiting -------------------------------------------------------------------------

    async def read_own(
        self,
        session: str,
        approval_id: str,
        read: Callable[[], Awaitable[T | None]],
        closed: Callable[[], bool],
    ) -> T | None:
        """``read()`` an approval from the broker (None: not there), reading this bus's
        own writes: when its request for ``approval_id`` was still here before the read
        (unwritten, or being written) and the read missed it, wait until it is written
        and read again. Asked before the read, not after: a request written between the
        read and a later look here would be found in neither."""
        held = any(
            isinstance(ev, ApprovalRequested) and ev.approval_id == approval_id
            for ev in self.pending(session)
        )
        got = await read()
        if got is None and held:
            await self.written(self.published, closed)
            got = await read()
        return got

    async def settle(self, target: int, deadline: float | None) -> None:
        """Wait until ``target`` events left the outbox (written, or dropped by the
        policy): woken by the flusher in its own loop, polled from another loop.
        ``TimeoutError`` at ``deadline`` (``time.monotonic()``)."""
        delay = 0.0005
        while self._settled < target:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{target - self._settled} events not yet written to {self.broker} "
                    "(unreachable?)"
                )
            progress = self._progress
            if progress is not None and self._loop is asyncio.get_running_loop():
                # Capped: the outbox policy may settle events from another thread.
                left = 0.05
                if deadline is not None:
                    left = max(0.0, min(left, deadline - time.monotonic()))
                try:
                    await asyncio.wait_for(progress.wait(), left)
                except TimeoutError:
                    pass
                continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def written(self, target: int, closed: Callable[[], bool]) -> None:
        """Wait until ``target`` events left the outbox, however long the broker is away
        (bound it with a cancel scope); ``BusClosed`` when the bus closes first."""
        while True:
            try:
                await self.settle(target, time.monotonic() + 1.0)
                return
            except TimeoutError:
                if closed():
                    raise BusClosed(f"the bus closed before it wrote to {self.broker}") from None

    # -- the flusher -----------------------------------------------------------------------

    async def run(
        self,
        write: Callable[[list[Event]], Awaitable[None]],
        retryable: tuple[type[BaseException], ...],
        *,
        batch: int,
        written: Callable[[list[Event]], Awaitable[None]] | None = None,
    ) -> None:
        """The flusher task: ``write`` batches of up to ``batch`` events in order.

        ``retryable`` errors keep the batch and retry it with backoff (the writer must
        make a retried batch idempotent); :class:`Refused` drops it, counted and logged.
        Any other error is logged and treated as retryable: the flusher never dies.
        ``written(batch)`` runs after each batch left the outbox (checkpoints...).
        """
        event = self._event
        assert event is not None
        backoff = 0.05
        counts = self.counts
        while True:
            await event.wait()
            event.clear()
            with self.lock:
                self._kick_pending = False
            while True:
                with self.lock:
                    n = min(len(self.events), batch)
                    items = [self.events[i] for i in range(n)]
                    self._inflight = n
                if not items:
                    break
                try:
                    await write(items)
                except Refused as exc:
                    counts.flush_errors += 1
                    counts.refused += len(items)
                    counts.dropped += len(items)
                    logger.error("%s refused %d events, dropped: %s", self.broker, n, exc)
                except Exception as exc:
                    counts.flush_errors += 1
                    if self.down_since is None:
                        self.down_since = time.monotonic()
                        if isinstance(exc, retryable):
                            logger.warning(
                                "%s unreachable (%s); keeping events in the outbox",
                                self.broker,
                                exc,
                            )
                        else:
                            logger.exception(
                                "writing to %s failed; keeping events in the outbox", self.broker
                            )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                if self.down_since is not None:
                    logger.warning(
                        "%s reachable again after %.1f s",
                        self.broker,
                        time.monotonic() - self.down_since,
                    )
                    self.down_since = None
                backoff = 0.05
                with self.lock:
                    for _ in range(n):
                        self.events.popleft()
                    self._inflight = 0
                    self._settled += n
                progress = self._progress
                if progress is not None:
                    self._progress = asyncio.Event()
                    progress.set()
                if written is not None:
                    await written(items)


class CheckpointMarks:
    """When to checkpoint a session: every ``replay // 4`` events written to it, the
    position ``replay`` events back is due (its state is stored, and what is before it
    may be trimmed)."""

    def __init__(self, replay: int) -> None:
        self.replay = replay
        self.step = max(replay // 4, 1)
        self._marks: dict[str, tuple[list[int], deque[tuple[int, int]]]] = {}

    def add(self, session: str, seq: int, due: dict[str, int]) -> None:
        """Count one event written to ``session`` at ``seq``; a checkpoint that became
        due goes into ``due`` (the newest per session)."""
        marks = self._marks.get(session)
        if marks is None:
            if len(self._marks) > 10_000:
                self._marks.clear()  # bounded; a forgotten session just trims later
            marks = self._marks[session] = ([0], deque())
        count = marks[0][0] = marks[0][0] + 1
        if count % self.step == 0:
            marks[1].append((count, seq))
        while marks[1] and count - marks[1][0][0] >= self.replay:
            due[session] = marks[1].popleft()[1]
