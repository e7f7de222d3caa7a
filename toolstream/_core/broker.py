"""What every broker-backed bus shares: a subscription fed by a reader task.

A broker bus (Redis Streams, NATS JetStream...) reads a session from its broker on a
connection of each subscription's own. :class:`FedSubscription` is the part that does
not depend on the broker: it learns where it starts (the bus reads what it retained,
:func:`~toolstream._core.subscription.start_position` decides), then a reader task
appends what the broker delivers to the subscription's own log, where the usual
machinery (filters, coalescing, cut-on-slow, batches) serves it. A bus implements two
coroutines, :meth:`FedSubscription._read_start` and :meth:`FedSubscription._read_loop`.

Broker client libraries are asyncio-only, so these subscriptions are too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import attrs

from .errors import ApprovalNotFound, BusUnavailable
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    StreamReset,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolDenied,
    ToolFailed,
    ToolQueued,
    ToolReady,
    ToolStarted,
)
from .start import Retained, StartRequest, start_position
from .subscription import Feeder, FeederStats, Log, Subscription, wake_all
from .view import LiveView

logger = logging.getLogger("toolstream.broker")

__all__ = [
    "ENDS_CALL",
    "OPENS_CALL",
    "BrokerStart",
    "FedSubscription",
    "SessionState",
    "due_approvals",
    "expire_due",
    "retry_until",
    "stop_task",
]

#: Events that open a call (a broker bus registers the call with its writer's lease
#: before writing one, so a reaper can close it) and events that end it.
OPENS_CALL = (ToolCreated, ToolReady, ToolQueued, ToolStarted)
ENDS_CALL = (ToolCompleted, ToolFailed, ToolCancelled, ToolDenied)

E_co = TypeVar("E_co", bound=Event, covariant=True)
T = TypeVar("T")


@attrs.frozen(kw_only=True)
class BrokerStart:
    """What a broker bus read of a session to start a subscription: its ``epoch``, what
    it ``retained``, where a subscription without a cursor starts (``live_seq``) and
    the newest position (``last_seq``)."""

    epoch: str
    retained: Retained
    live_seq: int
    last_seq: int


@attrs.frozen
class SessionState:
    """A session as a broker bus read it in one consistent step: the broker's ``epoch``,
    the ``last`` position, the ``floor`` (cursors below it cannot be served: trimmed,
    or before the checkpoint), the state ``base`` at the checkpoint (or empty), the
    retained ``events`` after it with their positions, and the session's
    ``incarnation`` (a broker that keeps one per session: a new one means its data was
    lost)."""

    epoch: str
    last: int
    floor: int
    base: LiveView
    events: list[tuple[int, Event]]
    incarnation: str = ""

    def folded(self) -> LiveView:
        """The state after every retained event (advances the base view: call once)."""
        view = self.base
        for _, event in self.events:
            view.apply(event)
        return view

    def retained(self) -> Retained:
        """What a subscription starts from."""
        return Retained(
            [event for _, event in self.events],
            [seq for seq, _ in self.events],
            self.base,
            self.floor,
        )


def due_approvals(state: SessionState, now: float) -> list[str]:
    """Ids of the session's approvals still pending in ``state`` and past their expiry
    at ``now`` (the checkpoint's open calls, then the events after it)."""
    pending: dict[str, float | None] = {}
    of_call: dict[str, str] = {}
    for call in state.base.open_calls():
        if call.approval is not None:
            pending[call.approval.approval_id] = call.approval.expires_at
            of_call[call.call_id] = call.approval.approval_id
    for _, event in state.events:
        if isinstance(event, ApprovalRequested):
            pending[event.approval_id] = event.expires_at
            of_call[event.call_id] = event.approval_id
        elif isinstance(event, ApprovalResolved):
            pending.pop(event.approval_id, None)
        elif isinstance(event, ENDS_CALL):
            pending.pop(of_call.pop(event.call_id, ""), None)
    return [aid for aid, expires in pending.items() if expires is not None and now >= expires]


async def expire_due(
    state: SessionState, now: float, decide: Callable[[str], Awaitable[object]]
) -> bool:
    """Touch every approval of ``state`` past its expiry with ``decide(approval_id)`` (a
    bus's ``decision``, which resolves an expired approval by ``"timeout"`` first), as
    docs/approvals.md promises for a snapshot and a subscription's start. True when
    there were any: the caller reads the session again."""
    due = due_approvals(state, now)
    for approval_id in due:
        try:
            await decide(approval_id)
        except (ApprovalNotFound, BusUnavailable) as exc:  # gone meanwhile, or unreachable
            logger.info("expiring approval %s skipped: %s", approval_id, exc)
    return bool(due)


async def retry_until(
    read: Callable[[], Awaitable[T]],
    retryable: tuple[type[BaseException], ...],
    deadline: float,
    what: str,
) -> T:
    """``await read()``, retried with backoff on ``retryable`` errors until ``deadline``
    (``time.monotonic()``), then :class:`~toolstream.BusUnavailable` naming ``what``."""
    delay = 0.05
    while True:
        try:
            return await read()
        except retryable as exc:
            if time.monotonic() + delay > deadline:
                raise BusUnavailable(f"cannot reach {what}: {exc}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


class FedSubscription(Subscription[E_co]):
    """A :class:`~toolstream.Subscription` with a feeder and a log of its own, filled by
    a reader task (asyncio). It learns where it starts on its first read (or
    ``await sub.prepare()``) and releases its reader when closed or cut."""

    def __init__(
        self,
        session: str,
        *,
        request: StartRequest,
        stats: FeederStats,
        reset_bytes: int,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(
            Feeder(stats), request.types, session, request.run, request.buffer, request.overflow
        )
        self._request = request
        self._reset_bytes = reset_bytes
        self._clock = clock
        self._prepared = False
        self._prep_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._task_loop: asyncio.AbstractEventLoop | None = None

    # -- what a broker bus implements -----------------------------------------------------

    async def _read_start(self) -> BrokerStart:  # pragma: no cover - abstract
        """Read what the broker retained of the session (``BusUnavailable`` when it
        cannot be reached in time)."""
        raise NotImplementedError

    async def _read_loop(self) -> None:  # pragma: no cover - abstract
        """Read the session after where the subscription started, handing each batch to
        :meth:`_append` (stop when it returns False), until the subscription closes."""
        raise NotImplementedError

    # -- starting ----------------------------------------------------------------------

    async def _read_touched(
        self,
        read: Callable[[], Awaitable[SessionState]],
        expire: Callable[[SessionState], Awaitable[bool]],
    ) -> tuple[SessionState, bool]:
        """The session as ``read`` gives it, its approvals past their expiry touched
        first when the subscription starts with a snapshot or from a cursor (as on
        ``EventBus``): ``(state, True)`` when ``expire`` resolved any — the session is
        then read again, and the start (a reset) shows them resolved rather than pending
        with their resolutions delivered just after."""
        state = await read()
        request = self._request
        if (request.snapshot or request.after is not None) and await expire(state):
            return await read(), True
        return state, False

    async def prepare(self) -> None:
        """Read where the subscription starts from the broker and start its reader.
        ``BusUnavailable`` if the broker cannot be reached in time."""
        if self._prepared:
            return
        async with self._prep_lock:
            if self._prepared or self.closed:
                return
            begin = await self._read_start()
            self._begin_at(begin)
            self._prepared = True
            loop = asyncio.get_running_loop()
            self._task_loop = loop
            if not self.closed:
                self._task = loop.create_task(self._read_loop(), name="toolstream-reader")

    def _begin_at(self, begin: BrokerStart) -> None:
        request = self._request
        retained = begin.retained
        start = start_position(
            request,
            self._kinds_match,
            retained,
            session=self.session or "",
            epoch=begin.epoch,
            live_seq=begin.live_seq,
            last_seq=begin.last_seq,
            ts=self._clock(),
            reset_bytes=self._reset_bytes,
        )
        if start.reset is not None and request.after is not None:
            self._feeder.stats.resets += 1
        log = Log(self.session, 0, None)
        tail = list(retained.events[start.index :])
        replay = len(tail) if request.after is not None and start.reset is None else 0
        with self._feeder.lock:
            if not start.done:
                log.events.extend(tail)
            self._begin(log, start, cursor=0, replay_end=replay)

    async def _fill(self, hand_out: bool = False) -> Any:
        if not self._prepared:
            await self.prepare()
        return await super()._fill(hand_out)  # type: ignore[call-overload]

    # -- what the reader hands over ------------------------------------------------------

    def _append(self, events: list[Event]) -> bool:
        """Add events read from the broker; False when the subscription stops reading
        (cut, closed)."""
        log = self._log
        assert log is not None
        feeder = self._feeder
        with feeder.lock:
            if self.closed:
                return False
            done = self._cursor - log.base
            if done > 0:  # drop what the consumer already took
                del log.events[:done]
                log.base = self._cursor
            log.events.extend(events)
            over = log.end - max(self._cursor, self._replay_end) > self._limit
            if over:
                feeder.cut(self, log)
            wakes = log.take_waiters() + feeder.take_wakes()
        wake_all(wakes)
        return not over

    def _push_reset(self, reset: StreamReset) -> None:
        """Deliver ``reset`` next (the broker lost the session's data)."""
        log = self._log
        assert log is not None
        with self._feeder.lock:
            if self.run is not None:  # the run's sub-agents the broker still knows
                self._tree.update(r.run_id for r in reset.snapshot.runs)
            self._pending = [*self._pending, reset]  # replaced: the empty one is shared
            wakes = log.take_waiters() + self._feeder.take_wakes()
        wake_all(wakes)

    def _cut_now(self, why: str) -> None:
        """Cut the subscription (its consumer resumes, or gets a reset)."""
        log = self._log
        assert log is not None
        with self._feeder.lock:
            self._feeder.cut(self, log)
            wakes = log.take_waiters() + self._feeder.take_wakes()
        wake_all(wakes)
        logger.info("subscription to %s cut: %s", self.session, why)

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Release the subscription: its reader stops and its connection closes."""
        super().close()
        task, loop = self._task, self._task_loop
        if task is not None and loop is not None and not task.done():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                _cancel_until_done(task, loop)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_cancel_until_done, task, loop)

    async def aclose(self) -> None:
        """Release the subscription and wait until its reader has ended."""
        self.close()
        task = self._task
        if task is not None and self._task_loop is asyncio.get_running_loop():
            await stop_task(task)
            if not task.cancelled() and task.exception() is not None:
                logger.error("subscription reader failed: %r", task.exception())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# Python 3.10/3.11's ``wait_for`` (inside client libraries' sends) can swallow a
# cancellation that lands as a write completes, which would leave a task blocked in a
# read for seconds: both ways of stopping a task cancel it again until it has ended.


def _cancel_until_done(task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Cancel ``task`` now and every 50 ms until it ends (without waiting for it)."""
    if not task.done():
        task.cancel()
        loop.call_later(0.05, _cancel_until_done, task, loop)


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` until it ends, and wait for that."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.05)
