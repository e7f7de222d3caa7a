"""Tracker: what an agent framework uses to announce its tool calls.

A tracker owns one session's calls and runs on a bus. It makes handles
(:mod:`toolstream._core.handle`) and scopes (:mod:`toolstream._core.scopes`), enforces
the lifecycle (states only move forward; every announced call ends with exactly one
terminal event) and publishes through the payload policy. Every method may be called
from any thread.
"""

from __future__ import annotations

import functools
import inspect
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from itertools import islice
from typing import Any, TypeVar, cast, overload

import anyio
from typing_extensions import ParamSpec, Self

from .approvals import CANCELLED_BY, TIMEOUT_BY, Decision, decision_of
from .build import plan_of
from .bus import Bus, EventBus
from .coalescer import Coalescer
from .errors import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    BusClosed,
    BusUnavailable,
    LifecycleError,
)
from .events import (
    ENVELOPE,
    EVENT_TYPES,
    ApprovalResolved,
    CallState,
    Event,
    JSONValue,
    MessageDelta,
    MessageFinished,
    MessageStarted,
    RunFinished,
    StreamReset,
    ToolCancelled,
    ToolOutputDelta,
    ToolProgress,
)
from .handle import AWAITING, DONE, NEW, RUNNING, Ask, CallHandle
from .identifiers import MAX_ID_BYTES, check_identifier
from .jsonenc import is_utf8
from .message import MessageHandle, check_role
from .payload import PayloadPolicy, default_policy
from .publishers import hot_publisher
from .scopes import (
    Batch,
    CallScope,
    RunScope,
    bind_args,
    current_call,
    current_runs,
)
from .summaries import CANCELLED, CallInfo, Summaries, Summarizer, SummaryKind, summarize

logger = logging.getLogger("toolstream.tracker")

__all__ = ["Tracker"]

P = ParamSpec("P")
R = TypeVar("R")

# The hot paths pass these events' values by position (see ``CallHandle.progress``).
_PROGRESS = plan_of(ToolProgress)
_OUTPUT = plan_of(ToolOutputDelta)
_MESSAGE_FIELDS = {
    MessageStarted: (*ENVELOPE, "message_id", "role"),
    MessageDelta: (*ENVELOPE, "message_id", "text", "kind"),
    MessageFinished: (*ENVELOPE, "message_id"),
}
if (
    _PROGRESS.fields != (*ENVELOPE, "fraction", "current", "total", "message", "data")
    or _OUTPUT.fields != (*ENVELOPE, "text")
    or any(plan_of(cls).fields != fields for cls, fields in _MESSAGE_FIELDS.items())
):
    raise ImportError("the tracker's positional events disagree with their classes' fields")
# The EventBus publishers of the events trackers pass by position (values in field order).
# Progress has its own, guarded one (``CallHandle.progress``): it reaches
# ``_emit_values`` only on other buses.
_HOT_PUBLISHERS = {cls: hot_publisher(cls) for cls in (ToolOutputDelta, *_MESSAGE_FIELDS)}
# The builders of the classes a tracker publishes, looked up once per event on the hot
# path (each is its class's ``plan_of(cls).build``).
_BUILDERS = {cls: plan_of(cls).build for cls in EVENT_TYPES if cls is not StreamReset}
# What a tracker given no summarizer uses until its ``summarizer`` is read (never
# changed: a tracker whose summarizer is read gets one of its own).
_DEFAULT_SUMMARIES = Summaries()
#: Ended call ids remembered, to tell a reused id from a new one (at least this many;
#: up to :data:`_FINISHED_SLACK` more, dropped together).
_MAX_FINISHED_IDS = 10_000
_FINISHED_SLACK = 1_000


def _default_hidden(tool: str) -> bool:
    return tool.startswith("_")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def _check_id(name: str, value: object) -> None:
    if type(value) is str and value and value.isascii() and len(value) <= MAX_ID_BYTES:
        return  # the common case
    if not isinstance(value, str) or not value or not is_utf8(value):
        raise ValueError(f"{name} must be a non-empty string of valid text, got {value!r:.80}")
    check_identifier(name, value)


