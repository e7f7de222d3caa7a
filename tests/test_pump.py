"""The one serving path: what SSEApp, sse.frames, WebSocketApp and dialects.render send."""

from __future__ import annotations

import json
from contextlib import aclosing

import toolstream as ts
from toolstream import dialects
from toolstream.dialects import Encoder
from toolstream.dialects._pump import FrameCache, Pump
from toolstream.sse._app import SSEFormat, encode_frame
from toolstream.websocket._app import WSFormat


def _events(bus: ts.EventBus) -> list[ts.Event]:
    tracker = ts.Tracker(bus, "s1")
    call = tracker.create("web_search", call_id="c")
    call.args_delta('{"q": "caf\u00e9 \U0001f600"}')
    call.ready()
    call.start()
    call.complete({"rows": [1, 2.5, None, "x\ny"]})
    return bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()


def test_the_native_fast_path_matches_the_generic_encoding() -> None:
    bus = ts.EventBus()
    events = _events(bus)
    sub = bus.subscribe(session="s1")
    for fmt in (SSEFormat(), WSFormat("s1")):
        fast = Pump(sub, Encoder(dialects.get("native")), fmt).encode(events)
        generic = [fmt.frame(f) for e in events for f in Encoder(dialects.get("native")).encode(e)]
        assert fast == generic
    sse = Pump(sub, Encoder(dialects.get("native")), SSEFormat()).encode(events)
    assert sse[0] == encode_frame(Encoder(dialects.get("native")).encode(events[0])[0])
    ws = Pump(sub, Encoder(dialects.get("native")), WSFormat("s1")).encode(events)
    first = json.loads(ws[0])
    assert first["op"] == "event" and first["session"] == "s1"
    assert first["data"] == ts.to_dict(events[0]) and first["event"] == "tool.created"


def test_a_partial_resume_never_changes_what_other_clients_get() -> None:
    """A client resuming inside an event (``<id>/<k>``) gets that event's encoding minus
    what it has; the encoding shared with the other clients stays whole, whichever
    client asks first (SSE and WebSocket share this code)."""
    bus = ts.EventBus()
    sub = bus.subscribe(session="s1")
    event = bus.publish(ts.ToolStarted, session="s1", call_id="c", tool="t")
    for fmt in (SSEFormat(), WSFormat("s1")):
        for resuming_first in (True, False):
            cache: FrameCache[object] = FrameCache()
            for _ in range(3):
                cache.join("s1")
            skipping = Pump(
                sub,
                Encoder(dialects.get("native"), skip_event=event.id, skip=1),
                fmt,
                cache=cache,
            )
            others = [
                Pump(sub, Encoder(dialects.get("native")), fmt, cache=cache) for _ in range(2)
            ]
            if resuming_first:
                assert skipping.encode([event]) == []
                assert others[0].encode([event]) == [fmt.native(event)]
            else:
                assert others[0].encode([event]) == [fmt.native(event)]
                assert skipping.encode([event]) == []
            assert others[1].encode([event]) == [fmt.native(event)], "whole for everyone"


def test_encodings_are_shared_per_session() -> None:
    # A broker bus's ids are per stream: two sessions may hold the same id. The shared
    # encodings must never hand one session's frame to the other's client.
    bus = ts.EventBus()
    sub = bus.subscribe(session="a")
    one = ts.ToolStarted(id="e-5", session="a", ts=1.0, call_id="c", tool="secret_a")
    two = ts.ToolStarted(id="e-5", session="b", ts=1.0, call_id="c", tool="other_b")
    cache: FrameCache[object] = FrameCache()
    cache.join("a")
    cache.join("a")
    fmt = SSEFormat()
    a = Pump(sub, Encoder(dialects.get("native")), fmt, cache=cache).encode([one])
    b = Pump(sub, Encoder(dialects.get("native")), fmt, cache=cache).encode([two])
    assert b"secret_a" in a[0]  # type: ignore[operator]
    assert b"secret_a" not in b[0] and b"other_b" in b[0]  # type: ignore[operator]


def test_stateful_dialects_are_never_shared() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s1")
    cache: FrameCache[bytes] = FrameCache()
    for _ in range(5):
        cache.join("s1")
    pump = Pump(sub, Encoder(dialects.get("agui")), SSEFormat(), cache=cache)
    assert pump.cache is None


def test_the_inline_sharing_decision_is_encoder_shares() -> None:
    # Pump.encode checks what Encoder.shares() decides inline (the hot path): the events
    # it shares must be exactly those shares() accepts, event by event.
    bus = ts.EventBus()
    sub = bus.subscribe(session="s1")
    tracker = ts.Tracker(bus, "s1")
    for i in range(4):
        tracker.create("t", call_id=f"c{i}").complete(i)
    events = bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()
    reset = bus.subscribe(session="s1", snapshot=True).take_nowait()[0]
    batch = [events[0], reset, *events[1:]]
    for skip_at in (None, 0, 3):
        skip = batch[skip_at].id if skip_at is not None else None
        cache: FrameCache[object] = FrameCache()
        cache.join("s1")
        cache.join("s1")
        plain = Encoder(dialects.get("native"), skip_event=skip, skip=1)
        expected = []
        for event in batch:
            if plain.shares(event):
                expected.append(event.id)
            plain.encode(event)
        encoder = Encoder(dialects.get("native"), skip_event=skip, skip=1)
        Pump(sub, encoder, SSEFormat(), cache=cache).encode(batch)
        assert [key[2] for key in cache._items] == expected, skip_at


