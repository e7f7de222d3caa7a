"""LiveView: tolerant, idempotent, reset-aware, bounded."""

from __future__ import annotations

import random
from typing import Any

import pytest

import toolstream as ts


def stream() -> tuple[ts.EventBus, ts.Subscription[ts.Event], ts.Tracker]:
    bus = ts.EventBus()
    return bus, bus.subscribe(session="s"), ts.Tracker(bus, "s")


def test_view_follows_a_whole_session() -> None:
    bus, sub, tracker = stream()
    with tracker.run(run_id="r"):
        call = tracker.create("search", call_id="a", title="Search")
        call.args_delta('{"q": ')
        view = ts.LiveView()
        for e in sub.take_nowait():
            view.apply(e)
        assert view.calls["a"].state is ts.CallState.CREATED
        assert view.calls["a"].args_text == '{"q": '
        call.args_delta('"x"}')
        call.ready()
        call.start()
        call.progress(0.25, message="a quarter")
        call.output_delta("abc ")
        call.output_delta("def\n")
        call.output_partial({"rows": 2})
        for e in sub.take_nowait():
            view.apply(e)
        snap = view.calls["a"]
        assert snap.state.value == "running" and snap.args == {"q": "x"} and snap.args_text == ""
        assert snap.fraction == 0.25 and snap.message == "a quarter"
        assert snap.output_text == "abc def\n" and snap.output == {"rows": 2}
        assert snap.title == "Search" and snap.run_id == "r" and snap.started_ts is not None
        assert view.runs["r"].state == "running"
        call.fail(ValueError("x"))
    for e in sub.take_nowait():
        view.apply(e)
    snap = view.calls["a"]
    assert snap.state is ts.CallState.FAILED and snap.error == ts.ErrorInfo(
        type="ValueError", message="x"
    )
    assert snap.duration_s is not None and snap.ended_ts is not None
    finished_run: ts.RunSnapshot = view.runs["r"]
    assert finished_run.state == "completed"
    assert view.open_calls() == []
    assert view.last_id == bus.position


def test_tolerates_missing_earlier_events() -> None:
    view = ts.LiveView()
    view.apply(ts.ToolCompleted(id="e-9", session="s", ts=5.0, call_id="late", tool="t", result=1))
    view.apply(
        ts.ToolProgress(id="e-10", session="s", ts=6.0, call_id="mid", tool="u", fraction=0.5)
    )
    assert view.calls["late"].state is ts.CallState.COMPLETED and view.calls["late"].result == 1
    assert view.calls["mid"].state is ts.CallState.RUNNING


def test_replayed_events_are_ignored() -> None:
    _, sub, tracker = stream()
    call = tracker.create("t", call_id="a")
    call.args_delta('{"a": ')
    call.args_delta("1}")
    call.start()
    call.output_delta("once\n")
    events = sub.take_nowait()
    view = ts.LiveView()
    for e in events + events + events[2:]:
        view.apply(e)
    assert view.calls["a"].output_text == "once\n"
    assert view.apply(events[-1]) is False


def test_reset_replaces_state_and_marks_vanished_open_calls_lost() -> None:
    view = ts.LiveView()
    view.apply(ts.RunStarted(id="old-1", session="s", ts=1.0, run_id="r"))
    view.apply(
        ts.ToolStarted(id="old-2", session="s", ts=1.0, call_id="vanished", tool="t", run_id="r")
    )
    view.apply(ts.ToolStarted(id="old-3", session="s", ts=1.0, call_id="kept", tool="t"))
    view.apply(ts.ToolStarted(id="old-4", session="s", ts=1.0, call_id="finished", tool="t"))
    view.apply(ts.ToolCompleted(id="old-5", session="s", ts=1.0, call_id="finished", tool="t"))
    reset = ts.StreamReset(
        id="new-0",
        session="s",
        ts=2.0,
        snapshot=ts.Snapshot(
            calls=(
                ts.CallSnapshot(call_id="kept", tool="t", state=ts.CallState.RUNNING, fraction=0.9),
            )
        ),
    )
    view.apply(reset)
    assert view.calls["vanished"].state is ts.CallState.LOST
    assert view.calls["vanished"].state.terminal
    assert view.calls["kept"].fraction == 0.9
    assert view.calls["finished"].state is ts.CallState.COMPLETED
    assert view.runs["r"].state == "cancelled"
    assert view.last_id == "new-0"
    # events of the new epoch apply after the reset
    view.apply(ts.ToolCompleted(id="new-1", session="s", ts=3.0, call_id="kept", tool="t"))
    assert view.calls["kept"].state is ts.CallState.COMPLETED