class Tracker:
    """Announces the tool calls of one session on a bus.

    ::

        async with ts.Tracker(bus, session="s1") as tracker:
            async with tracker.run():
                async with tracker.call("web_search", {"q": "anyio"}) as call:
                    call.progress(0.5, message="fetched 6 of 12 pages")
                    call.complete(results)

    Every method may be called from any thread. ``payload`` shapes what is
    published (redaction and size caps are on by default), ``summarizer`` writes
    the summaries, ``hidden(tool)`` keeps internal tools off the stream,
    ``coalesce`` (seconds) merges each call's deltas and progress into one event
    per interval, ``strict=True`` turns lifecycle violations into
    :class:`~toolstream.LifecycleError` instead of a warning, and
    ``max_subagent_depth`` bounds how deep sub-agents nest (:meth:`CallHandle.subagent`).

    A call id used again after its call ended (servers that number calls ``call_0``,
    ``call_1``... in every turn) starts a new call, published as ``"<id>#2"`` (then
    ``#3``...): clients see two calls, never two lifecycles under one id.
    """

    __slots__ = (
        "__weakref__",
        "_asked",
        "_bus_closed_logged",
        "_clock",
        "_closed",
        "_coalescer",
        "_fast",
        "_finished_ids",
        "_lock",
        "_messages",
        "_nested",
        "_open",
        "_runs",
        "_summarizer",
        "bus",
        "coalesce",
        "hidden",
        "max_subagent_depth",
        "payload",
        "session",
        "strict",
        "violations",
    )

    def __init__(
        self,
        bus: Bus,
        session: str,
        *,
        summarizer: Summarizer | None = None,
        payload: PayloadPolicy | None = None,
        hidden: Callable[[str], bool] | None = None,
        coalesce: float = 0.0,
        strict: bool = False,
        max_subagent_depth: int = 8,
    ) -> None:
        _check_id("session", session)
        if coalesce < 0:
            raise ValueError(f"coalesce must be >= 0 seconds, got {coalesce!r}")
        if (
            not isinstance(max_subagent_depth, int)
            or isinstance(max_subagent_depth, bool)
            or max_subagent_depth < 0
        ):
            raise ValueError(f"max_subagent_depth must be an int >= 0, got {max_subagent_depth!r}")
        self.bus = bus
        # EventBus: events go straight to its builders (no keywords, no checks the
        # tracker made already); other buses, and an EventBus subclass that overrides
        # publish (to log, count...), get publish(cls, **fields).
        self._fast: EventBus | None = (
            bus if isinstance(bus, EventBus) and type(bus).publish is EventBus.publish else None
        )
        #: The session every event of this tracker belongs to.
        self.session = session
        # None: the shared default, until someone reads ``summarizer`` (to register
        # templates on it); one object less per session meanwhile.
        self._summarizer: Summarizer | None = summarizer
        self.payload = payload if payload is not None else default_policy()
        self.hidden = hidden if hidden is not None else _default_hidden
        self.coalesce = float(coalesce)
        self.strict = strict
        #: How deep sub-agents may nest (a sub-agent's run is at depth 1, its own
        #: sub-agent's at 2...); starting one deeper raises ``LifecycleError``.
        self.max_subagent_depth = max_subagent_depth
        #: Lifecycle violations dropped (lenient mode).
        self.violations = 0
        # Reentrant: summarizers and payload hooks are user code and may report too.
        self._lock = threading.RLock()
        self._coalescer = Coalescer(self.coalesce, self._lock) if coalesce > 0 else None
        # Open calls by the id they were asked for (a reused id's new call included).
        self._open: dict[str, CallHandle] = {}
        # Ended call ids -> how many calls used them.
        # (A plain dict of str -> int: the garbage collector never tracks it.)
        self._finished_ids: dict[str, int] = {}
        self._runs: dict[str, RunScope] = {}
        # Sub-agents' runs open: while there are none (nearly always), a new call, message
        # or batch looks no further for the call its run is nested under.
        self._nested = 0
        # Open messages by id.
        self._messages: dict[str, MessageHandle] = {}
        # Approvals asked by this tracker's calls whose decision is not applied yet.
        self._asked: dict[str, CallHandle] = {}
        # The bus's clock (expires_at is on it); the wall clock for a bus without one.
        self._clock: Callable[[], float] = getattr(bus, "_clock", None) or time.time
        self._closed = False
        self._bus_closed_logged = False

    @property
    def summarizer(self) -> Summarizer:
        """What writes the calls' ``summary`` sentences (a :class:`Summaries` of this
        tracker's own unless one was given)."""
        if self._summarizer is None:
            self._summarizer = Summaries()
        return self._summarizer

    @summarizer.setter
    def summarizer(self, summarizer: Summarizer) -> None:
        self._summarizer = summarizer

    def __repr__(self) -> str:
        return f"<Tracker session={self.session!r} open_calls={len(self._open)}>"

    @property
    def closed(self) -> bool:
        """True after :meth:`close` / :meth:`aclose`."""
        return self._closed

    def open_calls(self) -> list[CallHandle]:
        """The announced calls not yet ended."""
        with self._lock:
            return [h for h in self._open.values() if h._state != NEW]

    # -- runs and calls --------------------------------------------------------------

    def run(self, run_id: str | None = None, *, title: str | None = None) -> RunScope:
        """A run: ``async with tracker.run():`` (calls inside join it). Started inside the
        block of one of this tracker's calls, it is that call's sub-agent
        (:meth:`CallHandle.subagent`)."""
        if run_id is not None:
            _check_id("run_id", run_id)
        return RunScope(self, run_id or _new_id("run"), title)

    def message(
        self,
        message_id: str | None = None,
        role: str = "assistant",
        *,
        run_id: str | None = None,
    ) -> MessageHandle:
        """A message of the agent (its answer text, its reasoning) in the current run
        (or ``run_id``): publishes ``message.started`` now. ``with tracker.message() as
        m: m.delta("...")``; see :class:`~toolstream.MessageHandle`.

        A ``message_id`` that is already open returns that message's handle.
        """
        if message_id is not None:
            _check_id("message_id", message_id)
        check_role(role)
        if run_id is not None:
            _check_id("run_id", run_id)
        run = self._run_for(run_id)
        with self._lock:
            key = message_id or _new_id("msg")
            existing = self._messages.get(key)
            if existing is not None:
                return existing
            handle = MessageHandle(self, key, role, run)
            if self._nested:
                handle.parent_call_id = self._run_parent(run)
            if self._closed:
                self._violation(
                    f"message {key!r}: started after the tracker closed", key, "closed", "message"
                )
                handle.finished = True
                return handle
            self._messages[key] = handle
            if self._coalescer is not None:
                self._coalescer.flush()  # what calls hold goes out before the message
            handle._emit(MessageStarted, role)
            return handle

    def create(
        self,
        tool: str,
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        parent_call_id: str | None = None,
        parent_id: str | None = None,
        batch_id: str | None = None,
        title: str | None = None,
        announce: bool = True,
    ) -> CallHandle:
        """A call whose input streams in: publishes ``tool.created`` now (unless
        ``announce=False``: then the handle's first report is its first event).

        A ``call_id`` that is already open returns that call's handle.
        """
        handle, owner = self._handle_for(tool, call_id, run_id, parent_call_id, batch_id, title)
        if owner:
            with self._lock:
                if handle._state == NEW:
                    handle.parent_id = parent_id
                    if announce:
                        handle._announce()
        return handle

    def call(
        self,
        tool: str,
        args: Any = None,
        *,
        call_id: str | None = None,
        run_id: str | None = None,
        parent_call_id: str | None = None,
        title: str | None = None,
        approval: str | bool | None = None,
        approval_timeout: float | None = None,
    ) -> CallScope:
        """``async with`` (or ``with``) one call: ``tool.started`` with ``args`` on
        entry, completed / failed / cancelled on exit. A call already announced
        with this ``call_id`` (by a provider ingest) is adopted, not duplicated.

        ``approval`` (a reason, or ``True``): a person must approve the call first.
        ``async with`` then waits for the decision: approved, the block runs (with
        the edited args, if any, in ``call.args``); denied or expired (after
        ``approval_timeout`` seconds), ``ApprovalDenied`` is raised and the block never
        runs. A call waiting for an approval it asked earlier (``await_approval``, a
        run that finished ``"interrupted"``) is adopted by its ``call_id`` the same way.
        """
        handle, owner = self._handle_for(tool, call_id, run_id, parent_call_id, None, title)
        if not owner and handle._state < RUNNING:
            owner = True  # announced (by an ingest) but not running: this scope runs it
            if handle._state == AWAITING:  # adopted by the run that resumes it
                handle.run_id = self._run_for(run_id) or handle.run_id
        return CallScope(
            self,
            handle,
            {} if args is None else args,
            owner,
            approval=approval,
            approval_timeout=approval_timeout,
        )

    @overload
    def tool(self, fn: Callable[P, R], /) -> Callable[P, R]: ...
    @overload
    def tool(
        self, fn: None = None, /, *, name: str | None = None
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def tool(
        self, fn: Callable[P, R] | None = None, /, *, name: str | None = None
    ) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorator: every invocation of the function is a tracked call (sync or async).

        Its bound arguments are the call's input and its return value the result.
        Inside an open call of the same tool (an agent loop that already tracks the
        call) it adds no second call.
        """

        def decorate(func: Callable[P, R]) -> Callable[P, R]:
            tool_name = name or str(getattr(func, "__name__", "tool"))
            tracker = self

            def inside_same_call() -> bool:
                current = current_call.get()
                return (
                    current is not None
                    and current.tool == tool_name
                    and current._tracker is tracker
                    and not current.done
                )

            if inspect.iscoroutinefunction(func):
                afunc = cast(Callable[P, Awaitable[Any]], func)

                @functools.wraps(func)
                async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                    if inside_same_call():
                        return await afunc(*args, **kwargs)
                    async with tracker.call(tool_name, bind_args(func, args, kwargs)) as call:
                        result = await afunc(*args, **kwargs)
                        call.complete(result)
                        return result

                return cast(Callable[P, R], async_wrapper)

            @functools.wraps(func)
            def sync_wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                if inside_same_call():
                    return func(*args, **kwargs)
                with tracker.call(tool_name, bind_args(func, args, kwargs)) as call:
                    result = func(*args, **kwargs)
                    call.complete(result)
                    return result

            return sync_wrapper

        if fn is not None:
            return decorate(fn)
        return decorate

    def batch(self, limit: int | None = None, *, batch_id: str | None = None) -> Batch:
        """Parallel calls, at most ``limit`` running at once: ``async with tracker.batch(3)``."""
        return Batch(self, limit, batch_id or _new_id("batch"))

    # -- approvals -------------------------------------------------------------------

    async def decision(self, approval_id: str) -> Decision:
        """Wait for the decision on ``approval_id`` (asked by a call of this tracker
        with ``await_approval``, or any approval of the session) and apply it to the
        call: approved, the call may run (with the edited args); refused, the call
        has ended ``denied``. Past the approval's expiry it is resolved by timeout."""
        handle = self._asked.get(approval_id)
        ask = None if handle is None else handle._approval
        if handle is not None and ask is not None and ask.approval_id == approval_id:
            return await self._wait(handle, ask)
        return await self._receive(approval_id, None)

    async def _wait(self, handle: CallHandle, ask: Ask) -> Decision:
        """Wait for the decision on ``ask`` and apply it to ``handle``. Cancelled while
        waiting, the approval is withdrawn (resolved by ``"cancelled"``) first."""
        try:
            decision = await self._receive(ask.approval_id, ask.deadline)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self._withdraw(handle, ask)
            raise
        with self._lock:
            handle._apply_decision(ask, decision, ended_by_bus=True)
        return decision

    async def _receive(self, approval_id: str, deadline: float | None) -> Decision:
        """The decision on ``approval_id``, waited for on the bus; at ``deadline`` (the
        approval's expiry) it is resolved by timeout here, unless a decision won."""
        bus = self.bus
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        with anyio.move_on_after(left):
            return await bus.wait_decision(self.session, approval_id)
        delay = 0.1
        while True:
            try:
                try:
                    won = await bus.resolve_approval(
                        self.session, approval_id, approved=False, by=TIMEOUT_BY
                    )
                except (ApprovalAlreadyResolved, ApprovalExpired) as exc:
                    won = exc.resolution
                known = await bus.decision(self.session, approval_id)
                return known if known is not None else decision_of(won)
            except BusUnavailable as exc:
                # A broker bus cannot arbitrate the expiry while the broker is away (a
                # decision may have won just before): the call waits until it is back.
                logger.info("approval %s expired, broker away: %s", approval_id, exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _withdraw(self, handle: CallHandle, ask: Ask) -> None:
        """The waiting call is being cancelled: resolve its approval by ``"cancelled"``
        (unless a decision won already) so the approval, too, ends exactly once."""
        try:
            await self.bus.resolve_approval(
                self.session, ask.approval_id, approved=False, by=CANCELLED_BY, ends_call=False
            )
            ended = False
        except (ApprovalAlreadyResolved, ApprovalExpired) as exc:
            ended = not exc.resolution.approved
        except BusClosed:
            ended = False
        except (ApprovalNotFound, BusUnavailable):
            # A broker bus cannot reach its broker now (or never wrote the request: its
            # outbox dropped it): the withdrawal is published after the request, and
            # arbitrated when written (first wins); the call ends at once.
            with self._lock:
                if handle._approval is ask:
                    self._withdraw_now(handle, ask)
            return
        with self._lock:
            handle._apply_decision(
                ask,
                Decision(approval_id=ask.approval_id, approved=False, by=CANCELLED_BY),
                ended_by_bus=ended,
            )

    def _withdraw_now(self, handle: CallHandle, ask: Ask) -> bool:
        """From synchronous code (the call ends while its approval is pending; lock
        held): resolve the approval by ``"cancelled"``. False when a refusal had won
        and ended the call on the bus already (it is then marked ended here)."""
        handle._approval = None
        self._asked.pop(ask.approval_id, None)
        resolve = getattr(self.bus, "resolve_approval_now", None)
        if resolve is None:
            # A broker bus arbitrates this resolution when it is written (first wins).
            handle._emit(
                ApprovalResolved,
                False,
                approval_id=ask.approval_id,
                approved=False,
                by=CANCELLED_BY,
                reason=None,
                args=None,
            )
            return True
        try:
            resolve(self.session, ask.approval_id, approved=False, by=CANCELLED_BY, ends_call=False)
        except (ApprovalAlreadyResolved, ApprovalExpired) as exc:
            if not exc.resolution.approved and not ask.running:
                handle._end_silently(CallState.DENIED)
                return False
        except (ApprovalNotFound, BusClosed):
            pass
        return True

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """End the session's open calls (cancelled, reason ``"session closed"``) and
        runs; further reports are violations."""
        with self._lock:
            if self._closed:
                return
            self._close_calls(list(self._open.values()), "session closed")
            self._finish_messages(None)
            for run in reversed(list(self._runs.values())):  # innermost first
                run._finished = True
                self._publish(
                    RunFinished,
                    run_id=run.run_id,
                    outcome="cancelled",
                    error=None,
                    reason="session closed",
                    parent_call_id=run.parent_call_id,
                )
            self._runs.clear()
            self._closed = True

    async def aclose(self) -> None:
        """Like :meth:`close`."""
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self) -> None:
        """Publish now what coalescing holds (it would go out within ``coalesce`` s)."""
        with self._lock:
            if self._coalescer is not None:
                self._coalescer.flush()

    # -- internals -------------------------------------------------------------------

    def _handle_for(
        self,
        tool: str,
        call_id: str | None,
        run_id: str | None,
        parent_call_id: str | None,
        batch_id: str | None,
        title: str | None,
    ) -> tuple[CallHandle, bool]:
        """An open call's handle (adopted: False) or a new one (True). After the tracker
        closed, a call that is already over (nothing is announced for it)."""
        _check_id("tool", tool)
        if call_id is not None:
            _check_id("call_id", call_id)
        if parent_call_id is None:
            current = current_call.get()
            if current is not None and not current.done:
                parent_call_id = current.call_id
        elif parent_call_id is not None:
            _check_id("parent_call_id", parent_call_id)
        if run_id is not None:
            _check_id("run_id", run_id)
        run = self._run_for(run_id)
        if parent_call_id is None and self._nested:
            parent_call_id = self._run_parent(run)
        shown_title = self.payload.text(title) if title else None
        with self._lock:
            key = call_id or _new_id("call")
            wire_id = key
            if call_id is not None:
                existing = self._open.get(call_id)
                if existing is not None:
                    return existing, False
                uses = self._finished_ids.get(call_id)
                if uses is not None:
                    # A reused id: a new call, told apart on the wire.
                    wire_id = f"{call_id}#{uses + 1}"
                    logger.debug("call id %r reused: publishing the new call as %r", key, wire_id)
            handle = CallHandle(
                self,
                tool,
                wire_id,
                run,
                parent_call_id,
                batch_id,
                shown_title,
                bool(self.hidden(tool)),
                given_id=call_id,
            )
            if self._closed:
                self._violation(
                    f"call {wire_id!r} ({tool}): announced after the tracker closed",
                    wire_id,
                    "closed",
                    "create",
                )
                handle._state = DONE
                handle._terminal_state = CallState.CANCELLED
                return handle, False
            self._open[key] = handle
            return handle, True

    def _run_for(self, run_id: str | None) -> str | None:
        if run_id is not None:
            return run_id
        for scope in reversed(current_runs.get()):
            t = scope._tracker
            same = t is self or (t.bus is self.bus and t.session == self.session)
            if same and not scope._finished:
                return scope.run_id
        return None

    def _run_parent(self, run_id: str | None) -> str | None:
        """The call whose sub-agent run ``run_id`` is (None for a run of its own)."""
        scope = self._runs.get(run_id) if run_id is not None else None
        return None if scope is None else scope.parent_call_id

    def _depth_of(self, handle: CallHandle) -> int:
        """How deep ``handle``'s run is nested (0: a run of its own, or none)."""
        run_id = handle.run_id
        if run_id is None:
            return 0
        scope = self._runs.get(run_id)
        return 0 if scope is None else scope.depth

    def _allowed(self, handle: CallHandle, op: str, ok: bool) -> bool:
        """Check a report against the call's state (lock held)."""
        if ok and not self._closed:
            return True
        state = handle.state
        if self._closed and handle._state != DONE:
            message = f"call {handle.call_id!r} ({handle.tool}): {op}() after the tracker closed"
        else:
            message = (
                f"call {handle.call_id!r} ({handle.tool}) is "
                f"{state.value if state is not None else 'not announced'}: {op}() is not allowed"
            )
        self._violation(message, handle.call_id, str(state), op)
        return False

    def _violation(self, message: str, call_id: str, state: str, op: str) -> None:
        if self.strict:
            raise LifecycleError(message, call_id=call_id, state=state, attempted=op)
        self.violations += 1
        logger.warning("lifecycle violation dropped: %s", message)

    def _forget(self, handle: CallHandle) -> None:
        key = handle.given_id or handle.call_id
        if self._open.get(key) is handle:
            del self._open[key]
        if handle.given_id is not None:
            finished = self._finished_ids
            finished[key] = finished.pop(key, 0) + 1  # the newest last
            if len(finished) > _MAX_FINISHED_IDS + _FINISHED_SLACK:
                # The oldest go a slack at a time, into a new dict: deleting them one
                # at a time from the front left holes that every next(iter()) walked
                # over again (~9% of a call's cost once 10,000 ids had ended).
                self._finished_ids = dict(
                    islice(finished.items(), len(finished) - _MAX_FINISHED_IDS, None)
                )

    def _close_calls(self, handles: Iterable[CallHandle], reason: str) -> None:
        for handle in list(handles):
            if handle._state == NEW:
                handle._end_silently(CallState.CANCELLED)
            elif handle._state != DONE:
                summary = None if handle.hidden else self._summary(CANCELLED, handle, reason)
                handle._finish_locked(
                    CallState.CANCELLED, ToolCancelled, reason=reason, summary=summary
                )

    def _finish_messages(self, run_id: str | None) -> None:
        """Finish the open messages of ``run_id`` (all of them: None; lock held)."""
        for handle in list(self._messages.values()):
            if run_id is None or handle.run_id == run_id:
                handle._finish_locked()

    def _emit(self, cls: type[Event], handle: CallHandle, fields: dict[str, Any]) -> Event | None:
        """Publish one event of ``handle`` (lock held); returns it (None: bus closed)."""
        fields["session"] = self.session
        fields["run_id"] = handle.run_id
        fields["call_id"] = handle.call_id
        fields["tool"] = handle.tool
        fields["parent_call_id"] = handle.parent_call_id
        fast = self._fast
        try:
            if fast is not None:
                return fast._publish(_BUILDERS[cls], self.session, fields)
            return self.bus.publish(cls, **fields)
        except BusClosed:
            self._bus_gone()
            return None

    def _emit_values(self, cls: type[Event], values: tuple[Any, ...]) -> None:
        """Publish a progress, output-text or message event given as its values in field
        order (the hot paths; lock held)."""
        fast = self._fast
        try:
            if fast is not None:
                _HOT_PUBLISHERS[cls](fast, *values)
            else:
                fields = plan_of(cls).fields
                self.bus.publish(cls, **dict(zip(fields, values, strict=True)))
        except BusClosed:
            self._bus_gone()

    def _publish(self, cls: type[Event], **fields: Any) -> None:
        """Publish a run or batch event, after what coalescing holds."""
        with self._lock:
            if self._coalescer is not None:
                self._coalescer.flush()
            try:
                self.bus.publish(cls, session=self.session, **fields)
            except BusClosed:
                self._bus_gone()

    def _bus_gone(self) -> None:
        if self.strict:
            raise BusClosed(f"tracker {self.session!r}: the bus is closed")
        if not self._bus_closed_logged:
            self._bus_closed_logged = True
            logger.warning("tracker %r: the bus is closed; events are dropped", self.session)

    def _value(self, value: Any) -> JSONValue:
        try:
            return self.payload.value(value)
        except Exception as exc:  # a payload that cannot be shaped still publishes
            logger.warning("could not convert a payload (%s); publishing a marker", exc)
            return {"unserializable": type(value).__name__}

    def _summary(
        self,
        kind: SummaryKind,
        handle: CallHandle,
        detail: Any,
        *,
        args: JSONValue | None = None,
        valid: bool | None = None,
    ) -> str | None:
        """A summary of ``handle``: the summarizer sees what is published (redacted
        arguments and result), and its text goes through the payload policy."""
        info = CallInfo(
            call_id=handle.call_id,
            tool=handle.tool,
            args=handle._published_args if args is None else args,
            args_valid=handle.args_valid if valid is None else valid,
            run_id=handle.run_id,
            title=handle.title,
            duration_s=handle.duration_s,
        )
        summarizer = self._summarizer if self._summarizer is not None else _DEFAULT_SUMMARIES
        return self.payload.text(summarize(summarizer, kind, info, detail))
