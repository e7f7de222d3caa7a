"""EventBus: one append-only log per session; a subscription is a cursor into it.

Publishing appends once, whatever the number of subscribers, and wakes the
subscribers that wait; a consumer takes everything after its cursor as one
slice. Replay is reading from an earlier cursor, a backlog is the distance from
a cursor to the log's end, and a stalled subscriber is a cursor that does not
move: it costs the others nothing. The subscription machinery itself is
:mod:`toolstream._core.subscription`, which every bus shares.
"""

from __future__ import annotations

import logging
import secrets
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

import attrs
from typing_extensions import Self, deprecated

from .approvals import MAX_RESOLVED, Decision
from .arbiter import Arbiter
from .build import prepare
from .errors import (
    BusClosed,
)
from .events import ApprovalResolved, Event, Snapshot, StreamReset
from .ids import compare_ids, make_id
from .payload import PayloadPolicy, default_policy
from .publishers import publish_built
from .snapshots import DEFAULT_RESET_BYTES, FIELD_BYTES
from .start import (
    Origin,
    Overflow,
    Retained,
    Start,
    StartRequest,
    cursor_index,
    resume_request,
    start_position,
    subscribe_request,
)
from .subscription import Feeder, FeederStats, Log, Subscription, wake_all
from .view import LiveView

logger = logging.getLogger("toolstream.bus")

__all__ = ["Bus", "BusStats", "EventBus", "Overflow", "Subscription"]

