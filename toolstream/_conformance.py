"""The ``Bus`` conformance suite: plain async checks that any ``Bus`` must pass
(``toolstream.testing.bus_conformance_checks`` returns them)."""

from __future__ import annotations

import inspect
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

from ._core.approvals import Decision
from ._core.bus import Bus
from ._core.errors import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    SlowConsumer,
)
from ._core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    MessageDelta,
    MessageFinished,
    MessageStarted,
    RunFinished,
    RunStarted,
    Snapshot,
    StreamReset,
    ToolArgsDelta,
    ToolCompleted,
    ToolCreated,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolStarted,
)
from ._core.subscription import Subscription
from ._core.view import LiveView

BusFactory = Callable[[], "Bus | Awaitable[Bus]"]


async def _make(factory: BusFactory) -> Bus:
    bus = factory()
    if inspect.isawaitable(bus):
        bus = await bus
    assert isinstance(bus, Bus), f"{bus!r} does not satisfy the Bus protocol"
    return bus


_DEADLINE = 10.0  # seconds any single check may wait for events


async def _drain(sub: Subscription[Any], count: int) -> list[Event]:
    out: list[Event] = []
    with anyio.fail_after(_DEADLINE):
        async for event in sub:
            out.append(event)
            if len(out) >= count:
                break
    return out


async def _backlog(sub: Subscription[Any], count: int) -> None:
    """Wait until ``count`` events wait in ``sub``: at once on ``EventBus``; a
    broker-backed bus takes a round trip to bring them."""
    await sub.prepare()
    for _ in range(int(_DEADLINE / 0.005)):
        if sub.backlog >= count:
            return
        await anyio.sleep(0.005)
    raise AssertionError(f"{count} events did not reach the subscription in {_DEADLINE} s")


def _progress(bus: Bus, session: str, n: int, call_id: str = "c") -> list[Event]:
    return [
        bus.publish(ToolProgress, session=session, call_id=call_id, tool="t", current=i)
        for i in range(n)
    ]


async def check_ids_increase(factory: BusFactory) -> None:
    """Published ids increase by ``bus.compare`` across sessions."""
    bus = await _make(factory)
    try:
        events = [
            bus.publish(ToolProgress, session=f"s{i % 3}", call_id="c", tool="t") for i in range(20)
        ]
        for a, b in itertools.pairwise(events):
            assert bus.compare(a.id, b.id) == -1, (a.id, b.id)
            assert bus.compare(b.id, a.id) == 1, (b.id, a.id)
            assert bus.compare(a.id, a.id) == 0
    finally:
        await bus.aclose()


async def check_live_in_order(factory: BusFactory) -> None:
    """A live subscriber gets every event of its session, in order, and nothing else."""
    bus = await _make(factory)
    try:
        async with bus.subscribe(session="a") as sub:
            published = []
            for i in range(50):
                published.append(
                    bus.publish(ToolProgress, session="a", call_id="c", tool="t", current=i)
                )
                bus.publish(ToolProgress, session="b", call_id="c", tool="t", current=i)
            got = await _drain(sub, 50)
            assert [e.id for e in got] == [e.id for e in published]
            assert all(e.session == "a" for e in got)
    finally:
        await bus.aclose()


async def check_replay_every_position(factory: BusFactory) -> None:
    """``after=`` any id gives exactly the events after it, then live ones, no gap, no duplicate."""
    bus = await _make(factory)
    try:
        published = _progress(bus, "s", 30)
        for k, cut in enumerate(list(published)):
            async with bus.subscribe(session="s", after=cut.id) as sub:
                expected = [e.id for e in published[k + 1 :]]
                got = await _drain(sub, len(expected)) if expected else []
                assert [e.id for e in got] == expected, f"replay after position {k}"
                live = bus.publish(ToolProgress, session="s", call_id="live", tool="t")
                nxt = await _drain(sub, 1)
                assert [e.id for e in nxt] == [live.id]
                published.append(live)
    finally:
        await bus.aclose()


