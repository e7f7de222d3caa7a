"""Subscriptions: cursors into a log of events, and what a bus must give them.

This is the seam every bus implements. A bus keeps :class:`Log`\\ s (bounded lists of
events, with the consumers waiting on them) and is, or gives each subscription, a
:class:`Feeder`: the lock guarding the logs, the wake-ups due, the counters, and the
cutting of a subscriber that fell too far behind. A :class:`Subscription` reads
everything after its cursor in one slice, filters it, coalesces it when it is behind,
and waits in its consumer's own event loop when there is nothing to read.

Where a subscription starts is worked out in one place,
:func:`toolstream._core.start.start_position`.

``EventBus`` is one feeder for all its logs. A broker-backed bus gives each
subscription a feeder and a log of its own, filled by a reader task
(:class:`toolstream._core.broker.FedSubscription`).
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, Literal, TypeAlias, TypeVar, overload

import attrs
from typing_extensions import Self

from .errors import SlowConsumer
from .events import (
    DELTA_EVENTS,
    MESSAGE_EVENTS,
    Event,
    MessageDelta,
    RunFinished,
    RunStarted,
    Snapshot,
    StreamReset,
    ToolArgsDelta,
    ToolOutputDelta,
    ToolProgress,
)
from .start import Origin, Overflow, Start
from .view import LiveView
from .wake import Waiter, checkpoint, current_backend, make_waiter, waiting, wake_all

__all__ = ["Feeder", "FeederStats", "Log", "Subscription", "coalesce", "wake_all"]

E_co = TypeVar("E_co", bound=Event, covariant=True)
T = TypeVar("T")

_MERGED_TEXT_LIMIT = 32 * 1024  # coalescing never builds a delta larger than this

#: Registered waiters (a subscription knows its own: ``sub._waiter``).
Wakes: TypeAlias = "list[Waiter]"

# An empty list shared by every subscription and never mutated: a drained buffer, no
# pending resets, "nothing yet". With thousands of waiting subscriptions, every object
# a wait keeps alive is one more for the garbage collector to trace.
_EMPTY: list[Any] = []
_EMPTY_IT: Iterator[Any] = iter(_EMPTY)


class Log:
    """One bounded, append-only list of events (a session's, or the all-sessions one),
    with the subscriptions reading it and the consumers waiting on it."""

    __slots__ = (
        "base",
        "events",
        "last_ts",
        "nbytes",
        "resets",
        "session",
        "sizes",
        "subs",
        "tier",
        "tier_top",
        "trimmed_seq",
        "view",
        "waiters",
    )

    def __init__(self, session: str | None, trimmed_seq: int, view: LiveView | None) -> None:
        self.session = session
        self.events: list[Event] = []
        self.sizes: list[int] = []
        self.base = 0  # absolute position of events[0]
        self.nbytes = 0
        #: Every event of this log with a seq <= trimmed_seq is gone.
        self.trimmed_seq = trimmed_seq
        self.waiters: Wakes = []
        self.subs: set[Subscription[Any]] = set()
        #: The session's state at position ``base`` (events before it applied).
        self.view = view
        self.last_ts = 0.0
        #: Bounded reset snapshots by (absolute position, run): clients connecting at
        #: the same moment share one (see :class:`Retained`).
        self.resets: dict[tuple[int, str | None], Snapshot] = {}
        #: Its size class for a bus that trims by bytes: ``nbytes.bit_length()`` as of
        #: the last time the bus filed it (0: not filed), and the size at which it
        #: moves up a class (``1 << tier``).
        self.tier = 0
        self.tier_top = 1

    @property
    def end(self) -> int:
        """The absolute position after the newest event."""
        return self.base + len(self.events)

    def take_waiters(self) -> Wakes:
        """Unregister every waiting consumer and return them, to be woken."""
        wakes = self.waiters
        if wakes:
            # A copy that is gone once they are woken; the log keeps its own list (a
            # fresh one per wake-up would be one more object alive through each wait).
            wakes = wakes.copy()
            self.waiters.clear()
        return wakes


@attrs.define
class FeederStats:
    """What a feeder counts."""

    #: Events merged away by ``overflow="coalesce"`` subscriptions.
    coalesced: int = 0
    #: Subscriptions cut with ``SlowConsumer``.
    cut: int = 0
    #: Resets delivered because a cursor could not be served.
    resets: int = 0
    #: Estimated bytes of events kept for subscriptions that fell behind their log's
    #: window (each holds what it has not read, within its allowance).
    held_bytes: int = 0


class Feeder:
    """What a :class:`Subscription` needs of whatever feeds its log: a lock guarding the
    log, the wake-ups due, counters, and cutting or unregistering a subscriber.

    ``EventBus`` has one for all its logs; a broker-backed bus one per subscription.
    """

    __slots__ = ("closed", "lock", "released", "stats", "wakes")

    def __init__(self, stats: FeederStats | None = None) -> None:
        #: Guards every log this feeder feeds, and the subscriptions' cursors.
        self.lock = threading.Lock()
        #: Consumers to wake once the lock is released.
        self.wakes: Wakes = []
        self.stats = stats if stats is not None else FeederStats()
        #: True once the bus closed: subscriptions end when they have read everything.
        self.closed = False
        #: Called (lock held) with a log a subscription just left: a bus may forget a
        #: log nobody reads and nothing was published to.
        self.released: Callable[[Log], None] | None = None

    def cut(self, sub: Subscription[Any], log: Log) -> None:
        """Cut ``sub`` for falling behind (lock held): its next read raises SlowConsumer."""
        if sub._cut:
            return
        sub._cut = True
        self.stats.cut += 1
        self.release(sub)
        log.subs.discard(sub)
        self.unregister(sub, log, wake=True)

    def hold(self, sub: Subscription[Any], events: list[Event], size: int) -> None:
        """Keep ``events`` (``size`` bytes), which are leaving ``sub``'s log unread, for
        ``sub`` alone (lock held): its next read starts with them."""
        if sub._held is _EMPTY:
            sub._held = events
        else:
            sub._held.extend(events)
        sub._held_bytes += size
        self.stats.held_bytes += size

    def release(self, sub: Subscription[Any]) -> None:
        """Drop what was kept for ``sub`` (lock held): it read it, or it is gone."""
        if sub._held_bytes or sub._held:
            self.stats.held_bytes -= sub._held_bytes
            sub._held = _EMPTY
            sub._held_bytes = 0

    def unregister(self, sub: Subscription[Any], log: Log, *, wake: bool) -> None:
        """Remove ``sub``'s waiting consumer from ``log`` (lock held), to be woken later
        (``take_wakes``) when ``wake``."""
        kept = []
        # A subscription awaited by several tasks at once only knows its newest waiter:
        # then every waiter of the log is woken (a needless wake-up is harmless).
        crowded = sub._crowded
        for waiter in log.waiters:
            if waiter is sub._waiter or crowded:
                if wake:
                    self.wakes.append(waiter)
            else:
                kept.append(waiter)
        log.waiters = kept

    def take_wakes(self) -> Wakes:
        """The wake-ups collected so far (lock held); wake them after releasing it."""
        wakes = self.wakes
        if wakes:
            self.wakes = []
        return wakes


# -- coalescing ---------------------------------------------------------------------------


def coalesce(events: list[Event]) -> tuple[list[Event], int]:
    """Per call, merge runs of text deltas and keep only the newest progress / partial
    output. Run and lifecycle events are never dropped, and a call's events keep their
    order. Returns (events, how many were merged away)."""
    out: list[Event | None] = []
    last: dict[str, int] = {}
    merged = 0
    for event in events:
        kind = type(event)
        call_id = event.call_id
        if not call_id and kind in MESSAGE_EVENTS:
            call_id = "\0" + event.message_id  # type: ignore[attr-defined]  # its message's key
        if call_id and kind in DELTA_EVENTS:
            j = last.get(call_id)
            if j is not None:
                prev = out[j]
                if type(prev) is kind:
                    combined = _merge(prev, event)
                    if combined is not None:
                        out[j] = None
                        out.append(combined)
                        last[call_id] = len(out) - 1
                        merged += 1
                        continue
        out.append(event)
        if call_id:
            last[call_id] = len(out) - 1
    return [e for e in out if e is not None], merged


def _merge(prev: Event, event: Event) -> Event | None:
    """``event`` absorbing ``prev`` (same call, same kind), or None if they stay apart.
    A merged event keeps the id of the newest one, so resume cursors stay valid."""
    if isinstance(event, ToolArgsDelta) and isinstance(prev, ToolArgsDelta):
        if len(prev.delta) + len(event.delta) > _MERGED_TEXT_LIMIT:
            return None
        return attrs.evolve(event, delta=prev.delta + event.delta)
    if isinstance(event, ToolOutputDelta) and isinstance(prev, ToolOutputDelta):
        if len(prev.text) + len(event.text) > _MERGED_TEXT_LIMIT:
            return None
        return attrs.evolve(event, text=prev.text + event.text)
    if isinstance(event, MessageDelta) and isinstance(prev, MessageDelta):
        if prev.kind != event.kind or len(prev.text) + len(event.text) > _MERGED_TEXT_LIMIT:
            return None
        return attrs.evolve(event, text=prev.text + event.text)
    if (
        isinstance(event, ToolProgress)
        and isinstance(prev, ToolProgress)
        and event.message is None
        and prev.message is not None
    ):
        return attrs.evolve(event, message=prev.message)
    return event  # progress, partial output: the newest replaces the older


# -- subscriptions ---------------------------------------------------------------------------


class Subscription(Generic[E_co]):
    """A cursor into the bus: iterate it (``async for``) or take batches of events.

    Create with :meth:`EventBus.subscribe` (or ``resume``); use as ``async with`` (or
    call :meth:`close`) so the bus can release it. Iteration checkpoints once per batch
    taken from the bus, not once per event.
    """

    __slots__ = (
        "_backend",
        "_buf",
        "_closed",
        "_crowded",
        "_cursor",
        "_cut",
        "_done",
        "_feeder",
        "_filter",
        "_held",
        "_held_bytes",
        "_it",
        "_last_id",
        "_limit",
        "_log",
        "_nudged",
        "_pending",
        "_replay_end",
        "_tree",
        "_waiter",
        "buffer",
        "coalesced",
        "origin",
        "overflow",
        "run",
        "session",
        "types",
    )

    def __init__(
        self,
        feeder: Feeder,
        types: Sequence[type[Event]],
        session: str | None,
        run: str | None,
        buffer: int,
        overflow: Overflow,
    ) -> None:
        self._feeder = feeder
        #: The session read, or None for all sessions.
        self.session = session
        #: The run this subscription is limited to, if any.
        self.run = run
        #: The event classes delivered (every class when empty); resets always are.
        self.types: tuple[type[Event], ...] = tuple(types)
        self.buffer = buffer
        self.overflow = overflow
        self._last_id: str | None = None  # before the buffer's delivered part
        #: Events merged away by coalescing.
        self.coalesced = 0
        #: Where the subscription starts (final once :meth:`prepare` returned).
        self.origin: Origin | None = None
        self._filter: tuple[type[Event], ...] | None = (
            None if not types or Event in types else (*types, StreamReset)
        )
        self._limit = buffer if overflow == "disconnect" else 2 * buffer
        self._log: Log | None = None
        # With ``run``: the run and its sub-agents' runs (grows as sub-agents start).
        self._tree: set[str] = set() if run is None else {run}
        self._cursor = 0
        self._replay_end = 0
        # Events its log let go before it read them, kept for it (within its allowance):
        # positions ``_cursor`` up to the log's base. See ``Feeder.hold``.
        self._held: list[Any] = _EMPTY
        self._held_bytes = 0
        # Resets due before the next slice (replaced, never appended to in place).
        self._pending: list[StreamReset] = _EMPTY
        # Events taken from the bus: ``_buf``, delivered up to where ``_it`` stands (every
        # way of reading shares the iterator; its length hint says how many are left).
        self._buf: list[Any] = _EMPTY
        self._it: Iterator[Any] = _EMPTY_IT
        self._cut = False
        self._done = False
        self._closed = False
        self._backend: str | None = None
        self._waiter: Waiter | None = None  # the newest registration
        self._crowded = False  # awaited by several tasks at once, ever
        self._nudged = False  # batches() hands out [] instead of waiting (see _nudge)

    def __repr__(self) -> str:
        return (
            f"<Subscription session={self.session!r} run={self.run!r} "
            f"last_id={self.last_id!r} closed={self.closed}>"
        )

    @property
    def last_id(self) -> str | None:
        """Id of the newest event this subscription delivered: resume with ``after=`` it."""
        buf = self._buf
        if buf:
            done = len(buf) - _left(self._it)
            if done:
                return buf[done - 1].id  # type: ignore[no-any-return]
        return self._last_id

    # -- where it starts ------------------------------------------------------------------

    @property
    def starts_with_reset(self) -> bool:
        """True when the first thing delivered is a ``StreamReset`` (no cursor, or one
        that could not be served). Final once :meth:`prepare` returned."""
        return self.origin is not None and self.origin.reset

    @property
    def start_after(self) -> str | None:
        """The id of the event just before the first one delivered (resume with
        ``after=`` it if cut before anything was delivered). Final after :meth:`prepare`."""
        return None if self.origin is None else self.origin.after

    @property
    def state(self) -> Snapshot | None:
        """Deprecated: ``sub.origin.state`` (of a subscription made by ``bus.resume``)."""
        warnings.warn(
            "Subscription.state is deprecated: use bus.resume(...) and sub.origin.state",
            DeprecationWarning,
            stacklevel=2,
        )
        return None if self.origin is None else self.origin.state

    @property
    def history(self) -> list[Event]:
        """Deprecated: ``sub.origin.history`` (of a subscription made by ``bus.resume``)."""
        warnings.warn(
            "Subscription.history is deprecated: use bus.resume(...) and sub.origin.history",
            DeprecationWarning,
            stacklevel=2,
        )
        return [] if self.origin is None else list(self.origin.history)

    @property
    def history_state(self) -> Snapshot | None:
        """Deprecated: ``sub.origin.base`` (of a subscription made by ``bus.resume``)."""
        warnings.warn(
            "Subscription.history_state is deprecated: use bus.resume(...) and sub.origin.base",
            DeprecationWarning,
            stacklevel=2,
        )
        return None if self.origin is None else self.origin.base

    def _begin(self, log: Log, start: Start, *, cursor: int, replay_end: int) -> None:
        """Point the subscription at absolute position ``cursor`` of ``log``, as ``start``
        says (feeder lock held); events before ``replay_end`` are replayed ones."""
        self._log = log
        self._cursor = cursor
        self._replay_end = replay_end
        self.origin = start.origin
        if start.tree:
            self._tree.update(start.tree)
        if start.reset is not None:
            self._pending = [start.reset]
        if start.done:
            self._done = True
        else:
            log.subs.add(self)

    def matches(self, event: Event) -> bool:
        """Whether this subscription delivers ``event``: its types, and its run (with the
        runs of the run's sub-agents it knows of)."""
        if self.run is not None and event.run_id not in self._tree:
            return False
        return self._kinds_match(event)

    def _kinds_match(self, event: Event) -> bool:
        """Whether ``event`` is of this subscription's types."""
        kinds = self._filter
        return kinds is None or isinstance(event, kinds)

    # -- state ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once closed, ended (its run finished, the bus closed) or cut."""
        return self._closed or self._done or self._cut

    @property
    def backlog(self) -> int:
        """How many events are published and not yet taken by this subscription."""
        log = self._log
        return 0 if log is None else max(0, log.end - self._cursor)

    def close(self) -> None:
        """Release the subscription; a consumer waiting on it stops iterating."""
        feeder = self._feeder
        with feeder.lock:
            if self._closed:
                return
            self._closed = True
            feeder.release(self)
            log = self._log
            if log is not None:
                log.subs.discard(self)
                feeder.unregister(self, log, wake=True)
                if feeder.released is not None:
                    feeder.released(log)
            wakes = feeder.take_wakes()
        wake_all(wakes)

    async def aclose(self) -> None:
        """Release the subscription."""
        self.close()

    async def prepare(self) -> None:
        """Wait until the subscription knows where it starts: ``origin`` (and so
        ``starts_with_reset`` and ``start_after``) is final afterwards.

        Immediate on :class:`EventBus` (final when ``subscribe`` returns); a
        broker-backed bus reads it from the broker. Iterating calls it first.
        """

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- taking events ---------------------------------------------------------------

    def _take(self, wait_on: str | None) -> list[Any] | None:
        """Everything after the cursor (filtered, coalesced); [] if nothing yet (then,
        given the consumer's backend ``wait_on``, a waiter is registered in the same
        hold of the lock: ``self._waiter``); None when the subscription has ended."""
        feeder = self._feeder
        with feeder.lock:
            pending = self._pending
            if pending:
                self._pending = _EMPTY
            elif self._closed or self._done:
                if self._log is not None:
                    self._log.subs.discard(self)
                return None
            if self._cut:
                raise self._slow("it fell too far behind")
            log = self._log
            if log is None:  # not started yet (a broker bus before prepare())
                return pending
            base = log.base
            end = base + len(log.events)
            cursor = self._cursor
            batch: list[Event] = _EMPTY
            replayed = 0
            if cursor < end:
                if end - max(cursor, self._replay_end) > self._limit:
                    feeder.cut(self, log)
                    raise self._slow(f"its backlog passed {self._limit} events")
                if cursor >= base:
                    batch = log.events[cursor - base :]
                else:
                    held = self._held  # what the log let go before it read them
                    if cursor + len(held) != base:
                        feeder.cut(self, log)
                        raise self._slow("events it had not read left the replay window")
                    batch = held + log.events
                    feeder.release(self)
                replayed = max(0, self._replay_end - cursor)
                self._cursor = end
            elif not pending:
                if feeder.closed:
                    return None
                if wait_on is not None:
                    if self._waiter is not None:
                        self._crowded = True
                    waiter = self._waiter = make_waiter(wait_on)
                    log.waiters.append(waiter)
                return _EMPTY
        if replayed:
            replay = self._deliverable(batch[:replayed])
            live = [] if self._done else self._deliverable(batch[replayed:])
            batch = replay
        else:
            live = self._deliverable(batch)
            batch = []
        if len(live) > self.buffer:
            live, merged = coalesce(live) if self.overflow == "coalesce" else (live, 0)
            if merged:
                self.coalesced += merged
                feeder.stats.coalesced += merged
            if len(live) > self.buffer:
                with feeder.lock:
                    if self._log is not None:
                        feeder.cut(self, self._log)
                raise self._slow(f"more than {self.buffer} events were waiting for it")
        out = pending + batch + live if pending or batch else live
        if not out and self._done:
            return None
        return out

    def _deliverable(self, events: list[Event]) -> list[Event]:
        kinds = self._filter
        run = self.run
        if run is None:
            return events if kinds is None else [e for e in events if isinstance(e, kinds)]
        tree = self._tree
        out = []
        for event in events:
            run_id = event.run_id
            if run_id not in tree:
                # A sub-agent of the run (or of one of its sub-agents) starts: followed.
                if run_id is None or type(event) is not RunStarted:
                    continue
                if event.parent_run_id not in tree:
                    continue
                tree.add(run_id)
            if kinds is None or isinstance(event, kinds):
                out.append(event)
            if run_id == run and type(event) is RunFinished:
                self._done = True
                break
        return out

    def _slow(self, why: str) -> SlowConsumer:
        return SlowConsumer(
            f"subscription to session {self.session!r} was cut: {why}; "
            f"resume with after={self.last_id!r}",
            last_id=self.last_id,
        )

    @overload
    async def _fill(self, hand_out: Literal[False] = False) -> bool: ...

    @overload
    async def _fill(self, hand_out: Literal[True]) -> list[Any]: ...

    async def _fill(self, hand_out: bool = False) -> bool | list[Any]:
        """Wait until the local buffer holds events: True, or False when the subscription
        ended. ``hand_out``: return the buffer's events instead (raising
        ``StopAsyncIteration`` at the end), for ``batches()``, whose ``__anext__`` is
        then this one coroutine (with thousands of waiting consumers, every object a
        wait keeps alive is one more for the garbage collector to trace).

        A batch is parked in the buffer *before* the checkpoint that follows taking it,
        so a cancellation there (a heartbeat timeout, a cancelled consumer) loses
        nothing: the next read returns it.
        """
        if hand_out and _left(self._it):
            return self._hand_out()
        backend = self._backend
        if backend is None:
            backend = self._backend = current_backend()
        waited = False
        while True:
            batch = self._take(backend)
            if batch is None:
                break
            if batch:
                self._park(batch)
                if not waited or len(batch) >= 16:
                    # Found without waiting (a consumer that is always behind must not
                    # starve the loop), or a large batch: let the others run first, so
                    # the producer fills the next batch meanwhile. A few events just
                    # waited for are read at once: a yield each would double the task
                    # switches of a quiet consumer (measured with 10,000 sessions).
                    await checkpoint(backend)
                return self._hand_out() if hand_out else True
            waiter = self._waiter  # registered by _take, if it found nothing new
            if waiter is None:
                continue  # what it took was all filtered out: look again
            if not (hand_out and self._nudged):
                try:
                    await waiting(waiter)
                except BaseException:  # cancelled: nobody is waiting any more
                    self._discard(waiter)
                    raise
                finally:
                    self._waiter = None
                waited = True
            if hand_out and self._nudged:
                # Nudged (a pump's heartbeat): nothing instead of a wait. Its
                # registration may still be in the log: nobody published.
                self._nudged = False
                self._waiter = None
                self._discard(waiter)
                return _EMPTY
        if hand_out:
            raise StopAsyncIteration
        return False

    def _nudge(self) -> None:
        """Make ``batches()`` hand out an empty list instead of waiting: the wait under
        way ends now, or else the next one does not begin. Call it in the consumer's
        own event loop. For a pump's heartbeat, timed without a cancel scope per wait
        (see :meth:`toolstream.dialects._pump.Pump.chunks`)."""
        self._nudged = True
        waiter = self._waiter
        if waiter is not None:  # waiting now (it is set only while it waits)
            wake_all((waiter,))

    def _hand_out(self) -> list[Any]:
        """The buffer's events not handed out yet, as a list the caller owns."""
        buf, it = self._buf, self._it
        # The buffer itself when none of it was handed out (nothing else holds it).
        batch = buf if _left(it) == len(buf) and buf is not _EMPTY else list(it)
        if buf:
            self._last_id = buf[-1].id
        self._buf = _EMPTY
        self._it = _EMPTY_IT
        return batch

    def _park(self, batch: list[Any]) -> None:
        """Put ``batch`` in the buffer, remembering the last id delivered from the old
        (all of it, once its iterator is exhausted)."""
        self._last_id = self.last_id
        self._buf = batch
        self._it = iter(batch)

    def _discard(self, waiter: Waiter) -> None:
        with self._feeder.lock:
            log = self._log
            if log is not None:
                log.waiters = [w for w in log.waiters if w is not waiter]

    def take_nowait(self) -> list[E_co]:
        """Everything available now (possibly nothing), without waiting.

        Raises ``SlowConsumer`` if the subscription was cut. For consumers that poll
        from a thread, and for tests.
        """
        out: list[Any] = self._hand_out()
        more = self._take(None)
        if more:
            out.extend(more)
        if out:
            self._last_id = out[-1].id
        return out

    def __aiter__(self) -> AsyncIterator[E_co]:
        # ``async for event in sub`` runs this async generator: resuming a suspended
        # generator costs about half of a fresh ``__anext__`` coroutine per event. It
        # shares the buffer with ``__anext__``, ``batches()`` and ``take_nowait()``.
        return _no_finalizer(self._events())

    async def _events(self) -> AsyncGenerator[E_co, None]:
        while True:
            for event in self._it:
                yield event
            if not await self._fill():
                return

    async def __anext__(self) -> E_co:
        # ``anext(sub)``: the next event from the shared iterator (``last_id`` is read
        # from where it stands when asked for).
        for event in self._it:
            return event  # type: ignore[no-any-return]
        if not await self._fill():
            raise StopAsyncIteration
        return next(self._it)  # type: ignore[no-any-return]

    def batches(self) -> AsyncIterator[list[E_co]]:
        """Iterate lists of events: everything available at each wake-up (transports
        write one list with one send)."""
        return _Batches(self)


def _left(it: Iterator[Any]) -> int:
    """How many events of the buffer an iterator over it has not handed out yet."""
    return it.__length_hint__()  # type: ignore[attr-defined,no-any-return]


def _no_finalizer(agen: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """``agen``, opted out of the event loop's async generator hooks.

    A subscription's iterator holds nothing to clean up: left suspended (a ``break``
    out of ``async for``) it can simply be dropped. With the loop's finalizer hook,
    trio would warn about every such generator and asyncio would schedule its
    ``aclose()``; without it, the generator closes at once when collected. The hooks
    are taken on a generator's first step, so that step is made here with none
    installed (hooks are per thread; the step only starts ``__anext__``)."""
    firstiter, finalizer = sys.get_asyncgen_hooks()
    if firstiter is None and finalizer is None:
        return agen
    sys.set_asyncgen_hooks(firstiter=None, finalizer=None)
    try:
        agen.__anext__()  # type: ignore[unused-coroutine]  # only the hooks are taken
    finally:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
    return agen


class _Batches(Generic[E_co]):
    __slots__ = ("_sub",)

    def __init__(self, sub: Subscription[E_co]) -> None:
        self._sub = sub

    def __aiter__(self) -> Self:
        return self

    def __anext__(self) -> Awaitable[list[E_co]]:
        # Taken through the shared iterator: a suspended ``async for`` over the same
        # subscription must not hand these out again.
        return self._sub._fill(hand_out=True)
