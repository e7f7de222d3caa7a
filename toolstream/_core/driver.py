"""The seam between a broker-backed bus and its broker: the :class:`Broker` protocol.

:class:`~toolstream._core.brokerbus.BrokerBus` does everything a broker-backed bus does
(its options, the outbox, start and close, subscribe / resume / snapshot, the approvals
front, leases and reaping, stats) once; a *driver* holds the connection and only what
differs between brokers. Every method below is one atomic step on the broker: whatever
processes call it at once, each sees it happen entirely or not at all.

The data model a driver keeps (per ``prefix``):

- an **epoch**: a token naming the broker's data; every event id is
  ``"<epoch>-<seq>"``. A new epoch means the data was lost (every cursor resets).
- per **session**:

  - its **events**, each stored as its native JSON without its id (``blob``) under an
    integer ``seq``, increasing within the session (a driver may number them in one
    sequence shared by every session);
  - an **incarnation**: a token set by the session's first write; a new one means the
    session's data was lost (subscribers get a reset, not a silent gap);
  - a **checkpoint**: a ``seq`` and a ``stream.reset`` JSON of the session's state after
    the event at ``seq``; events up to it may be deleted (the *floor*);
  - each writer's **high-water mark** (the highest seq, in the writer's own numbering,
    it wrote: a retried batch is recognised and not written twice);
  - the **open calls and runs**, by writer (what a reaper closes if the writer is lost);
  - the **fenced** calls and runs, by writer (closed by a reaper or ended by a denial:
    later events for them are dropped);
  - its **approvals**: pending or resolved, their meta, once resolved the resolution's
    JSON, its seq and the decision (with the real edited args).

- per **writer** (a bus's ``token``): a **lease** (``hold``), the sessions it wrote to,
  and whether a reaper claimed it.

Events a driver writes on its own (what :meth:`Broker.reap` and :meth:`Broker.resolve`
append, and a renumbered event) get a seq above the session's last that follows the
broker's clock where it has one — ``next_seq(last, now)`` with the broker's ``now``
(Redis: ``XADD *``, the server's clock) — so a subscription that starts "live" at
``next_seq(...) - 1`` on a quiet session does not start after them. Time to live and
retention (:meth:`Broker.expire`, :meth:`Broker.trim_due`) may be measured on the
broker's own clock rather than the ``now`` the bus passes.

A driver instance serves one bus: the bus calls :meth:`Broker.aclose` when it closes
(``MemoryBroker``, which stands for a broker several buses share, is the exception:
its ``start`` and ``aclose`` do nothing).

A driver raises one of its ``retryable`` errors when the broker cannot be reached (the
bus retries), and :class:`~toolstream._core.outbox.Refused` from :meth:`Broker.append`
for an answer retrying cannot cure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from .events import Event

__all__ = [
    "Appended",
    "ApprovalState",
    "Broker",
    "Decide",
    "BrokerReader",
    "Chunk",
    "Record",
    "RecordKind",
    "Resolution",
    "StoredState",
    "Variant",
]

#: What writing an event does beside appending it: ``"-"`` nothing; ``"o"`` it opens a
#: call (``call_id``, with its ``tool`` and ``run_id``) under the writer; ``"t"`` it ends
#: that call; ``"r"`` a run starts (``run_id``); ``"f"`` it ends; ``"A"`` an approval is
#: requested (recorded pending with ``meta``, unless already known); ``"R"`` a tracker
#: resolves its own approval (written only while it is pending: the first resolution
#: wins; recorded resolved with the decision ``{"approved": false, "by": "cancelled"}``).
RecordKind = Literal["-", "o", "t", "r", "f", "A", "R"]


@attrs.frozen(kw_only=True)
class Record:
    """One event of a batch to append, as a driver stores it."""

    kind: RecordKind
    #: The event's seq in the writer's own numbering (the number of its id).
    seq: int
    #: The event (for what a driver indexes: ``session``, ``type``...).
    event: Event
    #: Its native JSON without its ``id``.
    blob: str
    call_id: str = ""
    run_id: str = ""
    tool: str = ""
    approval_id: str = ""
    #: For ``"A"``: the approval's meta: ``s`` (session), ``exp`` (expiry or None),
    #: ``running``, ``cid`` (call id), ``env`` ([run_id, call_id, tool, parent_call_id])
    #: and ``w`` (the writer's token).
    meta: dict[str, Any] | None = None


@attrs.frozen
class Appended:
    """What :meth:`Broker.append` did: the session's ``incarnation``, one code per
    record (0 written at its seq, 1 already written: a retry, 2 dropped: fenced, or an
    ``"R"`` whose approval was resolved already, 3 written at another seq because
    entries of another writer were ahead) and the seqs of the records coded 3, in
    order."""

    incarnation: str
    codes: list[int]
    renumbered: list[int]


@attrs.frozen
class StoredState:
    """A session as stored, read in one atomic step: ``incarnation`` (``""``: never
    written), the ``last`` seq ever given in it (0: none; deletion never lowers it), the
    ``floor`` (the highest seq deleted or covered by the checkpoint: 0 when none), the
    ``checkpoint`` (its seq and JSON) if any, and the events after it (up to ``upto``
    when asked) as ``(seq, blob)`` in order."""

    incarnation: str
    last: int
    floor: int
    checkpoint: tuple[int, str] | None
    events: list[tuple[int, str | bytes]]


@attrs.frozen
class Chunk:
    """What a reader got: the session's ``incarnation``, its checkpoint's seq (0: none)
    and up to ``count`` events after the cursor as ``(seq, blob)``."""

    incarnation: str
    checkpoint: int
    events: list[tuple[int, str | bytes]]


@attrs.frozen
class ApprovalState:
    """An approval as stored: ``status`` ``"p"`` (pending) or ``"r"`` (resolved), its
    ``meta`` (see :attr:`Record.meta`), and once resolved its ``decision``
    (``approved``, ``by``, ``reason``, ``args``)."""

    status: Literal["p", "r"]
    meta: dict[str, Any]
    decision: dict[str, Any] | None


#: One way an approval may end: the resolution's event JSON (without id), the decision
#: JSON kept for the waiting tool, and the denial's event JSON (``tool.denied`` when the
#: call ends with it; None when it does not).
Variant = tuple[str, str, "str | None"]


@attrs.frozen
class Decide:
    """What :meth:`Broker.resolve` decides: the approval, the bus's ``now`` (which says
    whether it expired), whether the expiry timer decides (``by_timeout``), and the
    ``variants`` — in order the decision, the expiry and the cancellation (the call was
    closed elsewhere)."""

    approval_id: str
    now: float
    by_timeout: bool
    variants: Sequence[Variant]


@attrs.frozen
class Resolution:
    """What :meth:`Broker.resolve` did: ``outcome`` ``"ok"`` (this decision won),
    ``"expired"`` (resolved by timeout now), ``"resolved"`` (decided before, or its call
    was closed elsewhere: the winner's JSON) or ``"notfound"``; the resolution's JSON
    and the seq it was written at (``""`` and 0 for ``notfound``)."""

    outcome: Literal["ok", "expired", "resolved", "notfound"]
    blob: str
    seq: int


@runtime_checkable
class BrokerReader(Protocol):
    """One subscription's reads of one session (a connection of its own where the
    broker needs one for blocking reads)."""

    async def read(self, after: int, count: int) -> Chunk:
        """Up to ``count`` events after seq ``after``, with the session's incarnation
        and checkpoint, in one atomic step."""
        ...

    async def wait(self, after: int, timeout: float) -> None:
        """Return when an event after ``after`` may have been written, or after
        ``timeout`` seconds (returning early is allowed: the reader reads again). The
        bus always reads before it waits: a reader may count wake-ups from its last
        :meth:`read` so that a write between the two is not missed."""
        ...

    async def aclose(self) -> None:
        """Release what the reader holds."""
        ...


@runtime_checkable
class Broker(Protocol):
    """What a driver provides to :class:`~toolstream._core.brokerbus.BrokerBus`."""

    #: The broker in messages, credentials hidden (``"Redis at redis://host:6379/0"``).
    where: str
    #: Errors that mean "cannot reach the broker now": the bus retries.
    retryable: tuple[type[BaseException], ...]
    #: How the bus names itself in errors (``"RedisBus"``).
    name: str

    def open(self, connect_timeout: float) -> str:
        """Connect once, synchronously (from the bus's constructor): create what is
        missing and return the epoch (created if there is none). A retryable error
        when the broker cannot be reached in ``connect_timeout``."""
        ...

    async def epoch(self) -> str:
        """The epoch now (created again if the broker lost it)."""
        ...

    def next_seq(self, last: int, now: float) -> int:
        """The seq of the next event this process publishes, after ``last`` (the newest
        it gave), at wall-clock time ``now``. Runs under the bus's lock: no I/O, and no
        side effect (the bus also asks it where a live subscription starts)."""
        ...

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """Append ``records`` (one session's, in order) for writer ``token``, atomically:
        each is skipped if at or below the writer's high-water mark (code 1), dropped if
        fenced (code 2), else written at its ``seq`` (or, if another writer's events are
        ahead, at the next free seq: code 3), doing what its kind says. Sets the
        session's incarnation on its first write. The bus starts one session's appends
        of a batch together; a driver whose broker numbers every session in one sequence
        may write appends started together as one."""
        ...

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        """The session as stored, its events up to ``upto`` (None: all)."""
        ...

    def read_state_sync(self, session: str) -> StoredState:
        """:meth:`read_state` from synchronous code (``snapshot()``)."""
        ...

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """Store ``state`` as the checkpoint at ``seq`` unless a newer one is stored, and
        delete the events up to and including ``seq``."""
        ...

    def reader(self, session: str) -> BrokerReader:
        """A reader of ``session`` for one subscription."""
        ...

    # -- leases ------------------------------------------------------------------------

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        """Hold (or renew) writer ``token``'s lease for ``lease`` seconds and file
        ``sessions`` under it (where a reaper looks)."""
        ...

    async def lost(self, token: str) -> list[str]:
        """The writers other than ``token`` whose lease ran out, or whose reaping was
        claimed and not finished. The bus asks every ``lease / 3`` seconds (at most 30),
        so a broker without expiring keys may measure "ran out" between its calls."""
        ...

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """Claim writer ``token`` for reaping (``force``: even if its lease is held):
        the sessions it wrote to, or None when its lease is held or it was released. A
        writer claimed and not yet released may be claimed again (a reaper that died
        half-way is continued): that each call is closed once is :meth:`reap`'s to
        ensure."""
        ...

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """Close, once, what writer ``token`` left open in ``session``: a
        ``tool.cancelled`` (``reason``) per call, then a ``run.finished`` (cancelled,
        error ``WorkerLost``) per run; each is fenced. Returns how many events that
        wrote."""
        ...

    async def release(self, token: str) -> None:
        """Writer ``token`` is reaped in every session: forget it."""
        ...

    async def drop_lease(self, token: str) -> None:
        """Give up writer ``token``'s lease (it stops writing)."""
        ...

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        """Sessions whose history is kept by time: ``(session, seq)`` for each with
        events older than its retention, ``seq`` the newest of those (the bus stores a
        checkpoint there, which deletes them). A broker that keeps history by count
        (the bus's ``replay``) returns ``[]``. Called every ``lease / 3`` seconds; a
        driver may answer ``[]`` when it looked recently."""
        ...

    async def expire(self, now: float) -> int:
        """Delete the sessions past their time to live (a broker whose keys expire on
        their own does nothing); how many. A driver may answer 0 when it looked
        recently."""
        ...

    # -- approvals ---------------------------------------------------------------------

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval, or None when unknown or another session's."""
        ...

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        """:meth:`approval` from synchronous code."""
        ...

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """Decide an approval in one atomic step (see :class:`Decide`). A resolved
        approval answers ``resolved`` with the stored resolution; a fenced call writes
        the cancellation (``resolved``); a decision (not ``by_timeout``) at or past the
        expiry writes the expiry (``expired``); else the decision (``ok``).
        Writing appends the resolution, then the denial if any (fencing the call and
        closing it under its writer), stores the decision and wakes the waiters."""
        ...

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        """:meth:`resolve` from synchronous code."""
        ...

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        """Return when the approval may have been resolved, or after ``timeout``."""
        ...

    # -- connection ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the running loop (called before the bus's tasks start)."""
        ...

    async def aclose(self) -> None:
        """Disconnect (the bus has stopped using the driver)."""
        ...
