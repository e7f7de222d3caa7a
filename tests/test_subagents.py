"""Sub-agents: a call whose tool is itself an agent, its run nested under the call.

What a client sees: the tree on the wire (``run.started`` with ``parent_call_id``,
``parent_run_id`` and ``agent``), children ended before their parent with one terminal
each, the tree in every snapshot and reset, and run subscriptions that follow it."""

from __future__ import annotations

import anyio
import pytest

import toolstream as ts
from toolstream.testing import assert_lifecycle


def _recorded(bus: ts.EventBus) -> list[ts.Event]:
    return bus.subscribe(session="s", after=f"{bus.epoch}-0").take_nowait()


def _kinds(events: list[ts.Event]) -> list[tuple[str, str | None, str]]:
    return [(e.type, e.run_id, e.call_id) for e in events]


async def test_a_subagent_run_is_nested_under_its_call() -> None:
    bus = ts.EventBus()
    async with (
        ts.Tracker(bus, "s") as tracker,
        tracker.run(run_id="r1"),
        tracker.call("research", {"q": "x"}, call_id="c1") as call,
    ):
        async with call.subagent("researcher", run_id="s1") as sub:
            assert sub.parent_call_id == "c1" and sub.depth == 1
            async with tracker.call("search", {"q": "y"}, call_id="c2") as inner:
                inner.complete(["hit"])
            with tracker.message(message_id="m1") as message:
                message.delta("found it")
            async with tracker.batch(limit=1) as batch:
                batch.start_soon(anyio.sleep, 0, tool="wait", call_id="c3")
        call.complete("summary")
    events = _recorded(bus)
    assert_lifecycle(events)
    started = next(e for e in events if isinstance(e, ts.RunStarted) and e.run_id == "s1")
    assert (started.parent_call_id, started.parent_run_id, started.agent) == (
        "c1",
        "r1",
        "researcher",
    )
    # everything inside the sub-run carries the call it is nested under
    inside = [e for e in events if e.run_id == "s1"]
    assert {e.type for e in inside} >= {"tool.started", "message.delta", "batch.phase"}
    assert {e.parent_call_id for e in inside} == {"c1"}
    # the sub-run ends before its parent call does
    order = [
        (e.type, e.run_id or e.call_id)
        for e in events
        if e.type in ("run.finished", "tool.completed")
    ]
    assert order.index(("run.finished", "s1")) < order.index(("tool.completed", "r1"))


async def test_the_agent_defaults_to_the_tool_and_a_run_in_a_calls_block_nests() -> None:
    bus = ts.EventBus()
    async with ts.Tracker(bus, "s") as tracker:
        async with (
            tracker.run(run_id="r1"),
            tracker.call("planner", call_id="c1"),
            tracker.run(run_id="s1"),  # inside the call's block: its sub-agent
        ):
            tracker.create("step", call_id="c2").start()
        async with tracker.run(run_id="r2"), tracker.run(run_id="r3"):  # no call: not nested
            pass
    runs = {e.run_id: e for e in _recorded(bus) if isinstance(e, ts.RunStarted)}
    assert (runs["s1"].parent_call_id, runs["s1"].agent) == ("c1", "planner")
    assert runs["r3"].parent_call_id is None and runs["r3"].agent is None


async def test_the_parent_ending_first_ends_its_subruns_and_their_calls() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    with tracker.run(run_id="r1"):
        parent = tracker.create("research", call_id="c1")
        sub = parent.subagent(run_id="s1").start()  # driven by hand, never finished
        assert parent.state is ts.CallState.RUNNING  # a sub-agent implies the call runs
        inner = tracker.create("search", call_id="c2", run_id="s1")
        inner.start()
        deeper = inner.subagent(run_id="s2").start()
        tracker.create("read", call_id="c3", run_id="s2").start()
        parent.fail(RuntimeError("model quota"))
        assert sub.finished and deeper.finished
    events = _recorded(bus)
    assert_lifecycle(events)
    tail = [
        (e.type, e.run_id if e.type.startswith("run") else e.call_id)
        for e in events
        if e.type in ("run.finished", "tool.cancelled", "tool.failed")
    ]
    assert tail[:5] == [
        ("tool.cancelled", "c3"),
        ("run.finished", "s2"),
        ("tool.cancelled", "c2"),
        ("run.finished", "s1"),
        ("tool.failed", "c1"),
    ]
    finished = {e.run_id: e for e in events if isinstance(e, ts.RunFinished)}
    reason = "parent call failed: RuntimeError: model quota"
    assert (finished["s1"].outcome, finished["s1"].reason) == ("cancelled", reason)
    assert finished["s2"].reason == "parent call cancelled: " + reason
    cancelled = {e.call_id: e for e in events if isinstance(e, ts.ToolCancelled)}
    assert cancelled["c2"].reason == reason


