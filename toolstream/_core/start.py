"""Where a subscription starts: one decision, for every bus.

A subscriber asks for live events, a snapshot first, or to continue after a cursor
(:class:`StartRequest`); a bus knows what it retained of the session
(:class:`Retained`). :func:`start_position` decides from both which retained events
are replayed, which reset comes first, and what the subscription's :class:`Origin`
is: ``EventBus`` calls it under its lock, a broker bus with what it read from its
broker, so the two cannot disagree.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeAlias

import attrs

from .events import Event, RunFinished, RunStarted, Snapshot, StreamReset
from .identifiers import check_identifier
from .ids import make_id, parse_event_id
from .snapshots import bound_snapshot
from .view import LiveView, run_tree

__all__ = [
    "Origin",
    "Overflow",
    "Retained",
    "Start",
    "StartRequest",
    "check_subscribe",
    "cursor_index",
    "resume_request",
    "start_position",
    "subscribe_request",
]

#: What a subscriber past its ``buffer`` gets: merged deltas, or cut at once.
Overflow: TypeAlias = Literal["coalesce", "disconnect"]


def check_subscribe(
    types: Sequence[object],
    session: str | None,
    run: str | None,
    after: str | None,
    snapshot: bool,
    buffer: object,
    overflow: object,
) -> None:
    """The argument checks every bus's ``subscribe`` and ``resume`` make (TypeError /
    ValueError; ``IdTooLong`` for a session or run past ``MAX_ID_BYTES``)."""
    for t in types:
        if not (isinstance(t, type) and issubclass(t, Event)):
            raise TypeError(f"subscribe() takes event classes, got {t!r}")
    if after is not None and snapshot:
        raise ValueError("after= and snapshot=True exclude each other")
    if session is not None and (not isinstance(session, str) or not session):
        raise ValueError(f"session must be a non-empty string or None, got {session!r}")
    if run is not None and session is None:
        raise ValueError("run= needs session=: run ids are scoped to a session")
    if session is not None:
        check_identifier("session", session)
    if isinstance(run, str):
        check_identifier("run", run)
    if not isinstance(buffer, int) or buffer < 1:
        raise ValueError(f"buffer must be a positive int, got {buffer!r}")
    if overflow not in ("coalesce", "disconnect"):
        raise ValueError(f"overflow must be 'coalesce' or 'disconnect', got {overflow!r}")


@attrs.frozen(kw_only=True)
class Origin:
    """Where a subscription starts reading, and (for :meth:`Bus.resume`) what a client
    that read up to there already has.

    A transport that resumes a client mid-stream brings its dialect to where the client
    was from ``base`` and ``history``; ``state`` is the session's state at the start.
    """

    #: True when the first thing delivered is a ``StreamReset`` (no cursor, a cursor the
    #: bus cannot serve, or a run that already finished).
    reset: bool
    #: The id just before the first event delivered: resume with ``after=`` it if cut
    #: before anything was delivered.
    after: str
    #: (resume) The session's state (of the run, with ``run=``) before ``history``.
    base: Snapshot | None = None
    #: (resume) The retained events from ``base`` up to the start, as this subscription
    #: delivers them (its types and run).
    history: tuple[Event, ...] = ()
    #: (resume) The session's state (of the run) where reading starts.
    state: Snapshot | None = None


@attrs.frozen(kw_only=True)
class StartRequest:
    """What a subscriber asked for (checked: see :func:`subscribe_request` and
    :func:`resume_request`, which every bus's ``subscribe`` and ``resume`` call)."""

    types: tuple[type[Event], ...] = ()
    session: str | None = None
    after: str | None = None
    #: With ``after``: start *at* that event (a client cut between its wire messages).
    at: bool = False
    snapshot: bool = False
    run: str | None = None
    #: Work out ``Origin.base``, ``history`` and ``state`` (:meth:`Bus.resume`).
    resume: bool = False
    buffer: int = 1024
    overflow: Overflow = "coalesce"


def subscribe_request(
    types: Sequence[object],
    *,
    session: str | None,
    run: str | None,
    after: str | None,
    snapshot: bool,
    buffer: int,
    overflow: Overflow,
    at: bool = False,
    resume: bool = False,
) -> StartRequest:
    """A ``subscribe`` call's arguments, checked (TypeError / ValueError)."""
    check_subscribe(types, session, run, after, snapshot, buffer, overflow)
    return StartRequest(
        types=tuple(types),  # type: ignore[arg-type]  # checked: event classes
        session=session,
        after=after,
        at=at,
        snapshot=snapshot,
        run=run,
        resume=resume,
        buffer=buffer,
        overflow=overflow,
    )


def resume_request(
    types: Sequence[object],
    *,
    session: str,
    after: str,
    at: bool,
    run: str | None,
    buffer: int,
    overflow: Overflow,
) -> StartRequest:
    """A ``resume`` call's arguments, checked (TypeError / ValueError)."""
    if not isinstance(after, str) or not after:
        raise ValueError(f"after must be a non-empty string, got {after!r}")
    if session is None:
        raise ValueError("resume() needs session=")
    return subscribe_request(
        types,
        session=session,
        run=run,
        after=after,
        snapshot=False,
        buffer=buffer,
        overflow=overflow,
        at=at,
        resume=True,
    )


@attrs.frozen(kw_only=True)
class Start:
    """Where a subscription starts: ``events[index:]`` are delivered (replayed), after
    ``reset`` when there is one; ``done`` when nothing follows the reset."""

    index: int
    reset: StreamReset | None
    done: bool
    origin: Origin
    #: With ``run=``: the run and its sub-agents' runs known at the start (a run
    #: subscription follows its sub-agents; later ones join as they start).
    tree: frozenset[str] = frozenset()


class Seqs(Protocol):
    """Sequence numbers by position, ascending (a list, or a bus's view of its log)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> int: ...


def cursor_index(
    seqs: Seqs, after: str, *, epoch: str, floor: int, last: int, at: bool = False
) -> int | None:
    """The index in ``seqs`` of the first event after id ``after`` (at it, with ``at``),
    or None if that cannot be served exactly: another epoch, from the future, older than
    ``floor`` (every event up to ``floor`` is gone), or not an id."""
    try:
        cursor_epoch, seq = parse_event_id(after)
    except ValueError:
        return None
    if cursor_epoch != epoch or seq > last or seq < floor:
        return None
    if at:
        return None if seq <= floor else bisect_left(seqs, seq)
    return bisect_right(seqs, seq)


_RESET_CACHE = 8  # bounded snapshots kept per log


class Retained:
    """What a bus knows of one session, as :func:`start_position` reads it: the retained
    ``events`` and their sequence numbers ``seqs``, the state ``base`` before
    ``events[0]`` (never changed here), and ``floor``: every event with a sequence up to
    it is gone. ``cache`` (keyed by ``offset + k``, an absolute position) lets
    subscriptions starting at the same position share one reset snapshot."""

    __slots__ = ("base", "cache", "events", "floor", "offset", "seqs")

    def __init__(
        self,
        events: Sequence[Event],
        seqs: Seqs,
        base: LiveView,
        floor: int,
        *,
        cache: dict[tuple[int, str | None], Snapshot] | None = None,
        offset: int = 0,
    ) -> None:
        self.events = events
        self.seqs = seqs
        self.base = base
        self.floor = floor
        self.cache = cache
        self.offset = offset

    def state(self, k: int) -> LiveView:
        """The state after ``events[:k]``."""
        view = self.base.copy()
        view.fold(list(self.events[:k]))
        return view

    def reset_snapshot(
        self, k: int, run: str | None, budget: int, view: LiveView | None = None
    ) -> Snapshot:
        """The bounded snapshot (of ``run``) after ``events[:k]``."""
        key = (self.offset + k, run)
        cache = self.cache
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:
                return hit
        if view is None:
            view = self.state(k)
        snapshot = bound_snapshot(view.snapshot(run_id=run), budget)
        if cache is not None:
            if len(cache) >= _RESET_CACHE:
                cache.clear()
            cache[key] = snapshot
        return snapshot


def start_position(
    request: StartRequest,
    matches: Callable[[Event], bool],
    retained: Retained,
    *,
    session: str,
    epoch: str,
    live_seq: int,
    last_seq: int,
    ts: float,
    reset_bytes: int,
) -> Start:
    """Where a subscription to ``session`` starts, from what the bus ``retained``.

    - ``live_seq``: the position a subscription without a cursor starts after (events
      with a higher sequence are delivered); ``last_seq``: the newest position (where the
      reset of a finished run stands).
    - ``matches(event)``: the subscription's type filter, for ``Origin.history`` (the
      run filter, a run and its sub-agents' runs, is applied here).
    - ``reset_bytes``: the budget of a reset's snapshot.
    """
    run = request.run
    events, seqs, floor = retained.events, retained.seqs, retained.floor
    state = retained.state
    index: int | None = None
    if request.after is not None:
        index = cursor_index(
            seqs, request.after, epoch=epoch, floor=floor, last=last_seq, at=request.at
        )
    need_reset = request.snapshot or (request.after is not None and index is None)
    live = bisect_right(seqs, live_seq)
    start = live if index is None else index
    done = False
    end_state: LiveView | None = None
    tree: frozenset[str] = frozenset()
    if run is not None:
        end_state = state(len(events))
        tree = frozenset(run_tree(end_state.runs.values(), run))
        info = end_state.runs.get(run)
        if info is not None and info.state != "running":
            ends_later = any(type(e) is RunFinished and e.run_id == run for e in events[start:])
            if index is not None and not ends_later:
                # The client's cursor is at or past the run's end: it has everything.
                start, done = len(events), True
            elif need_reset or not ends_later:
                need_reset = done = True
    if not need_reset:
        after = request.after if request.after is not None else make_id(epoch, live_seq)
        if not request.resume:
            return Start(
                index=start,
                reset=None,
                done=done,
                origin=Origin(reset=False, after=after),
                tree=tree,
            )
        history = [e for e in events[:start] if matches(e)]
        if run is not None:
            history = _of_run(history, run_tree(retained.base.runs.values(), run))
        return Start(
            index=start,
            reset=None,
            done=done,
            origin=Origin(
                reset=False,
                after=after,
                base=retained.base.snapshot(run_id=run),
                history=tuple(history),
                state=state(start).snapshot(run_id=run),
            ),
            tree=tree,
        )
    if done:
        start, position, view = len(events), last_seq, end_state
    else:
        start, position, view = live, live_seq, None
    snapshot = retained.reset_snapshot(start, run, reset_bytes, view)
    reset = StreamReset(
        id=make_id(epoch, position), session=session, ts=ts, run_id=run, snapshot=snapshot
    )
    origin = Origin(
        reset=True,
        after=reset.id,
        state=snapshot if request.resume else None,
        base=snapshot if request.resume else None,
    )
    return Start(index=start, reset=reset, done=done, origin=origin, tree=tree)


def _of_run(events: list[Event], tree: set[str]) -> list[Event]:
    """The events of the runs in ``tree`` (a run and its sub-agents' runs), following the
    sub-agents that start among them (``tree`` grows)."""
    out = []
    for event in events:
        run_id = event.run_id
        if run_id in tree:
            out.append(event)
        elif run_id is not None and isinstance(event, RunStarted) and event.parent_run_id in tree:
            tree.add(run_id)
            out.append(event)
    return out
