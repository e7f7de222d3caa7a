"""tracker.message(): the agent's text and reasoning in a run, streamed like a call's output."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolstream as ts
from toolstream import dialects
from toolstream._core.subscription import coalesce
from toolstream.testing import Recorder, assert_lifecycle

# Pieces a model may stream: words, separators, and the parts of secrets.
PIECES = [
    "key ",
    "sk-",
    "proj-",
    "4pTy6cHd8",
    "fJs3gVa1eXqZ7",
    "ghp_",
    "0123456789abcdefghij",
    "Bearer ",
    "abcdefgh12345678",
    "password=",
    "hunter2hunter2",
    " ",
    ". ",
    "\n",
    "hmm",
    "postgres://admin:",
    "p4ss@db/x ",
]


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


def events_of(bus: ts.EventBus, session: str = "s") -> list[ts.Event]:
    return bus.subscribe(session=session, after=f"{bus.epoch}-0").take_nowait()


def is_finished(message: ts.MessageHandle) -> bool:
    return message.finished


def text_of(events: Sequence[ts.Event], kind: str = "text") -> str:
    return "".join(e.text for e in events if isinstance(e, ts.MessageDelta) and e.kind == kind)


async def test_a_message_streams_inside_its_run(bus: ts.EventBus) -> None:
    async with Recorder(bus, session="s") as rec:
        tracker = ts.Tracker(bus, "s")
        async with tracker, tracker.run("r1"):
            async with tracker.message("m1") as message:
                message.reasoning("The user greets; ")
                message.delta("Hello")
                message.delta(", world.")
            assert message.finished
        events = await rec.wait_for(lambda es: any(e.type == "run.finished" for e in es))
    kinds = [e.type for e in events]
    assert kinds == [
        "run.started",
        "message.started",
        "message.delta",
        "message.delta",
        "message.delta",
        "message.finished",
        "run.finished",
    ]
    for event in events[1:-1]:
        assert (event.run_id, event.call_id, event.tool) == ("r1", "", "")
        assert event.message_id == "m1"  # type: ignore[attr-defined]
    assert text_of(events) == "Hello, world."
    assert text_of(events, "reasoning") == "The user greets; "
    assert_lifecycle(events)


def test_open_messages_end_with_their_run_and_with_the_tracker(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    with tracker.run("r1"):
        first = tracker.message()
        first.delta("one")
        with tracker.run("r2"):
            inner = tracker.message()
            inner.delta("two")
        assert inner.finished
        assert not first.finished
    assert is_finished(first)
    loose = tracker.message()
    loose.delta("three")
    tracker.close()
    assert loose.finished
    events = events_of(bus)
    assert_lifecycle(events)
    finished = [e.message_id for e in events if isinstance(e, ts.MessageFinished)]
    assert finished == [inner.message_id, first.message_id, loose.message_id]


def test_the_same_open_id_gives_the_same_handle_and_a_run_can_be_named(
    bus: ts.EventBus,
) -> None:
    tracker = ts.Tracker(bus, "s")
    with tracker.run("outer"):
        a = tracker.message("m")
        assert tracker.message("m") is a
        b = tracker.message(run_id="elsewhere")
        assert (a.run_id, b.run_id) == ("outer", "elsewhere")
        b.finish()
    assert sum(isinstance(e, ts.MessageStarted) for e in events_of(bus)) == 2


def test_reports_after_finish_are_violations(
    bus: ts.EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = ts.Tracker(bus, "s")
    message = tracker.message()
    message.finish()
    message.delta("late")
    message.finish()
    assert tracker.violations == 2
    strict = ts.Tracker(bus, "s2", strict=True)
    done = strict.message()
    done.finish()
    with pytest.raises(ts.LifecycleError, match="is finished"):
        done.reasoning("late")
    strict.close()
    with pytest.raises(ts.LifecycleError, match="after the tracker closed"):
        strict.message()


def test_bad_input_gets_a_specific_error(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(ValueError, match="message_id"):
        tracker.message("")
    with pytest.raises(ValueError, match="message_id"):
        tracker.message("bad\ud800id")
    with pytest.raises(ValueError, match="role"):
        tracker.message(role="")
    message = tracker.message()
    with pytest.raises(TypeError, match="must be a str"):
        message.delta(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a str"):
        message.reasoning(None)  # type: ignore[arg-type]
    message.delta("")  # nothing to say: no event
    # A lone surrogate (text cut from bytes badly) is published safely, not a crash.
    message.delta("caf\udce9 ok")
    message.finish()
    events = events_of(bus)
    assert text_of(events) == "caf\ufffd ok"
    for event in events:
        json.dumps(ts.to_dict(event), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("coalesce_s", [0.0, 0.05])
def test_secrets_split_across_deltas_are_redacted_in_text_and_reasoning(
    bus: ts.EventBus, coalesce_s: float
) -> None:
    tracker = ts.Tracker(bus, "s", coalesce=coalesce_s)
    pieces = ("token: sk-", "abcdefghijkl", "mnopqrstuvwx1234", " ok. ")
    with tracker.message() as message:
        for piece in pieces:
            message.reasoning(piece)
        for piece in pieces:
            message.delta(piece)
    events = events_of(bus)
    for kind in ("text", "reasoning"):
        text = text_of(events, kind)
        assert "abcdefghijkl" not in text
        assert "[redacted]" in text
    snap = bus.snapshot("s").messages[0]
    assert "abcdefghijkl" not in snap.text + snap.reasoning


def test_what_a_kind_holds_back_waits_for_that_kinds_next_text(bus: ts.EventBus) -> None:
    """Each kind's text is one text for redaction: what the redactor of a kind holds
    back (it may be the start of a secret) is published with that kind's next text, or
    at the message's end (the newest kind's first), never cut off at a switch."""
    tracker = ts.Tracker(bus, "s")
    with tracker.message() as message:
        message.reasoning("I will answer")  # "answer" could still grow into a secret
        assert text_of(events_of(bus), "reasoning") == "I will "
        message.delta("Yes.")
        message.reasoning("Then more")
        assert text_of(events_of(bus), "reasoning") == "I will answerThen "
    deltas = [(e.kind, e.text) for e in events_of(bus) if isinstance(e, ts.MessageDelta)]
    assert deltas == [
        ("reasoning", "I will "),
        ("reasoning", "answerThen "),
        ("reasoning", "more"),
        ("text", "Yes."),
    ]


KEY = "sk-proj-4pTy6cHd8fJs3gVa1eXqZ7"


@pytest.mark.parametrize("cut", [9, 20])
@pytest.mark.parametrize("first", ["text", "reasoning"])
def test_a_secret_cut_by_the_other_kind_never_reaches_any_wire(
    bus: ts.EventBus, first: str, cut: int
) -> None:
    """``delta("key " + KEY[:cut]); reasoning("hmm"); delta(KEY[cut:])`` (and the same
    with the kinds swapped): no part of the key reaches the live deltas, the message's
    snapshot, a reset taken between the pieces or after, or the AI SDK and AG-UI wires
    (where a client joins the two pieces of one kind)."""
    from toolstream import dialects
    from toolstream.dialects import Encoder

    tracker = ts.Tracker(bus, "s")
    other = "reasoning" if first == "text" else "text"

    def say(kind: str, text: str) -> None:
        message.delta(text) if kind == "text" else message.reasoning(text)

    resets: list[ts.Event] = []
    with tracker.run("r1"):
        message = tracker.message("m1")
        say(first, "key " + KEY[:cut])
        say(other, "hmm, ")
        resets += bus.subscribe(session="s", snapshot=True).take_nowait()
        say(first, KEY[cut:] + " done")
        resets += bus.subscribe(session="s", snapshot=True).take_nowait()
        message.finish()
    events = events_of(bus)
    assert text_of(events, first) == "key [redacted] done"
    assert text_of(events, other) == "hmm, "
    snap = bus.snapshot("s").messages[0]
    assert (getattr(snap, first), getattr(snap, other)) == ("key [redacted] done", "hmm, ")
    wires = [json.dumps([ts.to_dict(e) for e in [*events, *resets]])]
    for name in ("ai_sdk", "agui"):
        for stream in (events, [resets[0], *events], [resets[1], *events]):
            encoder = Encoder(dialects.get(name))
            frames = [f.message.payload for e in stream for f in encoder.encode(e)]
            wires.append(json.dumps(frames))
    for wire in wires:
        for piece in (KEY[:cut], KEY[cut:], KEY[3:9], KEY[-9:]):
            assert piece not in wire, (piece, wire[:600])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["text", "reasoning"]), st.sampled_from(PIECES)),
        min_size=1,
        max_size=24,
    )
)
def test_each_kinds_text_is_redacted_as_one_text_however_the_kinds_interleave(
    pieces: list[tuple[str, str]],
) -> None:
    """Property: the published text of each kind is exactly the whole-text redaction
    of that kind's text, for any interleaving of the two kinds' pieces."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    with tracker.message() as message:
        for kind, piece in pieces:
            message.delta(piece) if kind == "text" else message.reasoning(piece)
    events = events_of(bus)
    policy = tracker.payload
    for kind in ("text", "reasoning"):
        whole = "".join(piece for k, piece in pieces if k == kind)
        assert text_of(events, kind) == policy.patterns.redact(whole), (kind, pieces)
    bus.close()


