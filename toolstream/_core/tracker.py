"""Tracker: what an agent framework uses to announce its tool calls.

Handles *report* what happened to a call; they do not control the tool. Every
method may be called from any thread. The tracker enforces the lifecycle: states
only move forward and every announced call ends with exactly one terminal event.
"""

from __future__ import annotations

import builtins
import contextvars
import functools
import inspect
import json
import logging
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, Literal, TypeVar, cast, overload

import anyio
from typing_extensions import ParamSpec, Self

from .build import _BUILDERS, _TUPLE_BUILDERS, ENVELOPE, positional_fields
from .bus import Bus, EventBus
from .errors import BusClosed, LifecycleError
from .events import (
    BatchPhase,
    CallState,
    ErrorInfo,
    Event,
    JSONValue,
    RunFinished,
    RunOutcome,
    RunStarted,
    ToolArgsDelta,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolQueued,
    ToolReady,
    ToolStarted,
)
from .payload import ArgsRedactor, PayloadPolicy, TextRedactor
from .scheduler import call_later
from .summaries import CallInfo, Summaries, Summarizer

logger = logging.getLogger("toolstream.tracker")

__all__ = ["Batch", "CallHandle", "CallScope", "RunScope", "Tracker"]

P = ParamSpec("P")
R = TypeVar("R")

_UNSET: Final[Any] = object()

# Internal state codes: order is the lifecycle order.
_NEW, _CREATED, _READY, _QUEUED, _RUNNING, _DONE = -1, 0, 1, 2, 3, 4

# The hot paths pass these events' values by position (see ``Tracker._emit_values``).
if positional_fields(ToolProgress) != (
    *ENVELOPE,
    "fraction",
    "current",
    "total",
    "message",
    "data",
) or positional_fields(ToolOutputDelta) != (*ENVELOPE, "text"):
    raise ImportError("the tracker's positional events disagree with their classes' fields")
_STATE_NAMES = {
    _NEW: None,
    _CREATED: CallState.CREATED,
    _READY: CallState.READY,
    _QUEUED: CallState.QUEUED,
    _RUNNING: CallState.RUNNING,
}
_MAX_FINISHED_IDS = 10_000

_current_call: contextvars.ContextVar[CallHandle | None] = contextvars.ContextVar(
    "toolstream_current_call", default=None
)
_current_runs: contextvars.ContextVar[tuple[RunScope, ...]] = contextvars.ContextVar(
    "toolstream_current_runs", default=()
)


def _default_hidden(tool: str) -> bool:
    return tool.startswith("_")


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def is_cancellation(exc: BaseException) -> bool:
    """True for the exceptions that mean "cancelled" on asyncio, trio and anyio."""
    import asyncio

    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)):
        return True
    trio = sys.modules.get("trio")
    if trio is not None and isinstance(exc, trio.Cancelled):
        return True
    group = getattr(builtins, "BaseExceptionGroup", None)
    if group is None:
        eg = sys.modules.get("exceptiongroup")
        group = getattr(eg, "BaseExceptionGroup", None) if eg else None
    if group is not None and isinstance(exc, group):
        return all(is_cancellation(e) for e in exc.exceptions)
    return False


def _cancel_reason(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, SystemExit):
        return "interpreter exiting"
    if isinstance(exc, GeneratorExit):
        return "closed"
    return "cancelled"