async def check_foreign_cursor_resets(factory: BusFactory) -> None:
    """A cursor from another bus (a restart), from the future or malformed gets a reset."""
    bus = await _make(factory)
    other = await _make(factory)
    try:
        _progress(bus, "s", 3)
        foreign = other.publish(ToolProgress, session="s", call_id="c", tool="t")
        for cursor in (foreign.id, "not-an-id", "x"):
            async with bus.subscribe(session="s", after=cursor) as sub:
                first = await _drain(sub, 1)
                assert isinstance(first[0], StreamReset), f"cursor {cursor!r}"
        try:
            bus.compare(foreign.id, _progress(bus, "s", 1)[0].id)
        except ValueError:
            pass
        else:
            raise AssertionError("ids of different buses compared without ValueError")
    finally:
        await bus.aclose()
        await other.aclose()


async def check_snapshot_first(factory: BusFactory) -> None:
    """``snapshot=True`` starts with a reset holding the session's open calls, then live events."""
    bus = await _make(factory)
    try:
        bus.publish(ToolStarted, session="s", call_id="open", tool="t", args={"q": 1})
        bus.publish(ToolStarted, session="s", call_id="done", tool="t")
        last = bus.publish(ToolCompleted, session="s", call_id="done", tool="t", result=1)
        async with bus.subscribe(session="s", snapshot=True) as sub:
            reset = (await _drain(sub, 1))[0]
            assert isinstance(reset, StreamReset)
            assert bus.compare(reset.id, last.id) == 0, "a reset's id is the bus position"
            states = {c.call_id: c.state.value for c in reset.snapshot.calls}
            assert states == {"open": "running", "done": "completed"}, states
            live = bus.publish(ToolCompleted, session="s", call_id="open", tool="t")
            assert [e.id for e in await _drain(sub, 1)] == [live.id]
        async with bus.subscribe(session="s", after=reset.id) as sub:
            assert [e.id for e in await _drain(sub, 1)] == [live.id]
        try:
            bus.subscribe(session="s", after=last.id, snapshot=True)
        except ValueError:
            pass
        else:
            raise AssertionError("after= with snapshot=True must raise ValueError")
    finally:
        await bus.aclose()


async def check_types_filter(factory: BusFactory) -> None:
    """Only the asked-for types are delivered; resets are delivered whatever the filter."""
    bus = await _make(factory)
    try:
        async with bus.subscribe(ToolCompleted, ToolFailed, session="s", snapshot=True) as sub:
            bus.publish(ToolStarted, session="s", call_id="a", tool="t")
            bus.publish(ToolProgress, session="s", call_id="a", tool="t")
            done = bus.publish(ToolCompleted, session="s", call_id="a", tool="t")
            got = await _drain(sub, 2)
            assert isinstance(got[0], StreamReset)
            assert [e.id for e in got[1:]] == [done.id]
    finally:
        await bus.aclose()


async def check_run_subscription(factory: BusFactory) -> None:
    """``run=`` gives only that run and ends after its ``run.finished``; a finished run
    gives its reset and ends."""
    bus = await _make(factory)
    try:
        sub = bus.subscribe(session="s", run="r1")
        bus.publish(RunStarted, session="s", run_id="r1")
        bus.publish(ToolStarted, session="s", run_id="r1", call_id="a", tool="t")
        bus.publish(ToolStarted, session="s", run_id="r2", call_id="b", tool="t")
        bus.publish(ToolCompleted, session="s", run_id="r1", call_id="a", tool="t")
        bus.publish(RunFinished, session="s", run_id="r1", outcome="completed")
        bus.publish(ToolProgress, session="s", run_id="r1", call_id="a", tool="t")
        got = []
        with anyio.fail_after(5):
            async for event in sub:
                got.append(event.type)
        assert got == ["run.started", "tool.started", "tool.completed", "run.finished"], got
        sub.close()
        got = []
        with anyio.fail_after(5):
            async with bus.subscribe(session="s", run="r1") as late:
                async for event in late:
                    got.append(event)
        assert len(got) == 1, got
        assert isinstance(got[0], StreamReset), got
        assert [c.call_id for c in got[0].snapshot.calls] == ["a"]
    finally:
        await bus.aclose()


