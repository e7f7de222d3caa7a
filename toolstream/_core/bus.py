"""EventBus: one append-only log per session; a subscription is a cursor into it.

Publishing appends once, whatever the number of subscribers, and wakes the
subscribers that wait; a consumer takes everything after its cursor as one
slice. Replay is reading from an earlier cursor, a backlog is the distance from
a cursor to the log's end, and a stalled subscriber is a cursor that does not
move: it costs the others nothing.
"""

from __future__ import annotations

import functools
import heapq
import logging
import secrets
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import (
    Any,
    Generic,
    Literal,
    Protocol,
    TypeAlias,
    TypeVar,
    overload,
    runtime_checkable,
)

import attrs
from typing_extensions import Self

from .build import prepare
from .errors import BusClosed, SlowConsumer
from .events import (
    Event,
    RunFinished,
    Snapshot,
    StreamReset,
    ToolArgsDelta,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
)
from .view import LiveView, compare_ids, parse_event_id
from .wake import Waiter, checkpoint, current_backend, make_waiter

logger = logging.getLogger("toolstream.bus")

__all__ = ["Bus", "BusStats", "EventBus", "Overflow", "Subscription"]

Overflow: TypeAlias = Literal["coalesce", "disconnect"]

E = TypeVar("E", bound=Event)
E1 = TypeVar("E1", bound=Event)
E2 = TypeVar("E2", bound=Event)
E3 = TypeVar("E3", bound=Event)
E_co = TypeVar("E_co", bound=Event, covariant=True)

_get_ident = threading.get_ident
_MERGED_TEXT_LIMIT = 32 * 1024  # coalescing never builds a delta larger than this


@runtime_checkable
class Bus(Protocol):
    """What trackers and transports need of a bus; ``EventBus`` is the in-memory one.

    A broker-backed bus (Redis Streams...) satisfies the same protocol and the
    conformance suite in :mod:`toolstream.testing`.
    """

    def publish(self, event_type: type[E], /, **fields: Any) -> E:
        """Build the event (assigning ``id`` and ``ts``) and deliver it; returns it."""
        ...

    def subscribe(
        self,
        *types: type[Event],
        session: str | None = None,
        run: str | None = None,
        after: str | None = None,
        snapshot: bool = False,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
        with_state: bool = False,
        inclusive: bool = False,
        with_history: bool = False,
    ) -> Subscription[Any]:
        """A cursor into the session's events (see :meth:`EventBus.subscribe`)."""
        ...

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now."""
        ...

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as event id ``a`` is before, equal to or after ``b``."""
        ...

    async def aclose(self) -> None:
        """End every subscription; publishing afterwards raises ``BusClosed``."""
        ...


def wake_all(wakes: list[tuple[Subscription[Any], Waiter]]) -> None:
    """Wake the consumers of ``wakes`` (outside the lock that collected them)."""
    if wakes:
        tid = _get_ident()
        for _, waiter in wakes:
            waiter.wake(tid)


def check_subscribe(
    types: Sequence[object],
    session: str | None,
    run: str | None,
    after: str | None,
    snapshot: bool,
    inclusive: bool,
    buffer: object,
    overflow: object,
) -> None:
    """The argument checks every bus's ``subscribe`` makes (TypeError / ValueError)."""
    for t in types:
        if not (isinstance(t, type) and issubclass(t, Event)):
            raise TypeError(f"subscribe() takes event classes, got {t!r}")
    if after is not None and snapshot:
        raise ValueError("after= and snapshot=True exclude each other")
    if inclusive and after is None:
        raise ValueError("inclusive=True needs after=")
    if session is not None and (not isinstance(session, str) or not session):
        raise ValueError(f"session must be a non-empty string or None, got {session!r}")
    if run is not None and session is None:
        raise ValueError("run= needs session=: run ids are scoped to a session")
    if not isinstance(buffer, int) or buffer < 1:
        raise ValueError(f"buffer must be a positive int, got {buffer!r}")
    if overflow not in ("coalesce", "disconnect"):
        raise ValueError(f"overflow must be 'coalesce' or 'disconnect', got {overflow!r}")