class CallHandle:
    """One tool call, as reported to the tracker. Obtain with :meth:`Tracker.create`,
    :meth:`Tracker.call` or a provider ingest.

    Methods report what happened: ``args_delta``, ``ready``, ``queue``, ``start``,
    ``progress``, ``output_delta``, ``output_partial`` and one of ``complete``,
    ``fail`` or ``cancel``. A report the call's state forbids is a lifecycle
    violation: dropped with a warning (or ``LifecycleError`` on a strict tracker).
    """

    __slots__ = (
        "_args",
        "_args_parts",
        "_args_redactor",
        "_args_sent",
        "_flush_due",
        "_out_redactor",
        "_pending_args",
        "_pending_output",
        "_pending_partial",
        "_pending_progress",
        "_published_args",
        "_started",
        "_state",
        "_terminal_state",
        "_tracker",
        "args_valid",
        "batch_id",
        "call_id",
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
    ) -> None:
        self._tracker = tracker
        #: The tool's name.
        self.tool = tool
        #: The correlation id shared by every event of the call.
        self.call_id = call_id
        #: The run the call belongs to, if any.
        self.run_id = run_id
        #: The call whose sub-agent made this one, if any.
        self.parent_call_id = parent_call_id
        #: The batch of parallel calls this call is part of, if any.
        self.batch_id = batch_id
        self.title = title
        #: True for a hidden tool: tracked, never published.
        self.hidden = hidden
        #: False when the streamed input was not valid JSON (``args`` is then the text).
        self.args_valid = True
        #: The assistant message the call belongs to, if known.
        self.parent_id: str | None = None
        self._state = _NEW
        self._terminal_state = CallState.COMPLETED
        self._args: Any = _UNSET
        self._args_parts: list[str] = []
        self._args_sent = False
        self._published_args: JSONValue = None
        self._args_redactor: ArgsRedactor | None = None
        self._out_redactor: TextRedactor | None = None
        self._started: float | None = None
        self._pending_args: list[str] | None = None
        self._pending_output: list[str] | None = None
        self._pending_progress: dict[str, Any] | None = None
        self._pending_partial: Any = _UNSET
        self._flush_due = False

    def __repr__(self) -> str:
        return f"<CallHandle {self.tool!r} call_id={self.call_id!r} state={self.state}>"

    # -- reading ---------------------------------------------------------------------

    @property
    def state(self) -> CallState | None:
        """The call's state; None before its first event is published."""
        if self._state == _DONE:
            return self._terminal_state
        return _STATE_NAMES[self._state]

    @property
    def done(self) -> bool:
        """True once the call reached a terminal state."""
        return self._state == _DONE

    @property
    def args(self) -> Any:
        """The call's real input: parsed JSON, the raw text if invalid, ``{}`` if none."""
        if self._args is _UNSET:
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
    def duration_s(self) -> float | None:
        """Seconds since the call started running (None before)."""
        started = self._started
        return None if started is None else time.monotonic() - started

    # -- reporting ---------------------------------------------------------------------

    def args_delta(self, text: str) -> None:
        """A fragment of the call's JSON input, as the model writes it."""
        if not isinstance(text, str):
            raise TypeError(f"args_delta() takes text, not {type(text).__name__}")
        t = self._tracker
        with t._lock:
            if not t._allowed(self, "args_delta", self._state <= _CREATED):
                return
            self._announce()
            self._args_parts.append(text)
            if self.hidden or not text:
                return
            redactor = self._args_redactor
            if redactor is None:
                redactor = self._args_redactor = t.payload.args_redactor()
            safe = redactor.feed(text)
            if not safe:
                return
            if t.coalesce > 0:
                if self._pending_args is None:
                    self._pending_args = []
                self._pending_args.append(safe)
                t._schedule(self)
                return
            for piece in t.payload.chunks(safe):
                t._emit(ToolArgsDelta, self, delta=piece)

    def ready(self, args: Any = _UNSET) -> None:
        """The whole input is known: parses the streamed text, or takes ``args``."""
        t = self._tracker
        published, valid, summary = self._prepare_args(args)
        with t._lock:
            if not t._allowed(self, "ready", self._state <= _CREATED):
                return
            self._set_args(args)
            self._flush()
            if self._state == _NEW and not self.hidden:
                self._state = _READY
                self._args_sent = True
                t._emit(
                    ToolReady,
                    self,
                    args=published,
                    args_valid=valid,
                    summary=summary,
                    **t._first_fields(self),
                )
                return
            self._state = _READY
            if not self.hidden:
                self._args_sent = True
                t._emit(ToolReady, self, args=published, args_valid=valid, summary=summary)

    def queue(self, *, batch_id: str | None = None, position: int | None = None) -> None:
        """The call waits for a concurrency slot (usually reported by a :class:`Batch`)."""
        t = self._tracker
        with t._lock:
            if not t._allowed(self, "queue", self._state < _QUEUED):
                return
            self._flush()
            if batch_id is not None:
                self.batch_id = batch_id
            first = self._state == _NEW
            self._state = _QUEUED
            if not self.hidden:
                extra = t._first_fields(self) if first else {}
                t._emit(ToolQueued, self, batch_id=self.batch_id, position=position, **extra)

    def start(self, args: Any = _UNSET) -> None:
        """Execution began. ``args``: the input, for a call whose input was not reported."""
        t = self._tracker
        prepared = None if self._args_sent else self._prepare_args(args)
        with t._lock:
            if not t._allowed(self, "start", self._state < _RUNNING):
                return
            self._start_locked(args, prepared)

    def _start_locked(self, args: Any, prepared: tuple[JSONValue, bool, str | None] | None) -> None:
        """Publish ``tool.started`` (lock held; the state allows it)."""
        t = self._tracker
        self._flush()
        first = self._state == _NEW
        if self._state == _CREATED and self._args_parts and not self.hidden:
            # Input streamed but never declared complete: say so before it runs.
            published, valid, summary = prepared or self._prepare_args(_UNSET)
            self._set_args(_UNSET)
            self._state = _READY
            self._args_sent = True
            t._emit(ToolReady, self, args=published, args_valid=valid, summary=summary)
            prepared = None
        self._set_args(args)
        self._state = _RUNNING
        self._started = time.monotonic()
        if self.hidden:
            return
        fields: dict[str, Any] = t._first_fields(self) if first else {}
        if not self._args_sent:
            published, _, summary = prepared or self._prepare_args(args)
            self._args_sent = True
            fields["args"] = published
            fields["summary"] = summary
        t._emit(ToolStarted, self, **fields)

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
        if type(fraction) is float and 0.0 <= fraction <= 1.0 and current is None and total is None:
            pass  # the common case, already safe
        else:
            fraction = _fraction(fraction, current, total)
            current = _number(current)
            total = _number(total)
        t = self._tracker
        hidden = self.hidden
        if not hidden:
            if message is not None:
                message = t.payload.text(message)
            if data is not None:
                data = t._value(data)
        lock = t._lock
        lock.acquire()  # not ``with``: the hot path of a running tool
        try:
            state = self._state
            if state >= _DONE or t._closed:
                t._allowed(self, "progress", state < _DONE)
                return
            if state < _RUNNING:
                self._start_locked(_UNSET, None)
            if hidden:
                return
            if t.coalesce > 0:
                fields = {
                    "fraction": fraction,
                    "current": current,
                    "total": total,
                    "message": message,
                    "data": data,
                }
                pending = self._pending_progress
                if pending is not None and message is None:
                    fields["message"] = pending["message"]
                self._pending_progress = fields
                t._schedule(self)
                return
            # The hot path of a running tool: the event's values in one tuple.
            t._emit_values(
                ToolProgress,
                (
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
                ),
            )
        finally:
            lock.release()

    def output_delta(self, text: str) -> None:
        """Text appended to the call's output so far. Implies the call is running."""
        if not isinstance(text, str):
            raise TypeError(f"output_delta() takes text, not {type(text).__name__}")
        t = self._tracker
        with t._lock:
            if not t._allowed(self, "output_delta", self._state < _DONE):
                return
            if self._state < _RUNNING:
                self._start_locked(_UNSET, None)
            if self.hidden or not text:
                return
            redactor = self._out_redactor
            if redactor is None:
                redactor = self._out_redactor = t.payload.text_redactor()
            safe = redactor.feed(text)
            if safe:
                self._publish_output(safe)

    def _publish_output(self, safe: str) -> None:
        t = self._tracker
        if t.coalesce > 0:
            if self._pending_output is None:
                self._pending_output = []
            self._pending_output.append(safe)
            t._schedule(self)
            return
        for piece in t.payload.chunks(safe):
            t._emit_values(
                ToolOutputDelta,
                (t.session, self.run_id, self.call_id, self.tool, self.parent_call_id, piece),
            )

    def output_partial(self, value: Any) -> None:
        """A JSON value that replaces the partial output so far. Implies running."""
        t = self._tracker
        published = None if self.hidden else t._value(value)
        with t._lock:
            if not t._allowed(self, "output_partial", self._state < _DONE):
                return
            if self._state < _RUNNING:
                self._start_locked(_UNSET, None)
            if self.hidden:
                return
            if t.coalesce > 0:
                self._pending_partial = published
                t._schedule(self)
                return
            t._emit(ToolOutputPartial, self, value=published)

    def complete(self, result: Any = None) -> None:
        """The tool returned ``result``. Terminal."""
        t = self._tracker
        published: JSONValue = None
        summary = None
        if not self.hidden:
            published = t._value(result)
            summary = t._summarize("result", self, result)
        with t._lock:
            if not t._allowed(self, "complete", self._state < _DONE):
                return
            if self._state < _RUNNING:
                self._start_locked(_UNSET, None)
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
        summary = None if self.hidden else t._summarize("error", self, info)
        with t._lock:
            if not t._allowed(self, "fail", self._state < _DONE):
                return
            if self._state == _NEW:
                self._start_locked(_UNSET, None)
            self._finish_locked(CallState.FAILED, ToolFailed, error=info, summary=summary)

    def cancel(self, reason: str | None = None) -> None:
        """The call was cancelled (``reason`` says why). Terminal."""
        t = self._tracker
        published = t.payload.text(reason)
        summary = None if self.hidden else t._summarize("cancelled", self, published)
        with t._lock:
            if not t._allowed(self, "cancel", self._state < _DONE):
                return
            self._cancel_locked(published, summary)

    def _cancel_locked(self, reason: str | None, summary: str | None) -> None:
        if self._state == _NEW:
            self._start_locked(_UNSET, None)
        self._finish_locked(CallState.CANCELLED, ToolCancelled, reason=reason, summary=summary)

    # -- internals (the tracker's lock is held) ------------------------------------------

    def _announce(self) -> None:
        """First event of a call that streams its input: ``tool.created``."""
        if self._state != _NEW:
            return
        self._state = _CREATED
        if not self.hidden:
            t = self._tracker
            t._emit(ToolCreated, self, **t._first_fields(self, created=True))

    def _finish_locked(self, state: CallState, cls: type[Event], **fields: Any) -> None:
        t = self._tracker
        self._flush(final=True)
        duration = self.duration_s
        self._state = _DONE
        self._terminal_state = state
        t._forget(self)
        if not self.hidden:
            t._emit(cls, self, duration_s=duration, **fields)

    def _flush(self, *, final: bool = False) -> None:
        """Publish what coalescing or redaction holds for this call (lock held)."""
        if self.hidden:
            return
        t = self._tracker
        if self._pending_args:
            text, self._pending_args = "".join(self._pending_args), None
            for piece in t.payload.chunks(text):
                t._emit(ToolArgsDelta, self, delta=piece)
        if final and self._out_redactor is not None:
            rest = self._out_redactor.flush()
            if rest:
                if self._pending_output is None:
                    self._pending_output = []
                self._pending_output.append(rest)
        if self._pending_output:
            text, self._pending_output = "".join(self._pending_output), None
            for piece in t.payload.chunks(text):
                t._emit(ToolOutputDelta, self, text=piece)
        if self._pending_progress is not None:
            fields, self._pending_progress = self._pending_progress, None
            t._emit(ToolProgress, self, **fields)
        if self._pending_partial is not _UNSET:
            value, self._pending_partial = self._pending_partial, _UNSET
            t._emit(ToolOutputPartial, self, value=value)

    def _set_args(self, args: Any) -> None:
        if args is not _UNSET:
            self._args = args
            self.args_valid = True
        elif self._args is _UNSET and self._args_parts:
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
        if args is not _UNSET:
            raw = args
        elif self._args is not _UNSET:
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
        if valid:
            published = t._value(raw)
        else:
            published = t.payload.text(_redact_invalid_json(t.payload, cast(str, raw)))
        self._published_args = published
        summary = t._summarize("start", self, None, args=published, valid=valid)
        return published, valid, summary


