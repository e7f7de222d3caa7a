"""The events the bus builds at publish are exactly what the classes' own ``__init__``
builds; bad fields get a clear error; the size estimate follows the payload."""

from __future__ import annotations

import traceback
from typing import Any

import attrs
import pytest

import toolstream as ts
from toolstream._core.build import EVENT_OVERHEAD, approx_size, plan
from toolstream._core.errors import BusClosed
from toolstream._core.publishers import hot_publisher

SAMPLES: dict[str, Any] = {
    "run_id": "r1",
    "call_id": "c1",
    "tool": "search",
    "parent_call_id": "p1",
    "title": "Searching",
    "outcome": "failed",
    "error": ts.ErrorInfo(type="ValueError", message="bad"),
    "batch_id": "b1",
    "parent_id": "m1",
    "delta": '{"q": ',
    "args": {"q": "weather", "n": [1, 2]},
    "args_valid": False,
    "summary": "did it",
    "position": 2,
    "fraction": 0.25,
    "current": 1.0,
    "total": 4.0,
    "message": "step",
    "data": {"rows": 3},
    "text": "hello",
    "value": [1, "two"],
    "result": {"ok": True},
    "duration_s": 0.5,
    "reason": "user",
    "phase": "running",
    "call_ids": ("c1", "c2"),
    "counts": {"running": 2},
}

PUBLISHABLE = [cls for cls in ts.EVENT_TYPES if cls is not ts.StreamReset]


ASSIGNED: dict[str, Any] = {"id": "abc-1", "ts": 1.5}


@pytest.mark.parametrize("cls", PUBLISHABLE, ids=lambda c: c.__name__)
def test_built_events_equal_the_classes_own(cls: type[ts.Event]) -> None:
    found = plan(cls)
    assert found is not None
    build = found.build
    assert found.twin is not None
    names = [f.name for f in attrs.fields(cls)]
    full = {"session": "s", **{n: SAMPLES[n] for n in names if n in SAMPLES}}
    event, size = build(dict(full), "abc-1", 1.5)
    assert type(event) is cls
    assert event == cls(**full, **ASSIGNED)
    assert size >= EVENT_OVERHEAD
    # The same from the values by position, through the publisher an EventBus makes
    # for the class (what a tracker's hot paths call), sized the same.
    order = found.fields
    assert set(order) == set(names) - {"id", "ts"}
    values = tuple(full.get(n, getattr(event, n)) for n in order)
    bus = ts.EventBus()
    same = hot_publisher(cls)(bus, *values)
    assert type(same) is cls
    assert same == cls(**full, id=same.id, ts=same.ts)
    assert bus._logs["s"].sizes == [size]
    assert bus._logs["s"].events == [same]
    # Fields left out take the class's defaults (factories called per event).
    bare, _ = build({"session": "s"}, "abc-1", 1.5)
    assert bare == cls(session="s", **ASSIGNED)
    if cls is ts.BatchPhase:
        other, _ = build({"session": "s"}, "abc-1", 1.5)
        assert isinstance(bare, ts.BatchPhase) and isinstance(other, ts.BatchPhase)
        assert bare.counts is not other.counts
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.id = "x"  # type: ignore[misc]


def test_publish_rejects_unknown_and_missing_fields_by_name() -> None:
    bus = ts.EventBus()
    with pytest.raises(TypeError, match=r"ToolProgress has no field 'fracton'"):
        bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", fracton=0.5)
    with pytest.raises(TypeError, match="not a lifecycle event class"):
        bus.publish(ts.StreamReset, session="s")
    with pytest.raises(TypeError, match="not a lifecycle event class"):
        bus.publish(dict, session="s")  # type: ignore[type-var]

    @attrs.frozen(kw_only=True)
    class Tagged(ts.ToolProgress):
        tag: str

    with pytest.raises(TypeError, match="Tagged needs the field 'tag'"):
        bus.publish(Tagged, session="s", call_id="c", tool="t")
    assert bus.stats.published == 0, "a rejected event takes no id"
    # id and ts are the bus's to assign, whatever a caller passes.
    own = bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", id="mine", ts=0.0)
    assert own.id != "mine" and own.ts > 0
    event = bus.publish(Tagged, session="s", call_id="c", tool="t", tag="x", fraction=0.5)
    assert type(event) is Tagged and event.tag == "x" and event.fraction == 0.5
    assert event.id.endswith("-2")


def test_subclasses_the_generated_code_cannot_build_use_their_own_init() -> None:
    bus = ts.EventBus()
    seen: list[str] = []

    @attrs.frozen(kw_only=True)
    class Checked(ts.ToolProgress):
        tag: str = attrs.field(validator=attrs.validators.instance_of(str))

    @attrs.frozen(kw_only=True)
    class Hooked(ts.ToolProgress):
        def __attrs_post_init__(self) -> None:
            seen.append(self.call_id)

    @attrs.frozen(kw_only=True, slots=False)
    class Plain(ts.ToolProgress):
        note: str = ""

    with pytest.raises(TypeError):
        bus.publish(Checked, session="s", call_id="c", tool="t", tag=3)
    assert bus.publish(Checked, session="s", call_id="c", tool="t", tag="ok").tag == "ok"
    bus.publish(Hooked, session="s", call_id="c2", tool="t")
    assert seen == ["c2"]
    assert bus.publish(Plain, session="s", call_id="c", tool="t", note="n").note == "n"