def _session_with_subagents(bus: Bus) -> list[Event]:
    """Run r1 whose call c1 runs a sub-agent (s1) whose call c2 runs one (s2); run r2
    with a sub-agent of its own (x1) interleaved, as published."""
    p = bus.publish
    return [
        p(RunStarted, session="s", run_id="r1"),
        p(ToolStarted, session="s", run_id="r1", call_id="c1", tool="research"),
        p(RunStarted, session="s", run_id="r2"),
        p(
            RunStarted,
            session="s",
            run_id="s1",
            parent_call_id="c1",
            parent_run_id="r1",
            agent="researcher",
        ),
        p(ToolStarted, session="s", run_id="s1", call_id="c2", tool="t", parent_call_id="c1"),
        p(ToolStarted, session="s", run_id="r2", call_id="o1", tool="t"),
        p(RunStarted, session="s", run_id="x1", parent_call_id="o1", parent_run_id="r2"),
        p(
            RunStarted,
            session="s",
            run_id="s2",
            parent_call_id="c2",
            parent_run_id="s1",
            agent="reader",
        ),
        p(ToolStarted, session="s", run_id="x1", call_id="o2", tool="t", parent_call_id="o1"),
        p(ToolStarted, session="s", run_id="s2", call_id="c3", tool="t", parent_call_id="c2"),
        p(ToolCompleted, session="s", run_id="s2", call_id="c3", tool="t", parent_call_id="c2"),
        p(RunFinished, session="s", run_id="s2", parent_call_id="c2"),
        p(ToolCompleted, session="s", run_id="s1", call_id="c2", tool="t", parent_call_id="c1"),
        p(RunFinished, session="s", run_id="s1", parent_call_id="c1"),
        p(ToolCompleted, session="s", run_id="r1", call_id="c1", tool="research"),
        p(RunFinished, session="s", run_id="r1"),
        p(ToolCompleted, session="s", run_id="x1", call_id="o2", tool="t", parent_call_id="o1"),
    ]


async def check_run_subscription_follows_subagents(factory: BusFactory) -> None:
    """``run=X`` delivers X's events and those of its sub-agents' runs at any depth
    (``run.started`` with a ``parent_run_id`` in the tree), never another run's; resumed
    mid-sub-run its ``history`` holds the tree's events; a finished run's reset shows
    the whole tree."""
    bus = await _make(factory)
    try:
        whole = bus.subscribe(session="s", run="r1")
        published = _session_with_subagents(bus)
        tree = {"r1", "s1", "s2"}
        mine = [e for e in published if e.run_id in tree]
        got = []
        with anyio.fail_after(_DEADLINE):
            async for event in whole:
                got.append(event)
        whole.close()
        assert [e.id for e in got] == [e.id for e in mine], [(e.type, e.run_id) for e in got]
        # a sub-agent's run on its own: it and its sub-agents
        got = []
        with anyio.fail_after(_DEADLINE):
            async with bus.resume(session="s", after=_first_id(bus), run="s1") as sub:
                async for event in sub:
                    got.append(event)
        inner = [e for e in published if e.run_id in ("s1", "s2")]
        assert [e.id for e in got] == [e.id for e in inner], [(e.type, e.run_id) for e in got]
        # resumed in the middle of the deeper sub-run
        cut = next(e for e in published if e.call_id == "c3")
        async with bus.resume(session="s", after=cut.id, run="r1") as sub:
            await sub.prepare()
            assert sub.origin is not None
            assert not sub.origin.reset
            seen = [e for e in mine if bus.compare(e.id, cut.id) <= 0]
            assert [e.id for e in sub.origin.history] == [e.id for e in seen]
            state = sub.origin.state
            assert state is not None
            assert {r.run_id for r in state.runs} == tree, state.runs
            rest = [e for e in mine if bus.compare(e.id, cut.id) > 0]
            assert [e.id for e in await _drain(sub, len(rest))] == [e.id for e in rest]
        # the run is over: its reset, with the whole tree
        got = []
        with anyio.fail_after(_DEADLINE):
            async with bus.subscribe(session="s", run="r1") as late:
                async for event in late:
                    got.append(event)
        assert len(got) == 1, got
        assert isinstance(got[0], StreamReset), got
        snap = got[0].snapshot
        assert {c.call_id for c in snap.calls} == {"c1", "c2", "c3"}, snap.calls
        runs = {r.run_id: r for r in snap.runs}
        assert set(runs) == tree, runs
        assert (runs["s2"].parent_call_id, runs["s2"].parent_run_id) == ("c2", "s1")
        assert runs["s1"].agent == "researcher"
        calls = {c.call_id: c for c in snap.calls}
        assert calls["c1"].subruns == ("s1",), calls["c1"]
        assert calls["c2"].subruns == ("s2",), calls["c2"]
    finally:
        await bus.aclose()


