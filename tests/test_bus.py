"""EventBus behaviour beyond the conformance suite: windows, budgets, slow consumers."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import tracemalloc
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import toolstream as ts
from tests.memory import traced
from toolstream.testing import assert_ids_increase


def progress(bus: ts.EventBus, session: str = "s", call_id: str = "c", **fields: Any) -> ts.Event:
    return bus.publish(ts.ToolProgress, session=session, call_id=call_id, tool="t", **fields)


async def test_stalled_subscriber_is_coalesced_then_cut_and_costs_the_live_one_nothing() -> None:
    bus = ts.EventBus()
    stalled = bus.subscribe(session="s", buffer=64)
    live = bus.subscribe(session="s", buffer=100_000)
    tracker = ts.Tracker(bus, "s")
    published: list[str] = []
    recorder = bus.subscribe(session="s", buffer=100_000)

    def burst(n_calls: int, deltas: int) -> None:
        for _ in range(n_calls):
            h = tracker.create("writer")
            h.start()
            for k in range(deltas):
                h.output_delta(f"chunk {k} ")
            h.complete("ok")

    burst(2, 40)  # ~90 events: over the stalled buffer, under twice it
    published += [e.id for e in recorder.take_nowait()]
    first = stalled.take_nowait()
    assert stalled.coalesced > 0
    assert len(first) <= 64
    kinds = [e.type for e in first]
    assert kinds.count("tool.started") == 2 and kinds.count("tool.completed") == 2
    text = "".join(e.text for e in first if isinstance(e, ts.ToolOutputDelta))
    assert text == "".join(f"chunk {k} " for k in range(40)) * 2

    burst(10, 60)  # ~640 events: far past twice the buffer
    published += [e.id for e in recorder.take_nowait()]
    with pytest.raises(ts.SlowConsumer) as cut:
        stalled.take_nowait()
    assert cut.value.last_id == first[-1].id, "the error says where to resume"
    assert stalled.closed

    got: list[str] = []
    with anyio.fail_after(5):
        async for event in live:
            got.append(event.id)
            if len(got) == len(published):
                break
    assert got == published, "the live subscriber lost nothing"
    assert live.coalesced == 0


async def test_a_stalled_subscriber_does_not_pin_memory() -> None:
    bus = ts.EventBus(replay=100)
    stalled = bus.subscribe(session="s", buffer=50)
    for i in range(5_000):
        progress(bus, current=i)
    assert bus.stats.cut == 1
    assert bus.subscriber_count("s") == 0
    assert len(bus._logs["s"].events) <= 200
    with pytest.raises(ts.SlowConsumer):
        stalled.take_nowait()


async def test_cursor_that_left_the_window_gets_a_reset() -> None:
    bus = ts.EventBus(replay=10)
    first = progress(bus)
    for i in range(100):
        progress(bus, current=i)
    sub = bus.subscribe(session="s", after=first.id)
    got = sub.take_nowait()
    assert len(got) == 1 and isinstance(got[0], ts.StreamReset)
    assert bus.stats.resets == 1
    # a recent cursor is still served exactly
    recent = progress(bus)
    newest = progress(bus)
    assert [e.id for e in bus.subscribe(session="s", after=recent.id).take_nowait()] == [newest.id]


async def test_replay_bytes_budget_bounds_memory_whatever_the_event_size() -> None:
    bus = ts.EventBus(replay=1000, replay_bytes=200_000)
    big = "x" * 30_000
    for i in range(50):
        bus.publish(ts.ToolOutputDelta, session="big", call_id="c", tool="t", text=big)
        progress(bus, session="small", current=i)
    assert bus._bytes <= 200_000
    # the largest session gave up its oldest events first; the small one kept its own
    assert len(bus._logs["small"].events) == 50
    assert len(bus._logs["big"].events) < 10


def test_a_full_byte_budget_is_trimmed_smoothly_so_the_heap_does_not_grow() -> None:
    # At its byte budget the bus trims about as much as each publish adds (not a tenth
    # of the budget at once): what it holds stays just under the budget, and the
    # collector's young generation does not grow with events the bus will drop, so a
    # gateway at its budget runs no young collections (whose survivors, promoted,
    # trigger the full collections that stall a process holding 10,000 streams).
    budget = 2 * 2**20
    bus = ts.EventBus(replay_bytes=budget)
    calls = [ts.Tracker(bus, f"s{k}").create("t") for k in range(500)]
    for call in calls:
        call.start()

    def rounds(n: int) -> None:
        for r in range(n):
            for call in calls:
                call.progress(0.5, message=f"round {r}")

    rounds(40)  # the budget is full, and every session has its view
    gc.collect()
    before = gc.get_stats()[0]["collections"]
    least = budget
    for _ in range(20):
        rounds(1)
        least = min(least, bus._bytes)
        assert bus._bytes <= budget
    assert least >= budget - 64 * 1024 - 1024, "trimmed a little at a time"
    assert gc.get_stats()[0]["collections"] - before <= 1, "no young collections"


def test_stalled_subscribers_pay_for_their_bytes_not_the_other_sessions() -> None:
    # Three sessions whose subscribers never read, flooded with 32 KB events, beside ten
    # sessions whose subscribers keep up. The stalled ones are cut once they hold more
    # than their allowance in bytes (however few events that is), the bus's memory stays
    # within its bounds, and a client of every quiet session resumes from its cursor.
    budget = 2 * 2**20
    bus = ts.EventBus(replay_bytes=budget)  # lag_bytes: budget / 16
    with traced() as held:
        stalled = [bus.subscribe(session=f"stalled-{k}") for k in range(3)]  # never read
        quiet = {f"quiet-{k}": bus.subscribe(session=f"quiet-{k}") for k in range(10)}
        cursors: dict[str, str] = {}
        missed: dict[str, list[str]] = {session: [] for session in quiet}
        for round in range(20):
            for sub in stalled:
                for i in range(20):  # 640 KB a round: 2048 events would be 64 MB
                    text = f"{round:02d}{i:02d}" + "x" * 32_000
                    bus.publish(
                        ts.ToolOutputDelta, session=sub.session, call_id="c", tool="t", text=text
                    )
            for session, reader in quiet.items():
                ids = [progress(bus, session=session, current=i).id for i in range(5)]
                if round < 10:
                    cursors[session] = reader.take_nowait()[-1].id
                else:  # the client went away; it will resume from its cursor
                    reader.close()
                    missed[session] += ids
    # 38 MB were published to the stalled sessions; the windows keep at most the budget
    # and the lagging subscribers at most as much again.
    assert held[0] < 2 * budget + 2**20, held[0]
    for session, cursor in cursors.items():
        resumed = bus.subscribe(session=session, after=cursor).take_nowait()
        assert [e.id for e in resumed] == missed[session], f"{session} resumes exactly"
    for sub in stalled:
        with pytest.raises(ts.SlowConsumer):
            sub.take_nowait()
    stats = bus.stats
    assert stats.retained_bytes <= budget and stats.held_bytes == 0


def test_trimming_costs_what_it_trims_not_the_sessions_that_exist() -> None:
    # Over the byte budget, a publish trims the largest sessions. It must not walk every
    # session to find them: with 20,000 idle sessions beside a flooded one, no publish
    # allocates more than with 20 (the peak memory of each publish, a measure of the
    # work that does not depend on this machine's speed).
    def peak_per_publish(idle: int) -> int:
        bus = ts.EventBus()  # a 16 MiB budget
        for k in range(idle):
            progress(bus, session=f"idle-{k}")
        flooded = bus.subscribe(session="flooded")  # never reads
        other = ts.Tracker(bus, "other").create("t")
        other.start()
        blob = "x" * 32_000
        worst = 0
        with traced():
            for i in range(1_500):  # 48 MB into the flooded session: trims all along
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                bus.publish(ts.ToolOutputDelta, session="flooded", call_id="c", tool="t", text=blob)
                other.progress(current=i)
                worst = max(worst, tracemalloc.get_traced_memory()[1] - before)
        flooded.close()
        return worst

    few, many = peak_per_publish(20), peak_per_publish(20_000)
    assert many < few + 64 * 1024, (few, many)


async def test_session_ttl_forgets_idle_sessions() -> None:
    now = [1000.0]
    bus = ts.EventBus(session_ttl=60, clock=lambda: now[0])
    seen = progress(bus, session="old")
    missed = progress(bus, session="old")
    now[0] += 100
    progress(bus, session="new")
    assert bus.sessions() == ["new"]
    # a client that missed events of the forgotten session is told to reset...
    got = bus.subscribe(session="old", after=seen.id).take_nowait()
    assert isinstance(got[0], ts.StreamReset) and got[0].snapshot.calls == ()
    # ...one that had seen them all missed nothing and just continues
    assert bus.subscribe(session="old", after=missed.id).take_nowait() == []


async def test_sessions_with_subscribers_are_not_forgotten() -> None:
    now = [1000.0]
    bus = ts.EventBus(session_ttl=60, clock=lambda: now[0])
    progress(bus, session="watched")
    sub = bus.subscribe(session="watched")
    now[0] += 100
    progress(bus, session="other")
    assert "watched" in bus.sessions()
    sub.close()


async def test_all_sessions_subscription() -> None:
    bus = ts.EventBus()
    progress(bus, session="a", call_id="before")
    async with bus.subscribe(snapshot=True) as everything:
        a = progress(bus, session="a")
        b = progress(bus, session="b")
        got = everything.take_nowait()
        resets = [e for e in got if isinstance(e, ts.StreamReset)]
        assert [r.session for r in resets] == ["a"]
        assert [c.call_id for c in resets[0].snapshot.calls] == ["before"]
        assert [e.id for e in got if not isinstance(e, ts.StreamReset)] == [a.id, b.id]
        async with bus.subscribe(after=a.id) as resumed:
            assert [e.id for e in resumed.take_nowait()] == [b.id]


async def test_batches_deliver_everything_available_at_once() -> None:
    bus = ts.EventBus()
    async with bus.subscribe(session="s") as sub:
        published = [progress(bus, current=i).id for i in range(100)]
        batches = []
        with anyio.fail_after(5):
            async for batch in sub.batches():
                batches.append([e.id for e in batch])
                if sum(map(len, batches)) == 100:
                    break
        assert [i for b in batches for i in b] == published
        assert len(batches) == 1
        assert sub.last_id == published[-1]


async def test_batches_the_caller_owns_and_a_shared_empty_list_nobody_fills() -> None:
    # batches() hands out the taken list itself: changing it changes nothing the
    # subscription reads later, and the empty list subscriptions share stays empty.
    from toolstream._core import subscription

    bus = ts.EventBus()
    async with bus.subscribe(session="s") as sub:
        first = [progress(bus, current=i).id for i in range(3)]
        with anyio.fail_after(5):
            batch = await anext(sub.batches())
        assert [e.id for e in batch] == first
        batch.clear()
        batch.append(progress(bus, session="other"))
        assert sub.last_id == first[-1]
        assert sub.take_nowait() == []
        later = progress(bus, current=9)
        with anyio.fail_after(5):
            assert await anext(sub.batches()) == [later]
    assert subscription._EMPTY == []


async def test_a_filtered_subscription_waits_past_events_it_does_not_take() -> None:
    # A wake-up whose events are all filtered out must wait again, not spin or fail.
    bus = ts.EventBus()
    got: list[ts.Event] = []
    arrived = anyio.Event()
    async with bus.subscribe(ts.ToolCompleted, session="s") as sub, anyio.create_task_group() as tg:

        async def consume() -> None:
            async for event in sub:
                got.append(event)
                arrived.set()
                return

        tg.start_soon(consume)
        for i in range(3):
            await anyio.sleep(0.01)
            progress(bus, current=i)  # wakes the consumer; nothing for it
        await anyio.sleep(0.01)
        done = bus.publish(ts.ToolCompleted, session="s", call_id="c", tool="t")
        with anyio.fail_after(5):
            await arrived.wait()
    assert got == [done]


async def test_subscription_waits_then_wakes_for_a_later_publish() -> None:
    bus = ts.EventBus()
    got: list[ts.Event] = []
    async with bus.subscribe(session="s") as sub, anyio.create_task_group() as tg:

        async def consume() -> None:
            async for event in sub:
                got.append(event)
                if len(got) == 3:
                    return

        tg.start_soon(consume)
        for i in range(3):
            await anyio.sleep(0.01)
            progress(bus, current=i)
    assert [e.current for e in got if isinstance(e, ts.ToolProgress)] == [0, 1, 2]


async def test_cancelling_a_waiting_consumer_leaves_the_subscription_usable() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    with anyio.move_on_after(0.05):
        async for _ in sub:
            pass
    event = progress(bus)
    with anyio.fail_after(5):
        assert (await sub.__anext__()).id == event.id
    sub.close()


async def test_closing_releases_the_subscription() -> None:
    bus = ts.EventBus()
    async with bus.subscribe(session="s"):
        assert bus.subscriber_count("s") == 1
        assert bus.subscriber_count() == 1
    assert bus.subscriber_count("s") == 0


async def test_resume_says_what_the_client_already_has() -> None:
    bus = ts.EventBus()
    bus.publish(ts.ToolStarted, session="s", call_id="a", tool="t")
    cursor = bus.publish(ts.ToolStarted, session="s", call_id="b", tool="t")
    bus.publish(ts.ToolCompleted, session="s", call_id="a", tool="t")
    sub = bus.resume(session="s", after=cursor.id)
    origin = sub.origin
    assert origin is not None
    assert not origin.reset
    assert origin.after == cursor.id
    assert origin.state is not None
    assert {c.call_id: c.state.value for c in origin.state.calls} == {
        "a": "running",
        "b": "running",
    }
    assert [e.call_id for e in origin.history] == ["a", "b"]
    assert origin.base == ts.Snapshot(), "nothing left the window: the state before it is empty"
    assert [e.type for e in sub.take_nowait()] == ["tool.completed"]
    assert bus.snapshot("s").calls[0].state is ts.CallState.COMPLETED


async def test_resume_history_is_what_the_subscription_delivers() -> None:
    # A per-run stream's client saw only its run: its history holds nothing else
    # (a dialect primed with another run's events would send phantom frames).
    bus = ts.EventBus()
    bus.publish(ts.RunStarted, session="s", run_id="r1")
    bus.publish(ts.ToolStarted, session="s", run_id="r1", call_id="a", tool="t")
    bus.publish(ts.RunStarted, session="s", run_id="r2")
    bus.publish(ts.ToolStarted, session="s", run_id="r2", call_id="b", tool="t")
    cursor = bus.publish(ts.ToolProgress, session="s", run_id="r1", call_id="a", tool="t")
    sub = bus.resume(session="s", after=cursor.id, run="r1")
    assert sub.origin is not None
    assert {e.run_id for e in sub.origin.history} == {"r1"}
    assert sub.origin.state is not None
    assert [c.call_id for c in sub.origin.state.calls] == ["a"]
    typed = bus.resume(ts.ToolProgress, session="s", after=cursor.id)
    assert typed.origin is not None
    assert [e.type for e in typed.origin.history] == ["tool.progress"]


def test_deprecated_subscribe_keywords_still_work() -> None:
    bus = ts.EventBus()
    bus.publish(ts.ToolStarted, session="s", call_id="a", tool="t")
    cursor = bus.publish(ts.ToolProgress, session="s", call_id="a", tool="t")
    with pytest.warns(DeprecationWarning, match="resume"):
        sub = bus.subscribe(session="s", after=cursor.id, inclusive=True, with_state=True)
    with pytest.warns(DeprecationWarning, match="origin"):
        state = sub.state
    assert state is not None
    assert [c.state.value for c in state.calls] == ["running"]
    assert [e.id for e in sub.take_nowait()] == [cursor.id]


async def test_reset_ids_mark_the_bus_position() -> None:
    bus = ts.EventBus()
    empty = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert empty.id == f"{bus.epoch}-0"
    progress(bus, session="other")
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert reset.id == bus.position
    later = progress(bus)
    sub = bus.subscribe(session="s", after=reset.id)
    assert [e.id for e in sub.take_nowait()] == [later.id]
    assert_ids_increase([reset, later], bus.compare)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"after": "x-1", "snapshot": True}, ValueError),
        ({"session": ""}, ValueError),
        ({"session": None, "run": "r"}, ValueError),
        ({"session": "s", "buffer": 0}, ValueError),
        ({"session": "s", "overflow": "drop"}, ValueError),
        ({"session": "s", "inclusive": True}, ValueError),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_subscribe_rejects_bad_arguments(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        ts.EventBus().subscribe(**kwargs)


def test_subscribe_rejects_non_event_types() -> None:
    with pytest.raises(TypeError):
        ts.EventBus().subscribe(dict)  # type: ignore[type-var]


def test_publish_rejects_what_is_not_an_event() -> None:
    bus = ts.EventBus()
    with pytest.raises(TypeError):
        bus.publish(ts.StreamReset, session="s")
    with pytest.raises(TypeError):
        bus.publish(dict, session="s")  # type: ignore[type-var]
    with pytest.raises(ValueError, match="session"):
        bus.publish(ts.ToolStarted, session="", call_id="c", tool="t")
    with pytest.raises(TypeError):
        bus.publish(ts.ToolStarted, session="s", bogus=1)
    # a failed publish does not burn an id
    assert progress(bus).id == f"{bus.epoch}-1"


async def test_closed_bus_refuses_publish_and_subscribe() -> None:
    bus = ts.EventBus()
    await bus.aclose()
    assert bus.closed
    with pytest.raises(ts.BusClosed):
        progress(bus)
    with pytest.raises(ts.BusClosed):
        bus.subscribe(session="s")


def test_compare_is_not_string_order() -> None:
    bus = ts.EventBus()
    ids = [progress(bus).id for _ in range(12)]
    assert sorted(ids)[1] != ids[1], "string order would be wrong past 9"
    assert bus.compare(ids[9], ids[10]) == -1
    with pytest.raises(ValueError):
        bus.compare(ids[0], "garbage")


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError):
        ts.EventBus(replay=0)
    with pytest.raises(ValueError):
        ts.EventBus(replay_bytes=10)
    with pytest.raises(ValueError):
        ts.EventBus(session_ttl=0)
    with pytest.raises(ValueError, match="lag_bytes"):
        ts.EventBus(replay_bytes=4096, lag_bytes=8192)
    with pytest.raises(ValueError, match="lag_bytes"):
        ts.EventBus(lag_bytes=-1)


async def test_resume_at_starts_at_the_event_itself() -> None:
    bus = ts.EventBus()
    bus.publish(ts.ToolStarted, session="s", call_id="a", tool="t")
    middle = bus.publish(ts.ToolCompleted, session="s", call_id="a", tool="t")
    last = progress(bus)
    sub = bus.resume(session="s", after=middle.id, at=True)
    assert [e.id for e in sub.take_nowait()] == [middle.id, last.id]
    assert sub.origin is not None
    assert sub.origin.state is not None
    assert [c.state.value for c in sub.origin.state.calls] == ["running"], "the state before it"
    small = ts.EventBus(replay=2)
    first = progress(small)
    for _ in range(100):  # past the trim threshold
        progress(small)
    got = small.resume(session="s", after=first.id, at=True).take_nowait()
    assert isinstance(got[0], ts.StreamReset)


async def test_a_cancelled_read_loses_nothing() -> None:
    # A consumer cancelled right after the bus handed it a batch (a heartbeat timeout
    # around the read) must get that batch on its next read.
    bus = ts.EventBus()
    async with bus.subscribe(session="s") as sub:
        published = [progress(bus, current=i).id for i in range(5)]
        with anyio.CancelScope() as scope:
            scope.cancel()  # the checkpoint after taking the batch is cancelled
            await sub.__anext__()
        got = [e.id for e in sub.take_nowait()]
        assert got == published


def test_start_after_says_where_a_subscription_begins() -> None:
    bus = ts.EventBus()
    first = progress(bus)
    live = bus.subscribe(session="s")
    assert live.start_after == first.id
    resumed = bus.subscribe(session="s", after=first.id)
    assert resumed.start_after == first.id
    fresh = bus.subscribe(session="s", snapshot=True)
    assert fresh.start_after == bus.position


def test_a_closed_consumer_loop_never_breaks_the_producer() -> None:
    # A consumer waits in an asyncio loop that is then closed without being cancelled
    # (a framework that drives its own loop); the same thread goes on publishing.
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    sub = bus.subscribe(session="s")

    async def consume() -> None:
        async for _ in sub:
            pass

    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda loop, context: None)  # "Task was destroyed": meant
    task = loop.create_task(consume())
    loop.run_until_complete(asyncio.sleep(0.05))  # the consumer waits on the bus
    loop.close()
    with tracker.call("t", {"x": 1}) as call:  # must not raise "Event loop is closed"
        call.progress(0.5)
        call.complete("ok")
    assert [e.type for e in bus.subscribe(session="s", after=f"{bus.epoch}-0").take_nowait()] == [
        "tool.started",
        "tool.progress",
        "tool.completed",
    ]
    del task
    gc.collect()


def test_a_reset_is_bounded_whatever_the_session_holds() -> None:
    bus = ts.EventBus(replay=100)
    tracker = ts.Tracker(bus, "s", payload=ts.PayloadPolicy(max_bytes=None))
    streaming = tracker.create("big_input", call_id="open")
    for _ in range(64):  # 4 MiB of input, each delta within the payload cap
        streaming.args_delta('"' + "x" * 65_534 + '",')
    for i in range(500):  # 500 finished calls, each within the cap
        tracker.create("t", call_id=f"done{i}").complete("y" * 30_000)
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(reset, ts.StreamReset)
    size = len(json.dumps(ts.to_dict(reset)))
    assert size <= bus.reset_bytes * 1.1, size
    calls = {c.call_id: c for c in reset.snapshot.calls}
    assert "open" in calls, "open calls always stay"
    assert len(calls["open"].args_text.encode()) <= 32 * 1024
    kept = [c for c in reset.snapshot.calls if c.state.terminal]
    assert kept and kept[-1].call_id == "done499", "the newest finished calls stay"
    # Clients connecting at the same position share one snapshot.
    again = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(again, ts.StreamReset)
    assert again.snapshot is reset.snapshot
    assert bus.snapshot("s") is reset.snapshot


def test_sessions_only_subscribed_to_are_swept_on_an_idle_bus() -> None:
    now = [1000.0]
    bus = ts.EventBus(session_ttl=1, clock=lambda: now[0])
    for i in range(5000):
        bus.subscribe(session=f"idle-{i}").close()
    assert bus.sessions() == [], "a log nobody reads and nobody wrote to goes at once"
    kept = [bus.subscribe(session=f"held-{i}") for i in range(10)]
    now[0] += 10
    bus.subscribe(session="another").close()  # a subscribe sweeps too, no publish needed
    assert sorted(bus.sessions()) == sorted(f"held-{i}" for i in range(10))
    for sub in kept:
        sub.close()
    assert bus.sessions() == []


async def test_every_way_of_reading_shares_one_cursor() -> None:
    """``async for`` (left with ``break`` and entered again), ``anext``, ``batches()``
    and ``take_nowait()`` on one subscription hand out each event once, in order, and
    ``last_id`` is always the last one handed out."""
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    published = [progress(bus, current=i).id for i in range(40)]
    seen: list[str] = []
    async for event in sub:
        seen.append(event.id)
        assert sub.last_id == event.id
        if len(seen) == 5:
            break
    seen.append((await anext(sub)).id)
    assert sub.last_id == seen[-1]
    async for event in sub:  # a second loop goes on where the first stopped
        seen.append(event.id)
        if len(seen) == 10:
            break
    batch = await anext(sub.batches())
    seen += [e.id for e in batch]
    assert sub.last_id == seen[-1]
    more = [progress(bus, current=i).id for i in range(40, 45)]
    async for event in sub:
        seen.append(event.id)
        break
    seen += [e.id for e in sub.take_nowait()]
    assert seen == published + more
    assert sub.last_id == more[-1]
    sub.close()


async def test_leaving_a_loop_early_warns_about_nothing() -> None:
    """A subscription's iterator left suspended (``break``) and dropped is collected
    without the event loop's async generator hooks: no warning, under trio either."""
    import warnings

    bus = ts.EventBus()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            sub = bus.subscribe(session="s")
            progress(bus)
            progress(bus)
            async for _event in sub:
                break
            del sub
            gc.collect()
            await anyio.lowlevel.checkpoint()
        async with bus.subscribe(session="s") as kept:
            progress(bus)
            iterator = aiter(kept)
            await anext(iterator)
            del iterator
            gc.collect()
            await anyio.lowlevel.checkpoint()


