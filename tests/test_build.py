"""The events the bus builds at publish are exactly what the classes' own ``__init__``
builds; bad fields get a clear error; the size estimate follows the payload."""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest

import toolstream as ts
from toolstream._core.build import EVENT_OVERHEAD, approx_size, builder
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


def _envelope() -> dict[str, Any]:
    return {"id": "abc-1", "session": "s", "ts": 1.5}


@pytest.mark.parametrize("cls", PUBLISHABLE, ids=lambda c: c.__name__)
def test_built_events_equal_the_classes_own(cls: type[ts.Event]) -> None:
    build = builder(cls)
    assert build is not None
    names = [f.name for f in attrs.fields(cls)]
    full = {**_envelope(), **{n: SAMPLES[n] for n in names if n in SAMPLES}}
    event, size = build(dict(full))
    assert type(event) is cls
    assert event == cls(**full)
    assert size >= EVENT_OVERHEAD
    # Fields left out take the class's defaults (factories called per event).
    bare, _ = build(_envelope())
    assert bare == cls(**_envelope())
    if cls is ts.BatchPhase:
        other, _ = build(_envelope())
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
    event = bus.publish(Tagged, session="s", call_id="c", tool="t", tag="x", fraction=0.5)
    assert type(event) is Tagged and event.tag == "x" and event.fraction == 0.5
    assert event.id.endswith("-1")


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
    _, small = build({**_envelope(), "call_id": "c", "tool": "t", "message": "x"})
    _, large = build({**_envelope(), "call_id": "c", "tool": "t", "message": "x" * 10_000})
    assert large - small == 9_999
    _, nested = build({**_envelope(), "call_id": "c", "tool": "t", "data": {"k": ["v" * 5000]}})
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
