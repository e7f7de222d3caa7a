""":class:`MemoryBroker`: a :class:`~toolstream._core.driver.Broker` in process memory.

``BrokerBus(MemoryBroker())`` is a broker-backed bus with no server; several over one
``MemoryBroker`` behave as processes sharing one broker (from one thread or several). The
semantics are those of RedisBus's Lua scripts (``toolstream/redis/_scripts.py``) step for
step, numbering included: the events it writes on its own (a reaper's, a resolution, an
event renumbered) take ``next_seq(last, wall())`` with the broker's ``wall`` clock, as
Redis's ``XADD *`` takes the server's. Test hooks make the broker fail on purpose:
``down()`` (an outage), ``stall()`` (a hung writer, a lease not renewed, a reader left
behind), ``after()`` (something happens right after an operation) and ``lose_data()`` (a
broker restarted empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from .brokerstate import blob, lost_writer_events
from .driver import (
    Appended,
    ApprovalState,
    BrokerReader,
    Chunk,
    Decide,
    Record,
    Resolution,
    StoredState,
)
from .jsonenc import dumps, loads
from .memory_data import Approval as _Approval
from .memory_data import Session as _Session
from .stalling import OPERATIONS, AfterHook, OperationHooks

__all__ = ["BrokerDown", "MemoryBroker"]

#: An event id's number is a millisecond time ``ms`` and a counter ``n``: ``ms * SCALE + n``.
SCALE = 1_000_000
#: What a reaper's or a tracker's "R" record stores as the decision.
_CANCELLED = '{"approved":false,"by":"cancelled"}'

T = TypeVar("T")
_Key = tuple[str, ...]
_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class BrokerDown(ConnectionError):
    """A :class:`MemoryBroker` is down (:meth:`MemoryBroker.down`): what a broker
    unreachable raises, and what a bus over it retries."""


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class MemoryBroker:
    """A broker in this process's memory, for ``BrokerBus(MemoryBroker())``: a bus with
    no server, or several buses over one broker that behave as processes sharing it.

    - ``clock``: the monotonic clock of leases and session idle times (a test's own).
    - ``wall``: the broker's wall clock. The events it writes on its own (what
      :meth:`reap` and :meth:`resolve` append, an event renumbered because another
      writer's were ahead) take the seq ``next_seq(last, wall())``, as a Redis server's
      ``XADD *`` follows its clock; a reaper's events are stamped with it.
    - ``session_ttl``: seconds a session may stay unwritten before :meth:`expire`
      deletes it (its incarnation too: a later write starts a new one).

    Its ``start`` and ``aclose`` do nothing: the broker stands for a server several
    buses share (unlike other drivers, one instance serves every bus over it).

    Safe from any thread and event loop. Each operation is one atomic step, after a
    yield to the event loop (as a call to a real broker would).
    """

    where = "memory broker"
    retryable: tuple[type[BaseException], ...] = (BrokerDown,)
    name = "BrokerBus"

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        session_ttl: float = 3600.0,
    ) -> None:
        if not session_ttl > 0:
            raise ValueError(f"session_ttl must be positive, got {session_ttl}")
        self.clock = clock
        self.wall = wall
        self.session_ttl = session_ttl
        self._lock = threading.Lock()
        self._epoch = secrets.token_hex(6)
        self._sessions: dict[str, _Session] = {}
        self._leases: dict[str, float] = {}  # writer token -> when its lease runs out
        self._workers: set[str] = set()  # writers that hold or held a lease
        self._lost: set[str] = set()  # writers claimed for reaping, not released yet
        self._filed: dict[str, dict[str, None]] = {}  # writer token -> its sessions
        self._waiters: dict[_Key, list[_Waiter]] = {}
        self._hooks = OperationHooks()
        self._down = False

    def __repr__(self) -> str:
        return f"<MemoryBroker epoch={self._epoch} sessions={len(self._sessions)}>"

    # -- test hooks ----------------------------------------------------------------------

    def down(self) -> None:
        """Take the broker down (a test hook): until :meth:`up`, every operation of every
        bus over it raises :class:`BrokerDown`, as an unreachable broker would. Waiting
        readers and approval waiters return (their next read raises)."""
        with self._lock:
            self._down = True
            for key in list(self._waiters):
                self._wake(key)

    def up(self) -> None:
        """Bring the broker back after :meth:`down` (a test hook), its data intact."""
        with self._lock:
            self._down = False

    def lose_data(self) -> None:
        """Lose everything, as a broker restarted empty (a test hook): a new epoch (every
        cursor gets a reset), no session, no lease. Waiters return."""
        with self._lock:
            self._epoch = secrets.token_hex(6)
            self._sessions.clear()
            self._leases.clear()
            self._workers.clear()
            self._lost.clear()
            self._filed.clear()
            for key in list(self._waiters):
                self._wake(key)

    def stall(self, op: str, token: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold operation ``op`` (a method's name; a reader's are ``"read"`` and
        ``"wait"``) for the ``with`` block (a test hook): its calls, by every bus or only
        those whose ``token`` argument is ``token`` (``append``, ``hold``, ``lost``,
        ``claim``, ``reap``, ``release``, ``drop_lease``), wait until the block ends, then
        run (``*_sync`` ones block their thread). ``stall("append", bus.token)``: a hung
        writer; ``stall("hold", bus.token)``: a lease not renewed (other buses reap it);
        ``stall("read")``: readers left behind while writers run ahead. The block may
        end in any thread; an unknown ``op`` is a ``ValueError`` naming them all."""
        return self._hooks.stall(op, token)

    def after(self, op: str, callback: AfterHook) -> contextlib.AbstractContextManager[None]:
        """For the ``with`` block (a test hook), call ``callback(result)`` after each
        call of operation ``op`` completed its atomic step, before the bus gets the
        result (an async operation's callback may be a coroutine function: awaited; not
        run when the operation raises). ``after("approval", ...)``: something happens
        between a bus's read and what it does with it."""
        return self._hooks.after(op, callback)

    # -- the machinery of an operation ---------------------------------------------------

    async def _io(self, op: str, token: str | None = None) -> threading.Lock:
        """What every async operation does first: wait out a stall of it, yield to the
        loop (a round trip), raise if the broker is down. Returns the lock to take for
        the operation's one atomic step (then :meth:`_done`)."""
        await self._hooks.enter(op, token)
        await asyncio.sleep(0)
        if self._down:
            raise BrokerDown("the memory broker is down")
        return self._lock

    async def _done(self, op: str, result: T) -> T:
        """What every async operation does last: run the callbacks following it."""
        return await self._hooks.done(op, result)

    def _io_sync(self, op: str) -> threading.Lock:
        """:meth:`_io` for a synchronous operation: a stall blocks the thread."""
        if op in OPERATIONS:
            self._hooks.enter_sync(op)
        if self._down:
            raise BrokerDown("the memory broker is down")
        return self._lock

    async def _wait(self, key: _Key, timeout: float | None, ready: Callable[[], bool]) -> bool:
        """Return True at once if ``ready()`` (checked under the lock, so a wake cannot be
        missed), else False when ``key`` is woken or ``timeout`` passes."""
        with self._lock:
            if ready():
                return True
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            waiter = (loop, future)
            self._waiters.setdefault(key, []).append(waiter)
        try:
            await asyncio.wait([future], timeout=timeout)
        finally:
            future.cancel()
            with self._lock:
                waiting = self._waiters.get(key, [])
                if waiter in waiting:
                    waiting.remove(waiter)
                if not waiting:
                    self._waiters.pop(key, None)
        return False

    def _wake(self, key: _Key) -> None:
        """Wake the waiters of ``key``, in their own loops (called under the lock)."""
        for loop, future in self._waiters.pop(key, ()):
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # its loop is closed: nobody waits any more
                pass

    def _session(self, session: str) -> _Session:
        """The session's data, created empty if there is none (under the lock)."""
        s = self._sessions.get(session)
        if s is None:
            s = self._sessions[session] = _Session(self.clock())
        return s

    # -- epoch, numbering, connection ------------------------------------------------------

    def open(self, connect_timeout: float) -> str:
        """The epoch (:class:`BrokerDown` while the broker is down)."""
        with self._io_sync("open"):
            return self._epoch

    async def epoch(self) -> str:
        """The epoch now (a new one after :meth:`lose_data`)."""
        await self._io("epoch")
        return await self._done("epoch", self._epoch)

    def next_seq(self, last: int, now: float) -> int:
        """``now`` in milliseconds times ``1_000_000``, or ``last + 1`` if that is not
        above ``last`` (the numbering of Redis stream entry ids)."""
        return max(int(now * 1000) * SCALE, last + 1)

    async def start(self) -> None:
        """Nothing to connect."""
        await asyncio.sleep(0)

    async def aclose(self) -> None:
        """Nothing to disconnect (other buses may go on using the broker)."""
        await asyncio.sleep(0)

    # -- events ----------------------------------------------------------------------------

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """Append ``records`` for writer ``token`` (the FLUSH script)."""
        with await self._io("append", token):
            got = self._append(session, token, records)
        return await self._done("append", got)

    def _append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        s = self._session(session)
        if not s.incarnation:
            s.incarnation = secrets.token_hex(6)
        mine = s.marks.get(token)
        codes: list[int] = []
        moved: list[int] = []
        wrote = False
        wall: float | None = None  # read once, when an event is renumbered
        for r in records:
            approval = s.approvals.get(r.approval_id) if r.kind in ("A", "R") else None
            if mine is not None and r.seq <= mine:
                codes.append(1)  # written before: a retried batch
                continue
            if (
                (r.kind == "R" and approval is not None and approval.status == "r")
                or (r.call_id and ("c", token, r.call_id) in s.fenced)
                or (r.kind == "f" and ("r", token, r.run_id) in s.fenced)
            ):
                codes.append(2)  # decided already (the first one wins), or closed elsewhere
                continue
            if r.seq > s.last:
                seq = s.add(r.blob, r.seq)
                codes.append(0)
            else:  # another writer's events are ahead: after them, by the broker's clock
                wall = self.wall() if wall is None else wall
                seq = s.add(r.blob, self.next_seq(s.last, wall))
                codes.append(3)
                moved.append(seq)
            # The high-water mark is in the writer's own numbering (what a retry resends),
            # not the seq an event was renumbered to.
            mine = r.seq
            wrote = True
            if r.kind == "o":
                s.open.setdefault(("c", token, r.call_id), (r.tool, r.run_id))
            elif r.kind == "t":
                s.open.pop(("c", token, r.call_id), None)
            elif r.kind == "r":
                s.open.setdefault(("r", token, r.run_id), ("", ""))
            elif r.kind == "f":
                s.open.pop(("r", token, r.run_id), None)
            elif r.kind == "A" and approval is None:
                s.approvals[r.approval_id] = _Approval(dumps(r.meta or {}))
            elif r.kind == "R":
                if approval is None:  # never requested here: resolved, with no meta
                    approval = s.approvals[r.approval_id] = _Approval("{}")
                self._resolved(session, r.approval_id, approval, r.blob, seq, _CANCELLED)
        if wrote and mine is not None:
            s.marks[token] = mine
            s.touched = self.clock()
            self._wake(("s", session))
        return Appended(s.incarnation, codes, moved)

    def _resolved(
        self, session: str, approval_id: str, approval: _Approval, blob: str, seq: int, dec: str
    ) -> None:
        approval.status, approval.resolution, approval.seq, approval.decision = "r", blob, seq, dec
        self._wake(("a", session, approval_id))

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        """The session as stored, its events up to ``upto`` (the READ_STATE script)."""
        with await self._io("read_state"):
            got = self._read_state(session, upto)
        return await self._done("read_state", got)

    def read_state_sync(self, session: str) -> StoredState:
        """:meth:`read_state` from synchronous code."""
        with self._io_sync("read_state_sync"):
            got = self._read_state(session, None)
        return self._hooks.done_sync("read_state_sync", got)

    def _read_state(self, session: str, upto: int | None) -> StoredState:
        s = self._sessions.get(session)
        if s is None:
            return StoredState("", 0, 0, None, [])
        ck = s.checkpoint
        start = s.after(ck[0]) if ck else 0
        end = len(s.events) if upto is None else s.after(upto)
        floor = max(s.deleted, ck[0] if ck else 0)
        return StoredState(s.incarnation, s.last, floor, ck, s.events[start:end])

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """Store a checkpoint, delete what it covers (the CHECKPOINT script)."""
        with await self._io("checkpoint"):
            self._checkpoint(session, seq, state)
        await self._done("checkpoint", None)

    def _checkpoint(self, session: str, seq: int, state: str) -> None:
        s = self._session(session)
        if s.checkpoint is not None and seq <= s.checkpoint[0]:
            return
        s.checkpoint = (seq, state)
        cut = s.after(seq)
        if cut:
            s.deleted = max(s.deleted, s.events[cut - 1][0])
            del s.events[:cut]
        s.touched = self.clock()

    def reader(self, session: str) -> BrokerReader:
        """A reader of ``session``."""
        return _Reader(self, session)

    # -- leases ----------------------------------------------------------------------------

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        """Hold writer ``token``'s lease ``lease`` seconds of :attr:`clock`, file ``sessions``."""
        with await self._io("hold", token):
            self._leases[token] = self.clock() + lease
            self._workers.add(token)
            self._filed.setdefault(token, {}).update(dict.fromkeys(sessions))
        await self._done("hold", None)

    def _held(self, token: str) -> bool:
        return self._leases.get(token, -math.inf) > self.clock()

    async def lost(self, token: str) -> list[str]:
        """The writers but ``token`` whose lease ran out, or claimed and not released."""
        with await self._io("lost", token):
            others = sorted((self._workers | self._lost) - {token})
            got = [w for w in others if w in self._lost or not self._held(w)]
        return await self._done("lost", got)

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """Claim writer ``token`` for reaping (the CLAIM script)."""
        with await self._io("claim", token):
            got = self._claim(token, force)
        return await self._done("claim", got)

    def _claim(self, token: str, force: bool) -> list[str] | None:
        if not force and self._held(token):
            return None
        if token in self._workers:
            self._workers.discard(token)
        elif token not in self._lost:
            return None  # reaped already
        self._lost.add(token)
        return list(self._filed.get(token, ()))

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """Close what writer ``token`` left open in ``session`` (the REAP script): its
        events are stamped and numbered by :attr:`wall` (``now`` is the bus's clock, as
        the Redis script does not use it either)."""
        with await self._io("reap", token):
            got = self._reap(session, token, reason)
        return await self._done("reap", got)

    def _reap(self, session: str, token: str, reason: str) -> int:
        s = self._sessions.get(session)
        if s is None:
            return 0
        now = self.wall()
        calls: list[tuple[str, str, str]] = []
        runs: list[str] = []
        for key, (tool, run_id) in list(s.open.items()):
            kind, who, id_ = key
            if who != token:
                continue
            if kind == "c":
                calls.append((id_, tool, run_id))
            else:
                runs.append(id_)
            s.fenced.add(key)
            del s.open[key]
        blobs = [blob(ev) for ev in lost_writer_events(session, now, reason, calls, runs)]
        for stored in blobs:
            s.add(stored, self.next_seq(s.last, now))
        if blobs:
            s.touched = self.clock()
            self._wake(("s", session))
        return len(blobs)

    async def release(self, token: str) -> None:
        """Forget writer ``token`` (reaped in every session)."""
        with await self._io("release", token):
            self._lost.discard(token)
            self._filed.pop(token, None)
        await self._done("release", None)

    async def drop_lease(self, token: str) -> None:
        """Give up writer ``token``'s lease."""
        with await self._io("drop_lease", token):
            self._leases.pop(token, None)
        await self._done("drop_lease", None)

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        """``[]``: history is kept by count (the bus's ``replay``)."""
        await self._io("trim_due")
        return await self._done("trim_due", [])

    async def expire(self, now: float) -> int:
        """Delete the sessions unwritten for more than ``session_ttl`` seconds of
        :attr:`clock` (not ``now``: as a broker's keys expire by its own clock); how
        many."""
        with await self._io("expire"):
            edge = self.clock() - self.session_ttl
            idle = [name for name, s in self._sessions.items() if s.touched < edge]
            for name in idle:
                del self._sessions[name]
        return await self._done("expire", len(idle))

    # -- approvals ---------------------------------------------------------------------------

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval, or None when unknown or another session's."""
        with await self._io("approval"):
            got = self._approval(session, approval_id)
        return await self._done("approval", got)

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        """:meth:`approval` from synchronous code."""
        with self._io_sync("approval_sync"):
            got = self._approval(session, approval_id)
        return self._hooks.done_sync("approval_sync", got)

    def _approval(self, session: str, approval_id: str) -> ApprovalState | None:
        s = self._sessions.get(session)
        approval = s.approvals.get(approval_id) if s is not None else None
        if approval is None:
            return None
        meta = loads(approval.meta)
        if meta.get("s") != session:
            return None
        decision = loads(approval.decision) if approval.decision else None
        return ApprovalState(approval.status, meta, decision)

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """Decide an approval (the RESOLVE script): ``now`` (the bus's clock) decides
        whether it expired; what it writes is numbered by :attr:`wall`."""
        with await self._io("resolve"):
            got = self._resolve(session, decide)
        return await self._done("resolve", got)

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        """:meth:`resolve` from synchronous code."""
        with self._io_sync("resolve_sync"):
            got = self._resolve(session, decide)
        return self._hooks.done_sync("resolve_sync", got)

    def _resolve(self, session: str, decide: Decide) -> Resolution:
        aid, now, timer, variants = (
            decide.approval_id,
            decide.now,
            decide.by_timeout,
            decide.variants,
        )
        s = self._sessions.get(session)
        approval = s.approvals.get(aid) if s is not None else None
        if s is None or approval is None:
            return Resolution("notfound", "", 0)
        meta = loads(approval.meta)
        if meta.get("s") != session:
            return Resolution("notfound", "", 0)
        if approval.status == "r":
            return Resolution("resolved", approval.resolution, approval.seq)
        call = ("c", str(meta.get("w", "")), str(meta.get("cid", "")))
        expires = meta.get("exp")
        outcome: Literal["ok", "expired", "resolved"]
        if call in s.fenced:  # the call was closed elsewhere (a reaper): cancelled
            outcome, (res, dec, den) = "resolved", variants[2]
        elif not timer and expires is not None and now >= expires:
            outcome, (res, dec, den) = "expired", variants[1]
        else:
            outcome, (res, dec, den) = "ok", variants[0]
        wall = self.wall()
        seq = s.add(res, self.next_seq(s.last, wall))
        if den:
            s.add(den, self.next_seq(s.last, wall))
            s.fenced.add(call)
            s.open.pop(call, None)
        self._resolved(session, aid, approval, res, seq, dec)
        s.touched = self.clock()
        self._wake(("s", session))
        return Resolution(outcome, res, seq)

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        """Return when the approval is resolved (at once if it is), or after
        ``timeout``."""
        await self._io("wait_approval")

        def resolved() -> bool:
            s = self._sessions.get(session)
            approval = s.approvals.get(approval_id) if s is not None else None
            return approval is not None and approval.status == "r"

        await self._wait(("a", session, approval_id), timeout, resolved)
        await self._done("wait_approval", None)


class _Reader:
    """A subscription's reads of one session of a :class:`MemoryBroker`."""

    def __init__(self, broker: MemoryBroker, session: str) -> None:
        self._broker = broker
        self._session = session

    async def read(self, after: int, count: int) -> Chunk:
        """Up to ``count`` events after ``after`` (the READ_AFTER script)."""
        broker = self._broker
        with await broker._io("read"):
            s = broker._sessions.get(self._session)
            if s is None:
                got = Chunk("", 0, [])
            else:
                start = s.after(after)
                ck = s.checkpoint[0] if s.checkpoint else 0
                got = Chunk(s.incarnation, ck, s.events[start : start + max(count, 0)])
        return await broker._done("read", got)

    async def wait(self, after: int, timeout: float) -> None:
        """Return when the session has an event after ``after`` (at once if it has), or
        after ``timeout``."""
        broker = self._broker
        await broker._io("wait")

        def written() -> bool:
            s = broker._sessions.get(self._session)
            return broker._down or (s is not None and s.last > after)

        await broker._wait(("s", self._session), timeout, written)
        await broker._done("wait", None)

    async def aclose(self) -> None:
        """Nothing to release."""
        await asyncio.sleep(0)
