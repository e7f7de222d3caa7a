"""CallHandle: what a framework reports about one tool call.

Handles *report* what happened to a call; they do not control the tool. Every method may
be called from any thread; each takes the tracker's lock, checks the call's state
(:meth:`CallHandle._report`), and publishes through the tracker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .approvals import Decision, check_timeout, denied_summary, new_approval_id
from .coalescer import NOTHING
from .errors import BusClosed, LifecycleError
from .events import (
    ApprovalRequested,
    CallState,
    ErrorInfo,
    JSONValue,
    ToolArgsDelta,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolDenied,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolQueued,
    ToolReady,
    ToolStarted,
)
from .jsonenc import safe_text
from .publishers import hot_publisher
from .redaction import ArgsRedactor, TextRedactor
from .subagents import end_subruns
from .summaries import APPROVAL, CANCELLED, ERROR, RESULT, START

if TYPE_CHECKING:
    from .events import Event
    from .scopes import RunScope
    from .tracker import Tracker

__all__ = ["CallHandle"]

UNSET: Final[Any] = object()

# Internal state codes: order is the lifecycle order.
NEW, CREATED, READY, AWAITING, QUEUED, RUNNING, DONE = -1, 0, 1, 2, 3, 4, 5

# An EventBus's publisher of progress events (values in ToolProgress's field order),
# which first checks, in the bus's lock, that the call is still hot (``CallHandle._hot``).
_PUBLISH_PROGRESS = hot_publisher(ToolProgress, guarded=True)

#: The events that may open a call, and so carry its title.
_TITLED = frozenset({ToolCreated, ToolReady, ToolQueued, ToolStarted})

_STATE_NAMES = {
    NEW: None,
    CREATED: CallState.CREATED,
    READY: CallState.READY,
    AWAITING: CallState.AWAITING_APPROVAL,
    QUEUED: CallState.QUEUED,
    RUNNING: CallState.RUNNING,
}


class Ask:
    """An approval this call asked for and whose decision it has not applied yet."""

    __slots__ = ("approval_id", "deadline", "expires_at", "request_id", "running")

    def __init__(
        self,
        approval_id: str,
        request_id: str | None,
        running: bool,
        expires_at: float | None,
        deadline: float | None,
    ) -> None:
        self.approval_id = approval_id
        #: The id of the ``tool.approval.requested`` event (where the decision follows).
        self.request_id = request_id
        #: Asked from inside the running call (the call goes on whatever the decision).
        self.running = running
        self.expires_at = expires_at
        #: ``time.monotonic()`` at which the waiting tracker resolves it by timeout.
        self.deadline = deadline


class CallHandle:
    """One tool call, as reported to the tracker. Obtain with :meth:`Tracker.create`,
    :meth:`Tracker.call` or a provider ingest.

    Methods report what happened: ``args_delta``, ``ready``, ``queue``, ``start``,
    ``progress``, ``output_delta``, ``output_partial`` and one of ``complete``,
    ``fail`` or ``cancel``. A report the call's state forbids is a lifecycle
    violation: dropped with a warning (or ``LifecycleError`` on a strict tracker).
    """

    __slots__ = (
        "_approval",
        "_args",
        "_args_parts",
        "_args_redactor",
        "_args_sent",
        "_hot",
        "_out_redactor",
        "_published_args",
        "_started",
        "_state",
        "_subruns",
        "_terminal_state",
        "_tracker",
        "args_valid",
        "batch_id",
        "call_id",
        "given_id",
        "hidden",
        "parent_call_id",
        "parent_id",
        "run_id",
        "title",
        "tool",
    )

    def __init__(
        self,
        tracker: Tracker,
        tool: str,
        call_id: str,
        run_id: str | None,
        parent_call_id: str | None,
        batch_id: str | None,
        title: str | None,
        hidden: bool,
        given_id: str | None = None,
    ) -> None:
        self._tracker = tracker
        #: The tool's name.
        self.tool = tool
        #: The correlation id shared by every event of the call.
        self.call_id = call_id
        #: The id the framework gave (``None`` when generated). ``call_id`` is the same,
        #: except for a call that reused the id of an ended call: ``"<id>#2"``...
        self.given_id = given_id
        #: The run the call belongs to, if any.
        self.run_id = run_id
        #: The call whose sub-agent made this one, if any.
        self.parent_call_id = parent_call_id
        #: The batch of parallel calls this call is part of, if any.
        self.batch_id = batch_id
        #: A short title for the call, published with its first event.
        self.title = title
        #: True for a hidden tool: tracked, never published.
        self.hidden = hidden
        #: False when the streamed input was not valid JSON (``args`` is then the text).
        self.args_valid = True
        #: The assistant message the call belongs to, if known.
        self.parent_id: str | None = None
        self._state = NEW
        # True while progress may skip the tracker's lock: running, tool.started out,
        # published as it comes (no coalescing, an EventBus). Set after tool.started is
        # published and cleared before anything ends the call, both in the tracker's
        # lock; read again in the bus's lock by the guarded publisher, so a progress
        # never precedes tool.started nor follows the terminal event.
        self._hot = False
        self._terminal_state = CallState.COMPLETED
        self._args: Any = UNSET
        # The shared empty tuple until the first fragment: most calls get their
        # arguments whole, and an empty list would be one more object to trace.
        self._args_parts: list[str] | tuple[()] = ()
        self._args_sent = False
        self._published_args: JSONValue = None
        self._args_redactor: ArgsRedactor | None = None
        self._out_redactor: TextRedactor | None = None
        self._started: float | None = None
        self._approval: Ask | None = None
        # The runs of this call's sub-agents not yet over (None: it never had one, what
        # nearly every call pays for nesting: this slot, read once at its end).
        self._subruns: list[RunScope] | None = None

    def __repr__(self) -> str:
        return f"<CallHandle {self.tool!r} call_id={self.call_id!r} state={self.state}>"

    # -- reading ---------------------------------------------------------------------

    @property
    def state(self) -> CallState | None:
        """The call's state; None before its first event is published."""
        if self._state == DONE:
            return self._terminal_state
        return _STATE_NAMES[self._state]

    @property
    def done(self) -> bool:
        """True once the call reached a terminal state."""
        return self._state == DONE

    @property
    def args(self) -> Any:
        """The call's real input: parsed JSON, the raw text if invalid, ``{}`` if none."""
        if self._args is UNSET:
            text = "".join(self._args_parts)
            if not text.strip():
                return {}
            try:
                return json.loads(text)
            except ValueError:
                return text
        return self._args

    @property
    def args_text(self) -> str:
        """The streamed input text so far (raw: only the tool sees it)."""
        return "".join(self._args_parts)

    @property
    def approval_id(self) -> str | None:
        """The id of the approval this call waits for, if any."""
        ask = self._approval
        return None if ask is None else ask.approval_id

    @property
    def duration_s(self) -> float | None:
        """Seconds since the call started running (None before)."""
        started = self._started
        return None if started is None else time.monotonic() - started

    # -- reporting ---------------------------------------------------------------------

    def _report(self, op: str, allowed: bool, *, runs: bool = False) -> bool:
        """What every report checks first (the tracker's lock held): the tracker is open
        and the call's state allows ``op`` (else a violation: False). A report that
        implies the call runs (``runs``) starts it first."""
        t = self._tracker
        if (runs or op == "start" or op == "queue") and self._gated():
            allowed = False
        if not (allowed and not t._closed) and not t._allowed(self, op, allowed):
            return False
        if runs and self._state < RUNNING:
            self._start_locked(UNSET, None)
        return True

    def args_delta(self, text: str) -> None:
        """A fragment of the call's JSON input, as the model writes it."""
        if not isinstance(text, str):
            raise TypeError(f"args_delta() takes text, not {type(text).__name__}")
        t = self._tracker
        with t._lock:
            if not self._report("args_delta", self._state <= CREATED):
                return
            self._announce()
            parts = self._args_parts
            if not isinstance(parts, list):
                parts = self._args_parts = []
            parts.append(text)
            if self.hidden or not text:
                return
            redactor = self._args_redactor
            if redactor is None:
                redactor = self._args_redactor = t.payload.args_redactor()
            safe = redactor.feed(text)
            if not safe:
                return
            if not safe.isascii():
                safe = safe_text(safe)  # a lone surrogate cannot go on the wire
            coalescer = t._coalescer
            if coalescer is not None:
                coalescer.args(self, safe)
            else:
                self._publish_args_text(safe)

    def ready(self, args: Any = UNSET) -> None:
        """The whole input is known: parses the streamed text, or takes ``args``."""
        t = self._tracker
        published, valid, summary = self._prepare_args(args)
        with t._lock:
            if not self._report("ready", self._state <= CREATED):
                return
            self._set_args(args)
            self._flush()
            first = self._state == NEW
            self._state = READY
            if not self.hidden:
                self._args_sent = True
                self._emit(ToolReady, first, args=published, args_valid=valid, summary=summary)

    def queue(self, *, batch_id: str | None = None, position: int | None = None) -> None:
        """The call waits for a concurrency slot (usually reported by a :class:`Batch`)."""
        with self._tracker._lock:
            if not self._report("queue", self._state < QUEUED):
                return
            self._flush()
            if batch_id is not None:
                self.batch_id = batch_id
            first = self._state == NEW
            self._state = QUEUED
            if not self.hidden:
                self._emit(ToolQueued, first, batch_id=self.batch_id, position=position)

    def start(self, args: Any = UNSET) -> None:
        """Execution began. ``args``: the input, for a call whose input was not reported."""
        t = self._tracker
        prepared = None if self._args_sent else self._prepare_args(args)
        with t._lock:
            if self._report("start", self._state < RUNNING):
                self._start_locked(args, prepared)

    def _start_locked(self, args: Any, prepared: tuple[JSONValue, bool, str | None] | None) -> None:
        """Publish ``tool.started`` (lock held; the state allows it)."""
        self._flush()
        first = self._state == NEW
        if self._state == CREATED and self._args_parts and not self.hidden:
            # Input streamed but never declared complete: say so before it runs.
            published, valid, summary = prepared or self._prepare_args(UNSET)
            self._set_args(UNSET)
            self._state = READY
            self._args_sent = True
            self._emit(ToolReady, False, args=published, args_valid=valid, summary=summary)
            prepared = None
        self._set_args(args)
        self._state = RUNNING
        self._started = time.monotonic()
        if self.hidden:
            return
        published, summary = None, None  # the input was shown already
        if not self._args_sent:
            published, _, summary = prepared or self._prepare_args(args)
            self._args_sent = True
        # Every field given: the builder's short path.
        self._emit(ToolStarted, first, args=published, summary=summary)
        t = self._tracker
        self._hot = t._fast is not None and t._coalescer is None

    def progress(
        self,
        fraction: float | None = None,
        *,
        current: float | None = None,
        total: float | None = None,
        message: str | None = None,
        data: Any = None,
    ) -> None:
        """Progress from inside the running tool: ``fraction`` in 0..1, or ``current`` of
        ``total``, a ``message``, any JSON ``data``. Implies the call is running."""
        if current is None and total is None and type(fraction) is float and 0.0 <= fraction <= 1.0:
            pass  # the common case, already safe
        else:
            fraction = _fraction(fraction, current, total)
            current = _number(current)
            total = _number(total)
        t = self._tracker
        hidden = self.hidden
        if not hidden:
            if message is not None:
                # A repeated short message's published form, as payload.text() keeps it
                # (looked up here: this is the hot path of a running tool).
                known = t.payload._text_cache.get(message) if type(message) is str else None
                message = known if known is not None else t.payload.text(message)
            if data is not None:
                data = t._value(data)
        if not self._hot:
            # Not on the lock-free path (yet): the call's state checked in the tracker's
            # lock (starting it if needed: progress implies running).
            lock = t._lock
            lock.acquire()  # not ``with``, and _report inlined: a hot path too
            try:
                state = self._state
                if state >= DONE or t._closed or (state == AWAITING and self._gated()):
                    t._allowed(self, "progress", state < DONE and not self._gated())
                    return
                if state < RUNNING:
                    self._start_locked(UNSET, None)
                if hidden:
                    return
                coalescer = t._coalescer
                if coalescer is not None:
                    coalescer.progress(
                        self,
                        {
                            "fraction": fraction,
                            "current": current,
                            "total": total,
                            "message": message,
                            "data": data,
                        },
                    )
                    return
                if t._fast is None:  # another bus: its publish(), the values in field order
                    envelope = (
                        t.session,
                        self.run_id,
                        self.call_id,
                        self.tool,
                        self.parent_call_id,
                    )
                    t._emit_values(
                        ToolProgress, (*envelope, fraction, current, total, message, data)
                    )
                    return
                # Running and published as it comes: the call is hot now.
            finally:
                lock.release()
        try:  # the publisher made for ToolProgress, checking the call in the bus's lock
            if (
                _PUBLISH_PROGRESS(
                    t._fast,
                    self,
                    t.session,
                    self.run_id,
                    self.call_id,
                    self.tool,
                    self.parent_call_id,
                    fraction,
                    current,
                    total,
                    message,
                    data,
                )
                is not None
            ):
                return
        except BusClosed:
            with t._lock:
                t._bus_gone()
            return
        with t._lock:  # the call ended meanwhile: this report came after its end
            t._allowed(self, "progress", False)

    def output_delta(self, text: str) -> None:
        """Text appended to the call's output so far. Implies the call is running."""
        if not isinstance(text, str):
            raise TypeError(f"output_delta() takes text, not {type(text).__name__}")
        t = self._tracker
        with t._lock:
            if not self._report("output_delta", self._state < DONE, runs=True):
                return
            if self.hidden or not text:
                return
            if not text.isascii():
                text = safe_text(text)  # a lone surrogate cannot go on the wire
            redactor = self._out_redactor
            if redactor is None:
                redactor = self._out_redactor = t.payload.text_redactor()
            safe = redactor.feed(text)
            if not safe:
                return
            coalescer = t._coalescer
            if coalescer is not None:
                coalescer.output(self, safe)
            else:
                self._publish_output_text(safe)

    def output_partial(self, value: Any) -> None:
        """A JSON value that replaces the partial output so far. Implies running."""
        t = self._tracker
        published = None if self.hidden else t._value(value)
        with t._lock:
            if not self._report("output_partial", self._state < DONE, runs=True):
                return
            if self.hidden:
                return
            coalescer = t._coalescer
            if coalescer is not None:
                coalescer.partial(self, published)
            else:
                self._emit(ToolOutputPartial, False, value=published)

    def complete(self, result: Any = None) -> None:
        """The tool returned ``result``. Terminal."""
        t = self._tracker
        published: JSONValue = None
        summary = None
        if not self.hidden:
            published = t._value(result)
            summary = t._summary(RESULT, self, published)
        with t._lock:
            if self._report("complete", self._state < DONE, runs=True):
                self._finish_locked(
                    CallState.COMPLETED, ToolCompleted, result=published, summary=summary
                )

    def fail(
        self,
        error: BaseException | str | ErrorInfo | Mapping[str, Any],
        *,
        retryable: bool | None = None,
    ) -> None:
        """The tool failed with ``error`` (an exception, a message...). Terminal."""
        t = self._tracker
        info = t.payload.error(error)
        if retryable is not None:
            info = ErrorInfo(type=info.type, message=info.message, retryable=retryable)
        summary = None if self.hidden else t._summary(ERROR, self, info)
        with t._lock:
            if self._report("fail", self._state < DONE):
                self._finish_locked(CallState.FAILED, ToolFailed, error=info, summary=summary)

    def cancel(self, reason: str | None = None) -> None:
        """The call was cancelled (``reason`` says why). Terminal."""
        t = self._tracker
        published = t.payload.text(reason)
        summary = None if self.hidden else t._summary(CANCELLED, self, published)
        with t._lock:
            if self._report("cancel", self._state < DONE):
                self._finish_locked(
                    CallState.CANCELLED, ToolCancelled, reason=published, summary=summary
                )

    def deny(self, reason: str | None = None, *, by: str | None = None) -> None:
        """A person refused the call, and the refusal ends it: ``tool.denied``
        (``reason`` says why, ``by`` who). Terminal.

        For a refusal decided outside toolstream's approvals, or one a framework acts on
        itself (an approval asked from inside the running tool, whose tool stops when it
        is refused): a call waiting for a toolstream approval ends ``denied`` on its
        own when the approval is refused."""
        t = self._tracker
        shown_reason = t.payload.text(reason)
        shown_by = t.payload.text(by)
        summary = None
        if not self.hidden:
            summary = t.payload.text(denied_summary(self.tool, by, reason))
        with t._lock:
            if self._report("deny", self._state < DONE):
                self._finish_locked(
                    CallState.DENIED, ToolDenied, reason=shown_reason, by=shown_by, summary=summary
                )

    # -- sub-agents --------------------------------------------------------------------

    def subagent(self, name: str | None = None, *, run_id: str | None = None) -> RunScope:
        """A sub-agent of this call: a run nested under it (``async with`` or ``with``,
        or ``start()`` / ``finish()`` by hand), for a tool that is itself an agent.

        Its ``run.started`` carries this call (``parent_call_id``), this call's run
        (``parent_run_id``) and ``agent`` (``name``; this call's tool by default); the
        calls, messages and batches made inside it carry this call as their
        ``parent_call_id``. Starting it implies the call runs. This call's end ends the
        sub-run first if it is still open (``cancelled``, ``RunFinished.reason`` saying
        why), with its open calls — children before their parent, one terminal each.

        A ``tracker.run()`` started inside this call's block nests the same way.
        Sub-runs nest to ``Tracker(max_subagent_depth=...)`` levels; starting one deeper
        raises :class:`~toolstream.LifecycleError` naming the depth, strict or not.
        """
        from .scopes import RunScope
        from .tracker import _check_id, _new_id

        if name is not None:
            _check_id("agent", name)
        if run_id is not None:
            _check_id("run_id", run_id)
        return RunScope(self._tracker, run_id or _new_id("run"), None, parent=self, agent=name)

    # -- approval ----------------------------------------------------------------------

    def await_approval(self, reason: str | None = None, timeout: float | None = None) -> str:
        """Ask a person to approve this call, without waiting: publishes
        ``tool.approval.requested`` and returns its ``approval_id``.

        Before the call runs, the call is then ``awaiting_approval`` and may not start
        until the decision is applied (``async with tracker.call(..., call_id=...)``
        adopts it and waits, or ``await tracker.decision(approval_id)``); a run can
        finish ``"interrupted"`` meanwhile and leave it open. From inside a running
        call, the call stays running. ``timeout`` (seconds) sets ``expires_at``.

        Asking where it cannot be (an ended or queued call, an approval already
        pending, a hidden tool) raises ``LifecycleError`` even on a lenient tracker:
        a tool must never run unapproved because a request was dropped.
        """
        return self._ask(reason, timeout).approval_id

    async def request_approval(
        self, reason: str | None = None, timeout: float | None = None
    ) -> Decision:
        """From inside the running tool: ask a person and wait for the decision. The
        call stays running and the tool decides what to do; on expiry the decision is
        ``approved=False, by="timeout"``."""
        if self._state != RUNNING:
            raise LifecycleError(
                f"call {self.call_id!r} ({self.tool}) is {self.state}: request_approval() "
                "is for a running call (use approval= on tracker.call, or await_approval())",
                call_id=self.call_id,
                state=str(self.state),
                attempted="request_approval",
            )
        ask = self._ask(reason, timeout)
        return await self._tracker._wait(self, ask)

    def _gated(self) -> bool:
        """True while the call waits for an approval before it may run."""
        ask = self._approval
        return ask is not None and not ask.running

    def _ask(self, reason: str | None, timeout: float | None) -> Ask:
        seconds = check_timeout(timeout)
        t = self._tracker
        if self.hidden:
            raise LifecycleError(
                f"call {self.call_id!r} ({self.tool}) is hidden: nobody could approve it",
                call_id=self.call_id,
                state=str(self.state),
                attempted="await_approval",
            )
        if self._state < READY:
            self.ready()
        shown = t.payload.text(reason)
        with t._lock:
            state = self._state
            if state in (DONE, QUEUED, NEW) or t._closed or self._approval is not None:
                why = (
                    "an approval is pending already"
                    if self._approval is not None
                    else "the tracker is closed"
                    if t._closed
                    else f"it is {self.state}"
                )
                raise LifecycleError(
                    f"call {self.call_id!r} ({self.tool}) cannot ask for approval: {why}",
                    call_id=self.call_id,
                    state=str(self.state),
                    attempted="await_approval",
                )
            self._flush()
            running = state == RUNNING
            approval_id = new_approval_id()
            expires_at = None if seconds is None else t._clock() + seconds
            deadline = None if seconds is None else time.monotonic() + seconds
            summary = t._summary(APPROVAL, self, shown)
            if not running:
                self._state = AWAITING
            event = self._emit(
                ApprovalRequested,
                False,
                approval_id=approval_id,
                args=self._published_args,
                reason=shown,
                summary=summary,
                expires_at=expires_at,
                running=running,
            )
            ask = Ask(
                approval_id, None if event is None else event.id, running, expires_at, deadline
            )
            self._approval = ask
            t._asked[approval_id] = self
        return ask

    def _apply_decision(self, ask: Ask, decision: Decision, *, ended_by_bus: bool) -> None:
        """Take the decision on ``ask`` (lock held). A refusal before the call ran ended
        the call on the bus (``tool.denied``) when ``ended_by_bus``."""
        if self._approval is not ask:
            return
        self._approval = None
        self._tracker._asked.pop(ask.approval_id, None)
        if ask.running or self._state == DONE:
            return
        if decision.approved:
            if decision.args is not None:
                self._args = decision.args
                self.args_valid = True
                self._args_sent = False  # tool.started shows what actually runs
        elif ended_by_bus:
            self._end_silently(CallState.DENIED)

    # -- internals (the tracker's lock is held) ------------------------------------------

    def _emit(self, cls: type[Event], first: bool, **fields: Any) -> Event | None:
        """Publish one event of this call; the call's first event carries its title.
        (Every field of the class is given: the bus's builder then takes its short path.)
        Returns the event (None when the bus is closed)."""
        if cls in _TITLED:
            fields["title"] = self.title if first else None
        return self._tracker._emit(cls, self, fields)

    def _announce(self) -> None:
        """First event of a call that streams its input: ``tool.created``."""
        if self._state != NEW:
            return
        self._state = CREATED
        if not self.hidden:
            self._emit(ToolCreated, True, batch_id=self.batch_id, parent_id=self.parent_id)

    def _finish_locked(self, state: CallState, cls: type[Event], **fields: Any) -> None:
        """End the call with ``cls`` (its state allows it). A call never announced gets
        its synthesized ``tool.started`` first (every client sees a well-formed
        lifecycle)."""
        ask = self._approval
        if ask is not None and not self._tracker._withdraw_now(self, ask):
            return  # refused on the bus meanwhile: the call ended there (tool.denied)
        if self._state == NEW:
            self._start_locked(UNSET, None)
        if self._subruns is not None:
            end_subruns(self, state, fields)  # children before their parent
        self._hot = False  # before anything that ends the call: no progress follows it
        self._flush(final=True)
        duration = self.duration_s
        self._state = DONE
        self._terminal_state = state
        self._tracker._forget(self)
        if not self.hidden:
            self._emit(cls, False, duration_s=duration, **fields)

    def _end_silently(self, state: CallState) -> None:
        """End a call that was never announced, publishing nothing (a later report on it
        is then a violation, rather than a call nobody closes)."""
        self._hot = False
        self._state = DONE
        self._terminal_state = state
        self._tracker._forget(self)

    def _publish_args_text(self, text: str) -> None:
        for piece in self._tracker.payload.chunks(text):
            self._emit(ToolArgsDelta, False, delta=piece)

    def _publish_output_text(self, text: str) -> None:
        t = self._tracker
        for piece in t.payload.chunks(text):
            t._emit_values(
                ToolOutputDelta,
                (t.session, self.run_id, self.call_id, self.tool, self.parent_call_id, piece),
            )

    def _flush(self, *, final: bool = False) -> None:
        """Publish what coalescing holds for this call, and (``final``) what the output
        redactor still holds back."""
        if self.hidden:
            return
        coalescer = self._tracker._coalescer
        held = coalescer.release(self) if coalescer is not None else None
        output = held.output if held is not None else []
        if final and self._out_redactor is not None:
            rest = self._out_redactor.flush()
            if rest:
                output.append(rest)
        if held is not None and held.args:
            self._publish_args_text("".join(held.args))
        if output:
            self._publish_output_text("".join(output))
        if held is None:
            return
        if held.progress is not None:
            self._emit(ToolProgress, False, **held.progress)
        if held.partial is not NOTHING:
            self._emit(ToolOutputPartial, False, value=held.partial)

    def _set_args(self, args: Any) -> None:
        if args is not UNSET:
            self._args = args
            self.args_valid = True
        elif self._args is UNSET and self._args_parts:
            text = "".join(self._args_parts)
            try:
                self._args = json.loads(text) if text.strip() else {}
                self.args_valid = True
            except ValueError:
                self._args = text
                self.args_valid = False

    def _prepare_args(self, args: Any) -> tuple[JSONValue, bool, str | None]:
        """The published input, its validity and the start summary (no lock needed)."""
        if self.hidden:
            return None, True, None
        t = self._tracker
        valid = True
        if args is not UNSET:
            raw = args
        elif self._args is not UNSET:
            raw = self._args
            valid = self.args_valid
        elif self._args_parts:
            text = "".join(self._args_parts)
            try:
                raw = json.loads(text) if text.strip() else {}
            except ValueError:
                raw, valid = text, False
        else:
            raw = {}
        published = t._value(raw) if valid else t.payload.invalid_args(str(raw))
        self._published_args = published
        summary = t._summary(START, self, None, args=published, valid=valid)
        return published, valid, summary


def _number(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return int(number) if isinstance(value, int) else number


def _fraction(fraction: float | None, current: float | None, total: float | None) -> float | None:
    value = _number(fraction)
    if value is None:
        c, t = _number(current), _number(total)
        if c is not None and t:
            value = c / t
    if value is None:
        return None
    return min(1.0, max(0.0, float(value)))