async def check_disconnect_policy(factory: BusFactory) -> None:
    """A subscriber further behind than ``buffer`` is cut with ``SlowConsumer``; the
    publisher never waits for it and other subscribers lose nothing."""
    bus = await _make(factory)
    try:
        slow = bus.subscribe(session="s", buffer=10, overflow="disconnect")
        fast = bus.subscribe(session="s", buffer=1000)
        published = _progress(bus, "s", 50)
        got = await _drain(fast, 50)
        assert [e.id for e in got] == [e.id for e in published]
        try:
            await _drain(slow, 50)
        except SlowConsumer:
            pass
        else:
            raise AssertionError("a subscriber 50 events behind a buffer of 10 was not cut")
        slow.close()
        fast.close()
    finally:
        await bus.aclose()


async def check_coalesce_policy(factory: BusFactory) -> None:
    """``coalesce`` merges a call's queued deltas (text intact) and keeps lifecycle events."""
    bus = await _make(factory)
    try:
        sub = bus.subscribe(session="s", buffer=8)
        bus.publish(ToolStarted, session="s", call_id="c", tool="t")
        for i in range(12):
            bus.publish(ToolOutputDelta, session="s", call_id="c", tool="t", text=str(i % 10))
        done = bus.publish(ToolCompleted, session="s", call_id="c", tool="t")
        await _backlog(sub, 14)
        got = sub.take_nowait()
        text = "".join(e.text for e in got if isinstance(e, ToolOutputDelta))
        assert text == "".join(str(i % 10) for i in range(12)), text
        assert got[0].type == "tool.started", got
        assert got[-1].id == done.id, got
        assert len(got) <= 8, [e.type for e in got]
        sub.close()
    finally:
        await bus.aclose()


async def check_thread_publish(factory: BusFactory) -> None:
    """Events published from other threads (with and without an event loop of their own)
    reach a waiting subscriber, each thread's events in order."""
    bus = await _make(factory)
    try:
        async with bus.subscribe(session="s") as sub:

            def plain(n: int) -> None:
                for i in range(n):
                    bus.publish(ToolProgress, session="s", call_id="plain", tool="t", current=i)

            def with_loop(n: int) -> None:
                async def main() -> None:
                    for i in range(n):
                        bus.publish(ToolProgress, session="s", call_id="loop", tool="t", current=i)
                        await anyio.lowlevel.checkpoint()

                anyio.run(main)

            threads = [
                threading.Thread(target=plain, args=(200,)),
                threading.Thread(target=with_loop, args=(200,)),
            ]
            for t in threads:
                t.start()
            got = await _drain(sub, 400)
            for t in threads:
                t.join()
            for call in ("plain", "loop"):
                seq = [e.current for e in got if e.call_id == call and isinstance(e, ToolProgress)]
                assert seq == list(range(200)), f"{call}: {seq[:5]}..."
    finally:
        await bus.aclose()


async def check_snapshot_method(factory: BusFactory) -> None:
    """``bus.snapshot(session)`` shows the session's calls and runs as they stand."""
    bus = await _make(factory)
    try:
        bus.publish(RunStarted, session="s", run_id="r")
        bus.publish(ToolCreated, session="s", run_id="r", call_id="a", tool="t")
        bus.publish(ToolArgsDelta, session="s", run_id="r", call_id="a", tool="t", delta='{"x"')
        bus.publish(ToolStarted, session="s", run_id="r", call_id="b", tool="u")
        bus.publish(ToolFailed, session="s", run_id="r", call_id="b", tool="u")
        snap = bus.snapshot("s")
        calls = {c.call_id: c for c in snap.calls}
        assert calls["a"].state.value == "created", calls["a"]
        assert calls["a"].args_text == '{"x"'
        assert calls["b"].state.value == "failed"
        assert [r.run_id for r in snap.open_runs] == ["r"]
        assert bus.snapshot("nobody").calls == ()
    finally:
        await bus.aclose()