def test_switching_kinds_keeps_the_order(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s", coalesce=30.0)  # only switches and finish() publish
    with tracker.message() as message:
        message.reasoning("a ")
        message.reasoning("b ")
        message.delta("c ")
        message.reasoning("d ")
        message.delta("e")
    deltas = [(e.kind, e.text) for e in events_of(bus) if isinstance(e, ts.MessageDelta)]
    assert deltas == [("reasoning", "a b "), ("text", "c "), ("reasoning", "d "), ("text", "e")]


async def test_coalescing_merges_deltas_and_loses_nothing(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s", coalesce=0.05)
    message = tracker.message()
    for i in range(200):
        message.delta(f"{i} ")
    await anyio.sleep(0.2)
    count = sum(isinstance(e, ts.MessageDelta) for e in events_of(bus))
    assert 1 <= count < 20
    message.finish()
    assert text_of(events_of(bus)) == "".join(f"{i} " for i in range(200))


def test_a_long_text_is_chunked(bus: ts.EventBus) -> None:
    policy = ts.PayloadPolicy(max_bytes=1000)
    tracker = ts.Tracker(bus, "s", payload=policy)
    with tracker.message() as message:
        message.delta("x " * 5000)
    deltas = [e for e in events_of(bus) if isinstance(e, ts.MessageDelta)]
    assert len(deltas) >= 10
    assert all(len(e.text.encode()) <= 1000 for e in deltas)
    assert text_of(deltas) == "x " * 5000


def test_snapshots_and_views_carry_the_whole_text(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    with tracker.run("r1"):
        message = tracker.message("m1")
        message.reasoning("why ")
        message.delta("Hello ")
        # A client joining now gets the message so far in its reset.
        late = bus.subscribe(session="s", snapshot=True)
        reset = late.take_nowait()[0]
        assert isinstance(reset, ts.StreamReset)
        (snap,) = reset.snapshot.messages
        assert (snap.message_id, snap.text, snap.reasoning, snap.finished) == (
            "m1",
            "Hello ",
            "why ",
            False,
        )
        assert snap.run_id == "r1" and snap.first_event_id is not None
        message.delta("world\n")
        view = ts.LiveView()
        for event in [reset, *late.take_nowait()]:
            view.apply(event)
        assert view.messages["m1"].text == "Hello world\n"
    view2 = ts.LiveView()
    for event in events_of(bus):
        view2.apply(event)
    assert view2.messages["m1"].finished and view2.messages["m1"].text == "Hello world\n"
    assert bus.snapshot("s", run="r1").messages[0].text == "Hello world\n"
    assert bus.snapshot("s").runs[0].first_event_id == events_of(bus)[0].id
    # Replays are harmless.
    for event in events_of(bus):
        assert not view2.apply(event) or not event.type.startswith("message.")
    assert view2.messages["m1"].text == "Hello world\n"
    copy = view2.copy()
    assert copy.snapshot() == view2.snapshot()


def test_a_view_keeps_messages_bounded() -> None:
    view = ts.LiveView(max_runs=3, max_text=100)
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    for i in range(10):
        with tracker.run(f"r{i}"), tracker.message(f"m{i}") as message:
            message.delta("y" * 500)
    for event in events_of(bus):
        view.apply(event)
    assert len(view.messages) <= 3
    assert all(len(m.text) <= 100 for m in view.messages.values())
    bus.close()


def test_a_slow_subscriber_gets_merged_text_never_merged_kinds(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    with tracker.message("m") as message:
        for i in range(5):
            message.delta(f"t{i} ")
        message.reasoning("r ")
        message.delta("t5 ")
    merged, count = coalesce(events_of(bus))
    deltas = [(e.kind, e.text) for e in merged if isinstance(e, ts.MessageDelta)]
    assert deltas == [("text", "t0 t1 t2 t3 t4 "), ("reasoning", "r "), ("text", "t5 ")]
    assert count == 4
    assert_lifecycle(merged)


def test_messages_from_threads(bus: ts.EventBus) -> None:
    tracker = ts.Tracker(bus, "s")
    message = tracker.message()

    def write(k: int) -> None:
        for i in range(100):
            message.delta(f"{k}.{i} ")

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    message.finish()
    text = text_of(events_of(bus))
    assert sorted(text.split()) == sorted(f"{k}.{i}" for k in range(4) for i in range(100))


def test_a_broken_bus_does_not_raise_into_the_agent() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    message = tracker.message()
    bus.close()
    message.delta("after the bus closed")  # dropped, logged once
    message.finish()
    assert message.finished
    time.sleep(0)


@pytest.mark.parametrize("name", ["ai_sdk", "agui", "native"])
def test_a_persons_words_on_the_bus_are_not_the_agents_text(bus: ts.EventBus, name: str) -> None:
    """A message with role ``user`` (LangGraph clients' words, kept on the bus) is no
    text of the agent in the protocols that frame the agent's message."""
    bus.publish(ts.MessageStarted, session="s", message_id="u1", role="user")
    bus.publish(ts.MessageDelta, session="s", message_id="u1", text="is it raining in Oslo")
    bus.publish(ts.MessageFinished, session="s", message_id="u1")
    with ts.Tracker(bus, "s") as tracker, tracker.run("r1"), tracker.message() as message:
        message.delta("Hello.")
    dialect = dialects.get(name)
    wire = json.dumps([m.payload for e in events_of(bus) for m in dialect.encode(e)], default=str)
    assert "Hello." in wire
    if name == "native":
        assert '"role": "user"' in wire  # native says whose words they are
    else:
        assert "Oslo" not in wire
    snapshot = ts.StreamReset(id="9-9", ts=0.0, session="s", snapshot=bus.snapshot("s"))
    fresh = dialects.get(name)
    again = json.dumps([m.payload for m in fresh.encode(snapshot)], default=str)
    if name != "native":
        assert "Oslo" not in again