E = TypeVar("E", bound=Event)
E1 = TypeVar("E1", bound=Event)
E2 = TypeVar("E2", bound=Event)
E3 = TypeVar("E3", bound=Event)


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
    ) -> Subscription[Any]:
        """A cursor into the session's events (see :meth:`EventBus.subscribe`)."""
        ...

    def resume(
        self,
        *types: type[Event],
        session: str,
        after: str,
        at: bool = False,
        run: str | None = None,
        buffer: int = 1024,
        overflow: Overflow = "coalesce",
    ) -> Subscription[Any]:
        """Continue a client exactly where it was (see :meth:`EventBus.resume`)."""
        ...

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now."""
        ...

    def compare(self, a: str, b: str) -> int:
        """-1, 0 or 1 as event id ``a`` is before, equal to or after ``b``."""
        ...

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
        """Decide an approval; the first decision wins (see :meth:`EventBus.resolve_approval`)."""
        ...

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (real edited args), or None while it is pending."""
        ...

    async def wait_decision(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on an approval (bound the wait with a cancel scope)."""
        ...

    async def aclose(self) -> None:
        """End every subscription; publishing afterwards raises ``BusClosed``."""
        ...


@attrs.define
class BusStats(FeederStats):
    """Counters of an :class:`EventBus` (read with ``bus.stats``): events ``published``,
    ``coalesced`` away by slow subscriptions, subscriptions ``cut`` with
    ``SlowConsumer``, ``resets`` delivered because a cursor could not be served; and the
    memory its events take (estimated): ``retained_bytes`` in the replay windows (at
    most ``replay_bytes``), ``held_bytes`` kept for subscribers that fell behind a
    window (at most ``replay_bytes`` too, and ``lag_bytes`` each)."""

    published: int = 0
    retained_bytes: int = 0


class _Seqs:
    """The sequence numbers of a log's events, read from their ids when a subscription
    starts (a bisection reads a few): the bus keeps no second list per session, so a
    publish appends to one list less and a session holds one object less."""

    __slots__ = ("_events", "_skip")

    def __init__(self, events: list[Event], skip: int) -> None:
        self._events = events
        self._skip = skip

    def __len__(self) -> int:
        return len(self._events)

    def __getitem__(self, index: int) -> int:
        return int(self._events[index].id[self._skip :])


#: How far under ``replay_bytes`` a byte trim goes (at most a tenth of it): a few hundred
#: typical events, fewer than the collector's young generation holds (700 objects).
_TRIM_SLACK = 64 * 1024


class EventBus:
    """The in-memory bus: publish from any thread, subscribe from asyncio or trio.

    ``replay`` events are kept per session, within a global ``replay_bytes`` budget
    (the oldest events of the largest sessions go first); a session with no event for
    ``session_ttl`` seconds (and no subscriber, and no approval pending) is forgotten. A
    subscriber that has not read events its session's window lets go keeps them, charged
    to it: at most ``lag_bytes`` (default ``replay_bytes // 16``) per subscription and
    ``replay_bytes`` for all of them together; past either it is cut (``SlowConsumer``).
    So the bus holds at most twice ``replay_bytes`` of events, whatever its subscribers
    do, and a stalled subscriber never shortens another session's window. A
    ``stream.reset`` holds at most ``reset_bytes`` (open calls always; the oldest finished
    calls go first; each field capped). ``clock`` gives event timestamps (injectable for
    tests). ``payload`` shapes what a decision publishes (edited args, reasons): redacted
    and capped like any args. The newest ``max_resolved`` resolved approvals are kept, so
    that a decision replayed on one of them learns who won (``ApprovalAlreadyResolved``);
    on an older one it gets ``ApprovalNotFound`` (never a second decision).
    """

    def __init__(
        self,
        *,
        replay: int = 1_000,
        replay_bytes: int = 16 * 2**20,
        session_ttl: float = 3600.0,
        clock: Callable[[], float] = time.time,
        max_finished: int = 500,
        reset_bytes: int = DEFAULT_RESET_BYTES,
        payload: PayloadPolicy | None = None,
        max_resolved: int = MAX_RESOLVED,
        lag_bytes: int | None = None,
    ) -> None:
        if replay < 1:
            raise ValueError(f"replay must be at least 1, got {replay}")
        if replay_bytes < 1024:
            raise ValueError(f"replay_bytes must be at least 1024, got {replay_bytes}")
        if lag_bytes is None:
            lag_bytes = replay_bytes // 16
        elif not 0 <= lag_bytes <= replay_bytes:
            raise ValueError(
                f"lag_bytes must be between 0 and replay_bytes ({replay_bytes}), got {lag_bytes}"
            )
        if not session_ttl > 0:
            raise ValueError(f"session_ttl must be positive, got {session_ttl}")
        if reset_bytes < 4096:
            raise ValueError(f"reset_bytes must be at least 4096, got {reset_bytes}")
        if not isinstance(max_resolved, int) or max_resolved < 1:
            raise ValueError(f"max_resolved must be a positive int, got {max_resolved!r}")
        self.replay = replay
        self.replay_bytes = replay_bytes
        #: The most one subscription may keep of events its window let go unread.
        self.lag_bytes = lag_bytes
        self.session_ttl = session_ttl
        self.reset_bytes = reset_bytes
        self._stats = BusStats()
        self._feeder = feeder = Feeder(self._stats)
        feeder.released = self._released
        self._lock = feeder.lock
        self._clock = clock
        self._max_finished = max_finished
        #: A random token per bus instance: ids of another instance do not compare.
        self.epoch = secrets.token_hex(6)
        self._prefix = f"{self.epoch}-"
        self._seq = 0
        self._logs: dict[str, Log] = {}
        self._all: Log | None = None  # the all-sessions log, once someone needs it
        self._bytes = 0
        # The logs holding events, by size class (``Log.tier``: ``nbytes.bit_length()``),
        # so trimming by bytes finds the largest without looking at every session.
        self._tiers: list[dict[Log, None]] = [{} for _ in range(64)]
        self._forgotten_seq = 0
        self._high = replay + max(32, replay // 4)
        self._sweep_every = min(session_ttl / 4, 60.0)
        self._next_sweep = clock() + self._sweep_every
        #: What a decision publishes goes through this policy.
        self.payload = payload if payload is not None else default_policy()
        self._arbiter = Arbiter(self, max_resolved)

    def __repr__(self) -> str:
        return f"<EventBus epoch={self.epoch} seq={self._seq} sessions={len(self._logs)}>"

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose` / :meth:`close`."""
        return self._feeder.closed

    @property
    def stats(self) -> BusStats:
        """Counters: events published, coalesced away, subscriptions cut, resets sent."""
        self._stats.published = self._seq  # one seq per event published
        self._stats.retained_bytes = self._bytes
        return self._stats

    @property
    def position(self) -> str:
        """The id of the newest event published (``"<epoch>-0"`` on an empty bus)."""
        return make_id(self.epoch, self._seq)

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
        """Build an event with ``build`` (a builder of an ``EventPlan``: ``values`` is
        its fields as a dict, or as a tuple for a tuple builder), give it the next id,
        append it and wake the subscribers. Trackers call this directly: what
        ``publish`` checks holds for them already (a lifecycle class, a non-empty
        session checked when the tracker was made, the class's own fields). ``extra``
        is added to the event's size estimate."""
        return publish_built(self, build, session, values, extra)

    def _seqs(self, log: Log) -> _Seqs:
        """The sequence numbers of ``log``'s events (the numbers in their ids)."""
        return _Seqs(log.events, len(self._prefix))

    def _new_log(self, session: str) -> Log:
        # Its view (the session's state before the replay window) is made when events
        # first leave the window: a short session never needs one, and with thousands
        # of sessions every object less is less for the garbage collector to trace.
        log = Log(session, self._forgotten_seq, None)
        self._logs[session] = log
        return log

    def _view_of(self, log: Log) -> LiveView:
        """A session log's view, made when events first leave its window."""
        view = log.view
        if view is None:
            view = log.view = self._new_view()
        return view

    def _new_view(self) -> LiveView:
        # Fed every event once, in order: no replay check.
        return LiveView(
            max_finished=self._max_finished,
            max_text=FIELD_BYTES,
            compare=self.compare,
            check_replays=False,
        )

    def _append(self, log: Log, event: Event, size: int) -> None:
        log.events.append(event)
        log.sizes.append(size)
        log.nbytes += size
        self._bytes += size
        if log.nbytes >= log.tier_top:
            self._file(log)

    def _file(self, log: Log) -> None:
        """File ``log`` under its size class (lock held): the publishers call this when
        it outgrows its class, trimming when it shrinks below it."""
        tier = log.nbytes.bit_length()
        old = log.tier
        if tier != old:
            tiers = self._tiers
            if old:
                tiers[old].pop(log, None)
            if tier:
                tiers[tier][log] = None
            log.tier = tier
        log.tier_top = 1 << tier

    def _trim_to(self, log: Log, target: int) -> int:
        """Drop the events before absolute position ``target``. A subscriber that has not
        read them keeps them, charged to it (``Feeder.hold``), within its allowance:
        ``buffer`` (events) and ``lag_bytes``, and ``replay_bytes`` for all subscribers
        together; past it, it is cut. Returns bytes freed."""
        base = log.base
        k = target - base
        if k <= 0:
            return 0
        if log.subs:
            feeder = self._feeder
            end = log.end
            for sub in list(log.subs):
                first = max(sub._cursor, base)  # its first unread event still in the log
                if first >= target:
                    continue
                if end - max(sub._cursor, sub._replay_end) > sub._limit:
                    feeder.cut(sub, log)
                    continue
                size = sum(log.sizes[first - base : k])
                if (
                    sub._held_bytes + size > self.lag_bytes
                    or self._stats.held_bytes + size > self.replay_bytes
                ):
                    feeder.cut(sub, log)
                    continue
                feeder.hold(sub, log.events[first - base : k], size)
        if log.session is not None:  # the all-sessions log has no view
            self._view_of(log).fold(log.events[:k])
        freed = sum(log.sizes[:k])
        log.trimmed_seq = self._seqs(log)[k - 1]
        del log.events[:k]
        del log.sizes[:k]
        log.base = target
        log.nbytes -= freed
        self._bytes -= freed
        self._file(log)
        return freed

    def _trim_bytes(self) -> None:
        """Over the byte budget: drop the oldest events of the largest logs first, down to
        :data:`_TRIM_SLACK` under it (a tenth of it, if less). The logs are filed by size
        class (powers of two): the largest class is trimmed first, each of its logs down
        below the class or until the goal is met, so the work is per event dropped,
        whatever the number of sessions — and the same however far under the budget a
        trim goes. It goes a little: a bus at its budget then frees about what each
        publish adds, so the objects it holds stay level. Trimming a tenth of 16 MiB at a
        time (~5,000 events) let the young generation grow by thousands between trims:
        young collections, whose survivors (every waiting stream's objects) were
        promoted, and full collections of a second each at 10,000 connections."""
        goal = self.replay_bytes - min(self.replay_bytes // 10, _TRIM_SLACK)
        tiers = self._tiers
        top = len(tiers) - 1
        while self._bytes > goal and top > 0:
            tier = tiers[top]
            if not tier:
                top -= 1
                continue
            log, _ = tier.popitem()  # the newest filed in this class: O(1)
            log.tier = 0
            want = min(self._bytes - goal, log.nbytes - (1 << (top - 1)) + 1)
            k, freed = 0, 0
            sizes = log.sizes
            while freed < want:
                freed += sizes[k]
                k += 1
            self._trim_to(log, log.base + k)  # files it again, in its class now

    def _sweep(self, now: float) -> None:
        """Forget the sessions nobody reads that saw no event for ``session_ttl`` (lock
        held). Runs on publishing and on subscribing, at most every ``ttl / 4``."""
        self._next_sweep = now + self._sweep_every
        horizon = now - self.session_ttl
        for session, log in list(self._logs.items()):
            if (
                not log.subs
                and log.last_ts < horizon
                and not self._arbiter.book.has_pending(session)
            ):
                self._forget(session, log)

    def _forget(self, session: str, log: Log) -> None:
        del self._logs[session]
        self._bytes -= log.nbytes
        if log.tier:
            self._tiers[log.tier].pop(log, None)
            log.tier = 0
        last = self._seqs(log)[-1] if log.events else log.trimmed_seq
        self._forgotten_seq = max(self._forgotten_seq, last)

    def _released(self, log: Log) -> None:
        """A subscription left ``log`` (lock held): a session log nobody reads that never
        saw an event holds nothing to replay, and is forgotten at once."""
        session = log.session
        view = log.view
        if (
            session is not None
            and not log.subs
            and not log.events
            and (view is None or (not view.calls and not view.runs))
            and self._logs.get(session) is log
        ):
            self._forget(session, log)

    # -- reading ---------------------------------------------------------------------

    def _retained(self, log: Log) -> Retained:
        # Nothing left the window yet: the state before it is empty (a view made for
        # this read only; the log gets its own when it first trims).
        return Retained(
            log.events,
            self._seqs(log),
            log.view if log.view is not None else self._new_view(),
            log.trimmed_seq,
            cache=log.resets,
            offset=log.base,
        )

    def snapshot(self, session: str, *, run: str | None = None) -> Snapshot:
        """The session's calls, runs and batches as they stand now (open calls, and
        the newest finished ones, within ``reset_bytes``); only one run's part with
        ``run=``."""
        self._arbiter.expire_due(session)
        with self._lock:
            log = self._logs.get(session)
            if log is None:
                return Snapshot()
            return self._retained(log).reset_snapshot(len(log.events), run, self.reset_bytes)

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
    ) -> Subscription[Event]: ...
    @overload
    @deprecated("with_state=, inclusive=, with_history=: use bus.resume(...) and sub.origin")
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

        A ``StreamReset`` is delivered whenever one is due, whatever ``types`` says.
        (``with_state``, ``inclusive`` and ``with_history`` are deprecated: use
        :meth:`resume`.)
        """
        if with_state or inclusive or with_history:
            warnings.warn(
                "subscribe(with_state=, inclusive=, with_history=) is deprecated: "
                "use bus.resume(..., at=inclusive) and sub.origin",
                DeprecationWarning,
                stacklevel=2,
            )
            if inclusive and after is None:
                raise ValueError("inclusive=True needs after=")
        request = subscribe_request(
            types,
            session=session,
            run=run,
            after=after,
            snapshot=snapshot,
            buffer=buffer,
            overflow=overflow,
            at=inclusive,
            resume=with_state or with_history,
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
    ) -> Subscription[Any]:
        """Continue a client that read ``session`` (its ``types``, its ``run``) up to
        event ``after`` — or up to just before it, with ``at=True`` (a client cut
        between the wire messages of that event).

        Delivers what :meth:`subscribe` with ``after=`` delivers (a reset when the
        cursor cannot be served), and ``sub.origin`` says what the client already has:
        ``base`` (the state before ``history``), ``history`` (the retained events up to
        the cursor, as this subscription delivers them) and ``state`` (the state at the
        cursor). A transport re-encodes the history to bring a client's wire dialect
        to exactly where it was.
        """
        request = resume_request(
            types, session=session, after=after, at=at, run=run, buffer=buffer, overflow=overflow
        )
        return self._open(request)

    def _open(self, request: StartRequest) -> Subscription[Any]:
        session = request.session
        if request.snapshot or request.after is not None:
            self._arbiter.expire_due(session)
        sub: Subscription[Any] = Subscription(
            self._feeder, request.types, session, request.run, request.buffer, request.overflow
        )
        with self._lock:
            if self._feeder.closed:
                raise BusClosed("the bus is closed")
            now = self._clock()
            if now > self._next_sweep:
                self._sweep(now)
            if session is None:
                self._open_all(sub, request)
                return sub
            log = self._logs.get(session) or self._new_log(session)
            start = start_position(
                request,
                sub._kinds_match,
                self._retained(log),
                session=session,
                epoch=self.epoch,
                live_seq=self._seq,
                last_seq=self._seq,
                ts=now,
                reset_bytes=self.reset_bytes,
            )
            if start.reset is not None and request.after is not None:
                self._stats.resets += 1
            sub._begin(log, start, cursor=log.base + start.index, replay_end=log.end)
        return sub

    def _open_all(self, sub: Subscription[Any], request: StartRequest) -> None:
        """An all-sessions subscription (lock held): its reset is one per session."""
        if self._all is None:
            self._all = Log(None, self._seq, None)
        log = self._all
        index = None
        if request.after is not None:
            index = cursor_index(
                self._seqs(log),
                request.after,
                epoch=self.epoch,
                floor=log.trimmed_seq,
                last=self._seq,
                at=request.at,
            )
        if request.snapshot or (request.after is not None and index is None):
            if request.after is not None:
                self._stats.resets += 1
            ts = self._clock()
            resets = [
                StreamReset(
                    id=self.position,
                    session=session,
                    ts=ts,
                    snapshot=self._retained(slog).reset_snapshot(
                        len(slog.events), None, self.reset_bytes
                    ),
                )
                for session, slog in self._logs.items()
            ]
            origin = Origin(reset=True, after=self.position)
            start = Start(index=len(log.events), reset=None, done=False, origin=origin)
            sub._begin(log, start, cursor=log.end, replay_end=log.end)
            sub._pending = resets
            return
        after = request.after if request.after is not None else self.position
        start = Start(
            index=len(log.events) if index is None else index,
            reset=None,
            done=False,
            origin=Origin(reset=False, after=after),
        )
        sub._begin(log, start, cursor=log.base + start.index, replay_end=log.end)

    # -- approvals (arbitrated by toolstream._core.arbiter) ------------------------------

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
        """Decide approval ``approval_id`` of ``session``: publishes the one
        ``tool.approval.resolved`` it gets and, when refused while the call waits to
        run, the call's ``tool.denied``. Returns the resolution.

        The first decision wins; any later one raises ``ApprovalAlreadyResolved``
        (``.resolution``: the winner). ``ApprovalNotFound`` for an unknown id and for
        another session's (the same error), ``ApprovalExpired`` past ``expires_at``
        (the approval is then resolved by ``"timeout"``), ``ApprovalInvalid`` for edited
        ``args`` that are not a JSON object within the payload cap. ``by`` names who
        decided (a transport passes the principal's id). ``ends_call=False`` is for the
        call's own tracker, which ends the call itself (cancelled while waiting).
        """
        return self._arbiter.resolve(session, approval_id, approved, by, reason, args, ends_call)

    def resolve_approval_now(
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
        """:meth:`resolve_approval`, from synchronous code (any thread)."""
        return self._arbiter.resolve(session, approval_id, approved, by, reason, args, ends_call)

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on approval ``approval_id`` (the real edited args, for the tool),
        or ``None`` while it is pending; ``ApprovalNotFound`` as for a decision. An
        approval past its expiry is resolved by ``"timeout"`` first."""
        return self._arbiter.decision(session, approval_id)

    def decision_now(self, session: str, approval_id: str) -> Decision | None:
        """:meth:`decision`, from synchronous code."""
        return self._arbiter.decision(session, approval_id)

    async def wait_decision(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on approval ``approval_id`` (what a waiting tracker
        does; bound it with a cancel scope, e.g. ``anyio.move_on_after``).
        ``ApprovalNotFound`` as for :meth:`decision`; ``BusClosed`` if the bus closes
        first."""
        return await self._arbiter.wait(session, approval_id)

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """End every subscription (their iterators stop); publishing raises ``BusClosed``."""
        with self._lock:
            if self._feeder.closed:
                return
            self._feeder.closed = True
            wakes: list[Any] = []
            logs = list(self._logs.values())
            if self._all is not None:
                logs.append(self._all)
            for log in logs:
                wakes.extend(log.take_waiters())
        wake_all(wakes)

    async def aclose(self) -> None:
        """End every subscription; publishing afterwards raises ``BusClosed``."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