@pytest.mark.parametrize("where", ["sub-run", "deeper sub-run"])
async def test_cancelling_the_parent_in_the_middle_of_a_subrun(where: str) -> None:
    bus = ts.EventBus()
    reached = anyio.Event()

    async def agent(tracker: ts.Tracker) -> None:
        async with (
            tracker.run(run_id="r1"),
            tracker.call("research", call_id="c1") as call,
            call.subagent(run_id="s1"),
            tracker.call("search", call_id="c2") as inner,
        ):
            if where == "sub-run":
                reached.set()
                await anyio.sleep_forever()
            async with inner.subagent(run_id="s2"):
                tracker.create("read", call_id="c3").start()
                reached.set()
                await anyio.sleep_forever()

    async with ts.Tracker(bus, "s") as tracker, anyio.create_task_group() as tg:
        tg.start_soon(agent, tracker)
        await reached.wait()
        tg.cancel_scope.cancel()
    events = _recorded(bus)
    assert_lifecycle(events)
    terminals = [e for e in events if isinstance(e, (ts.ToolCancelled, ts.RunFinished))]
    assert all(isinstance(e, ts.ToolCancelled) or e.outcome == "cancelled" for e in terminals)
    ids = [e.run_id if isinstance(e, ts.RunFinished) else e.call_id for e in terminals]
    expected = ["c2", "s1", "c1", "r1"]
    if where == "deeper sub-run":
        expected = ["c3", "s2", *expected]
    assert ids == expected


def test_subagents_nest_up_to_max_subagent_depth() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")  # lenient: the depth is refused all the same
    call = tracker.create("agent")
    for depth in range(1, 9):
        run = call.subagent().start()
        assert run.depth == depth
        call = tracker.create("agent", run_id=run.run_id)
    with pytest.raises(ts.LifecycleError, match="depth 9 is past max_subagent_depth=8"):
        call.subagent().start()
    shallow = ts.Tracker(bus, "t", max_subagent_depth=0)
    with pytest.raises(ts.LifecycleError, match="depth 1"):
        shallow.create("agent").subagent().start()
    with pytest.raises(ValueError, match="max_subagent_depth"):
        ts.Tracker(bus, "u", max_subagent_depth=-1)
    tracker.close()
    assert_lifecycle(_recorded(bus))


def test_a_subagent_of_an_ended_call_is_a_violation() -> None:
    bus = ts.EventBus()
    lenient = ts.Tracker(bus, "s")
    ended = lenient.create("done")
    ended.complete(1)
    run = ended.subagent().start()
    assert lenient.violations == 1 and not run.finished
    strict = ts.Tracker(bus, "s", strict=True)
    ended = strict.create("done")
    ended.complete(1)
    with pytest.raises(ts.LifecycleError, match="subagent"):
        ended.subagent().start()


def test_a_hidden_calls_subagent_is_a_run_of_its_own() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    hidden = tracker.create("_internal")
    hidden.start()
    with hidden.subagent(run_id="s1"):
        tracker.create("visible", call_id="v").start()
    started = next(e for e in _recorded(bus) if isinstance(e, ts.RunStarted))
    assert started.run_id == "s1" and started.parent_call_id is None


