"""Where the agents of the requests an app starts run: ``ChatApp``'s turns and
``A2AApp``'s tasks alike. A request claims its run, its agent's tasks live in a group of
their own (a client going away ends only the response; a stop or cancel ends only the
agent), and an agent that raises ends its run ``failed`` — announced failed when it
never was — so every client gets its protocol's error, never a cut response."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio
import attrs
from anyio.abc import TaskGroup

from toolstream import (
    Bus,
    BusClosed,
    BusUnavailable,
    PayloadPolicy,
    RunFinished,
    RunStarted,
)
from toolstream import _serving as serving

__all__ = ["Agents", "CancelTurn", "StartTurn", "TurnRequest", "describe"]


@attrs.frozen(kw_only=True)
class TurnRequest:
    """What ``start_turn`` gets: start the agent on ``session`` as run ``run_id``.

    ``messages`` and ``body`` are the client's own (AI SDK UI messages and its request
    body; AG-UI's ``RunAgentInput`` messages and the whole input); ``principal`` is
    what ``authorize`` returned (``None`` without ``authorize``).
    :meth:`start_soon` runs the agent in this server process: the task outlives the
    response (a client going away never stops it) and ``POST …/<chat id>/stop``
    cancels it.
    """

    session: str
    run_id: str
    messages: list[Any]
    body: dict[str, Any]
    principal: Any = None
    #: The bus the ``ChatApp`` serves (what the agent's tracker publishes on).
    bus: Bus | None = None
    _task_group: TaskGroup | None = attrs.field(default=None, alias="task_group", repr=False)
    _on_error: _AgentFailed | None = attrs.field(default=None, alias="on_error", repr=False)

    @property
    def user_text(self) -> str:
        """The text of the newest user message (AI SDK: its text parts; AG-UI: its
        ``content``), or ``""``."""
        for message in reversed(self.messages):
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = message.get("parts")
            if isinstance(parts, list):
                return "".join(
                    p["text"]
                    for p in parts
                    if isinstance(p, dict)
                    and p.get("type") == "text"
                    and isinstance(p.get("text"), str)
                )
            return ""
        return ""

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``await fn(*args)`` as this turn's agent, in the server process. If it
        raises, the server logs one line with the reason and the run ends ``failed``
        (a run it never announced is announced failed): the client gets the dialect's
        error, never a cut response."""
        if self._task_group is None:
            raise RuntimeError(f"this {type(self).__name__} was not made by an app's request")
        self._task_group.start_soon(self._guarded, fn, args)

    async def _guarded(self, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any) -> None:
        try:
            await fn(*args)
        except Exception as exc:
            if self._on_error is None:
                raise
            await self._on_error(self.session, self.run_id, exc)


class _AgentFailed(Protocol):
    async def __call__(self, session: str, run_id: str, exc: BaseException) -> None: ...


#: ``start_turn(request)``: start the agent (a task via ``request.start_soon``, or a
#: job for a worker process) so that it announces run ``request.run_id``.
StartTurn = Callable[[TurnRequest], Awaitable[None]]
#: ``cancel_turn(session, run_id)``: cancel a turn running elsewhere (a worker
#: process); True when it was found.
CancelTurn = Callable[[str, str], Awaitable[bool]]


@attrs.define
class _Running:
    """An agent running in this process: its cancel scope once it has one."""

    scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