@attrs.define
class BusStats:
    """Counters of an :class:`EventBus` (read with ``bus.stats``)."""

    published: int = 0
    #: Events merged away by ``overflow="coalesce"`` subscriptions.
    coalesced: int = 0
    #: Subscriptions cut with ``SlowConsumer``.
    cut: int = 0
    #: Resets delivered because a cursor could not be served.
    resets: int = 0


class _Log:
    """One bounded, append-only log (a session's, or the all-sessions one)."""

    __slots__ = (
        "base",
        "events",
        "last_ts",
        "nbytes",
        "seqs",
        "session",
        "sizes",
        "subs",
        "trimmed_seq",
        "view",
        "waiters",
    )

    def __init__(self, session: str | None, trimmed_seq: int, view: LiveView | None) -> None:
        self.session = session
        self.events: list[Event] = []
        self.seqs: list[int] = []
        self.sizes: list[int] = []
        self.base = 0  # absolute position of events[0]
        self.nbytes = 0
        #: Every event of this log with a seq <= trimmed_seq is gone.
        self.trimmed_seq = trimmed_seq
        self.waiters: list[tuple[Subscription[Any], Waiter]] = []
        self.subs: set[Subscription[Any]] = set()
        #: The session's state at position ``base`` (events before it applied).
        self.view = view
        self.last_ts = 0.0

    @property
    def end(self) -> int:
        return self.base + len(self.events)