def test_an_interrupted_run_keeps_a_call_whose_subagent_waits_for_a_person() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = tracker.run(run_id="r1").start()
    parent = tracker.create("assistant", call_id="c1", run_id="r1")
    sub = parent.subagent(run_id="s1").start()
    waiting = tracker.create("send_email", call_id="c2", run_id="s1")
    waiting.ready({"to": "a@example.com"})
    waiting.await_approval("Sends mail")
    sub.finish("interrupted")
    run.finish("interrupted")
    assert parent.state is ts.CallState.RUNNING  # suspended with its sub-agent
    assert waiting.state is ts.CallState.AWAITING_APPROVAL
    parent.cancel("the person went away")  # its end still ends the waiting call first
    assert waiting.done
    events = _recorded(bus)
    assert_lifecycle(events)
    assert [e.call_id for e in events if isinstance(e, ts.ToolCancelled)] == ["c2", "c1"]


def test_closing_the_tracker_says_why_each_run_ended() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    tracker.run(run_id="r1").start()
    parent = tracker.create("research", call_id="c1", run_id="r1")
    parent.subagent(run_id="s1").start()
    tracker.close()
    finished = {e.run_id: e.reason for e in _recorded(bus) if isinstance(e, ts.RunFinished)}
    assert finished == {"s1": "parent call cancelled: session closed", "r1": "session closed"}


def test_snapshots_and_resets_show_the_tree() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    tracker.run(run_id="r1").start()
    parent = tracker.create("research", call_id="c1", run_id="r1")
    first = parent.subagent("scout", run_id="s1").start()
    tracker.create("search", call_id="c2", run_id="s1").complete([1])
    first.finish()
    parent.subagent("reader", run_id="s2").start()
    tracker.create("read", call_id="c3", run_id="s2").start()
    tracker.run(run_id="r2").start()
    tracker.create("other", call_id="o1", run_id="r2").start()
    # a late joiner (a reset first) sees the tree
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(reset, ts.StreamReset)
    calls = {c.call_id: c for c in reset.snapshot.calls}
    assert calls["c1"].subruns == ("s1", "s2") and calls["c2"].subruns == ()
    runs = {r.run_id: r for r in reset.snapshot.runs}
    assert (runs["s1"].state, runs["s1"].agent, runs["s1"].parent_call_id) == (
        "completed",
        "scout",
        "c1",
    )
    assert (runs["s2"].state, runs["s2"].parent_run_id) == ("running", "r1")
    # one run's part is the run and its sub-agents'
    part = bus.snapshot("s", run="r1")
    assert {c.call_id for c in part.calls} == {"c1", "c2", "c3"}
    assert {r.run_id for r in part.runs} == {"r1", "s1", "s2"}
    # a client view rebuilt from the reset knows the tree too
    view = ts.LiveView()
    view.apply(reset)
    assert view.calls["c1"].subruns == ("s1", "s2")
    assert view.snapshot(run_id="s2").calls[0].call_id == "c3"
    tracker.close()


def test_a_reset_stays_bounded_with_many_subruns() -> None:
    bus = ts.EventBus(reset_bytes=64 * 1024)
    tracker = ts.Tracker(bus, "s")
    parent = tracker.create("orchestrate", call_id="c1")
    for i in range(300):
        with parent.subagent(run_id=f"sub-{i:04d}-" + "x" * 200):
            tracker.create("step").complete("y" * 500)
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(reset, ts.StreamReset)
    subruns = next(c for c in reset.snapshot.calls if c.call_id == "c1").subruns
    assert 0 < len(subruns) <= 100 and subruns[-1].startswith("sub-0299")
    assert len(ts.to_dict(reset)["snapshot"]["calls"]) <= 500
    tracker.close()


async def test_a_run_subscription_follows_its_subagents_live() -> None:
    bus = ts.EventBus()
    async with ts.Tracker(bus, "s") as tracker:
        run = tracker.run(run_id="r1").start()
        parent = tracker.create("research", call_id="c1", run_id="r1")
        parent.start()
        async with bus.subscribe(session="s", run="r1") as sub:
            with parent.subagent(run_id="s1"):
                tracker.create("search", call_id="c2").complete(1)
            parent.complete("done")
            run.finish()
            got = [(e.type, e.run_id) async for e in sub]
    assert got == [
        ("run.started", "s1"),
        ("tool.created", "s1"),
        ("tool.started", "s1"),
        ("tool.completed", "s1"),
        ("run.finished", "s1"),
        ("tool.completed", "r1"),
        ("run.finished", "r1"),
    ]