async def check_messages_in_snapshots_and_replays(factory: BusFactory) -> None:
    """A run's messages: their text in ``snapshot()``, in a late subscriber's reset, and
    replayed exactly from the run's ``first_event_id`` (what a chat resume reads)."""
    bus = await _make(factory)
    try:
        env: dict[str, Any] = {"session": "s", "run_id": "r"}
        bus.publish(RunStarted, **env)
        bus.publish(MessageStarted, **env, message_id="m", role="assistant")
        bus.publish(MessageDelta, **env, message_id="m", text="Hel", kind="text")
        bus.publish(MessageDelta, **env, message_id="m", text="why", kind="reasoning")
        bus.publish(MessageDelta, **env, message_id="m", text="lo", kind="text")
        late = bus.subscribe(session="s", snapshot=True)
        (reset,) = await _drain(late, 1)
        assert isinstance(reset, StreamReset), reset
        (message,) = reset.snapshot.messages
        assert (message.text, message.reasoning, message.finished) == ("Hello", "why", False)
        bus.publish(MessageFinished, **env, message_id="m")
        bus.publish(RunFinished, **env)
        snap = bus.snapshot("s")
        assert [(m.message_id, m.text, m.finished) for m in snap.messages] == [("m", "Hello", True)]
        (run,) = snap.runs
        assert run.first_event_id is not None
        replay = bus.resume(session="s", run="r", after=run.first_event_id, at=True)
        events = await _drain(replay, 7)
        assert [e.type for e in events] == [
            "run.started",
            "message.started",
            "message.delta",
            "message.delta",
            "message.delta",
            "message.finished",
            "run.finished",
        ]
        late.close()
        replay.close()
    finally:
        await bus.aclose()


async def check_close_ends_subscriptions(factory: BusFactory) -> None:
    """Closing the bus ends waiting subscriptions (their iteration stops)."""
    bus = await _make(factory)
    sub = bus.subscribe(session="s")
    done = anyio.Event()

    async def consume() -> None:
        async for _ in sub:
            pass
        done.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.sleep(0.01)
            await bus.aclose()
            await done.wait()


async def check_partial_output_kept(factory: BusFactory) -> None:
    """Coalescing keeps only the newest partial output and progress of a call."""
    bus = await _make(factory)
    try:
        sub = bus.subscribe(session="s", buffer=4)
        bus.publish(ToolStarted, session="s", call_id="c", tool="t")
        for i in range(6):
            bus.publish(ToolOutputPartial, session="s", call_id="c", tool="t", value=i)
        await _backlog(sub, 7)
        got = sub.take_nowait()
        partials = [e.value for e in got if isinstance(e, ToolOutputPartial)]
        assert partials == [5], partials
        sub.close()
    finally:
        await bus.aclose()


def _session_with_runs(bus: Bus) -> list[Event]:
    """Two interleaved runs and a call outside any run, as published."""
    return [
        bus.publish(RunStarted, session="s", run_id="r1"),
        bus.publish(ToolStarted, session="s", run_id="r1", call_id="a", tool="t"),
        bus.publish(RunStarted, session="s", run_id="r2"),
        bus.publish(ToolStarted, session="s", run_id="r2", call_id="b", tool="t"),
        bus.publish(ToolProgress, session="s", run_id="r1", call_id="a", tool="t", current=1),
        bus.publish(ToolStarted, session="s", call_id="c", tool="t"),
        bus.publish(ToolCompleted, session="s", run_id="r1", call_id="a", tool="t"),
        bus.publish(RunFinished, session="s", run_id="r1", outcome="completed"),
        bus.publish(ToolFailed, session="s", run_id="r2", call_id="b", tool="t"),
        bus.publish(ToolCompleted, session="s", call_id="c", tool="t"),
    ]


def _states(snapshot: Snapshot | None) -> dict[str, str]:
    assert snapshot is not None
    return {c.call_id: c.state.value for c in snapshot.calls}


async def check_resume_origin(factory: BusFactory) -> None:
    """``resume(after=id)`` at every position delivers exactly the events after it, and its
    ``origin`` says what the client has: ``history`` (the events up to the cursor, as
    this subscription delivers them), ``state`` (the state there); ``at=True`` starts at
    the event itself."""
    bus = await _make(factory)
    try:
        published = _session_with_runs(bus)
        for k, cut in enumerate(published):
            for at in (False, True):
                seen = k if at else k + 1
                async with bus.resume(session="s", after=cut.id, at=at) as sub:
                    await sub.prepare()
                    origin = sub.origin
                    assert origin is not None, (k, at)
                    assert not origin.reset, (k, at, origin)
                    assert origin.after == cut.id
                    assert [e.id for e in origin.history] == [e.id for e in published[:seen]]
                    view = LiveView()
                    view.fold(published[:seen])
                    assert _states(origin.state) == _states(view.snapshot()), (k, at)
                    rest = published[seen:]
                    got = await _drain(sub, len(rest)) if rest else []
                    assert [e.id for e in got] == [e.id for e in rest], (k, at)
    finally:
        await bus.aclose()


