"""Scopes: a call, a run and a batch of parallel calls, as ``async with`` blocks.

Each scope turns how a block ends into the lifecycle: a normal exit completes, an
exception fails, a cancellation cancels (and the exception goes on), so every call a
scope opened ends exactly once.
"""

from __future__ import annotations

import builtins
import contextvars
import inspect
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
from typing_extensions import Self

from . import subagents
from .errors import ApprovalDenied
from .events import BatchPhase, ErrorInfo, RunFinished, RunOutcome, RunStarted
from .handle import AWAITING, DONE, READY, RUNNING, CallHandle

if TYPE_CHECKING:
    from .tracker import Tracker

__all__ = ["Batch", "CallScope", "RunScope", "bind_args", "current_call", "is_cancellation"]

#: The call whose block is running in this context (a tool's own code, a sub-agent).
current_call: contextvars.ContextVar[CallHandle | None] = contextvars.ContextVar(
    "toolstream_current_call", default=None
)
#: The runs open in this context, outermost first.
current_runs: contextvars.ContextVar[tuple[RunScope, ...]] = contextvars.ContextVar(
    "toolstream_current_runs", default=()
)


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


def cancel_reason(exc: BaseException) -> str:
    """The reason a cancelled call is given for ``exc``."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, SystemExit):
        return "interpreter exiting"
    if isinstance(exc, GeneratorExit):
        return "closed"
    return "cancelled"


def _reset(var: contextvars.ContextVar[Any], token: contextvars.Token[Any] | None) -> None:
    if token is not None:
        try:
            var.reset(token)
        except ValueError:  # exited in another context (e.g. a different task)
            pass


class CallScope:
    """``async with`` / ``with`` a tracked call: completes on a normal exit (with
    ``None`` unless :meth:`CallHandle.complete` was called), fails on an exception
    (re-raised), is cancelled on cancellation (re-raised). Returned by
    :meth:`Tracker.call` and :meth:`Batch.call`."""

    __slots__ = (
        "_approval",
        "_approval_timeout",
        "_args",
        "_batch",
        "_handle",
        "_owner",
        "_slot",
        "_token",
        "_tracker",
    )

    def __init__(
        self,
        tracker: Tracker,
        handle: CallHandle,
        args: Any,
        owner: bool,
        batch: Batch | None = None,
        *,
        approval: str | bool | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        if approval is not None and not isinstance(approval, (str, bool)):
            raise TypeError(f"approval is a reason (str) or True, not {type(approval).__name__}")
        self._tracker = tracker
        self._handle = handle
        self._args = args
        self._owner = owner
        self._batch = batch
        self._approval = approval
        self._approval_timeout = approval_timeout
        self._slot = False
        self._token: contextvars.Token[CallHandle | None] | None = None

    @property
    def handle(self) -> CallHandle:
        """The call's handle."""
        return self._handle

    def __enter__(self) -> CallHandle:
        if self._batch is not None:
            raise TypeError("a batch call waits for a slot: use `async with`")
        if self._approval not in (None, False) or self._handle._gated():
            raise TypeError("a call that needs approval waits for a person: use `async with`")
        return self._enter()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit(exc)

    async def __aenter__(self) -> CallHandle:
        if self._owner:
            await self._approve()
        batch = self._batch
        if batch is not None:
            try:
                await batch._acquire()
            except BaseException as exc:
                handle = self._handle
                if not handle.done:
                    handle.cancel(cancel_reason(exc) if is_cancellation(exc) else str(exc))
                raise
            self._slot = True
        handle = self._enter()
        if batch is not None:
            batch._running()
        return handle

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

    async def _approve(self) -> None:
        """Ask for the approval (``approval=``) or adopt the pending one, and wait for the
        decision; ``ApprovalDenied`` when the block will not run for want of it."""
        handle = self._handle
        wanted = self._approval not in (None, False)
        if wanted and handle._approval is None and handle._state < AWAITING:
            if handle._state < READY:
                handle.ready(self._args)
            reason = self._approval if isinstance(self._approval, str) else None
            handle.await_approval(reason, self._approval_timeout)
        ask = handle._approval
        if ask is None or ask.running:
            return
        try:
            decision = await self._tracker._wait(handle, ask)
        except BaseException as exc:  # the block will not run: the call ends here
            if not handle.done:
                if is_cancellation(exc):
                    handle.cancel(cancel_reason(exc))
                else:
                    handle.fail(exc)
            raise
        if not decision.approved:
            who = f" by {decision.by}" if decision.by else ""
            raise ApprovalDenied(
                f"call {handle.call_id!r} ({handle.tool}) was not approved{who}",
                decision=decision,
            )
        if decision.args is not None:
            self._args = decision.args

    def _enter(self) -> CallHandle:
        handle = self._handle
        if self._owner and handle._state < RUNNING:
            handle.start(self._args)
        self._token = current_call.set(handle)
        return handle

    def _exit(self, exc: BaseException | None) -> None:
        _reset(current_call, self._token)
        self._token = None
        handle = self._handle
        if not self._owner or handle.done:
            return
        if exc is None:
            handle.complete(None)
        elif is_cancellation(exc):
            handle.cancel(cancel_reason(exc))
        else:
            handle.fail(exc)