async def test_a_waiting_session_keeps_few_objects_for_the_garbage_collector() -> None:
    # With thousands of sessions, what grows is the collector tracing every object the
    # waiting consumers hold (docs/decisions.md, performance round two). A session with
    # a tracker, a running call, its event and a consumer task waiting on batches()
    # held 64 tracked objects; 38-41 now (the consumer's task itself is ~15 of them).
    n = 300

    async def drain(sub: ts.Subscription[Any]) -> None:
        async for _ in sub.batches():
            pass

    gc.collect()
    before = len(gc.get_objects())
    bus = ts.EventBus()
    calls = [ts.Tracker(bus, f"s{k}").create("t") for k in range(n)]
    subs = [bus.subscribe(session=f"s{k}") for k in range(n)]
    async with anyio.create_task_group() as tg:
        for call in calls:
            call.start()
        for sub in subs:
            tg.start_soon(drain, sub)
        await anyio.sleep(0.05)
        for call in calls:
            call.progress(0.5, message="step")
        await anyio.sleep(0.05)
        gc.collect()
        per_session = (len(gc.get_objects()) - before) / n
        tg.cancel_scope.cancel()
    assert per_session <= 46, f"{per_session:.1f} tracked objects per waiting session"


async def test_a_subscription_awaited_by_two_tasks_ends_both_when_closed() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    ended: list[str] = []

    async def read(name: str) -> None:
        async for _ in sub.batches():
            pass
        ended.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, "a")
            tg.start_soon(read, "b")
            await anyio.sleep(0.05)
            sub.close()
    assert sorted(ended) == ["a", "b"]


