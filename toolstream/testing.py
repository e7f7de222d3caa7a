"""Helpers for testing code that uses toolstream, and the ``Bus`` conformance suite.

::

    from toolstream.testing import Recorder, assert_lifecycle

    async with Recorder(bus, session="s1") as rec:
        await run_my_agent(tracker)
        assert_lifecycle(rec.events)      # every call ended exactly once, in order

Nothing here needs pytest; the conformance checks are plain async functions that
raise ``AssertionError``, to parametrize a test with::

    @pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
    async def test_my_bus(check):
        await check(make_my_bus)

``MemoryBroker`` is a broker in process memory: ``BrokerBus(MemoryBroker())`` is a
broker-backed bus with no server, several ``BrokerBus`` over one ``MemoryBroker`` behave
as processes sharing a broker, and its hooks (``down()``, ``stall()``, ``after()``,
``lose_data()``) make the broker fail on purpose. ``StallingBroker(driver)`` gives any
other driver (a real broker's) the ``stall()`` and ``after()`` hooks.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ._conformance import BusFactory, bus_conformance_checks
from ._core.bus import Bus
from ._core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    MessageDelta,
    MessageFinished,
    MessageStarted,
    RunFinished,
    RunStarted,
    StreamReset,
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
from ._core.ids import parse_event_id
from ._core.memory_broker import BrokerDown, MemoryBroker
from ._core.stalling import StallingBroker
from ._core.subscription import Subscription

__all__ = [
    "BrokerDown",
    "BusFactory",
    "MemoryBroker",
    "Recorder",
    "StallingBroker",
    "assert_ids_increase",
    "assert_lifecycle",
    "bus_conformance_checks",
    "serve",
    "sse_data",
]

E = TypeVar("E", bound=Event)

_RANK: dict[type[Event], float] = {
    ToolCreated: 0,
    ToolArgsDelta: 0,
    ToolReady: 1,
    ToolQueued: 2,
    ToolStarted: 3,
    ToolProgress: 3,
    ToolOutputDelta: 3,
    ToolOutputPartial: 3,
    ToolCompleted: 4,
    ToolFailed: 4,
    ToolCancelled: 4,
    ToolDenied: 4,
    ApprovalRequested: 1.5,
    ApprovalResolved: 1.5,
}
_TERMINALS = (ToolCompleted, ToolFailed, ToolCancelled, ToolDenied)
_STATE_EVENTS: dict[type[Event], float] = {
    ToolCreated: 0,
    ToolReady: 1,
    ToolQueued: 2,
    ToolStarted: 3,
}


class Recorder:
    """Records what a subscription delivers. ``async with Recorder(bus, ...) as rec``;
    ``rec.events`` is everything delivered so far (taken without waiting)."""

    def __init__(self, bus: Bus, *types: type[Event], **subscribe: Any) -> None:
        self._sub: Subscription[Event] = bus.subscribe(*types, **subscribe)
        self._events: list[Event] = []

    @property
    def subscription(self) -> Subscription[Event]:
        """The underlying subscription."""
        return self._sub

    @property
    def events(self) -> list[Event]:
        """Every event delivered so far, in order (also after the recorder closed)."""
        if not self._sub.closed:
            self._events.extend(self._sub.take_nowait())
        return list(self._events)

    def of(self, call_id: str) -> list[Event]:
        """The events of one call."""
        return [e for e in self.events if e.call_id == call_id]

    def types(self, call_id: str | None = None) -> list[str]:
        """The wire names of the events (of one call, with ``call_id``)."""
        events = self.events if call_id is None else self.of(call_id)
        return [e.type for e in events]

    async def wait_for(self, predicate: Callable[[list[Event]], bool]) -> list[Event]:
        """Wait until ``predicate(events)`` holds (bound it with ``anyio.fail_after``)."""
        if not predicate(self.events):
            async for event in self._sub:
                self._events.append(event)
                if predicate(self._events):
                    break
        return list(self._events)

    def close(self) -> None:
        """Keep what was delivered and not yet read, then release the subscription."""
        if not self._sub.closed:
            self._events.extend(self._sub.take_nowait())
        self._sub.close()

    async def __aenter__(self) -> Recorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


def assert_ids_increase(
    events: Sequence[Event], compare: Callable[[str, str], int] | None = None
) -> None:
    """Every id is after the previous one (resets may repeat the position they mark)."""
    previous: Event | None = None
    for event in events:
        if previous is not None:
            if compare is not None:
                order = compare(previous.id, event.id)
            else:
                ea, sa = parse_event_id(previous.id)
                eb, sb = parse_event_id(event.id)
                assert ea == eb, f"ids of different epochs in one stream: {previous.id}, {event.id}"
                order = (sa > sb) - (sa < sb)
            repeat_ok = isinstance(event, StreamReset) or isinstance(previous, StreamReset)
            assert order < 0 or (order == 0 and repeat_ok), (
                f"ids do not increase: {previous.id} ({previous.type}) "
                f"then {event.id} ({event.type})"
            )
        previous = event


def assert_lifecycle(
    events: Iterable[Event],
    *,
    allow_open: bool = False,
    compare: Callable[[str, str], int] | None = None,
) -> None:
    """Check the lifecycle guarantees on a recorded stream (``AssertionError`` otherwise):

    ids increase; per call, states only move forward, the first event is not a
    terminal, exactly one terminal ends it and nothing follows; every announced
    call ended (unless ``allow_open``); a run's calls ended before its
    ``run.finished`` (a run finished ``interrupted`` may leave open the calls that
    asked for approval, decided or not: the run that resumes them adopts them), and
    each run started and finished once; a sub-agent's run starts under an announced
    call that has not ended, and finishes before that call's terminal (children before
    their parent); every approval requested is resolved exactly once (unless
    ``allow_open``), and only a requested one; every
    message starts once, gets text only while open, finishes once, and before its run's
    ``run.finished``.
    """
    events = list(events)
    _check_messages(events, allow_open)
    assert_ids_increase(events, compare)
    state: dict[str, float] = {}
    approvals: dict[str, str] = {}  # approval id -> call id, while pending
    gated: set[str] = set()  # calls that asked for approval
    resolved: set[str] = set()
    run_of: dict[str, str | None] = {}
    ended: dict[str, Event] = {}
    runs_started: set[str] = set()
    runs_finished: set[str] = set()
    subruns: dict[str, set[str]] = {}  # call id -> its sub-agents' runs not finished
    parent_of_run: dict[str, str] = {}  # a sub-agent's run -> its parent call
    for event in events:
        kind = type(event)
        if kind is RunStarted:
            run = event.run_id or ""
            assert run not in runs_started, f"run {run!r} started twice"
            runs_started.add(run)
            parent = event.parent_call_id
            if parent is not None:
                assert parent in state, f"sub-agent run {run!r} under unknown call {parent!r}"
                assert parent not in ended, (
                    f"sub-agent run {run!r} started under call {parent!r} after its end"
                )
                subruns.setdefault(parent, set()).add(run)
                parent_of_run[run] = parent
            continue
        if kind is RunFinished:
            run = event.run_id or ""
            assert run not in runs_finished, f"run {run!r} finished twice"
            runs_finished.add(run)
            for open_runs in subruns.values():
                open_runs.discard(run)
            # pending or decided: the run that resumes them adopts them
            waiting = {c for c in gated if c not in ended}
            for call in list(waiting):  # a call whose sub-agent waits is suspended too
                up = parent_of_run.get(run_of.get(call) or "")
                while up is not None and up not in waiting:
                    waiting.add(up)
                    up = parent_of_run.get(run_of.get(up) or "")
            interrupted = getattr(event, "outcome", None) == "interrupted"
            still_open = [
                c
                for c in state
                if c not in ended and run_of.get(c) == run and not (interrupted and c in waiting)
            ]
            assert not still_open, f"run {run!r} finished with calls still open: {still_open}"
            continue
        if kind not in _RANK:
            continue
        call_id = event.call_id
        if event.run_id is not None or call_id not in run_of:
            run_of[call_id] = event.run_id
        if kind is ApprovalRequested:
            approval_id = getattr(event, "approval_id", "")
            twice = approval_id in approvals or approval_id in resolved
            assert not twice, f"approval {approval_id!r} requested twice"
            approvals[approval_id] = call_id
            gated.add(call_id)
        elif kind is ApprovalResolved:
            approval_id = getattr(event, "approval_id", "")
            assert approval_id not in resolved, f"approval {approval_id!r} resolved twice"
            assert approval_id in approvals, f"approval {approval_id!r} resolved, never requested"
            del approvals[approval_id]
            resolved.add(approval_id)
            continue
        assert call_id not in ended, (
            f"call {call_id!r}: {event.type} (id {event.id}) after its terminal "
            f"{ended[call_id].type} (id {ended[call_id].id})"
        )
        if call_id not in state:
            assert kind not in _TERMINALS, (
                f"call {call_id!r}: first event is the terminal {event.type}"
            )
            state[call_id] = -1
        if kind in _STATE_EVENTS:
            rank = _STATE_EVENTS[kind]
            assert rank > state[call_id] or (rank == 0 and state[call_id] == -1), (
                f"call {call_id!r}: {event.type} does not move its state forward"
            )
            state[call_id] = rank
        elif kind is ToolArgsDelta:
            assert state[call_id] <= 0, (
                f"call {call_id!r}: input delta after its input was complete"
            )
        elif kind in _TERMINALS:
            ended[call_id] = event
            left = subruns.pop(call_id, None)
            assert not left, (
                f"call {call_id!r} ended (id {event.id}) before its sub-agent runs {sorted(left)}"
            )
            undecided = [a for a, c in approvals.items() if c == call_id]
            assert not undecided, f"call {call_id!r} ended with approval {undecided} undecided"
        elif kind is ApprovalRequested:
            if getattr(event, "running", False):
                assert state[call_id] == 3, f"call {call_id!r}: a running approval, not running"
            else:
                assert state[call_id] < 1.5, (
                    f"call {call_id!r}: approval asked after the call went on"
                )
                state[call_id] = 1.5
        else:
            state[call_id] = max(state[call_id], 3)
    if not allow_open:
        never = [c for c in state if c not in ended]
        assert not never, f"calls never ended: {never}"
        assert not approvals, f"approvals never resolved: {sorted(approvals)}"


def _check_messages(events: list[Event], allow_open: bool) -> None:
    """The message part of :func:`assert_lifecycle`."""
    open_: dict[str, str | None] = {}  # message id -> its run, while open
    done: set[str] = set()
    for event in events:
        if isinstance(event, MessageStarted):
            mid = event.message_id
            assert mid not in (open_.keys() | done), f"message {mid!r} started twice"
            open_[mid] = event.run_id
        elif isinstance(event, (MessageDelta, MessageFinished)):
            mid = event.message_id
            assert mid in open_, f"message {mid!r}: {event.type} (id {event.id}) while not open"
            if isinstance(event, MessageFinished):
                del open_[mid]
                done.add(mid)
        elif isinstance(event, RunFinished):
            left = [m for m, run in open_.items() if run == event.run_id]
            assert not left, f"run {event.run_id!r} finished with messages still open: {left}"
    if not allow_open:
        assert not open_, f"messages never finished: {sorted(open_)}"


def _run_of(events: Sequence[Event], call_id: str) -> str | None:
    for event in events:
        if event.call_id == call_id:
            return event.run_id
    return None


@contextlib.contextmanager
def serve(app: Any, *, host: str = "127.0.0.1", timeout: float = 10.0) -> Iterator[str]:
    """Serve the ASGI ``app`` under uvicorn in a thread, on a free port of ``host``, for
    as long as the ``with`` block runs; yields the base URL (``http://127.0.0.1:<port>``).

    For your own tests of a gateway (and the docs' examples). Needs uvicorn (the
    ``server`` extra)."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"toolstream-serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)


def sse_data(body: str) -> list[Any]:
    """The ``data:`` of every frame of an SSE response body, JSON-decoded (a data that
    is not JSON, such as the AI SDK's ``[DONE]``, as its text)."""
    out: list[Any] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [
            line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")
        ]
        if not lines:
            continue
        data = "\n".join(lines)
        try:
            out.append(json.loads(data))
        except ValueError:
            out.append(data)
    return out