def test_size_follows_the_payload_and_publish_counts_identifiers() -> None:
    found = plan(ts.ToolProgress)
    assert found is not None
    build = found.build
    base = {"session": "s", "call_id": "c", "tool": "t"}
    _, small = build({**base, "message": "x"}, "a-1", 1.0)
    _, large = build({**base, "message": "x" * 10_000}, "a-1", 1.0)
    assert large - small == 9_999
    _, nested = build({**base, "data": {"k": ["v" * 5000]}}, "a-1", 1.0)
    assert nested - small > 5000
    # Identifiers a tracker shares between events are not counted per event, but a
    # caller of publish() may pass a fresh one each time (up to MAX_ID_BYTES): the
    # window's budget holds.
    bus = ts.EventBus(replay=10_000, replay_bytes=50_000)
    for i in range(200):
        bus.publish(ts.ToolProgress, session="s", call_id=f"{i:05d}" + "c" * 1000, tool="t")
    assert bus._bytes <= 50_000
    assert len(bus._logs["s"].events) < 60
    assert approx_size({"message": "x" * 100}) == EVENT_OVERHEAD + 100


def test_generated_builders_show_their_source_in_tracebacks() -> None:
    found = plan(ts.ToolProgress)
    assert found is not None
    fields: dict[str, Any] = dict.fromkeys(found.fields)
    del fields["tool"]
    fields["tol"] = "t"  # as many fields as the class has, one of them misnamed
    with pytest.raises(KeyError) as caught:
        found.build(fields, "a-1", 1.0)
    frames = traceback.extract_tb(caught.value.__traceback__)
    generated = frames[-1]
    assert generated.filename.startswith("<toolstream generated builder for ToolProgress")
    assert generated.line and "f['tool']" in generated.line, "the generated line is shown"
    # The publishers a bus makes for the hot paths show theirs too.
    bus = ts.EventBus()
    bus.close()
    with pytest.raises(BusClosed) as closed:
        hot_publisher(ts.ToolProgress)(bus, *fields.values())
    frames = traceback.extract_tb(closed.value.__traceback__)
    assert frames[-1].filename.startswith("<toolstream generated publish_ToolProgress")
    assert frames[-1].line and "BusClosed" in frames[-1].line
    with pytest.raises(TypeError) as bad:
        ts.to_dict(object())  # type: ignore[arg-type]
    assert "toolstream event" in str(bad.value)


def test_publish_refuses_identifiers_that_are_not_text() -> None:
    bus = ts.EventBus()
    with pytest.raises(ValueError, match="call_id must be a string of valid Unicode"):
        bus.publish(ts.ToolStarted, session="s", call_id="bad\ud800", tool="t")
    with pytest.raises(ValueError, match="tool"):
        bus.publish(ts.ToolStarted, session="s", call_id="c", tool=3)
    assert bus.stats.published == 0


def test_a_guarded_publisher_publishes_only_for_a_hot_handle() -> None:
    """The lock-free progress path: the guard is read in the bus's lock, and a handle
    that is no longer hot gets None and nothing published (its caller takes the
    tracker's lock)."""
    bus = ts.EventBus()
    call = ts.Tracker(bus, "s").create("t")
    values = ("s", None, call.call_id, "t", None, 0.5, None, None, "step", None)
    publish = hot_publisher(ts.ToolProgress, guarded=True)
    assert publish is hot_publisher(ts.ToolProgress, guarded=True)
    assert publish is not hot_publisher(ts.ToolProgress)

    def hot() -> bool:
        return call._hot

    assert not hot()  # announced, not running
    assert publish(bus, call, *values) is None
    assert [e.type for e in bus._logs["s"].events] == ["tool.created"]
    call.start()
    assert hot()
    event = publish(bus, call, *values)
    assert isinstance(event, ts.ToolProgress) and event.fraction == 0.5
    call.complete()
    assert not hot()
    assert publish(bus, call, *values) is None
    assert [e.type for e in bus._logs["s"].events] == [
        "tool.created",
        "tool.started",
        "tool.progress",
        "tool.completed",
    ]


def test_a_trackers_call_events_give_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every event a tracker publishes for a call gives all of its class's fields, so the
    bus's builder never fills in defaults (its slower path): a call whose input was
    shown before it started, one that starts with its input, one that fails."""
    from toolstream._core import build

    filled: list[str] = []
    complete = build.EventPlan.complete

    def counting(self: build.EventPlan, fields: dict[str, Any]) -> None:
        filled.append(self.cls.__name__)
        complete(self, fields)

    monkeypatch.setattr(build.EventPlan, "complete", counting)
    tracker = ts.Tracker(ts.EventBus(), "s")
    streamed = tracker.create("search")
    streamed.args_delta('{"q": 1}')
    streamed.ready({"q": 1})
    streamed.start()
    streamed.progress(0.5, message="half")
    streamed.output_delta("text")
    streamed.complete({"hits": 1})
    direct = tracker.create("fetch")
    direct.start({"url": "x"})
    direct.fail(ValueError("boom"))
    tracker.create("late").cancel("stop")
    assert filled == []
