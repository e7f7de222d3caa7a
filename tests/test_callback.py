"""Callback sinks and the bridges to frameworks' legacy callbacks."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

import toolstream as ts
from toolstream.callback import CallbackSink, LegacyCallbackSink, legacy_callbacks
from toolstream.testing import Recorder, assert_lifecycle

from .servers import eventually


async def settle(condition: Any) -> None:
    await eventually(condition)


async def test_sync_and_async_callbacks_get_every_event_in_order() -> None:
    bus = ts.EventBus()
    sync_seen: list[str] = []
    async_seen: list[str] = []

    def on_sync(event: ts.Event) -> None:
        sync_seen.append(event.id)

    async def on_async(event: ts.Event) -> None:
        await anyio.lowlevel.checkpoint()
        async_seen.append(event.id)

    async with (
        CallbackSink(bus, on_sync, session="s1") as a,
        CallbackSink(bus, on_async, session="s1") as b,
    ):
        tracker = ts.Tracker(bus, "s1")
        for i in range(20):
            tracker.create("t").complete(i)
        await settle(lambda: len(sync_seen) == 60 and len(async_seen) == 60)
    expected = [e.id for e in bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()]
    assert sync_seen == async_seen == expected
    assert a.delivered == b.delivered == 60


async def test_a_failing_callback_is_isolated(caplog: pytest.LogCaptureFixture) -> None:
    bus = ts.EventBus()
    good: list[ts.Event] = []

    def broken(event: ts.Event) -> None:
        raise RuntimeError("consumer bug")

    async with (
        CallbackSink(bus, broken, session="s1") as bad_sink,
        CallbackSink(bus, good.append, session="s1"),
    ):
        tracker = ts.Tracker(bus, "s1")
        with tracker.call("t"):
            pass
        tracker.create("u").complete()
        await settle(lambda: len(good) == 5 and bad_sink.errors == 5)
    assert "consumer bug" in caplog.text
    assert bad_sink.delivered == 5, "it kept going after each failure"


async def test_a_slow_callback_slows_only_its_own_sink() -> None:
    bus = ts.EventBus()
    fast: list[str] = []
    slow: list[str] = []
    release = anyio.Event()

    async def blocked(event: ts.Event) -> None:
        await release.wait()
        slow.append(event.id)

    async with (
        CallbackSink(bus, blocked, types=[ts.ToolCompleted]),
        CallbackSink(bus, lambda e: fast.append(e.id), types=[ts.ToolCompleted]),
    ):
        tracker = ts.Tracker(bus, "s1")
        for _ in range(10):
            tracker.create("t").complete()
        await settle(lambda: len(fast) == 10)
        assert slow == []
        release.set()
        await settle(lambda: len(slow) == 10)


async def test_a_sink_that_falls_behind_resumes_without_loss() -> None:
    bus = ts.EventBus(replay=10_000)  # the burst must fit the replay window to be resumable
    seen: list[str] = []

    async def slowish(event: ts.Event) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(event.id)

    async with CallbackSink(bus, slowish, session="s1"):
        tracker = ts.Tracker(bus, "s1")
        for i in range(1500):  # a burst past twice the subscription buffer
            tracker.create("t").complete(i)
        await settle(lambda: len(seen) >= 4500)
    assert len(seen) == len(set(seen)) == 4500


async def test_legacy_callbacks_from_threads_give_the_full_lifecycle() -> None:
    bus = ts.EventBus()
    async with Recorder(bus, session="s1") as rec:
        tracker = ts.Tracker(bus, "s1")
        legacy = legacy_callbacks(tracker)

        def framework() -> None:
            legacy.tool_start_callback("call_1", "web_search", {"q": "anyio"})
            legacy.tool_complete_callback("call_1", "web_search", {"q": "anyio"}, ["r1"])
            legacy.tool_start_callback("call_2", "shell", {"cmd": "false"})
            legacy.tool_complete_callback(
                "call_2", "shell", {"cmd": "false"}, '{"error": "exit code 1"}'
            )
            legacy.tool_complete_callback("call_3", "late", {"x": 1}, {"ok": True})  # no start
            legacy.tool_start_callback("call_4", "never_finishes", {})

        threads = [threading.Thread(target=framework)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tracker.close()
        events = rec.events
    assert_lifecycle(events)
    by_call: dict[str, list[str]] = {}
    for e in events:
        by_call.setdefault(e.call_id, []).append(e.type)
    assert by_call == {
        "call_1": ["tool.started", "tool.completed"],
        "call_2": ["tool.started", "tool.failed"],
        "call_3": ["tool.started", "tool.completed"],
        "call_4": ["tool.started", "tool.cancelled"],
    }
    failed = next(e for e in events if isinstance(e, ts.ToolFailed))
    assert failed.error.message == "exit code 1"


async def test_hermes_style_callbacks_in_their_real_order() -> None:
    # hermes-agent calls tool_progress_callback("tool.started", name, preview, args)
    # before tool_start_callback(call_id, ...), streams "tool.output", and reports the
    # end twice: tool_complete_callback(call_id, ...) and "tool.completed" progress.
    bus = ts.EventBus()
    async with Recorder(bus, session="s1") as rec:
        tracker = ts.Tracker(bus, "s1")
        legacy = legacy_callbacks(tracker)
        for call_id, name in (
            ("call_a", "terminal"),
            ("call_b", "terminal"),
            ("call_c", "web_search"),
        ):
            legacy.tool_progress_callback("tool.started", name, f"{name} preview", {"n": call_id})
            legacy.tool_start_callback(call_id, name, {"n": call_id})
        legacy.tool_progress_callback("tool.output", "terminal", "first line\n", None)
        legacy.tool_complete_callback("call_a", "terminal", None, "done")
        legacy.tool_progress_callback(
            "tool.completed", "terminal", None, None, duration=0.1, is_error=False
        )
        legacy.tool_progress_callback("tool.output", "terminal", "second call\n", None)
        legacy.tool_progress_callback(
            "tool.completed", "terminal", None, None, is_error=True, result='{"error": "boom"}'
        )
        legacy.tool_complete_callback("call_b", "terminal", None, '{"error": "boom"}')
        legacy.tool_complete_callback("call_c", "web_search", None, [1, 2])
        tracker.close()
        events = rec.events
    assert_lifecycle(events)
    assert tracker.violations == 0, "the redundant reports were absorbed, not flagged"
    # Each id-less start was held until its id came: the framework's ids, on every event.
    assert sorted({e.call_id for e in events}) == ["call_a", "call_b", "call_c"]
    started = [e for e in events if isinstance(e, ts.ToolStarted)]
    assert [(e.call_id, e.title, e.args) for e in started] == [
        ("call_a", "terminal preview", {"n": "call_a"}),
        ("call_b", "terminal preview", {"n": "call_b"}),
        ("call_c", "web_search preview", {"n": "call_c"}),
    ]
    ends = {
        e.call_id: e.type
        for e in events
        if e.type in ("tool.completed", "tool.failed", "tool.cancelled")
    }
    assert sorted(ends.values()) == ["tool.completed", "tool.completed", "tool.failed"]
    outputs = [e.text for e in events if isinstance(e, ts.ToolOutputDelta)]
    assert outputs == ["first line\n", "second call\n"]


async def test_progress_only_frameworks_get_a_lifecycle_too() -> None:
    bus = ts.EventBus()
    async with Recorder(bus, session="s1") as rec:
        tracker = ts.Tracker(bus, "s1")
        legacy = legacy_callbacks(tracker)
        legacy.tool_progress_callback("tool.started", "search", "searching", {"q": "x"})
        legacy.tool_progress_callback("tool.progress", "search", "page 1 of 3", None, fraction=0.33)
        legacy.tool_progress_callback("tool.completed", "search", None, None, result="[1]")
        events = rec.events
    assert [e.type for e in events] == ["tool.started", "tool.progress", "tool.completed"]
    assert events[0].tool == "search" and events[1].fraction == 0.33  # type: ignore[attr-defined]


async def test_the_docs_example_carries_the_frameworks_id_and_is_one_call() -> None:
    # docs/callbacks.md: the id-less progress start comes first, the id-bearing one next.
    bus = ts.EventBus()
    async with Recorder(bus, session="s1") as rec:
        tracker = ts.Tracker(bus, "s1")
        hooks = legacy_callbacks(tracker)
        hooks.tool_progress_callback("tool.started", "terminal", "ls -la", {"cmd": "ls -la"})
        hooks.tool_start_callback("call_1", "terminal", {"cmd": "ls -la"})
        hooks.tool_progress_callback("tool.output", "terminal", "total 42\n", None)
        hooks.tool_complete_callback("call_1", "terminal", {"cmd": "ls -la"}, '{"exit_code": 0}')
        tracker.close()
        events = rec.events
    assert [(e.call_id, e.type) for e in events] == [
        ("call_1", "tool.started"),
        ("call_1", "tool.output.delta"),
        ("call_1", "tool.completed"),
    ]
    view = ts.LiveView()
    view.fold(events)
    assert list(view.calls) == ["call_1"]


async def test_a_held_start_is_published_when_no_id_comes() -> None:
    bus = ts.EventBus()
    async with Recorder(bus, session="s1") as rec:
        tracker = ts.Tracker(bus, "s1")
        hooks = legacy_callbacks(tracker, hold=0.05)
        hooks.tool_progress_callback("tool.started", "search", "searching", {"q": "x"})
        assert rec.events == []  # held, briefly
        with anyio.fail_after(5):
            events = await rec.wait_for(lambda events: len(events) == 1)
        assert events[0].type == "tool.started" and events[0].args == {"q": "x"}  # type: ignore[attr-defined]
        assert events[0].call_id.startswith("call_")
        # hold=0: at once, as before.
        immediate = legacy_callbacks(tracker, hold=0)
        immediate.tool_progress_callback("tool.started", "other", None, None)
        assert [e.tool for e in rec.events] == ["search", "other"]
        # A session that ends first: the held start is dropped with it, no violation.
        late = legacy_callbacks(ts.Tracker(bus, "s2"), hold=0.05)
        late.tool_progress_callback("tool.started", "search", None, None)
        late.tracker.close()
        await anyio.sleep(0.2)
        assert late.tracker.violations == 0 and tracker.violations == 0
    with pytest.raises(ValueError, match="hold"):
        legacy_callbacks(tracker, hold=-1)


async def test_legacy_consumer_keeps_working_from_a_bus() -> None:
    bus = ts.EventBus()
    started: list[tuple[str, str, Any]] = []
    completed: list[tuple[str, str, Any, Any]] = []
    progress: list[tuple[str, str, Any, dict[str, Any]]] = []

    def on_progress(event_type: str, name: str, preview: Any, args: Any, **kwargs: Any) -> None:
        progress.append((event_type, name, preview, kwargs))

    async with LegacyCallbackSink(
        bus,
        session="s1",
        tool_start_callback=lambda call_id, name, args: started.append((call_id, name, args)),
        tool_complete_callback=lambda call_id, name, args, result: completed.append(
            (call_id, name, args, result)
        ),
        tool_progress_callback=on_progress,
    ):
        tracker = ts.Tracker(bus, "s1")
        with tracker.call("web_search", {"q": "anyio"}, call_id="c1") as call:
            call.progress(0.5, message="halfway")
            call.output_delta("some output\n")
            call.complete(["r"])
        try:
            with tracker.call("shell", {"cmd": "x"}, call_id="c2"):
                raise RuntimeError("exit 2")
        except RuntimeError:
            pass
        await settle(lambda: len(completed) == 2)
    assert started == [("c1", "web_search", {"q": "anyio"}), ("c2", "shell", {"cmd": "x"})]
    assert completed == [
        ("c1", "web_search", {"q": "anyio"}, ["r"]),
        ("c2", "shell", {"cmd": "x"}, {"error": "exit 2", "type": "RuntimeError"}),
    ]
    kinds = [(p[0], p[1]) for p in progress]
    assert kinds == [
        ("tool.started", "web_search"),
        ("tool.progress", "web_search"),
        ("tool.output", "web_search"),
        ("tool.completed", "web_search"),
        ("tool.started", "shell"),
        ("tool.completed", "shell"),
    ]
    assert progress[-1][3]["is_error"] is True


async def test_a_legacy_consumer_hears_a_denied_call_end() -> None:
    bus = ts.EventBus()
    completed: list[tuple[str, str, Any, Any]] = []
    async with LegacyCallbackSink(
        bus,
        session="s1",
        tool_complete_callback=lambda call_id, name, args, result: completed.append(
            (call_id, name, args, result)
        ),
    ):
        tracker = ts.Tracker(bus, "s1")
        handle = tracker.create("rm", call_id="c1")
        handle.ready({"path": "/"})
        approval_id = handle.await_approval("Deletes everything")
        await bus.resolve_approval("s1", approval_id, approved=False, by="alice", reason="no")
        await settle(lambda: len(completed) == 1)
    assert completed == [("c1", "rm", {"path": "/"}, {"denied": "no", "by": "alice"})]