def _redact_invalid_json(policy: PayloadPolicy, text: str) -> str:
    """Best-effort key-based redaction of input that is not valid JSON."""
    if not policy.redact:
        return text

    import re

    def replace(m: re.Match[str]) -> str:
        if policy.is_secret_key(m.group(2)):
            return m.group(1) + '"' + policy.placeholder + '"'
        return m.group(0)

    text = re.sub(
        r"""(["']?([A-Za-z0-9_\-]+)["']?\s*[:=]\s*)("(?:[^"\\]|\\.)*"?|'[^']*'?|[^\s,}\]]*)""",
        replace,
        text,
    )
    return policy.redact_text(text)


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


class CallScope:
    """``async with`` / ``with`` a tracked call: completes on a normal exit (with
    ``None`` unless :meth:`CallHandle.complete` was called), fails on an exception
    (re-raised), is cancelled on cancellation (re-raised). Returned by
    :meth:`Tracker.call` and :meth:`Batch.call`."""

    __slots__ = ("_args", "_batch", "_handle", "_owner", "_slot", "_token", "_tracker")

    def __init__(
        self,
        tracker: Tracker,
        handle: CallHandle,
        args: Any,
        owner: bool,
        batch: Batch | None = None,
    ) -> None:
        self._tracker = tracker
        self._handle = handle
        self._args = args
        self._owner = owner
        self._batch = batch
        self._slot = False
        self._token: contextvars.Token[CallHandle | None] | None = None

    @property
    def handle(self) -> CallHandle:
        """The call's handle."""
        return self._handle

    def __enter__(self) -> CallHandle:
        if self._batch is not None:
            raise TypeError("a batch call waits for a slot: use `async with`")
        return self._enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc)

    async def __aenter__(self) -> CallHandle:
        batch = self._batch
        if batch is not None:
            try:
                await batch._acquire()
            except BaseException as exc:
                handle = self._handle
                if not handle.done:
                    handle.cancel(_cancel_reason(exc) if is_cancellation(exc) else str(exc))
                raise
            self._slot = True
        return self._enter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._exit(exc)
        finally:
            if self._slot:
                self._slot = False
                assert self._batch is not None
                self._batch._release()

    def _enter(self) -> CallHandle:
        handle = self._handle
        if self._owner and handle._state < _RUNNING:
            handle.start(self._args)
        self._token = _current_call.set(handle)
        return handle

    def _exit(self, exc: BaseException | None) -> None:
        if self._token is not None:
            try:
                _current_call.reset(self._token)
            except ValueError:  # exited in another context (e.g. a different task)
                pass
            self._token = None
        handle = self._handle
        if not self._owner or handle.done:
            return
        if exc is None:
            handle.complete(None)
        elif is_cancellation(exc):
            handle.cancel(_cancel_reason(exc))
        else:
            handle.fail(exc)