async def check_resume_filtered(factory: BusFactory) -> None:
    """A resumed run or typed subscription's ``history`` holds only what it delivers (a
    dialect primed with another run's events would send frames its client never saw),
    and its ``state`` is of its run; a cursor the bus cannot serve gives a reset."""
    bus = await _make(factory)
    try:
        published = _session_with_runs(bus)
        cut = published[5]
        async with bus.resume(session="s", after=cut.id, run="r2") as sub:
            await sub.prepare()
            assert sub.origin is not None
            assert {e.run_id for e in sub.origin.history} == {"r2"}, sub.origin.history
            assert _states(sub.origin.state) == {"b": "running"}
            got = await _drain(sub, 1)
            assert [e.type for e in got] == ["tool.failed"], got
        async with bus.resume(ToolCompleted, session="s", after=published[7].id) as sub:
            await sub.prepare()
            assert sub.origin is not None
            assert [e.type for e in sub.origin.history] == ["tool.completed"]
        async with bus.resume(session="s", after="not-an-id") as sub:
            await sub.prepare()
            assert sub.origin is not None
            assert sub.origin.reset
            assert isinstance((await _drain(sub, 1))[0], StreamReset)
    finally:
        await bus.aclose()


async def check_run_resumed_after_its_end(factory: BusFactory) -> None:
    """A run subscription resumed at or after its run's ``run.finished`` has nothing more
    to deliver and ends (no reset: the client has the run's end); resumed before it, it
    delivers the rest and ends there."""
    bus = await _make(factory)
    try:
        published = _session_with_runs(bus)
        finished = published[7]
        for after in (finished.id, published[-1].id):
            got = []
            with anyio.fail_after(_DEADLINE):
                async with bus.resume(session="s", after=after, run="r1") as sub:
                    async for event in sub:
                        got.append(event)
            assert got == [], got
        got = []
        with anyio.fail_after(_DEADLINE):
            async with bus.resume(session="s", after=published[4].id, run="r1") as sub:
                async for event in sub:
                    got.append(event)
        assert [e.type for e in got] == ["tool.completed", "run.finished"], got
    finally:
        await bus.aclose()


async def _requested(bus: Bus, session: str, approval_id: str) -> None:
    """Wait until the bus knows the approval (a broker-backed bus writes it first)."""
    with anyio.fail_after(_DEADLINE):
        while True:
            try:
                await bus.decision(session, approval_id)
                return
            except ApprovalNotFound:
                await anyio.sleep(0.005)


async def _events_of(bus: Bus, session: str, call_id: str, count: int) -> list[Event]:
    async with bus.subscribe(session=session, after=_first_id(bus)) as sub:
        out: list[Event] = []
        with anyio.fail_after(_DEADLINE):
            async for event in sub:
                if event.call_id == call_id:
                    out.append(event)
                    if len(out) >= count:
                        return out
    return out


def _first_id(bus: Bus) -> str:
    epoch = getattr(bus, "epoch", "")
    return f"{epoch}-0"


async def _refused(bus: Bus, session: str, approval_id: str) -> ApprovalResolved:
    """A late decision's refusal: the resolution that won."""
    try:
        await bus.resolve_approval(session, approval_id, approved=True, by="late")
    except (ApprovalAlreadyResolved, ApprovalExpired) as exc:
        resolution: ApprovalResolved = exc.resolution
        return resolution
    raise AssertionError(f"a late decision on {approval_id!r} won")