class _Host:
    """What a :class:`Subscription` needs of whatever feeds its log: a lock guarding
    the log, the wake-ups due, counters, and cutting / unregistering a subscriber.

    ``EventBus`` is one; a broker-backed bus gives each subscription a host of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakes: list[tuple[Subscription[Any], Waiter]] = []
        self._stats = BusStats()
        self._closed = False

    def _cut(self, sub: Subscription[Any], log: _Log) -> None:
        if sub._cut:
            return
        sub._cut = True
        self._stats.cut += 1
        log.subs.discard(sub)
        self._unregister(sub, log, wake=True)

    def _unregister(self, sub: Subscription[Any], log: _Log, *, wake: bool) -> None:
        kept = []
        for entry in log.waiters:
            if entry[0] is sub:
                if wake:
                    self._wakes.append(entry)
            else:
                kept.append(entry)
        log.waiters = kept


class EventBus(_Host):
    """The in-memory bus: publish from any thread, subscribe from asyncio or trio.

    ``replay`` events are kept per session, within a global ``replay_bytes``
    budget (the oldest events of the largest sessions go first); a session with
    no event for ``session_ttl`` seconds (and no subscriber) is forgotten.
    ``clock`` gives event timestamps (injectable for tests).
    """

    def __init__(
        self,
        *,
        replay: int = 1_000,
        replay_bytes: int = 16 * 2**20,
        session_ttl: float = 3600.0,
        clock: Callable[[], float] = time.time,
        max_finished: int = 500,
    ) -> None:
        if replay < 1:
            raise ValueError(f"replay must be at least 1, got {replay}")
        if replay_bytes < 1024:
            raise ValueError(f"replay_bytes must be at least 1024, got {replay_bytes}")
        if not session_ttl > 0:
            raise ValueError(f"session_ttl must be positive, got {session_ttl}")
        self.replay = replay
        self.replay_bytes = replay_bytes
        self.session_ttl = session_ttl
        super().__init__()
        self._clock = clock
        self._max_finished = max_finished
        #: A random token per bus instance: ids of another instance do not compare.
        self.epoch = secrets.token_hex(6)
        self._prefix = f"{self.epoch}-"
        self._seq = 0
        self._logs: dict[str, _Log] = {}
        self._all: _Log | None = None  # the all-sessions log, once someone needs it
        self._bytes = 0
        self._forgotten_seq = 0
        self._high = replay + max(32, replay // 4)
        self._sweep_every = min(session_ttl / 4, 60.0)
        self._last_sweep = clock()

    def __repr__(self) -> str:
        return f"<EventBus epoch={self.epoch} seq={self._seq} sessions={len(self._logs)}>"

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose` / :meth:`close`."""
        return self._closed

    @property
    def stats(self) -> BusStats:
        """Counters: events published, coalesced away, subscriptions cut, resets sent."""
        self._stats.published = self._seq  # one seq per event published
        return self._stats

    @property
    def position(self) -> str:
        """The id of the newest event published (``"<epoch>-0"`` on an empty bus)."""
        return f"{self.epoch}-{self._seq}"

    # -- ids ---------------------------------------------------------------------------

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as id ``a`` is before, equal to or after ``b``.

        ``ValueError`` for ids of different epochs (another bus instance, e.g.
        before a restart) or strings that are not ids of this kind.
        """
        return compare_ids(a, b)

    # -- publishing ------------------------------------------------------------------

    def publish(self, event_type: type[E], /, **fields: Any) -> E:
        """Build an event of ``event_type`` from ``fields`` (assigning ``id`` and ``ts``),
        append it to its session's log and wake the subscribers that wait.

        Safe from any thread; never waits for a subscriber. Trackers call this; you
        rarely need to. ``StreamReset`` cannot be published (the bus makes them).
        """
        build, session, extra = prepare(event_type, fields)
        return self._publish(build, session, fields, extra)  # type: ignore[return-value]

    def _publish(
        self,
        build: Callable[[Any, str, float], tuple[Event, int]],
        session: str,
        values: Any,
        extra: int = 0,
    ) -> Event:
        """Build an event with ``build`` (a builder from ``toolstream._core.build``:
        ``values`` is its fields as a dict, or as a tuple for a tuple builder), give it
        the next id, append it and wake the subscribers. Trackers call this directly:
        what ``publish`` checks holds for them already (a lifecycle class, a non-empty
        session checked when the tracker was made, the class's own fields). ``extra``
        is added to the event's size estimate."""
        # acquire/release rather than ``with``: half the interpreter work on this path.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise BusClosed("the bus is closed")
            seq = self._seq + 1
            ts = self._clock()
            event, size = build(values, f"{self._prefix}{seq}", ts)
            size += extra
            self._seq = seq
            log = self._logs.get(session)
            if log is None:
                log = self._new_log(session)
            log.events.append(event)
            log.seqs.append(seq)
            log.sizes.append(size)
            log.nbytes += size
            log.last_ts = ts
            self._bytes += size
            wakes = log.waiters
            if wakes:
                log.waiters = []
            everything = self._all
            if everything is not None:
                self._append(everything, event, seq, size)
                if everything.waiters:
                    wakes = wakes + everything.waiters
                    everything.waiters = []
                if len(everything.events) > self._high:
                    self._trim_to(everything, everything.end - self.replay)
            if len(log.events) > self._high:
                self._trim_to(log, log.end - self.replay)
            if self._bytes > self.replay_bytes:
                self._trim_bytes()
            if ts - self._last_sweep > self._sweep_every:
                self._sweep(ts)
            if self._wakes:
                wakes = wakes + self._wakes
                self._wakes = []
        finally:
            lock.release()
        if wakes:
            tid = _get_ident()
            for _, waiter in wakes:
                waiter.wake(tid)
        return event

    def _new_log(self, session: str) -> _Log:
        view = LiveView(max_finished=self._max_finished, compare=self.compare)
        view._check_replays = False  # this log feeds it every event once, in order
        log = _Log(session, self._forgotten_seq, view)
        self._logs[session] = log
        return log

    def _append(self, log: _Log, event: Event, seq: int, size: int) -> None:
        log.events.append(event)
        log.seqs.append(seq)
        log.sizes.append(size)
        log.nbytes += size
        self._bytes += size

    def _trim_to(self, log: _Log, target: int) -> int:
        """Drop the events before absolute position ``target`` (never those a live
        subscriber within its allowance still has to read). Returns bytes freed."""
        end = log.end
        for sub in list(log.subs):
            cursor = sub._cursor
            if cursor < target:
                if end - max(cursor, sub._replay_end) > sub._limit:
                    self._cut(sub, log)
                else:
                    target = cursor
        k = target - log.base
        if k <= 0:
            return 0
        view = log.view
        if view is not None:
            view.fold(log.events[:k])
        freed = sum(log.sizes[:k])
        log.trimmed_seq = log.seqs[k - 1]
        del log.events[:k]
        del log.seqs[:k]
        del log.sizes[:k]
        log.base = target
        log.nbytes -= freed
        self._bytes -= freed
        return freed

    def _trim_bytes(self) -> None:
        """Over the byte budget: drop the oldest events of the largest logs first."""
        goal = int(self.replay_bytes * 0.9)
        logs = list(self._logs.values())
        if self._all is not None:
            logs.append(self._all)
        heap = [(-log.nbytes, i, log) for i, log in enumerate(logs) if log.events]
        heapq.heapify(heap)
        while self._bytes > goal and heap:
            _, i, log = heapq.heappop(heap)
            runner_up = -heap[0][0] if heap else 0
            need = self._bytes - goal
            k, freed = 0, 0
            sizes = log.sizes
            while k < len(sizes) and freed < need and (log.nbytes - freed > runner_up or k == 0):
                freed += sizes[k]
                k += 1
            if self._trim_to(log, log.base + max(k, 1)) == 0:
                continue  # held by its subscribers: try the next largest
            if log.events:
                heapq.heappush(heap, (-log.nbytes, i, log))

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        horizon = now - self.session_ttl
        for session, log in list(self._logs.items()):
            if not log.subs and log.last_ts < horizon:
                del self._logs[session]
                self._bytes -= log.nbytes
                last = log.seqs[-1] if log.seqs else log.trimmed_seq
                self._forgotten_seq = max(self._forgotten_seq, last)

    # -- reading ---------------------------------------------------------------------

    def _state_at(self, log: _Log, position: int) -> LiveView:
        """The session's state after the events before absolute ``position``."""
        view = log.view
        assert view is not None
        k = position - log.base
        if k <= 0:
            return view
        view = view.copy()
        view.fold(log.events[:k])
        return view

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now (open calls, and
        the newest finished ones); only one run's part with ``run=``."""
        with self._lock:
            log = self._logs.get(session)
            if log is None:
                return Snapshot()
            return self._state_at(log, log.end).snapshot(run_id=run)

    def sessions(self) -> list[str]:
        """The sessions the bus currently remembers."""
        with self._lock:
            return list(self._logs)

    def subscriber_count(self, session: str | None = None) -> int:
        """Live subscriptions of ``session`` (or of every session and the all-sessions log)."""
        with self._lock:
            if session is not None:
                log = self._logs.get(session)
                return len(log.subs) if log else 0
            total = sum(len(log.subs) for log in self._logs.values())
            return total + (len(self._all.subs) if self._all else 0)

    @overload
    def subscribe(
        self,
        *,
        session: str | None = ...,
        run: str | None = ...,
        after: str | None = ...,
        snapshot: bool = ...,
        buffer: int = ...,
        overflow: Overflow = ...,
        with_state: bool = ...,
        inclusive: bool = ...,
        with_history: bool = ...,
    ) -> Subscription[Event]: ...
    @overload
    def subscribe(
        self,
        t1: type[E1],
        /,
        *,
        session: str | None = ...,
        run: str | None = ...,
        after: str | None = ...,
        snapshot: bool = ...,
        buffer: int = ...,
        overflow: Overflow = ...,
        with_state: bool = ...,
        inclusive: bool = ...,
        with_history: bool = ...,
    ) -> Subscription[E1 | StreamReset]: ...
    @overload
    def subscribe(
        self,
        t1: type[E1],
        t2: type[E2],
        /,
        *,
        session: str | None = ...,
        run: str | None = ...,
        after: str | None = ...,
        snapshot: bool = ...,
        buffer: int = ...,
        overflow: Overflow = ...,
        with_state: bool = ...,
        inclusive: bool = ...,
        with_history: bool = ...,
    ) -> Subscription[E1 | E2 | StreamReset]: ...
    @overload
    def subscribe(
        self,
        t1: type[E1],
        t2: type[E2],
        t3: type[E3],
        /,
        *,
        session: str | None = ...,
        run: str | None = ...,
        after: str | None = ...,
        snapshot: bool = ...,
        buffer: int = ...,
        overflow: Overflow = ...,
        with_state: bool = ...,
        inclusive: bool = ...,
        with_history: bool = ...,
    ) -> Subscription[E1 | E2 | E3 | StreamReset]: ...
    @overload
    def subscribe(
        self,
        *types: type[Event],
        session: str | None = ...,
        run: str | None = ...,
        after: str | None = ...,
        snapshot: bool = ...,
        buffer: int = ...,
        overflow: Overflow = ...,
        with_state: bool = ...,
        inclusive: bool = ...,
        with_history: bool = ...,
    ) -> Subscription[Event]: ...

    def subscribe(
        self,
        *types: type[Event],
        session: str | None = None,
        run: str | None = None,
        after: str | None = None,
        snapshot: bool = False,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
        with_state: bool = False,
        inclusive: bool = False,
        with_history: bool = False,
    ) -> Subscription[Any]:
        """Subscribe to events of ``types`` (all when none are given).

        - ``session``: one session, or ``None`` for all of them.
        - ``after=id``: every matching event after ``id``, then live ones, with no gap
          and no duplicate; a ``StreamReset`` instead when ``id`` has left the replay
          window, comes from another epoch (a restart) or from the future.
        - ``snapshot=True``: a ``StreamReset`` of the session's state first, then live.
          Without ``after`` or ``snapshot``: live events only.
        - ``run=X`` (with ``session``): only that run's events; the subscription ends
          after its ``run.finished``. A run already finished gives its reset and ends.
        - ``buffer``: how far (in events) the subscriber may fall behind; past it
          ``overflow`` applies: ``"coalesce"`` merges deltas and keeps the newest
          progress per call, and cuts the subscriber (``SlowConsumer``) when that is not
          enough; ``"disconnect"`` cuts it at once. Replayed events do not count.
        - ``with_state=True``: ``sub.state`` is the session's state at the point the
          subscription starts reading (for dialects that resume mid-stream).
        - ``inclusive=True`` (with ``after``): the event ``after`` itself is delivered
          too (a reset if it left the window) — for a client cut between the wire
          messages of that event.
        - ``with_history=True``: ``sub.history`` is the session's retained events before
          the starting point and ``sub.history_state`` the state before the oldest of
          them — what an encoder replays to continue exactly where a client was.

        A ``StreamReset`` is delivered whenever one is due, whatever ``types`` says.
        """
        check_subscribe(types, session, run, after, snapshot, inclusive, buffer, overflow)
        sub: Subscription[Any] = Subscription(self, types, session, run, buffer, overflow)
        with self._lock:
            if self._closed:
                raise BusClosed("the bus is closed")
            if session is None:
                if self._all is None:
                    self._all = _Log(None, self._seq, None)
                log = self._all
            else:
                log = self._logs.get(session) or self._new_log(session)
            end = log.end
            cursor: int | None = end
            if after is not None:
                cursor = self._cursor_for(log, after, inclusive)
            need_reset = snapshot or cursor is None
            if run is not None:
                state = self._state_at(log, end)
                finished = run in state.runs and state.runs[run].state != "running"
                if finished and (cursor is None or not self._run_ends_after(log, run, cursor)):
                    need_reset = True
                    sub._done = True
            if need_reset:
                if after is not None:
                    self._stats.resets += 1
                cursor = end
                sub._pending = self._resets(log, run)
                sub.starts_with_reset = True
            assert cursor is not None
            sub.start_after = after if after is not None and not need_reset else self.position
            sub._cursor = cursor
            sub._replay_end = end
            sub._log = log
            if with_history and log.view is not None:
                sub.history_state = log.view.snapshot(run_id=run)
                sub.history = log.events[: max(0, cursor - log.base)]
            if with_state:
                if sub._pending:
                    sub.state = sub._pending[-1].snapshot
                elif log.session is not None:
                    sub.state = self._state_at(log, cursor).snapshot(run_id=run)
            if not sub._done:
                log.subs.add(sub)
        return sub

    def _cursor_for(self, log: _Log, after: str, inclusive: bool = False) -> int | None:
        """The absolute position just after event ``after`` (at it, with ``inclusive``),
        or None if that cannot be served exactly (other epoch, from the future, left
        the window, malformed)."""
        try:
            epoch, seq = parse_event_id(after)
        except ValueError:
            return None
        if epoch != self.epoch or seq > self._seq or seq < log.trimmed_seq:
            return None
        if inclusive:
            if seq <= log.trimmed_seq:
                return None
            return log.base + bisect_left(log.seqs, seq)
        return log.base + bisect_right(log.seqs, seq)

    @staticmethod
    def _run_ends_after(log: _Log, run: str, cursor: int) -> bool:
        return any(
            type(e) is RunFinished and e.run_id == run for e in log.events[cursor - log.base :]
        )

    def _resets(self, log: _Log, run: str | None) -> list[StreamReset]:
        position = f"{self.epoch}-{self._seq}"
        ts = self._clock()
        if log.session is not None:
            snap = self._state_at(log, log.end).snapshot(run_id=run)
            return [StreamReset(id=position, session=log.session, ts=ts, run_id=run, snapshot=snap)]
        return [
            StreamReset(
                id=position,
                session=session,
                ts=ts,
                snapshot=self._state_at(slog, slog.end).snapshot(),
            )
            for session, slog in self._logs.items()
        ]

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """End every subscription (their iterators stop); publishing raises ``BusClosed``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            wakes: list[tuple[Subscription[Any], Waiter]] = []
            logs = list(self._logs.values())
            if self._all is not None:
                logs.append(self._all)
            for log in logs:
                wakes.extend(log.waiters)
                log.waiters = []
        wake_all(wakes)

    async def aclose(self) -> None:
        """End every subscription; publishing afterwards raises ``BusClosed``."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def _coalesce(events: list[Event]) -> tuple[list[Event], int]:
    """Per call, merge runs of text deltas and keep only the newest progress / partial
    output. Run and lifecycle events are never dropped. Returns (events, merged)."""
    out: list[Event | None] = []
    last: dict[str, int] = {}
    merged = 0
    for event in events:
        kind = type(event)
        call_id = event.call_id
        if call_id and kind in _MERGEABLE:
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


_MERGEABLE = frozenset({ToolArgsDelta, ToolOutputDelta, ToolProgress, ToolOutputPartial})


def _merge(prev: Event, event: Event) -> Event | None:
    """``event`` absorbing ``prev`` (same call, same kind), or None if they stay apart."""
    if isinstance(event, ToolArgsDelta) and isinstance(prev, ToolArgsDelta):
        if len(prev.delta) + len(event.delta) > _MERGED_TEXT_LIMIT:
            return None
        return attrs.evolve(event, delta=prev.delta + event.delta)
    if isinstance(event, ToolOutputDelta) and isinstance(prev, ToolOutputDelta):
        if len(prev.text) + len(event.text) > _MERGED_TEXT_LIMIT:
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


class Subscription(Generic[E_co]):
    """A cursor into the bus: iterate it (``async for``) or take batches of events.

    Create with :meth:`EventBus.subscribe`; use as ``async with`` (or call
    :meth:`close`) so the bus can release it. Iteration checkpoints once per
    batch taken from the bus, not once per event.
    """

    def __init__(
        self,
        bus: _Host,
        types: Sequence[type[Event]],
        session: str | None,
        run: str | None,
        buffer: int,
        overflow: Overflow,
    ) -> None:
        self._bus = bus
        #: The session read, or None for all sessions.
        self.session = session
        #: The run this subscription is limited to, if any.
        self.run = run
        #: The event classes delivered (every class when empty); resets always are.
        self.types: tuple[type[Event], ...] = tuple(types)
        self.buffer = buffer
        self.overflow = overflow
        #: Id of the newest event this subscription delivered: resume with ``after=`` it.
        self.last_id: str | None = None
        #: Events merged away by coalescing.
        self.coalesced = 0
        #: With ``with_state=True``: the session's state where reading starts.
        self.state: Snapshot | None = None
        #: True when the first thing delivered is a ``StreamReset`` (no cursor, or one
        #: that could not be served).
        self.starts_with_reset = False
        #: Where the subscription starts: the id of the event just before the first one it
        #: delivers (resume with ``after=`` it if cut before delivering anything).
        self.start_after: str | None = None
        #: With ``with_history=True``: the retained events before the starting point...
        self.history: list[Event] = []
        #: ...and the session's state before the oldest of them.
        self.history_state: Snapshot | None = None
        self._filter: tuple[type[Event], ...] | None = (
            None if not types or Event in types else (*types, StreamReset)
        )
        self._limit = buffer if overflow == "disconnect" else 2 * buffer
        self._log: _Log | None = None
        self._cursor = 0
        self._replay_end = 0
        self._pending: list[StreamReset] = []  # resets due before the next slice
        self._buf: list[Any] = []
        self._buf_i = 0
        self._cut = False
        self._done = False
        self._closed = False
        self._backend: str | None = None

    def __repr__(self) -> str:
        return (
            f"<Subscription session={self.session!r} run={self.run!r} "
            f"last_id={self.last_id!r} closed={self.closed}>"
        )

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
        bus = self._bus
        with bus._lock:
            if self._closed:
                return
            self._closed = True
            log = self._log
            if log is not None:
                log.subs.discard(self)
                bus._unregister(self, log, wake=True)
            wakes, bus._wakes = bus._wakes, []
        wake_all(wakes)

    async def aclose(self) -> None:
        """Release the subscription."""
        self.close()

    async def prepare(self) -> None:
        """Wait until the subscription knows where it starts: ``starts_with_reset``,
        ``start_after``, ``state`` and ``history`` are final afterwards.

        Immediate on :class:`EventBus` (they are final when ``subscribe`` returns); a
        broker-backed bus reads them from the broker. Iterating calls it first.
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

    def _take(self, waiter: Waiter | None) -> list[Any] | None:
        """Everything after the cursor (filtered, coalesced); [] if nothing yet (the
        waiter, if given, is registered); None when the subscription has ended."""
        bus = self._bus
        with bus._lock:
            pending = self._pending
            if pending:
                self._pending = []
            elif self._closed or self._done:
                if self._log is not None:
                    self._log.subs.discard(self)
                return None
            if self._cut:
                raise self._slow("it fell too far behind")
            log = self._log
            assert log is not None
            base = log.base
            end = base + len(log.events)
            cursor = self._cursor
            batch: list[Event] = []
            replayed = 0
            if cursor < end:
                if cursor < base:
                    bus._cut(self, log)
                    raise self._slow("events it had not read left the replay window")
                if end - max(cursor, self._replay_end) > self._limit:
                    bus._cut(self, log)
                    raise self._slow(f"its backlog passed {self._limit} events")
                batch = log.events[cursor - base :]
                replayed = max(0, self._replay_end - cursor)
                self._cursor = end
            elif not pending:
                if bus._closed:
                    return None
                if waiter is not None:
                    log.waiters.append((self, waiter))
                return []
        if replayed:
            replay = self._deliverable(batch[:replayed])
            live = [] if self._done else self._deliverable(batch[replayed:])
            batch = replay
        else:
            live = self._deliverable(batch)
            batch = []
        if len(live) > self.buffer:
            live, merged = _coalesce(live) if self.overflow == "coalesce" else (live, 0)
            if merged:
                self.coalesced += merged
                bus._stats.coalesced += merged
            if len(live) > self.buffer:
                with bus._lock:
                    if self._log is not None:
                        bus._cut(self, self._log)
                raise self._slow(f"more than {self.buffer} events were waiting for it")
        out = pending + batch + live if pending or batch else live
        if not out and self._done:
            return None
        return out

    def _deliverable(self, events: list[Event]) -> list[Event]:
        kinds = self._filter
        run = self.run
        if kinds is None and run is None:
            return events
        out = []
        for event in events:
            if run is not None and event.run_id != run:
                continue
            if kinds is None or isinstance(event, kinds):
                out.append(event)
            if run is not None and type(event) is RunFinished:
                self._done = True
                break
        return out

    def _slow(self, why: str) -> SlowConsumer:
        return SlowConsumer(
            f"subscription to session {self.session!r} was cut: {why}; "
            f"resume with after={self.last_id!r}",
            last_id=self.last_id,
        )

    async def _fill(self) -> bool:
        """Wait until the local buffer holds events; False when the subscription ended.

        A batch is parked in the buffer *before* the checkpoint that follows taking it,
        so a cancellation there (a heartbeat timeout, a cancelled consumer) loses
        nothing: the next read returns it.
        """
        backend = self._backend
        if backend is None:
            backend = self._backend = current_backend()
        while True:
            batch = self._take(None)
            if batch is None:
                return False
            if batch:
                self._buf, self._buf_i = batch, 0
                await checkpoint(backend)
                return True
            waiter = make_waiter(backend)
            batch = self._take(waiter)
            if batch is None:
                return False
            if batch:
                # Data arrived between the two takes; the registration is harmless.
                self._discard(waiter)
                self._buf, self._buf_i = batch, 0
                return True
            await waiter.wait(functools.partial(self._discard, waiter))
            if self._buf_i < len(self._buf):  # pragma: no cover - defensive
                return True

    def _discard(self, waiter: Waiter) -> None:
        bus = self._bus
        with bus._lock:
            log = self._log
            if log is not None:
                log.waiters = [w for w in log.waiters if w[1] is not waiter]

    def take_nowait(self) -> list[E_co]:
        """Everything available now (possibly nothing), without waiting.

        Raises ``SlowConsumer`` if the subscription was cut. For consumers that poll
        from a thread, and for tests.
        """
        out: list[Any] = []
        if self._buf_i < len(self._buf):
            out = self._buf[self._buf_i :]
            self._buf, self._buf_i = [], 0
        more = self._take(None)
        if more:
            out.extend(more)
        if out:
            self.last_id = out[-1].id
        return out

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> E_co:
        i = self._buf_i
        if i >= len(self._buf):
            if not await self._fill():
                raise StopAsyncIteration
            i = 0
        event = self._buf[i]
        self._buf_i = i + 1
        self.last_id = event.id
        return event  # type: ignore[no-any-return]

    def batches(self) -> AsyncIterator[list[E_co]]:
        """Iterate lists of events: everything available at each wake-up (transports
        write one list with one send)."""
        return _Batches(self)


class _Batches(Generic[E_co]):
    __slots__ = ("_sub",)

    def __init__(self, sub: Subscription[E_co]) -> None:
        self._sub = sub

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> list[E_co]:
        sub = self._sub
        if sub._buf_i >= len(sub._buf) and not await sub._fill():
            raise StopAsyncIteration
        batch = sub._buf[sub._buf_i :]
        sub._buf, sub._buf_i = [], 0
        sub.last_id = batch[-1].id
        return batch