class RunScope:
    """One run (an agent turn, a request): ``run.started`` ... ``run.finished``.

    Use as ``async with tracker.run():`` (or ``with``): calls opened inside join
    it, and its end closes the calls still open (cancelled, reason ``"run
    finished"``) before ``run.finished``. Or drive it by hand: ``start()`` and
    ``finish(outcome=...)``, passing ``run_id=`` to the calls.
    """

    def __init__(self, tracker: Tracker, run_id: str, title: str | None) -> None:
        self._tracker = tracker
        #: The run's id.
        self.run_id = run_id
        self.title = title
        self._started = False
        self._finished = False
        self._token: contextvars.Token[tuple[RunScope, ...]] | None = None

    def __repr__(self) -> str:
        return f"<RunScope {self.run_id!r} started={self._started} finished={self._finished}>"

    @property
    def finished(self) -> bool:
        """True once ``run.finished`` was published."""
        return self._finished

    def start(self) -> Self:
        """Publish ``run.started`` (once)."""
        t = self._tracker
        title = t.payload.text(self.title)
        with t._lock:
            if self._started:
                t._violation(
                    f"run {self.run_id!r} was already started", self.run_id, "running", "start"
                )
                return self
            if t._closed:
                t._violation(
                    f"run {self.run_id!r}: the tracker is closed", self.run_id, "closed", "start"
                )
                return self
            self._started = True
            t._runs[self.run_id] = self
            t._publish(RunStarted, run_id=self.run_id, title=title)
        return self

    def finish(
        self,
        outcome: RunOutcome = "completed",
        *,
        error: BaseException | str | ErrorInfo | None = None,
    ) -> None:
        """Close the run's open calls, then publish ``run.finished`` (once)."""
        if outcome not in ("completed", "failed", "cancelled"):
            raise ValueError(f"outcome must be completed, failed or cancelled, not {outcome!r}")
        t = self._tracker
        info = t.payload.error(error) if error is not None else None
        with t._lock:
            if not self._started or self._finished:
                state = "finished" if self._finished else "not started"
                t._violation(f"run {self.run_id!r} is {state}", self.run_id, state, "finish")
                return
            self._finished = True
            t._close_calls([h for h in t._open.values() if h.run_id == self.run_id], "run finished")
            t._runs.pop(self.run_id, None)
            t._publish(RunFinished, run_id=self.run_id, outcome=outcome, error=info)

    def _push(self) -> None:
        self._token = _current_runs.set((*_current_runs.get(), self))

    def _pop(self) -> None:
        if self._token is not None:
            try:
                _current_runs.reset(self._token)
            except ValueError:
                pass
            self._token = None

    def _end(self, exc: BaseException | None) -> None:
        self._pop()
        if self._finished:
            return
        if exc is None:
            self.finish("completed")
        elif is_cancellation(exc):
            self.finish("cancelled")
        else:
            self.finish("failed", error=exc)

    def __enter__(self) -> Self:
        self.start()
        self._push()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(exc)

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._end(exc)