class RunScope:
    """One run (an agent turn, a request): ``run.started`` ... ``run.finished``.

    Use as ``async with tracker.run():`` (or ``with``): calls opened inside join
    it, and its end closes the calls still open (cancelled, reason ``"run
    finished"``) before ``run.finished``. Or drive it by hand: ``start()`` and
    ``finish(outcome=...)``, passing ``run_id=`` to the calls.

    A run started inside a call's block (or made by :meth:`CallHandle.subagent`) is a
    *sub-agent's* run, nested under that call: its ``run.started`` carries the call
    (``parent_call_id``), the run of the call (``parent_run_id``) and the agent's name
    (``agent``), and the call's end ends it first if it is still open.
    """

    def __init__(
        self,
        tracker: Tracker,
        run_id: str,
        title: str | None,
        *,
        parent: CallHandle | None = None,
        agent: str | None = None,
    ) -> None:
        self._tracker = tracker
        #: The run's id.
        self.run_id = run_id
        #: A short title for the run, published with ``run.started``.
        self.title = title
        #: A sub-agent's name (the parent call's tool unless given), once started.
        self.agent = agent
        self._started = False
        self._finished = False
        # The call this run is a sub-agent of: given (CallHandle.subagent), or the call
        # whose block starts it (found at start()).
        self._parent = parent
        self._given_parent = parent is not None
        #: How deep the run is nested: 0 for a run of its own, 1 for a sub-agent's...
        self.depth = 0
        self._interrupted = False
        self._token: contextvars.Token[tuple[RunScope, ...]] | None = None

    def __repr__(self) -> str:
        return f"<RunScope {self.run_id!r} started={self._started} finished={self._finished}>"

    @property
    def started(self) -> bool:
        """True once ``run.started`` was published."""
        return self._started

    @property
    def finished(self) -> bool:
        """True once ``run.finished`` was published."""
        return self._finished

    @property
    def parent_call_id(self) -> str | None:
        """The call whose sub-agent this run is (known once started), if any."""
        parent = self._parent
        return None if parent is None else parent.call_id

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
            parent = self._parent
            if parent is None:
                parent = self._parent = _enclosing_call(t)
            if t._closed:
                t._violation(
                    f"run {self.run_id!r}: the tracker is closed", self.run_id, "closed", "start"
                )
                return self
            if parent is not None and not subagents.may_nest(parent, self):
                if self._given_parent and not parent.hidden:
                    return self  # a violation: the call ended, or waits for a person
                parent = self._parent = None  # a run of its own
            if parent is None:
                self._started = True
                t._runs[self.run_id] = self
                t._publish(RunStarted, run_id=self.run_id, title=title)
                return self
            self._started = True
            self.agent = self.agent or parent.tool
            t._runs[self.run_id] = self
            t._nested += 1
            subagents.adopt(parent, self)
            t._publish(
                RunStarted,
                run_id=self.run_id,
                title=title,
                parent_call_id=parent.call_id,
                parent_run_id=parent.run_id,
                agent=self.agent,
            )
        return self

    def finish(
        self,
        outcome: RunOutcome = "completed",
        *,
        error: BaseException | str | ErrorInfo | None = None,
    ) -> None:
        """Close the run's open calls, then publish ``run.finished`` (once).

        ``"interrupted"``: the run stops to wait for a person; its calls waiting for a
        decision (before they run, or asked from inside a running tool the framework
        suspended, or inside a sub-agent of theirs) stay open (the run that resumes them
        adopts them by ``call_id``)."""
        if outcome not in ("completed", "failed", "cancelled", "interrupted"):
            raise ValueError(
                f"outcome must be completed, failed, cancelled or interrupted, not {outcome!r}"
            )
        t = self._tracker
        info = t.payload.error(error) if error is not None else None
        with t._lock:
            if not self._started or self._finished:
                state = "finished" if self._finished else "not started"
                t._violation(f"run {self.run_id!r} is {state}", self.run_id, state, "finish")
                return
            self._finish_locked(outcome, info, None)

    def _finish_locked(
        self, outcome: RunOutcome, info: ErrorInfo | None, reason: str | None
    ) -> None:
        """Close the open calls (with ``reason``, when the run is ended by its parent
        call's end), then publish ``run.finished`` (the tracker's lock is held)."""
        t = self._tracker
        self._finished = True
        keep = outcome == "interrupted"  # calls waiting for a decision stay open
        t._close_calls(
            [
                h
                for h in t._open.values()
                if h.run_id == self.run_id and not (keep and subagents.waits(h))
            ],
            reason or "run finished",
        )
        t._finish_messages(self.run_id)
        t._runs.pop(self.run_id, None)
        parent = self._parent
        if parent is not None:
            t._nested -= 1
            self._interrupted = keep
            subagents.release(parent, self)
        if parent is None and reason is None:  # a run of its own: nothing nested to say
            t._publish(RunFinished, run_id=self.run_id, outcome=outcome, error=info)
            return
        t._publish(
            RunFinished,
            run_id=self.run_id,
            outcome=outcome,
            error=info,
            reason=None if reason is None else t.payload.text(reason),
            parent_call_id=None if parent is None else parent.call_id,
        )

    def _end(self, exc: BaseException | None) -> None:
        _reset(current_runs, self._token)
        self._token = None
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
        self._token = current_runs.set((*current_runs.get(), self))
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


