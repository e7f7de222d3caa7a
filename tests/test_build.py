"""The events the bus builds at publish are exactly what the classes' own ``__init__``
builds; bad fields get a clear error; the size estimate follows the payload."""

from __future__ import annotations

import random
from typing import Any, cast

import attrs
import pytest

import toolstream as ts
from toolstream._core.build import (
    EVENT_OVERHEAD,
    approx_size,
    builder,
    positional_fields,
    tuple_builder,
)
from toolstream._core.view import LiveView

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
    build = builder(cls)
    assert build is not None
    names = [f.name for f in attrs.fields(cls)]
    full = {"session": "s", **{n: SAMPLES[n] for n in names if n in SAMPLES}}
    event, size = build(dict(full), "abc-1", 1.5)
    assert type(event) is cls
    assert event == cls(**full, **ASSIGNED)
    assert size >= EVENT_OVERHEAD
    # The same from the values by position (what a tracker's hot paths pass).
    order = positional_fields(cls)
    assert set(order) == set(names) - {"id", "ts"}
    values = tuple(full.get(n, getattr(event, n)) for n in order)
    same, same_size = tuple_builder(cls)(values, "abc-1", 1.5)
    assert same == event and same_size == size
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
    build = builder(ts.ToolProgress)
    assert build is not None
    base = {"session": "s", "call_id": "c", "tool": "t"}
    _, small = build({**base, "message": "x"}, "a-1", 1.0)
    _, large = build({**base, "message": "x" * 10_000}, "a-1", 1.0)
    assert large - small == 9_999
    _, nested = build({**base, "data": {"k": ["v" * 5000]}}, "a-1", 1.0)
    assert nested - small > 5000
    # Identifiers a tracker shares between events are not counted per event, but a
    # caller of publish() may pass a fresh one each time: the window's budget holds.
    bus = ts.EventBus(replay=10_000, replay_bytes=1_000_000)
    for i in range(200):
        bus.publish(ts.ToolProgress, session="s", call_id=f"{i:05d}" + "c" * 20_000, tool="t")
    assert bus._bytes <= 1_000_000
    assert len(bus._logs["s"].events) < 60
    assert approx_size({"message": "x" * 100}) == EVENT_OVERHEAD + 100


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
        folded = LiveView()
        applied = LiveView()
        folded._check_replays = applied._check_replays = False
        cut = rng.randrange(len(events))
        folded.fold(events[:cut])
        folded.fold(events[cut:])
        for event in events:
            applied.apply(event)
        assert folded.snapshot() == applied.snapshot()
        assert folded.last_id == applied.last_id == events[-1].id
        # A view that checks for replays (a client's) ignores them in fold too.
        checking = LiveView()
        checking.fold(events)
        checking.fold(events[: len(events) // 2])
        assert checking.snapshot() == applied.snapshot()


def test_short_texts_are_remembered_with_the_same_result() -> None:
    policy = ts.PayloadPolicy()
    secret = "token sk-abcdefghijklmnopqrstuvwx1234"
    first = policy.text(secret)
    assert first is not None and "sk-abcdefghijklmnop" not in first
    assert policy.text(secret) == first
    assert policy.text("plain words") == "plain words"
    assert policy.text(None) is None
    assert policy.text(12) == "12"
    for i in range(5000):  # bounded: the memory of short texts is cleared when full
        policy.text(f"message {i}")
    assert len(policy._text_cache) <= 4096
    long = "a" * 300 + " Bearer abcdefghijklmnopqrstuvwxyz012345"
    shaped = policy.text(long)
    assert shaped is not None and "abcdefghijklmnopqrstuvwxyz012345" not in shaped


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