class Batch:
    """Parallel calls under a concurrency ``limit``: each is announced ``queued`` at
    once, runs when a slot frees, and ``batch.phase`` events mark the batch's
    progress (queued -> running -> done).

    ::

        async with tracker.batch(limit=2) as batch:
            for c in calls:
                batch.start_soon(run_tool, c.tool, c.args, call_id=c.id)

    ``start_soon`` runs a function as a tracked call in the batch's own task group
    (a failing call is reported failed and does not cancel the others; its
    exception is in ``batch.results``); ``batch.call()`` gives a scope to enter from
    tasks of your own.
    """

    def __init__(self, tracker: Tracker, limit: int | None, batch_id: str) -> None:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        self._tracker = tracker
        self.limit = limit
        #: The batch's id, carried by its calls' ``tool.queued`` events.
        self.batch_id = batch_id
        #: ``call_id -> return value`` (or the exception) of calls run with ``start_soon``.
        self.results: dict[str, Any] = {}
        self._handles: list[CallHandle] = []
        self._semaphore: anyio.Semaphore | None = None
        self._waiting = 0
        self._phase: str | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._entered = False

    def __repr__(self) -> str:
        return f"<Batch {self.batch_id!r} limit={self.limit} calls={len(self._handles)}>"

    def call(
        self,
        tool: str,
        args: Any = None,
        *,
        call_id: str | None = None,
        title: str | None = None,
    ) -> CallScope:
        """Announce a call of the batch (``queued`` now); ``async with`` it to run it
        when a slot is free."""
        t = self._tracker
        handle, owner = t._handle_for(tool, call_id, None, None, self.batch_id, title)
        self._handles.append(handle)
        if owner:
            self._waiting += 1
            handle.queue(batch_id=self.batch_id, position=self._waiting)
            if self._phase is None:
                self._set_phase("queued")
        return CallScope(t, handle, {} if args is None else args, owner, batch=self)

    def start_soon(
        self,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
        tool: str | None = None,
        call_id: str | None = None,
        title: str | None = None,
    ) -> CallHandle:
        """Run ``await fn(*args)`` as a call of the batch; returns its handle."""
        if self._tg is None:
            raise RuntimeError("start_soon() needs the batch to be entered (`async with`)")
        name = tool or str(getattr(fn, "__name__", "tool"))
        scope = self.call(name, _bind_args(fn, args, {}), call_id=call_id, title=title)
        self._tg.start_soon(self._run, scope, fn, args)
        return scope.handle

    async def _run(
        self, scope: CallScope, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        handle = scope.handle
        try:
            async with scope as call:
                result = await fn(*args)
                call.complete(result)
            self.results[handle.call_id] = result
        except Exception as exc:  # reported as failed; siblings keep running
            self.results[handle.call_id] = exc

    async def _acquire(self) -> None:
        semaphore = self._semaphore
        if semaphore is not None:
            await semaphore.acquire()
        self._waiting = max(0, self._waiting - 1)
        if self._phase in (None, "queued"):
            self._set_phase("running")

    def _release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()

    def _set_phase(self, phase: Literal["queued", "running", "done"]) -> None:
        self._phase = phase
        counts: dict[str, int] = {}
        for h in self._handles:
            state = h.state
            key = state.value if state is not None else "created"
            counts[key] = counts.get(key, 0) + 1
        self._tracker._publish(
            BatchPhase,
            batch_id=self.batch_id,
            phase=phase,
            call_ids=tuple(h.call_id for h in self._handles if not h.hidden),
            counts=counts,
            run_id=self._tracker._run_for(None),
        )

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a batch can be entered once")
        self._entered = True
        if self.limit is not None:
            self._semaphore = anyio.Semaphore(self.limit)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            reason = "batch ended"
            if exc is not None and is_cancellation(exc):
                reason = _cancel_reason(exc)
            for h in self._handles:
                if not h.done and h._state != _RUNNING:
                    h.cancel(reason)  # announced but never entered
            if self._handles:
                self._set_phase("done")


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
    per interval, and ``strict=True`` turns lifecycle violations into
    :class:`~toolstream.LifecycleError` instead of a warning.
    """

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
    ) -> None:
        if not isinstance(session, str) or not session:
            raise ValueError(f"session must be a non-empty string, got {session!r}")
        if coalesce < 0:
            raise ValueError(f"coalesce must be >= 0 seconds, got {coalesce!r}")
        self.bus = bus
        # EventBus: events go straight to its builders (no keywords, no checks the
        # tracker made already); other buses, and an EventBus subclass that overrides
        # publish (to log, count...), get publish(cls, **fields).
        self._fast: Callable[[Any, str, Any], object] | None = (
            bus._publish
            if isinstance(bus, EventBus) and type(bus).publish is EventBus.publish
            else None
        )
        #: The session every event of this tracker belongs to.
        self.session = session
        self.summarizer: Summarizer = summarizer if summarizer is not None else Summaries()
        self.payload = payload if payload is not None else PayloadPolicy()
        self.hidden = hidden if hidden is not None else _default_hidden
        self.coalesce = float(coalesce)
        self.strict = strict
        #: Lifecycle violations dropped (lenient mode).
        self.violations = 0
        # Reentrant: summarizers and payload hooks are user code and may report too.
        self._lock = threading.RLock()
        self._open: dict[str, CallHandle] = {}
        self._finished_ids: OrderedDict[str, None] = OrderedDict()
        self._runs: dict[str, RunScope] = {}
        self._closed = False
        self._dirty: set[CallHandle] = set()
        self._flush_scheduled = False
        self._bus_closed_logged = False

    def __repr__(self) -> str:
        return f"<Tracker session={self.session!r} open_calls={len(self._open)}>"

    @property
    def closed(self) -> bool:
        """True after :meth:`close` / :meth:`aclose`."""
        return self._closed

    def open_calls(self) -> list[CallHandle]:
        """The announced calls not yet ended."""
        with self._lock:
            return [h for h in self._open.values() if h._state != _NEW]

    # -- runs and calls --------------------------------------------------------------

    def run(self, run_id: str | None = None, *, title: str | None = None) -> RunScope:
        """A run: ``async with tracker.run():`` (calls inside join it)."""
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        return RunScope(self, run_id or _new_id("run"), title)

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
                if handle._state == _NEW:
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
    ) -> CallScope:
        """``async with`` (or ``with``) one call: ``tool.started`` with ``args`` on
        entry, completed / failed / cancelled on exit. A call already announced
        with this ``call_id`` (by a provider ingest) is adopted, not duplicated."""
        handle, owner = self._handle_for(tool, call_id, run_id, parent_call_id, None, title)
        if not owner and handle._state < _RUNNING:
            owner = True  # announced (by an ingest) but not running: this scope runs it
        return CallScope(self, handle, {} if args is None else args, owner)

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
                current = _current_call.get()
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
                    async with tracker.call(tool_name, _bind_args(func, args, kwargs)) as call:
                        result = await afunc(*args, **kwargs)
                        call.complete(result)
                        return result

                return cast(Callable[P, R], async_wrapper)

            @functools.wraps(func)
            def sync_wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                if inside_same_call():
                    return func(*args, **kwargs)
                with tracker.call(tool_name, _bind_args(func, args, kwargs)) as call:
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

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """End the session's open calls (cancelled, reason ``"session closed"``) and
        runs; further reports are violations."""
        with self._lock:
            if self._closed:
                return
            self._close_calls(list(self._open.values()), "session closed")
            for run in reversed(list(self._runs.values())):  # innermost first
                run._finished = True
                self._publish(RunFinished, run_id=run.run_id, outcome="cancelled", error=None)
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
        """An open call's handle (adopted: False) or a new one (True)."""
        if not isinstance(tool, str) or not tool:
            raise ValueError(f"tool must be a non-empty string, got {tool!r}")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise ValueError(f"call_id must be a non-empty string, got {call_id!r}")
        if parent_call_id is None:
            current = _current_call.get()
            if current is not None and not current.done:
                parent_call_id = current.call_id
        run = self._run_for(run_id)
        with self._lock:
            if call_id is not None:
                existing = self._open.get(call_id)
                if existing is not None:
                    return existing, False
                if call_id in self._finished_ids:
                    self._violation(
                        f"call {call_id!r} ({tool}) already ended; a call id is used once",
                        call_id,
                        "ended",
                        "create",
                    )
            handle = CallHandle(
                self,
                tool,
                call_id or _new_id("call"),
                run,
                parent_call_id,
                batch_id,
                self.payload.text(title) if title else None,
                bool(self.hidden(tool)),
            )
            self._open[handle.call_id] = handle
            return handle, True

    def _run_for(self, run_id: str | None) -> str | None:
        if run_id is not None:
            return run_id
        for scope in reversed(_current_runs.get()):
            t = scope._tracker
            same = t is self or (t.bus is self.bus and t.session == self.session)
            if same and not scope._finished:
                return scope.run_id
        return None

    def _first_fields(self, handle: CallHandle, *, created: bool = False) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if created:
            fields["batch_id"] = handle.batch_id
            fields["title"] = handle.title
            fields["parent_id"] = handle.parent_id
        return fields

    def _allowed(self, handle: CallHandle, op: str, ok: bool) -> bool:
        """Check a report against the call's state (lock held)."""
        if ok and not self._closed:
            return True
        state = handle.state
        if self._closed and handle._state != _DONE:
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
        self._open.pop(handle.call_id, None)
        self._dirty.discard(handle)
        finished = self._finished_ids
        finished[handle.call_id] = None
        if len(finished) > _MAX_FINISHED_IDS:
            finished.popitem(last=False)

    def _close_calls(self, handles: Iterable[CallHandle], reason: str) -> None:
        for handle in list(handles):
            if handle._state == _NEW:
                # Never announced: nothing to tell clients, but the call is over, so a
                # later report on it is a violation rather than a call nobody closes.
                handle._state = _DONE
                handle._terminal_state = CallState.CANCELLED
                self._forget(handle)
                continue
            if handle._state == _DONE:
                continue
            summary = None
            if not handle.hidden:
                summary = self._summarize("cancelled", handle, reason)
            handle._finish_locked(
                CallState.CANCELLED, ToolCancelled, reason=reason, summary=summary
            )

    def _emit(self, cls: type[Event], handle: CallHandle, **fields: Any) -> None:
        """Publish one event of ``handle`` (lock held)."""
        fields["session"] = self.session
        fields["run_id"] = handle.run_id
        fields["call_id"] = handle.call_id
        fields["tool"] = handle.tool
        fields["parent_call_id"] = handle.parent_call_id
        fast = self._fast
        try:
            if fast is not None:
                fast(_BUILDERS[cls], self.session, fields)
            else:
                self.bus.publish(cls, **fields)
        except BusClosed:
            self._bus_gone()

    def _emit_values(self, cls: type[Event], values: tuple[Any, ...]) -> None:
        """Publish an event given as its values in ``positional_fields`` order (the
        hot paths; lock held)."""
        fast = self._fast
        try:
            if fast is not None:
                fast(_TUPLE_BUILDERS[cls], self.session, values)
            else:
                self.bus.publish(cls, **dict(zip(positional_fields(cls), values, strict=True)))
        except BusClosed:
            self._bus_gone()

    def _publish(self, cls: type[Event], **fields: Any) -> None:
        """Publish a run or batch event, after what coalescing holds."""
        with self._lock:
            self._flush_all()
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

    def _summarize(
        self,
        kind: str,
        handle: CallHandle,
        detail: Any,
        *,
        args: JSONValue = _UNSET,
        valid: bool | None = None,
    ) -> str | None:
        info = CallInfo(
            call_id=handle.call_id,
            tool=handle.tool,
            args=handle._published_args if args is _UNSET else args,
            args_valid=handle.args_valid if valid is None else valid,
            run_id=handle.run_id,
            title=handle.title,
            duration_s=handle.duration_s,
        )
        summarizer = self.summarizer
        text: object
        try:
            if kind == "start":
                text = summarizer.start(info)
            elif kind == "result":
                text = summarizer.result(info, detail)
            elif kind == "error":
                text = summarizer.error(info, detail)
            else:
                method = getattr(summarizer, "cancelled", None)
                text = method(info, detail) if callable(method) else None
                if text is None and not callable(method):
                    text = Summaries.generic_cancelled(info, detail)
        except Exception:
            logger.warning(
                "summarizer %r failed for %s of %r; using the generic text",
                summarizer,
                kind,
                handle.tool,
                exc_info=True,
            )
            if kind == "start":
                text = Summaries.generic_start(info)
            elif kind == "result":
                text = Summaries.generic_result(info, detail)
            elif kind == "error":
                text = Summaries.generic_error(info, detail)
            else:
                text = Summaries.generic_cancelled(info, detail)
        if text is not None and not isinstance(text, str):
            text = str(text)
        return self.payload.text(text)

    # coalescing

    def _schedule(self, handle: CallHandle) -> None:
        """Mark ``handle`` as holding coalesced data; flush after ``coalesce`` s (lock held)."""
        self._dirty.add(handle)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            call_later(self.coalesce, self._timed_flush)

    def _timed_flush(self) -> None:
        with self._lock:
            self._flush_scheduled = False
            self._flush_all()

    def _flush_all(self) -> None:
        """Publish everything coalescing holds (lock held)."""
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            for handle in dirty:
                if handle._state != _DONE:
                    handle._flush()

    def flush(self) -> None:
        """Publish now what coalescing holds (it would go out within ``coalesce`` s)."""
        with self._lock:
            self._flush_all()


def _bind_args(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A function's arguments by parameter name (what the call's input looks like)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {"args": list(args), "kwargs": kwargs} if args else dict(kwargs)
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if name in ("self", "cls") and param.kind is param.POSITIONAL_OR_KEYWORD:
            continue
        if param.kind is param.VAR_KEYWORD:
            out.update(value)
        elif param.kind is param.VAR_POSITIONAL:
            if value:
                out[name] = list(value)
        else:
            out[name] = value
    return out