def describe(exc: BaseException) -> str:
    """``"RuntimeError: the model is unavailable"`` (the leaves of an exception group)."""
    leaves = getattr(exc, "exceptions", None)
    if isinstance(leaves, tuple) and leaves:
        return "; ".join(describe(e) for e in leaves)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Agents:
    """The agents an app started in this process, by ``(session, run_id)``.

    ``where`` names a run in log lines (``"chat %r run %r"``, ``"context %r task %r"``).
    """

    def __init__(
        self, bus: Bus, streams: serving.OpenStreams, log: logging.Logger, where: str
    ) -> None:
        self.bus = bus
        self._streams = streams
        self._log = log
        self._where = where
        self.running: dict[tuple[str, str], _Running] = {}
        self._policy = PayloadPolicy()  # for the error of an agent that failed to start

    def claim(self, session: str, run_id: str) -> _Running | None:
        """Claim run ``run_id`` (before any await: one request per run); None when an
        agent of it runs here already."""
        key = (session, run_id)
        if key in self.running:
            return None
        running = self.running[key] = _Running()
        return running

    def forget(self, session: str, run_id: str, running: _Running) -> None:
        """The run's agent is done (or never started)."""
        if self.running.get((session, run_id)) is running:
            del self.running[(session, run_id)]

    def cancel(self, session: str) -> list[str]:
        """Cancel every agent of ``session`` running here; their run ids."""
        stopped: list[str] = []
        for (of, run_id), running in list(self.running.items()):
            if of == session:
                running.cancel()
                stopped.append(run_id)
        return stopped

    @asynccontextmanager
    async def started(
        self,
        session: str,
        run_id: str,
        running: _Running,
        start: Callable[[TaskGroup], Awaitable[None]],
        what: str,
    ) -> AsyncIterator[None]:
        """Start the claimed run's agent — ``start(group)`` makes the request with the
        agent's task group and calls the app's hook, named ``what`` in the log — and
        hold it while the body (the response) runs. A hook that raises cancels what it
        started and fails the run if it never announced it."""
        started = anyio.Event()

        def done() -> None:
            self.forget(session, run_id, running)

        async with anyio.create_task_group() as outer:
            # The agent's tasks live in their own group: a client going away ends only
            # the response; a stop cancels only the agent. The run is forgotten when
            # they end.
            agents: TaskGroup = await outer.start(_host_agents, started, done, self._streams)
            running.scope = agents.cancel_scope
            try:
                await start(agents)
            except Exception as exc:
                agents.cancel_scope.cancel()  # what it started before it raised stops too
                self.log_failure(what, session, run_id, exc)
                await self.fail_run(session, run_id, exc, only_unknown=True)
            finally:
                started.set()  # the agent's group now ends with its tasks
            yield

    async def failed(self, session: str, run_id: str, exc: BaseException) -> None:
        """An agent started with ``start_soon`` raised: one log line, and its run ends
        ``failed`` if it is still open (announced failed if it never was)."""
        self.log_failure("the agent", session, run_id, exc)
        await self.fail_run(session, run_id, exc, only_unknown=False)

    async def fail_run(
        self, session: str, run_id: str, exc: BaseException, *, only_unknown: bool
    ) -> None:
        """End run ``run_id`` ``failed`` with ``exc`` as its error: always when the bus
        never heard of it (announced first), otherwise only while it runs and not
        ``only_unknown``."""
        try:
            runs = {r.run_id: r for r in (await serving.snapshot_of(self.bus, session)).runs}
            run = runs.get(run_id)
            error = self._policy.error(exc)
            if run is None:
                self.bus.publish(RunStarted, session=session, run_id=run_id)
            elif only_unknown or run.state != "running":
                return
            self.bus.publish(
                RunFinished, session=session, run_id=run_id, outcome="failed", error=error
            )
        except (BusUnavailable, BusClosed) as exc2:
            where = self._where % (session, run_id)
            self._log.warning("%s: could not announce it failed: %s", where, exc2)

    def log_failure(self, what: str, session: str, run_id: str, exc: BaseException) -> None:
        """One line with the reason (the traceback at debug level)."""
        where = self._where % (session, run_id)
        self._log.error("%s: %s failed: %s", where, what, describe(exc))
        self._log.debug("the failure of %s", where, exc_info=exc)


async def _host_agents(
    started: anyio.Event,
    done: Callable[[], None],
    streams: serving.OpenStreams,
    *,
    task_status: anyio.abc.TaskStatus[TaskGroup],
) -> None:
    """Hold a task group for a run's agent: open until the app's hook returned, then
    until the agent's tasks end; ``done()`` after. The server exiting (or the app's
    ``shutdown()``) cancels them: an agent never holds a server open."""
    try:
        with anyio.CancelScope() as scope, streams.serving(scope), serving.watched(scope):
            async with anyio.create_task_group() as agents:
                task_status.started(agents)
                await started.wait()
    finally:
        done()