def test_shared_encodings_are_bounded_in_bytes_and_go_with_their_readers() -> None:
    # The encodings an app shares between its clients are bounded by size as well as by
    # count (4,096 events of 32 KB would be 128 MB), and dropped once fewer than two
    # streams read them: clients that left hold nothing through the cache.
    cache: FrameCache[bytes] = FrameCache(max_bytes=100_000)
    for _ in range(3):
        cache.join("s1")
    for i in range(50):
        cache.put(("native", "s1", f"e-{i}"), (b"x" * 10_000,))
    assert cache.nbytes <= 100_000
    assert sum(len(v[0]) for v in cache._items.values()) == cache.nbytes
    assert ("native", "s1", "e-49") in cache._items, "the newest stay"
    cache.leave("s1")
    assert cache._items, "two readers left: still shared"
    cache.leave("s1")
    assert not cache._items and cache.nbytes == 0 and cache.readers == {"s1": 1}


def test_a_session_with_one_reader_stores_nothing_in_the_shared_cache() -> None:
    # A gateway whose clients each watch their own session has nothing to share:
    # storing each event's encoding there was a cost per event and two objects a time
    # for the garbage collector. The session's second reader turns sharing on.
    bus = ts.EventBus()
    sub = bus.subscribe(session="s1")
    event = bus.publish(ts.ToolStarted, session="s1", call_id="c", tool="t")
    cache: FrameCache[bytes] = FrameCache()
    cache.join("s1")
    cache.join("s2")  # two streams in all, one per session
    pump = Pump(sub, Encoder(dialects.get("native")), SSEFormat(), cache=cache)
    assert pump.encode([event]) == [SSEFormat().native(event)]
    assert not cache._items
    cache.join("s1")
    assert pump.encode([event]) == [SSEFormat().native(event)]
    assert list(cache._items) == [("native", "s1", event.id)]


async def test_a_heartbeat_comes_after_idle_seconds_and_loses_nothing() -> None:
    """The heartbeat (asyncio: one timer per stream, nudging the subscription's wait;
    trio: a cancel scope per wait): ``None`` after ``heartbeat`` idle seconds, every
    event delivered however the beats and the events interleave, and an idle stream's
    beats leave no registrations behind in its log."""
    import anyio

    bus = ts.EventBus()
    call = ts.Tracker(bus, "s1").create("t")
    sub = bus.subscribe(session="s1", snapshot=True)
    pump: Pump[bytes] = Pump(sub, Encoder(dialects.get("native")), SSEFormat())
    got: list[bytes | None] = []

    async def read() -> None:
        async with aclosing(pump.chunks(0.05)) as chunks:
            async for chunk in chunks:
                got.extend([None] if chunk is None else chunk)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.3)  # idle: beats
            assert 2 <= got.count(None) <= 7, got  # every 0.05 s (a loaded machine: fewer)
            log = sub._log
            assert log is not None and len(log.waiters) <= 1  # no stale registrations
            for i in range(40):  # events around the beats
                call.progress(message=f"m{i}")
                await anyio.sleep(0.007)
            await anyio.sleep(0.1)
            sub.close()
    sent = [frame for frame in got if frame is not None]
    messages = [json.loads(f.split(b"data: ", 1)[1]) for f in sent]
    progress = [m["message"] for m in messages if m["type"] == "tool.progress"]
    assert progress == [f"m{i}" for i in range(40)]
    assert log is not None and not log.waiters


async def test_a_nudge_ends_a_wait_or_skips_the_next_but_never_hides_events() -> None:
    """``Subscription._nudge``: ``batches()`` hands out [] instead of waiting — the
    wait under way ends, or the next one does not begin — and events already there
    come first."""
    import anyio

    bus = ts.EventBus()
    call = ts.Tracker(bus, "s1").create("t")
    call.start()
    sub = bus.subscribe(session="s1")
    batches = sub.batches()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            got: list[list[ts.Event]] = []

            async def one() -> None:
                got.append(await batches.__anext__())

            tg.start_soon(one)
            await anyio.sleep(0.05)  # waiting now
            sub._nudge()
        assert got == [[]]
        sub._nudge()  # not waiting: the next wait does not begin
        assert await batches.__anext__() == []
        call.progress(message="x")
        sub._nudge()  # an event is there: it comes first, then the nudge
        assert [e.type for e in await batches.__anext__()] == ["tool.progress"]
        assert await batches.__anext__() == []
        log = sub._log
        assert log is not None and not log.waiters
        call.progress(message="y")  # and waiting works as before
        assert [e.type for e in await batches.__anext__()] == ["tool.progress"]
    sub.close()