async def check_approval_one_decision_wins(factory: BusFactory) -> None:
    """Of many concurrent decisions exactly one wins; the others get the winner; an
    unknown id and another session's id get the same ``ApprovalNotFound``; the tool
    gets the real edited args."""
    from ._core.tracker import Tracker

    bus = await _make(factory)
    try:
        tracker = Tracker(bus, "a")
        approval_id = tracker.create("send", call_id="c").await_approval()
        await _requested(bus, "a", approval_id)
        for session, ident in (("b", approval_id), ("a", "apr_" + "0" * 32)):
            try:
                await bus.resolve_approval(session, ident, approved=True)
            except ApprovalNotFound:
                pass
            else:
                raise AssertionError(f"decided {ident!r} from session {session!r}")
        results: list[object] = []

        async def decide(i: int) -> None:
            try:
                edited = {"to": f"user{i}", "token": "sk-live-0123456789abcdef0123"}
                results.append(
                    await bus.resolve_approval(
                        "a", approval_id, approved=True, by=f"u{i}", args=edited
                    )
                )
            except ApprovalAlreadyResolved as exc:
                results.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(decide, i)
        winners = [r for r in results if isinstance(r, ApprovalResolved)]
        assert len(winners) == 1, results
        won = winners[0]
        for lost in results:
            if isinstance(lost, ApprovalAlreadyResolved):
                assert lost.resolution == won, (lost.resolution, won)
        assert isinstance(won.args, dict)
        assert won.args["token"] != "sk-live-0123456789abcdef0123", "redacted on the wire"
        decision = await tracker.decision(approval_id)
        assert decision.by == won.by
        assert decision.args is not None
        assert decision.args["token"] == "sk-live-0123456789abcdef0123", "real args for the tool"
        tracker.close()
    finally:
        await bus.aclose()


async def check_approval_denied_while_waiting(factory: BusFactory) -> None:
    """A call waiting for a person who refuses ends ``tool.denied`` once; the block never
    runs."""
    from ._core.errors import ApprovalDenied
    from ._core.tracker import Tracker

    bus = await _make(factory)
    try:
        tracker = Tracker(bus, "a")
        outcome: list[object] = []

        async def agent() -> None:
            try:
                async with tracker.call("rm", {"path": "/"}, approval="Deletes", call_id="c"):
                    outcome.append("ran")
            except ApprovalDenied as exc:
                outcome.append(exc.decision)

        async def person() -> None:
            async with bus.subscribe(ApprovalRequested, session="a", snapshot=True) as sub:
                with anyio.fail_after(_DEADLINE):
                    async for event in sub:
                        if isinstance(event, ApprovalRequested):
                            approval_id = event.approval_id
                            break
                        snapshot = getattr(event, "snapshot", None)
                        calls = snapshot.calls if snapshot is not None else ()
                        pending = [c.approval for c in calls if c.approval]
                        if pending:
                            approval_id = pending[0].approval_id
                            break
            await _requested(bus, "a", approval_id)
            await bus.resolve_approval("a", approval_id, approved=False, by="alice")

        async with anyio.create_task_group() as tg:
            tg.start_soon(person)
            await agent()
        assert len(outcome) == 1, outcome
        assert not isinstance(outcome[0], str), "the block ran"
        tracker.close()
        events = await _events_of(bus, "a", "c", 4)
        assert [e.type for e in events] == [
            "tool.ready",
            "tool.approval.requested",
            "tool.approval.resolved",
            "tool.denied",
        ], [e.type for e in events]
    finally:
        await bus.aclose()


async def check_approval_expires(factory: BusFactory) -> None:
    """An approval nobody decides expires: resolved by ``"timeout"`` and denied, once; a
    late decision learns it."""
    from ._core.errors import ApprovalDenied
    from ._core.tracker import Tracker

    bus = await _make(factory)
    try:
        tracker = Tracker(bus, "a")
        refusal: Decision | None = None
        try:
            async with tracker.call("send", {}, approval=True, approval_timeout=0.2, call_id="c"):
                raise AssertionError("ran without an approval")
        except ApprovalDenied as exc:
            refusal = exc.decision
        assert refusal is not None
        assert refusal.by == "timeout", refusal
        events = await _events_of(bus, "a", "c", 4)
        assert [e.type for e in events][-2:] == ["tool.approval.resolved", "tool.denied"]
        requested = next(e for e in events if isinstance(e, ApprovalRequested))
        late = await _refused(bus, "a", requested.approval_id)
        assert late.by == "timeout", late
        tracker.close()
    finally:
        await bus.aclose()


