"""Tracker: the lifecycle a framework reports is the lifecycle every client sees."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import anyio
import anyio.lowlevel
import attrs
import pytest

import toolstream as ts
from toolstream.testing import Recorder, assert_lifecycle


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
async def rec(bus: ts.EventBus) -> AsyncIterator[Recorder]:
    async with Recorder(bus, session="s") as recorder:
        yield recorder


def kinds(rec: Recorder, call_id: str | None = None) -> list[str]:
    return rec.types(call_id)


async def test_one_shot_call_completes_with_its_result(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker, tracker.call("web_search", {"q": "anyio"}, call_id="call_1") as call:
        call.progress(0.5, message="fetched 6 of 12 pages")
        call.output_delta("partial text ")
        call.complete(["r1", "r2"])
    events = rec.events
    assert kinds(rec) == ["tool.started", "tool.progress", "tool.output.delta", "tool.completed"]
    started, _, _, completed = events
    assert isinstance(started, ts.ToolStarted) and started.args == {"q": "anyio"}
    assert started.summary == "Running web_search (q='anyio')"
    assert isinstance(completed, ts.ToolCompleted) and completed.result == ["r1", "r2"]
    assert completed.duration_s is not None and completed.duration_s >= 0
    assert {e.call_id for e in events} == {"call_1"} and {e.tool for e in events} == {"web_search"}
    assert_lifecycle(events)


async def test_leaving_the_block_completes_with_none(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.call("noop"):
        pass
    done = rec.events[-1]
    assert isinstance(done, ts.ToolCompleted) and done.result is None


async def test_an_exception_fails_the_call_and_is_reraised(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(KeyError):
        async with tracker.call("lookup", {"k": 1}):
            raise KeyError("missing")
    failed = rec.events[-1]
    assert isinstance(failed, ts.ToolFailed)
    assert failed.error == ts.ErrorInfo(type="KeyError", message="'missing'")
    assert failed.summary == "lookup failed: KeyError: 'missing'"


async def test_anyio_cancellation_cancels_the_call(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with anyio.CancelScope() as scope:
        async with tracker.call("slow"):
            scope.cancel()
            await anyio.sleep(10)
    assert kinds(rec) == ["tool.started", "tool.cancelled"]
    assert rec.events[-1].reason == "cancelled"  # type: ignore[attr-defined]


async def test_a_timeout_cancels_the_call(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(TimeoutError), anyio.fail_after(0.01):
        async with tracker.call("slow"):
            await anyio.sleep(10)
    assert kinds(rec) == ["tool.started", "tool.cancelled"]


async def test_a_tool_raising_timeout_error_fails(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(TimeoutError):
        async with tracker.call("http"):
            raise TimeoutError
    failed = rec.events[-1]
    assert isinstance(failed, ts.ToolFailed) and failed.error.message == "timed out"


async def test_backend_native_cancellation(
    bus: ts.EventBus, rec: Recorder, anyio_backend: str
) -> None:
    tracker = ts.Tracker(bus, "s")
    if anyio_backend == "asyncio":

        async def body() -> None:
            async with tracker.call("native"):
                await asyncio.sleep(10)

        task = asyncio.get_running_loop().create_task(body())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        import trio

        with trio.move_on_after(0.01):
            async with tracker.call("native"):
                await trio.sleep(10)
    assert kinds(rec) == ["tool.started", "tool.cancelled"]


def test_sync_call_scope(bus: ts.EventBus) -> None:
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    with tracker.call("sync_tool", {"x": 1}) as call:
        call.progress(current=1, total=4)
    with pytest.raises(ValueError), tracker.call("sync_tool"):
        raise ValueError("bad")
    got = sub.take_nowait()
    assert [e.type for e in got] == [
        "tool.started",
        "tool.progress",
        "tool.completed",
        "tool.started",
        "tool.failed",
    ]
    assert got[1].fraction == 0.25  # type: ignore[attr-defined]


async def test_streamed_input_lifecycle(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    call = tracker.create("web_search", call_id="call_1", parent_id="msg_1", title="Search")
    call.args_delta('{"q": "an')
    call.args_delta('yio"}')
    call.ready()
    assert call.args == {"q": "anyio"} and call.args_valid
    call.start()
    call.complete(["x"])
    assert kinds(rec) == [
        "tool.created",
        "tool.args.delta",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.completed",
    ]
    created, d1, d2, ready, started, _ = rec.events
    assert isinstance(created, ts.ToolCreated)
    assert created.parent_id == "msg_1" and created.title == "Search"
    assert d1.delta + d2.delta == '{"q": "anyio"}'  # type: ignore[attr-defined]
    assert isinstance(ready, ts.ToolReady) and ready.args == {"q": "anyio"} and ready.args_valid
    assert isinstance(started, ts.ToolStarted) and started.args is None, "args were already sent"


async def test_invalid_json_input_is_flagged_not_guessed(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    call = tracker.create("write")
    call.args_delta('{"path": "a.txt", "content": "cut off by max_tok')
    call.ready()
    assert not call.args_valid and call.args == '{"path": "a.txt", "content": "cut off by max_tok'
    ready = rec.events[-1]
    assert isinstance(ready, ts.ToolReady) and ready.args_valid is False
    assert ready.args == '{"path": "a.txt", "content": "cut off by max_tok'


async def test_start_without_ready_declares_the_input_first(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s")
    call = tracker.create("t")
    call.args_delta('{"a": 1}')
    call.start()
    assert kinds(rec) == ["tool.created", "tool.args.delta", "tool.ready", "tool.started"]


async def test_first_event_may_be_any_non_terminal(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    a = tracker.create("a", announce=False)
    a.ready({"x": 1})
    b = tracker.create("b", announce=False)
    b.queue(position=1)
    c = tracker.create("c", announce=False)
    c.start({"y": 2})
    for h in (a, b, c):
        h.complete()
    assert [kinds(rec, h.call_id)[0] for h in (a, b, c)] == [
        "tool.ready",
        "tool.queued",
        "tool.started",
    ]
    assert_lifecycle(rec.events)


async def test_terminal_without_start_gets_a_synthesized_start(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s")
    legacy = tracker.create("legacy", announce=False)
    legacy.complete({"ok": True})
    assert kinds(rec, legacy.call_id) == ["tool.started", "tool.completed"]
    failing = tracker.create("legacy", announce=False)
    failing.fail("exit code 2")
    assert kinds(rec, failing.call_id) == ["tool.started", "tool.failed"]
    assert_lifecycle(rec.events)


async def test_progress_implies_running(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    call = tracker.create("t")
    call.progress(0.1)
    call.complete()
    assert kinds(rec) == ["tool.created", "tool.started", "tool.progress", "tool.completed"]


async def test_progress_values_are_made_safe(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.call("t") as call:
        call.progress(1.7)
        call.progress(float("nan"), current=float("inf"), total=3)
        call.progress(current=5, total=10, data={"k": {1, 2}})
    fractions = [e.fraction for e in rec.events if isinstance(e, ts.ToolProgress)]
    assert fractions == [1.0, None, 0.5]
    assert [e.data for e in rec.events if isinstance(e, ts.ToolProgress)][-1] == {"k": [1, 2]}


def test_lenient_violations_are_dropped_logged_and_counted(
    bus: ts.EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    call = tracker.create("t", call_id="c1")
    call.start()
    call.complete(1)
    with caplog.at_level(logging.WARNING, logger="toolstream.tracker"):
        call.complete(2)  # second terminal
        call.fail("late")  # another
        call.progress(0.5)  # after the end
        call.args_delta("x")
    assert tracker.violations == 4
    assert "call 'c1' (t) is completed: complete() is not allowed" in caplog.text
    assert [e.type for e in sub.take_nowait()] == ["tool.created", "tool.started", "tool.completed"]


def test_deny_ends_a_call_denied_once(bus: ts.EventBus) -> None:
    """A refusal decided outside toolstream's approvals (or acted on by the tool that
    asked from inside) ends the call ``denied``: terminal, once, summarized; a second
    terminal is a violation."""
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s", strict=True)
    call = tracker.create("send_email", call_id="c1")
    call.start({"to": "x", "token": "sk-live-0123456789abcdef"})
    call.deny("the person said no (sk-live-0123456789abcdef)", by="alice")
    assert call.state is ts.CallState.DENIED and call.done
    with pytest.raises(ts.LifecycleError, match="deny"):
        call.deny()
    with pytest.raises(ts.LifecycleError, match="complete"):
        call.complete(1)
    events = sub.take_nowait()
    assert [e.type for e in events] == ["tool.created", "tool.started", "tool.denied"]
    denied = events[-1]
    assert isinstance(denied, ts.ToolDenied) and denied.by == "alice"
    assert denied.reason == "the person said no ([redacted])"
    assert denied.summary == "send_email was denied by alice: the person said no ([redacted])"
    assert_lifecycle(events)
    view = ts.LiveView()
    for event in events:
        view.apply(event)
    assert view.calls["c1"].state is ts.CallState.DENIED


def test_backwards_transitions_are_violations(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s", strict=True)
    call = tracker.create("t", call_id="c1")
    call.start()
    for attempt in (call.ready, call.queue, call.start):
        with pytest.raises(ts.LifecycleError) as err:
            attempt()
        assert err.value.call_id == "c1" and err.value.state == "running"
    with pytest.raises(ts.LifecycleError, match="args_delta"):
        call.args_delta("{")


def test_strict_mode_raises_with_a_message_naming_the_call(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s", strict=True)
    call = tracker.create("web_search", call_id="call_9")
    call.cancel("user")
    with pytest.raises(
        ts.LifecycleError, match=r"call 'call_9' \(web_search\) is cancelled: complete\(\)"
    ):
        call.complete()


async def test_a_reused_call_id_starts_a_new_call_clients_tell_apart(
    bus: ts.EventBus, rec: Recorder
) -> None:
    # OpenAI-compatible servers number calls call_0, call_1... in every turn: the second
    # turn's call_0 is a new call, never a second lifecycle under one id.
    tracker = ts.Tracker(bus, "s", strict=True)
    async with tracker.call("search", {"q": "a"}, call_id="call_0") as first:
        first.complete("found")
    with pytest.raises(RuntimeError):
        async with tracker.call("shell", {"cmd": "ls"}, call_id="call_0") as second:
            raise RuntimeError("exit 2")
    third = tracker.create("search", call_id="call_0")
    assert (first.call_id, second.call_id, third.call_id) == ("call_0", "call_0#2", "call_0#3")
    assert second.given_id == "call_0"
    assert tracker.create("search", call_id="call_0") is third, "an open call is adopted"
    third.complete()
    assert_lifecycle(rec.events)
    view = ts.LiveView()
    view.fold(rec.events)
    assert {c.call_id: (c.tool, c.state.value) for c in view.calls.values()} == {
        "call_0": ("search", "completed"),
        "call_0#2": ("shell", "failed"),
        "call_0#3": ("search", "completed"),
    }
    assert tracker.violations == 0


def test_reused_ids_are_told_apart_after_many_thousand_calls() -> None:
    # The ended ids are remembered in a bounded table (at least the newest 10,000),
    # whose oldest are dropped in batches: a gateway's tracker that has seen more calls
    # than that still tells a reused recent id apart, and the table stays bounded.
    from toolstream._core import tracker as tracker_module

    keep = tracker_module._MAX_FINISHED_IDS
    most = keep + tracker_module._FINISHED_SLACK
    tracker = ts.Tracker(ts.EventBus(replay=100), "s")
    for i in range(most + 500):
        tracker.create("t", call_id=f"call_{i}").complete()
        assert len(tracker._finished_ids) <= most
    assert len(tracker._finished_ids) >= keep
    newest = most + 499
    for i in (newest, newest - keep + 1):  # the newest and the oldest it must remember
        again = tracker.create("t", call_id=f"call_{i}")
        assert again.call_id == f"call_{i}#2"
        again.complete()
    again = tracker.create("t", call_id=f"call_{newest}")
    assert again.call_id == f"call_{newest}#3", "a reuse is the newest again"
    again.complete()
    assert tracker.violations == 0


async def test_adopting_an_announced_call(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    announced = tracker.create("web_search", call_id="call_1")
    announced.args_delta('{"q": "x"}')
    announced.ready()
    async with tracker.call("web_search", announced.args, call_id="call_1") as call:
        assert call is announced
        call.complete("r")
    assert kinds(rec, "call_1") == [
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.completed",
    ]


async def test_decorator_tracks_each_invocation(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")

    @tracker.tool
    async def web_search(q: str, limit: int = 3) -> list[str]:
        return [q] * limit

    @tracker.tool(name="shell")
    def run(cmd: str) -> int:
        raise RuntimeError(f"{cmd} failed")

    assert await web_search("anyio", limit=2) == ["anyio", "anyio"]
    with pytest.raises(RuntimeError):
        run("ls")
    started = [e for e in rec.events if isinstance(e, ts.ToolStarted)]
    assert [(e.tool, e.args) for e in started] == [
        ("web_search", {"q": "anyio", "limit": 2}),
        ("shell", {"cmd": "ls"}),
    ]
    assert kinds(rec)[-1] == "tool.failed"
    assert web_search.__name__ == "web_search"


async def test_decorator_inside_an_open_call_adds_no_second_call(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s")

    @tracker.tool
    async def web_search(q: str) -> str:
        return q.upper()

    async with tracker.call("web_search", {"q": "x"}, call_id="call_1") as call:
        call.complete(await web_search("x"))
    assert {e.call_id for e in rec.events} == {"call_1"}
    assert kinds(rec) == ["tool.started", "tool.completed"]


async def test_calls_inside_a_call_are_linked_to_it(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with (
        tracker.call("sub_agent", call_id="outer"),
        tracker.call("web_search", call_id="inner"),
    ):
        pass
    inner = rec.of("inner")[0]
    assert inner.parent_call_id == "outer"
    assert rec.of("outer")[0].parent_call_id is None


async def test_run_brackets_calls_and_closes_open_ones(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.run(run_id="turn-7", title="Turn 7"):
        async with tracker.call("a"):
            pass
        dangling = tracker.create("b")
    assert kinds(rec) == [
        "run.started",
        "tool.started",
        "tool.completed",
        "tool.created",
        "tool.cancelled",
        "run.finished",
    ]
    events = rec.events
    assert {e.run_id for e in events} == {"turn-7"}
    cancelled = rec.of(dangling.call_id)[-1]
    assert isinstance(cancelled, ts.ToolCancelled) and cancelled.reason == "run finished"
    finished = events[-1]
    assert isinstance(finished, ts.RunFinished) and finished.outcome == "completed"
    assert_lifecycle(events)


async def test_run_outcomes(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(ValueError):
        async with tracker.run(run_id="r-fail"):
            raise ValueError("model error")
    with anyio.move_on_after(0.01):
        async with tracker.run(run_id="r-cancel"):
            await anyio.sleep(10)
    outcomes = [(e.run_id, e.outcome, e.error) for e in rec.events if isinstance(e, ts.RunFinished)]
    assert outcomes == [
        ("r-fail", "failed", ts.ErrorInfo(type="ValueError", message="model error")),
        ("r-cancel", "cancelled", None),
    ]


async def test_nested_runs_and_explicit_run_ids(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.run(run_id="outer"):
        async with tracker.run(run_id="inner"):
            tracker.create("in_inner").complete()
        tracker.create("in_outer").complete()
        tracker.create("explicit", run_id="elsewhere").complete()
    runs = {e.tool: e.run_id for e in rec.events if e.tool}
    assert runs == {"in_inner": "inner", "in_outer": "outer", "explicit": "elsewhere"}


def test_manual_run(bus: ts.EventBus) -> None:
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    run = tracker.run("manual").start()
    tracker.create("t", run_id=run.run_id)
    run.finish("failed", error="upstream 500")
    run.finish()  # twice: a violation, dropped
    got = sub.take_nowait()
    assert [e.type for e in got] == [
        "run.started",
        "tool.created",
        "tool.cancelled",
        "run.finished",
    ]
    assert got[-1].error == ts.ErrorInfo(type="Error", message="upstream 500")  # type: ignore[attr-defined]
    assert tracker.violations == 1


async def test_closing_the_tracker_ends_everything(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    run = tracker.run("r").start()
    open_call = tracker.create("t", run_id="r")
    open_call.start()
    other = tracker.create("u")
    await tracker.aclose()
    assert kinds(rec)[-3:] == ["tool.cancelled", "tool.cancelled", "run.finished"]
    reasons = {e.call_id: e.reason for e in rec.events if isinstance(e, ts.ToolCancelled)}
    assert reasons == {open_call.call_id: "session closed", other.call_id: "session closed"}
    assert run.finished
    open_call.complete()  # after close: a violation, dropped
    assert tracker.violations == 1
    assert_lifecycle(rec.events)


async def test_hidden_tools_are_tracked_but_never_published(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.call("_internal_memory", {"secret": 1}) as call:
        call.progress(0.5)
    async with tracker.call("visible"):
        pass
    assert {e.tool for e in rec.events} == {"visible"}
    custom = ts.Tracker(bus, "s", hidden=lambda tool: tool == "visible")
    async with custom.call("visible"):
        pass
    async with custom.call("_shown"):
        pass
    assert [e.tool for e in rec.events][-2:] == ["_shown", "_shown"]


async def test_batch_queues_behind_its_limit(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    release = anyio.Event()
    running = 0
    peak = 0

    entered = 0
    both_slots_taken = anyio.Event()

    def enter() -> None:
        nonlocal entered
        entered += 1
        if entered == 2:
            both_slots_taken.set()

    async def tool(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        enter()
        await release.wait()
        running -= 1
        return n * 10

    async def fails() -> None:
        enter()
        await release.wait()
        raise RuntimeError("boom")

    async with tracker.batch(limit=2) as batch:
        handles = [batch.start_soon(tool, i, call_id=f"c{i}") for i in range(3)]
        bad = batch.start_soon(fails, call_id="bad")
        with anyio.fail_after(5):
            await both_slots_taken.wait()
        # which two take the slots is the scheduler's choice (trio randomizes it)
        states = sorted(h.state.value for h in (*handles, bad) if h.state is not None)
        assert states == ["queued", "queued", "running", "running"]
        release.set()
    assert peak == 2
    assert batch.results["c2"] == 20 and isinstance(batch.results["bad"], RuntimeError)
    assert [h.state for h in (*handles, bad)] == [ts.CallState.COMPLETED] * 3 + [
        ts.CallState.FAILED
    ]
    queued = [e for e in rec.events if isinstance(e, ts.ToolQueued)]
    assert [(e.call_id, e.position, e.batch_id) for e in queued] == [
        ("c0", 1, batch.batch_id),
        ("c1", 2, batch.batch_id),
        ("c2", 3, batch.batch_id),
        ("bad", 4, batch.batch_id),
    ]
    phases = [e for e in rec.events if isinstance(e, ts.BatchPhase)]
    assert [p.phase for p in phases] == ["queued", "running", "done"]
    assert phases[-1].call_ids == ("c0", "c1", "c2", "bad")
    assert phases[-1].counts == {"completed": 3, "failed": 1}
    assert_lifecycle(rec.events)


async def test_batch_call_scopes_from_own_tasks(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.batch(limit=1) as batch:
        scopes = [batch.call("t", {"i": i}) for i in range(2)]
        never_entered = batch.call("t")
        async with anyio.create_task_group() as tg:
            for scope in scopes:

                async def go(scope: ts.CallScope = scope) -> None:
                    async with scope:
                        await anyio.lowlevel.checkpoint()

                tg.start_soon(go)
    assert [h.state for h in (s.handle for s in scopes)] == [ts.CallState.COMPLETED] * 2
    assert never_entered.handle.state == ts.CallState.CANCELLED
    assert_lifecycle(rec.events)


async def test_cancelling_a_batch_cancels_its_calls(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    with anyio.move_on_after(0.05):
        async with tracker.batch(limit=1) as batch:
            for i in range(3):
                batch.start_soon(anyio.sleep, 10, call_id=f"c{i}")
    states = {
        e.call_id: e.type
        for e in rec.events
        if e.type.startswith("tool.") and e.type in ("tool.cancelled", "tool.completed")
    }
    assert states == {"c0": "tool.cancelled", "c1": "tool.cancelled", "c2": "tool.cancelled"}
    assert_lifecycle(rec.events)


async def test_coalescing_batches_deltas_but_never_delays_lifecycle(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s", coalesce=0.05)
    call = tracker.create("t")
    for ch in '{"text": "hello world"}':
        call.args_delta(ch)
    assert kinds(rec) == ["tool.created"], "deltas wait for the interval"
    call.ready()  # a lifecycle event flushes what is pending first, at once
    assert kinds(rec) == ["tool.created", "tool.args.delta", "tool.ready"]
    call.start()
    for i in range(20):
        call.progress(i / 20, message=f"step {i}")
        call.output_delta(f"{i},")
    with anyio.fail_after(5):
        # The timed flush publishes the merged delta and the newest progress one after
        # the other: wait for both.
        await rec.wait_for(
            lambda events: {"tool.output.delta", "tool.progress"} <= {e.type for e in events}
        )
    merged = [e for e in rec.events if isinstance(e, ts.ToolOutputDelta)]
    assert "".join(e.text for e in merged) == "".join(f"{i}," for i in range(20))
    assert [e.message for e in rec.events if isinstance(e, ts.ToolProgress)] == ["step 19"]
    call.complete()
    assert kinds(rec)[-1] == "tool.completed"


def test_reports_from_many_threads_keep_the_lifecycle(bus: ts.EventBus) -> None:
    sub = bus.subscribe(session="s", buffer=100_000)
    tracker = ts.Tracker(bus, "s")
    calls = [tracker.create("t", call_id=f"c{i}") for i in range(40)]

    def worker(handle: ts.CallHandle) -> None:
        handle.start()
        for k in range(20):
            handle.progress(k / 20)
        # every thread races to end every call: exactly one terminal must win per call
        for other in calls:
            other.complete(threading.get_ident())

    threads = [threading.Thread(target=worker, args=(h,)) for h in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = sub.take_nowait()
    assert_lifecycle(events)
    terminals = [e for e in events if isinstance(e, ts.ToolCompleted)]
    assert sorted(e.call_id for e in terminals) == sorted(h.call_id for h in calls)


def test_lock_free_progress_keeps_to_the_lifecycle(caplog: pytest.LogCaptureFixture) -> None:
    """While a call runs, progress skips the tracker's lock (the bus's lock orders it
    against the call's start and end): threads reporting progress while another starts
    and ends the call never put a progress before ``tool.started`` or after the
    terminal event, and what arrives late is a violation, as on the locked path."""
    import sys

    caplog.set_level(logging.ERROR, logger="toolstream")
    # The subscriber reads the ~9,000 events at the end: they stay in the window (a
    # subscriber behind its window keeps at most lag_bytes, 1 MiB, before it is cut).
    bus = ts.EventBus(replay=20_000)
    sub = bus.subscribe(session="s", buffer=1_000_000)
    tracker = ts.Tracker(bus, "s")
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # interleave the threads as finely as possible
    try:
        for _ in range(30):
            call = tracker.create("t")
            go = threading.Barrier(4)

            def report(call: ts.CallHandle = call, go: threading.Barrier = go) -> None:
                go.wait()
                for k in range(100):
                    call.progress(k / 100)

            def run(call: ts.CallHandle = call, go: threading.Barrier = go) -> None:
                go.wait()
                call.start({})
                time.sleep(0)
                call.complete(1)

            threads = [threading.Thread(target=report) for _ in range(3)]
            threads.append(threading.Thread(target=run))
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(before)
    events = sub.take_nowait()
    assert_lifecycle(events)
    progress = [e for e in events if isinstance(e, ts.ToolProgress)]
    assert progress, "some progress got through"
    # each report published or dropped; a start() after a progress started the call
    # is a violation too
    assert 30 * 300 <= len(progress) + tracker.violations <= 30 * 300 + 30


async def test_reports_from_a_thread_with_its_own_loop(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")

    def in_thread() -> None:
        async def main() -> None:
            async with tracker.call("threaded") as call:
                call.progress(0.5)

        anyio.run(main, backend="asyncio")

    await anyio.to_thread.run_sync(in_thread)
    assert kinds(rec) == ["tool.started", "tool.progress", "tool.completed"]


async def test_a_closed_bus_never_breaks_the_agent(
    bus: ts.EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = ts.Tracker(bus, "s")
    await bus.aclose()
    with caplog.at_level(logging.WARNING):
        async with tracker.call("t") as call:
            call.progress(0.5)
    assert "the bus is closed" in caplog.text
    with pytest.raises(ts.BusClosed):
        ts.Tracker(bus, "s", strict=True).create("t")


async def test_a_raising_summarizer_falls_back(
    bus: ts.EventBus, rec: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def start(self, call: ts.CallInfo) -> str | None:
            raise RuntimeError("template bug")

        def result(self, call: ts.CallInfo, result: object) -> str | None:
            return f"{call.tool} gave {result}"

        def error(self, call: ts.CallInfo, error: ts.ErrorInfo) -> str | None:
            return None

    tracker = ts.Tracker(bus, "s", summarizer=Broken())
    with caplog.at_level(logging.WARNING):
        async with tracker.call("t", {"a": 1}) as call:
            call.complete(5)
    started, completed = rec.events
    assert started.summary == "Running t (a=1)"  # type: ignore[attr-defined]
    assert completed.summary == "t gave 5"  # type: ignore[attr-defined]
    assert "summarizer" in caplog.text


def test_bad_arguments_are_specific_errors(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(ValueError, match="tool"):
        tracker.create("")
    with pytest.raises(ValueError, match="call_id"):
        tracker.create("t", call_id="")
    with pytest.raises(TypeError, match="args_delta"):
        tracker.create("t").args_delta(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ts.Tracker(bus, "")
    with pytest.raises(ValueError):
        ts.Tracker(bus, "s", coalesce=-1)
    with pytest.raises(ValueError):
        tracker.batch(limit=0)
    with pytest.raises(ValueError, match="outcome"):
        tracker.run().start().finish("exploded")  # type: ignore[arg-type]


async def test_tool_does_its_work_even_when_args_cannot_be_serialized(
    bus: ts.EventBus, rec: Recorder
) -> None:
    class Weird:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    tracker = ts.Tracker(bus, "s")
    obj = Weird()
    async with tracker.call("t", {"obj": obj}) as call:
        call.complete(obj)
    started, completed = rec.events
    assert started.args == {"obj": "<unrepresentable Weird>"}  # type: ignore[attr-defined]
    assert completed.result == "<unrepresentable Weird>"  # type: ignore[attr-defined]


def test_duration_is_measured_from_the_start(bus: ts.EventBus) -> None:
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    with tracker.call("t"):
        time.sleep(0.02)
    done = sub.take_nowait()[-1]
    assert isinstance(done, ts.ToolCompleted) and done.duration_s is not None
    assert done.duration_s >= 0.02


def test_a_call_never_announced_before_its_run_ended_stays_ended(bus: ts.EventBus) -> None:
    # Found by the stateful test: a report after the run's end must not open a card
    # that nothing will ever close.
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    run = tracker.run().start()
    silent = tracker.create("t", run_id=run.run_id, announce=False)
    run.finish()
    silent.args_delta("{")
    tracker.close()
    assert tracker.violations == 1
    assert [e.type for e in sub.take_nowait()] == ["run.started", "run.finished"]


class Forwarding:
    """A bus that is not an ``EventBus``: trackers publish to it by keywords."""

    def __init__(self) -> None:
        self.inner = ts.EventBus()
        self.kinds: list[str] = []

    def publish(self, event_type: type[ts.Event], /, **fields: Any) -> ts.Event:
        self.kinds.append(event_type.type)
        return self.inner.publish(event_type, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _script(tracker: ts.Tracker) -> None:
    h = tracker.create("search", call_id="c1")
    h.start({"q": "x"})
    h.progress(0.5, message="half")
    h.progress(current=3, total=4, data={"rows": 3})
    h.output_delta("some text ")
    h.output_delta("and more")
    h.complete({"ok": True})


def test_a_tracker_publishes_the_same_events_to_any_bus() -> None:
    direct = ts.EventBus()
    _script(ts.Tracker(direct, "s"))
    other = Forwarding()
    _script(ts.Tracker(cast(ts.Bus, other), "s"))
    assert other.kinds == [e.type for e in direct._logs["s"].events]

    def shape(bus: ts.EventBus) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in attrs.asdict(e).items() if k not in ("id", "ts", "duration_s")}
            for e in bus._logs["s"].events
        ]

    assert shape(other.inner) == shape(direct)


def test_an_event_bus_subclass_that_overrides_publish_sees_every_tracked_event() -> None:
    class Counting(ts.EventBus):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def publish(self, event_type: type[Any], /, **fields: Any) -> Any:
            self.seen.append(event_type.type)
            return super().publish(event_type, **fields)

    bus = Counting()
    _script(ts.Tracker(bus, "s"))
    assert bus.seen == [e.type for e in bus._logs["s"].events]
    assert "tool.progress" in bus.seen and "tool.output.delta" in bus.seen


def test_nothing_is_announced_after_close_even_when_threads_race_it(bus: ts.EventBus) -> None:
    for _ in range(20):
        tracker = ts.Tracker(bus, "race")
        sub = bus.subscribe(session="race")
        go = threading.Barrier(5)

        def work(tracker: ts.Tracker = tracker, go: threading.Barrier = go) -> None:
            go.wait()
            for _ in range(200):
                call = tracker.create("t")
                call.progress(0.5)
                call.complete()

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        go.wait()
        tracker.close()
        for t in threads:
            t.join()
        assert_lifecycle(sub.take_nowait())  # every announced call ended
        sub.close()
    strict = ts.Tracker(bus, "s", strict=True)
    strict.close()
    with pytest.raises(ts.LifecycleError, match="after the tracker closed"):
        strict.create("late")


async def test_a_call_s_title_reaches_the_wire_whichever_event_opens_it(
    bus: ts.EventBus, rec: Recorder
) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.call("one_shot", {"a": 1}, call_id="a", title="One shot"):
        pass
    tracker.create("streamed", call_id="b", title="Streamed").complete()
    async with tracker.batch(limit=1) as batch:
        async with batch.call("queued", call_id="c", title="Queued"):
            pass
        batch.start_soon(anyio.sleep, 0, call_id="d", title="Soon")
    view = ts.LiveView()
    view.fold(rec.events)
    assert {cid: view.calls[cid].title for cid in "abcd"} == {
        "a": "One shot",
        "b": "Streamed",
        "c": "Queued",
        "d": "Soon",
    }


async def test_batch_phases_describe_the_whole_batch(bus: ts.EventBus, rec: Recorder) -> None:
    tracker = ts.Tracker(bus, "s")
    async with tracker.batch(limit=1) as batch:
        for i in range(3):
            batch.start_soon(anyio.sleep, 0, call_id=f"c{i}")
    phases = [e for e in rec.events if isinstance(e, ts.BatchPhase)]
    assert [p.phase for p in phases] == ["queued", "running", "done"]
    assert [p.call_ids for p in phases] == [("c0", "c1", "c2")] * 3
    assert [dict(p.counts) for p in phases] == [
        {"queued": 3},
        {"running": 1, "queued": 2},
        {"completed": 3},
    ]