def _enclosing_call(tracker: Tracker) -> CallHandle | None:
    """The open call of ``tracker`` whose block a run is started in: the run is that
    call's sub-agent. (A run of another tracker, even of the same session, is not
    nested: a call's end could not end it in the same hold of one lock.)"""
    current = current_call.get()
    if current is None or current.done or current._tracker is not tracker:
        return None
    return current


PhaseName = Literal["queued", "running", "done"]


class Batch:
    """Parallel calls under a concurrency ``limit``: each is announced ``queued`` at
    once, runs when a slot frees, and ``batch.phase`` events mark the batch's
    progress (queued -> running -> done), each describing all the batch's calls as
    they are at that moment.

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
        self._phase: PhaseName | None = None
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
        scope = self.call(name, bind_args(fn, args, {}), call_id=call_id, title=title)
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
        # The first call to wait for a slot: every call announced so far is queued
        # (start_soon's tasks run after the loop that announced them).
        if self._phase is None:
            self._set_phase("queued")
        semaphore = self._semaphore
        if semaphore is not None:
            await semaphore.acquire()
        self._waiting = max(0, self._waiting - 1)

    def _running(self) -> None:
        """A call of the batch started running."""
        if self._phase in (None, "queued"):
            self._set_phase("running")

    def _release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()

    def _set_phase(self, phase: PhaseName) -> None:
        self._phase = phase
        counts: dict[str, int] = {}
        for h in self._handles:
            if h.hidden:
                continue
            state = h.state
            key = state.value if state is not None else "created"
            counts[key] = counts.get(key, 0) + 1
        t = self._tracker
        run_id = t._run_for(None)
        t._publish(
            BatchPhase,
            batch_id=self.batch_id,
            phase=phase,
            call_ids=tuple(h.call_id for h in self._handles if not h.hidden),
            counts=counts,
            run_id=run_id,
            parent_call_id=t._run_parent(run_id) if t._nested else None,
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
                reason = cancel_reason(exc)
            for h in self._handles:
                if h._state != DONE and h._state != RUNNING:
                    h.cancel(reason)  # announced but never entered
            if self._handles:
                self._set_phase("done")


def bind_args(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
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