async def check_approval_expires_when_touched(factory: BusFactory) -> None:
    """An approval nobody waits for expires when it is touched after its expiry: a
    subscription's start (with a snapshot, or from a cursor) and a snapshot each show
    the call denied by ``"timeout"`` — never still pending — and the stream holds one
    resolution and one denial."""
    from ._core.tracker import Tracker

    bus = await _make(factory)
    sessions = ("reset", "resume", "snapshot", "fetched")
    try:
        trackers = [Tracker(bus, session) for session in sessions]
        ids = [t.create("send", call_id="c").await_approval(timeout=0.3) for t in trackers]
        flush = getattr(bus, "flush", None)
        if flush is not None:  # a broker-backed bus: the requests are written
            await flush(timeout=_DEADLINE)
        await anyio.sleep(0.6)  # past the expiry; nothing waits, nothing touched them

        def denied(calls: tuple[Any, ...]) -> bool:
            (call,) = calls
            return (call.state.value, call.decided_by, call.approval) == (
                "denied",
                "timeout",
                None,
            )

        async with bus.subscribe(session="reset", snapshot=True) as sub:
            (reset,) = await _drain(sub, 1)
        assert isinstance(reset, StreamReset), reset
        assert denied(reset.snapshot.calls), reset
        lifecycle = [
            "tool.created",
            "tool.ready",
            "tool.approval.requested",
            "tool.approval.resolved",
            "tool.denied",
        ]
        async with bus.subscribe(session="resume", after=_first_id(bus)) as sub:
            got = await _drain(sub, 5)
        assert [e.type for e in got] == lifecycle, got
        assert denied(bus.snapshot("snapshot").calls)
        fetch = getattr(bus, "fetch_snapshot", None)
        if fetch is not None:
            assert denied((await fetch("fetched")).calls)
        else:
            assert denied(bus.snapshot("fetched").calls)
        for session, tracker, approval_id in zip(sessions, trackers, ids, strict=True):
            decision = await tracker.decision(approval_id)
            assert (decision.approved, decision.by) == (False, "timeout"), decision
            tracker.close()
            with Tracker(bus, session) as marker:  # the end of what there is to read
                marker.create("end", call_id="m").complete(None)
            events: list[Event] = []
            async with bus.subscribe(session=session, after=_first_id(bus)) as sub:
                with anyio.fail_after(_DEADLINE):
                    async for event in sub:
                        events.append(event)
                        if event.call_id == "m" and event.type == "tool.completed":
                            break
            assert [e.type for e in events if e.call_id == "c"] == lifecycle, (session, events)
    finally:
        await bus.aclose()


async def check_approval_cancelled_while_waiting(factory: BusFactory) -> None:
    """A waiting call that is cancelled resolves its approval by ``"cancelled"`` and ends
    ``tool.cancelled``; a later decision gets ``ApprovalAlreadyResolved``."""
    from ._core.tracker import Tracker

    bus = await _make(factory)
    try:
        tracker = Tracker(bus, "a")
        with anyio.move_on_after(0.2):
            async with tracker.call("send", {}, approval=True, call_id="c"):
                raise AssertionError("ran without an approval")
        events = await _events_of(bus, "a", "c", 4)
        assert [e.type for e in events][-2:] == ["tool.approval.resolved", "tool.cancelled"]
        resolved = next(e for e in events if isinstance(e, ApprovalResolved))
        assert (resolved.approved, resolved.by) == (False, "cancelled")
        late = await _refused(bus, "a", resolved.approval_id)
        assert late.by == "cancelled", late
        tracker.close()
    finally:
        await bus.aclose()


_CHECKS: tuple[Callable[[BusFactory], Awaitable[None]], ...] = (
    check_ids_increase,
    check_live_in_order,
    check_replay_every_position,
    check_foreign_cursor_resets,
    check_snapshot_first,
    check_types_filter,
    check_run_subscription,
    check_run_subscription_follows_subagents,
    check_disconnect_policy,
    check_coalesce_policy,
    check_partial_output_kept,
    check_thread_publish,
    check_snapshot_method,
    check_messages_in_snapshots_and_replays,
    check_close_ends_subscriptions,
    check_resume_origin,
    check_resume_filtered,
    check_run_resumed_after_its_end,
    check_approval_one_decision_wins,
    check_approval_denied_while_waiting,
    check_approval_expires,
    check_approval_expires_when_touched,
    check_approval_cancelled_while_waiting,
)


def bus_conformance_checks() -> list[Callable[[BusFactory], Awaitable[None]]]:
    """The checks any :class:`~toolstream.Bus` must pass; each takes a bus factory."""
    return list(_CHECKS)