def test_a_resume_from_every_cursor_across_trims_sees_what_a_plain_list_gives() -> None:
    """Trimming folds what leaves the window into the session's view, runs of progress
    call by call (``_core/folding.py``). Around every trim, a resume from each cursor
    gets exactly the events after it when they are still in the window, and otherwise a
    reset holding the state before the window, then the window: a client that applies
    it holds what one that got every event holds; and the bus's snapshot is that
    state too."""
    rng = random.Random(5)
    bus = ts.EventBus(replay=8)  # trims from 40 events down to 8
    tracker = ts.Tracker(bus, "s")
    recorder = bus.subscribe(session="s")
    everything: list[ts.Event] = []  # the plain list: every event, as published
    handles: list[ts.CallHandle] = []
    checked = 0

    def check() -> None:
        base = bus._logs["s"].base
        whole = ts.LiveView(check_replays=False)
        whole.fold(everything)
        assert bus.snapshot("s") == whole.snapshot()
        for i, cursor in enumerate(everything):
            sub = bus.resume(session="s", after=cursor.id)
            got = sub.take_nowait()
            sub.close()
            assert sub.origin is not None and sub.origin.state is not None
            if i + 1 >= base:  # the events after it are in the window
                assert [e.id for e in got] == [e.id for e in everything[i + 1 :]], i
                upto = ts.LiveView(check_replays=False)
                upto.fold(everything[: i + 1])
                assert sub.origin.state == upto.snapshot(), i  # what the client has
                continue
            # Gone from the window: a reset, where the stream is now.
            assert [type(e) for e in got] == [ts.StreamReset], i
            reset = got[0]
            assert isinstance(reset, ts.StreamReset)
            assert reset.snapshot == whole.snapshot() == sub.origin.state, i
            client = ts.LiveView()
            client.fold(everything[: i + 1])
            client.fold(got)
            assert client.snapshot() == whole.snapshot(), i

    with tracker.run(run_id="r1"):
        for _ in range(400):
            live = [h for h in handles if h.state is not None and not h.state.terminal]
            roll = rng.random()
            if roll < 0.05 or not live:
                handles.append(tracker.create(rng.choice(["a", "b"])))
                handles[-1].start()
            elif roll < 0.85:
                rng.choice(live).progress(rng.random(), message=rng.choice([None, "m1", "m2"]))
            elif roll < 0.95:
                rng.choice(live).output_delta(rng.choice(["x", "yz"]))
            else:
                rng.choice(live).complete({"ok": True})
            base = bus._logs["s"].base
            everything += recorder.take_nowait()
            if len(everything) - base in (39, 40, 8, 9):
                check()  # just before a trim, and just after it
                checked += 1
    assert bus._logs["s"].base > 200, "the window moved past many trims"
    assert checked > 10