def test_finished_calls_are_retained_up_to_a_bound() -> None:
    view = ts.LiveView(max_finished=10)
    for i in range(50):
        view.apply(
            ts.ToolStarted(id=f"e-{2 * i + 1}", session="s", ts=1.0, call_id=f"c{i}", tool="t")
        )
        if i != 7:
            view.apply(
                ts.ToolCompleted(
                    id=f"e-{2 * i + 2}", session="s", ts=1.0, call_id=f"c{i}", tool="t"
                )
            )
    assert len(view.calls) == 11
    assert "c7" in view.calls, "open calls are never dropped"
    assert list(view.calls)[-1] == "c49"


def test_streamed_text_is_bounded() -> None:
    view = ts.LiveView(max_text=100)
    for i in range(1000):
        view.apply(
            ts.ToolOutputDelta(
                id=f"e-{i + 1}", session="s", ts=1.0, call_id="c", tool="t", text="0123456789"
            )
        )
    text = view.calls["c"].output_text
    assert len(text) == 100 and text == "0123456789" * 10


def test_snapshot_of_one_run_and_copy_independence() -> None:
    view = ts.LiveView()
    view.apply(ts.ToolStarted(id="e-1", session="s", ts=1.0, call_id="a", tool="t", run_id="r1"))
    view.apply(ts.ToolStarted(id="e-2", session="s", ts=1.0, call_id="b", tool="t", run_id="r2"))
    assert [c.call_id for c in view.snapshot(run_id="r1").calls] == ["a"]
    copy = view.copy()
    copy.apply(ts.ToolCompleted(id="e-3", session="s", ts=1.0, call_id="a", tool="t", run_id="r1"))
    assert view.calls["a"].state is ts.CallState.RUNNING
    assert copy.calls["a"].state is ts.CallState.COMPLETED


def test_calls_mapping_is_read_only_and_snapshots_are_frozen() -> None:
    view = ts.LiveView()
    view.apply(ts.ToolStarted(id="e-1", session="s", ts=1.0, call_id="a", tool="t"))
    with pytest.raises(TypeError):
        view.calls["a"] = view.calls["a"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        view.calls["a"].state = ts.CallState.FAILED  # type: ignore[misc]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ts.LiveView(max_finished=-1)


def test_a_trimmed_log_folds_into_the_same_state_as_applying_each_event() -> None:
    rng = random.Random(7)
    for trial in range(30):
        bus = ts.EventBus(replay=1_000_000)
        tracker = ts.Tracker(bus, "s")
        handles: list[ts.CallHandle] = []
        for _ in range(rng.randrange(20, 200)):
            roll = rng.random()
            live = [h for h in handles if h.state is not None and not h.state.terminal]
            if roll < 0.15 or not live:
                h = tracker.create(rng.choice(["a", "b"]))
                handles.append(h)
                if rng.random() < 0.5:
                    h.start({"x": 1})
            else:
                h = rng.choice(live)
                if roll < 0.55:
                    h.progress(rng.random(), message=rng.choice([None, "m1", "m2"]))
                elif roll < 0.8:
                    h.output_delta(rng.choice(["a", "bc", "def " * 50]))
                elif roll < 0.9:
                    h.complete({"ok": trial})
                else:
                    h.fail(ValueError("no"))
        events = list(bus._logs["s"].events)
        folded = ts.LiveView(check_replays=False)
        applied = ts.LiveView(check_replays=False)
        cut = rng.randrange(len(events))
        folded.fold(events[:cut])
        folded.fold(events[cut:])
        for event in events:
            applied.apply(event)
        assert folded.snapshot() == applied.snapshot()
        assert folded.last_id == applied.last_id == events[-1].id
        # A view that checks for replays (a client's) ignores them in fold too.
        checking = ts.LiveView()
        checking.fold(events)
        checking.fold(events[: len(events) // 2])
        assert checking.snapshot() == applied.snapshot()


def test_a_call_record_starts_empty_and_copies_whole() -> None:
    """The generated ``_Call.__init__`` sets every field (None but the few a new call
    starts with), and ``copy`` copies every slot, with text parts of its own."""
    from toolstream._core.view import _FIELDS, _Call

    rec = _Call("c1", "search")
    set_by_init = {"call_id", "tool", "state", "args_text", "output_text", "subruns"}
    assert all(getattr(rec, name) is None for name in _FIELDS if name not in set_by_init)
    assert (rec.call_id, rec.tool, rec.state) == ("c1", "search", ts.CallState.CREATED)
    assert rec.subruns == ()
    assert (rec.args_text, rec.output_text, rec.args_parts, rec.output_len) == ("", "", [], 0)
    assert rec._snap is None
    rec.args_parts.append('{"q"')
    rec.fraction = 0.5
    twin = rec.copy()
    assert all(getattr(twin, name) == getattr(rec, name) for name in _Call.__slots__)
    assert twin.args_parts is not rec.args_parts and twin.output_parts is not rec.output_parts


def test_runs_of_progress_fold_into_the_same_state_as_applying_each_event() -> None:
    """A run of progress events folds call by call (``_core/folding.py``): each call's
    newest fraction, the newest message and run any of its events had, the first tool;
    a run with a call that is not running (unknown, or ended) takes the general path.
    Messages' text between them skips ``apply``'s dispatch."""
    rng = random.Random(11)
    for trial in range(300):
        events: list[ts.Event] = []

        def add(cls: type[ts.Event], events: list[ts.Event] = events, **fields: Any) -> None:
            n = len(events) + 1
            events.append(cls(id=f"e-{n}", session="s", ts=float(n), **fields))

        calls = [f"c{i}" for i in range(rng.randrange(1, 4))]
        for _ in range(rng.randrange(1, 80)):
            call_id = rng.choice(calls)
            roll = rng.random()
            run_id = rng.choice([None, None, "r1", "r2"])
            if roll < 0.1:
                add(ts.ToolStarted, call_id=call_id, tool=rng.choice(["t", ""]), run_id=run_id)
            elif roll < 0.13:
                add(ts.ToolCompleted, call_id=call_id, tool="t", run_id=run_id)
            elif roll < 0.18:
                add(ts.ToolOutputDelta, call_id=call_id, tool="t", text=rng.choice(["a", "bc"]))
            elif roll < 0.3:  # a message's text (a chat's), in runs of its own
                message_id = rng.choice(["m1", "m2"])
                if roll < 0.2:
                    add(ts.MessageStarted, message_id=message_id, run_id=run_id, role="assistant")
                elif roll < 0.21:
                    add(ts.MessageFinished, message_id=message_id, run_id=run_id)
                else:
                    kind = rng.choice(["text", "reasoning"])
                    add(ts.MessageDelta, message_id=message_id, text="w ", kind=kind)
            else:
                add(
                    ts.ToolProgress,
                    call_id=call_id,
                    tool=rng.choice(["t", "u", ""]),
                    run_id=run_id,
                    fraction=rng.random(),
                    current=rng.choice([None, 3.0]),
                    message=rng.choice([None, None, "m1", "m2"]),
                )
        applied = ts.LiveView(check_replays=False)
        for event in events:
            applied.apply(event)
        folded = ts.LiveView(check_replays=False)
        cuts = sorted(rng.sample(range(len(events) + 1), k=min(3, len(events) + 1)))
        for start, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
            folded.fold(events[start:end])
        assert folded.snapshot() == applied.snapshot(), f"trial {trial}"
        assert folded.last_id == applied.last_id == events[-1].id
