"""The bus against raw anyio memory object streams, side by side in one run.

- fan-out: events delivered per second to S subscribers, published through a Tracker,
  against raw streams fed pre-built events (one stream per subscriber: the
  queue-per-subscriber design), with consumers that iterate item by item and with
  consumers that drain everything buffered after each wake-up;
- publish: the cost of one tracked event against a plain dict and one ``send_nowait``;
- no-op call: a tracked call (started + completed, one live subscriber) against two
  awaited ``send()``s on a raw stream.

Every ratio is the median of the per-round ratios over interleaved rounds (A B A B
...), reported with their range; results.json also holds the ratio of medians. Every
toolstream run checks that nothing was coalesced, cut or lost.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import partial
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts
from benchmarks._common import (
    BURST,
    alternate,
    compare,
    drain_batches,
    drain_raw,
    publish_progress,
    running_call,
    shown,
)


def _event_dict(i: int) -> dict[str, Any]:
    return {
        "type": "tool.progress",
        "id": f"e-{i}",
        "session": "s",
        "call_id": "c",
        "tool": "t",
        "fraction": 0.5,
        "message": "step",
        "ts": time.time(),
    }


# -- fan-out ---------------------------------------------------------------------------


async def fanout_toolstream(subscribers: int, events: int, *, drain: bool = False) -> float:
    """Seconds to deliver ``events`` tracked progress events to every subscriber, read
    item by item (``async for event in sub``) or drained (``async for batch in
    sub.batches()``, toolstream's counterpart of draining a stream)."""
    bus, call = running_call()
    subs = [bus.subscribe(session="s", buffer=4 * BURST) for _ in range(subscribers)]
    counts = [0] * subscribers
    done = anyio.Event()
    remaining = [subscribers]

    async def consume(k: int, sub: ts.Subscription[Any]) -> None:
        n = 0
        if drain:
            n = await drain_batches(sub, events)
        else:
            async for _ in sub:
                n += 1
                if n == events:
                    break
        counts[k] = n
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set()

    async with anyio.create_task_group() as tg:
        for k, sub in enumerate(subs):
            tg.start_soon(consume, k, sub)
        await anyio.sleep(0.01)
        start = time.perf_counter()
        await publish_progress(call, events)
        await done.wait()
        elapsed = time.perf_counter() - start
    assert counts == [events] * subscribers, "every subscriber got every event"
    assert bus.stats.coalesced == 0, bus.stats
    assert bus.stats.cut == 0, bus.stats
    for sub in subs:
        sub.close()
    return elapsed


async def fanout_raw(subscribers: int, events: int, *, drain: bool) -> float:
    """The same fan-out with one anyio memory stream per subscriber and pre-built events."""
    streams = [
        anyio.create_memory_object_stream[dict[str, Any]](math.inf) for _ in range(subscribers)
    ]
    prebuilt = [_event_dict(i) for i in range(events)]
    remaining = [subscribers]
    done = anyio.Event()

    async def consume(receive: Any) -> None:
        n = 0
        if drain:
            n = await drain_raw(receive, events)
        else:
            async for _ in receive:
                n += 1
                if n == events:
                    break
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set()

    async with anyio.create_task_group() as tg:
        for _, receive in streams:
            tg.start_soon(consume, receive)
        await anyio.sleep(0.01)
        sends = [send for send, _ in streams]
        start = time.perf_counter()
        for i, item in enumerate(prebuilt):
            for send in sends:
                send.send_nowait(item)
            if i % BURST == BURST - 1:
                await checkpoint()
        await done.wait()
        elapsed = time.perf_counter() - start
    for send, receive in streams:
        send.close()
        receive.close()
    return elapsed


# -- publish cost and the no-op call -----------------------------------------------------


def publish_toolstream(events: int) -> float:
    """Seconds per tracked progress event (payload policy and summaries on), in the
    steady state: the replay window is full before the timing starts, so every event
    timed pays its share of trimming the window and folding what leaves it."""
    bus = ts.EventBus()
    call = ts.Tracker(bus, "s").create("t")
    call.start()
    for _ in range(2 * bus.replay):  # past the first trim
        call.progress(0.5, message="step")
    assert bus._logs["s"].base > 0, "events have left the window: it is full"
    start = time.perf_counter()
    for _ in range(events):
        call.progress(0.5, message="step")
    return (time.perf_counter() - start) / events


def publish_raw(events: int) -> float:
    """Seconds per plain dict built and sent with ``send_nowait``."""
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
    total = 0.0
    chunk = 10_000
    done = 0
    while done < events:
        n = min(chunk, events - done)
        start = time.perf_counter()
        for i in range(n):
            send.send_nowait(
                {
                    "type": "tool.progress",
                    "id": f"e-{i}",
                    "session": "s",
                    "run_id": None,
                    "call_id": "c",
                    "tool": "t",
                    "fraction": 0.5,
                    "message": "step",
                    "ts": time.time(),
                }
            )
        total += time.perf_counter() - start
        while True:  # drain outside the timing
            try:
                receive.receive_nowait()
            except anyio.WouldBlock:
                break
        done += n
    send.close()
    receive.close()
    return total / events


async def noop_toolstream(calls: int) -> float:
    """Seconds per tracked no-op call, one subscriber reading live."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    got = [0]
    async with bus.subscribe(session="s") as sub, anyio.create_task_group() as tg:

        async def consume() -> None:
            async for _ in sub:
                got[0] += 1
                if got[0] == 2 * calls:
                    return

        tg.start_soon(consume)
        start = time.perf_counter()
        for i in range(calls):
            async with tracker.call("noop"):
                pass
            if i % BURST == BURST - 1:  # the call never awaits; let the reader run
                await checkpoint()
        elapsed = time.perf_counter() - start
    assert got[0] == 2 * calls, got
    assert bus.stats.coalesced == 0, bus.stats
    assert bus.stats.cut == 0, bus.stats
    return elapsed / calls


async def noop_raw(calls: int) -> float:
    """Seconds per two awaited ``send()``s on a raw stream with one reader."""
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
    got = [0]
    a = {"type": "tool.started"}
    b = {"type": "tool.completed"}
    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            async for _ in receive:
                got[0] += 1
                if got[0] == 2 * calls:
                    return

        tg.start_soon(consume)
        start = time.perf_counter()
        for _ in range(calls):
            await send.send(a)
            await send.send(b)
        elapsed = time.perf_counter() - start
    send.close()
    receive.close()
    return elapsed / calls


# -- running ---------------------------------------------------------------------------


def run(*, quick: bool = False) -> dict[str, Any]:
    """All bus benchmarks; ``quick`` uses tiny sizes (the test suite's smoke run)."""
    rounds = 1 if quick else 5
    results: dict[str, Any] = {"fanout": [], "publish": {}, "noop_call": {}}
    for backend in ("asyncio", "trio"):
        for subscribers in (1, 10, 100, 1000):
            total = 2_000 if quick else 400_000
            events = max(BURST, min(50_000, total // subscribers))
            events -= events % BURST
            ours_t, item_t = alternate(
                partial(fanout_toolstream, subscribers, events),
                partial(fanout_raw, subscribers, events, drain=False),
                rounds,
                backend,
            )
            ours2_t, drain_t = alternate(
                partial(fanout_toolstream, subscribers, events, drain=True),
                partial(fanout_raw, subscribers, events, drain=True),
                rounds,
                backend,
            )
            ours, item = statistics.median(ours_t), statistics.median(item_t)
            ours2, drain = statistics.median(ours2_t), statistics.median(drain_t)
            delivered = events * subscribers
            results["fanout"].append(
                {
                    "backend": backend,
                    "subscribers": subscribers,
                    "events": events,
                    "toolstream_item_per_s": delivered / ours,
                    "toolstream_batches_per_s": delivered / ours2,
                    "raw_item_per_s": delivered / item,
                    "raw_drain_per_s": delivered / drain,
                    **compare(item_t, ours_t, "vs_item"),
                    **compare(drain_t, ours_t, "item_vs_drain"),
                    **compare(drain_t, ours2_t, "vs_drain"),
                }
            )
        n = 2_000 if quick else 200_000
        ours_st, raw_st = alternate(
            partial(publish_toolstream, n), partial(publish_raw, n), rounds, backend
        )
        results["publish"][backend] = {
            "toolstream_us": statistics.median(ours_st) * 1e6,
            "raw_us": statistics.median(raw_st) * 1e6,
            **compare(ours_st, raw_st),
        }
        calls = 500 if quick else 20_000
        ours_ct, raw_ct = alternate(
            partial(noop_toolstream, calls), partial(noop_raw, calls), rounds, backend
        )
        results["noop_call"][backend] = {
            "toolstream_us": statistics.median(ours_ct) * 1e6,
            "raw_us": statistics.median(raw_ct) * 1e6,
            **compare(ours_ct, raw_ct),
        }
    return results


def report(results: dict[str, Any]) -> str:
    """Markdown tables of the results."""
    lines = [
        "### Bus fan-out through a Tracker vs raw anyio memory object streams",
        "",
        "Events delivered per second (all subscribers together);",
        "ratios > 1 mean toolstream is faster. Each ratio is the median of the per-round",
        "ratios (rounds alternate A B A B), with their range in brackets; results.json also",
        "holds the ratio of the medians.",
        "",
        "Item by item: `async for event in sub` against `async for item in stream`, and",
        "against the raw consumer's best (`receive()` then `receive_nowait()` until empty).",
        "Batches: `async for batch in sub.batches()` against that same draining consumer.",
        "",
        "| backend | subscribers | toolstream item ev/s | raw item ev/s | **item vs item** "
        "| raw draining ev/s | **item vs draining** | toolstream batches ev/s "
        "| **batches vs draining** |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["fanout"]:
        lines.append(
            f"| {row['backend']} | {row['subscribers']} | {row['toolstream_item_per_s']:,.0f} "
            f"| {row['raw_item_per_s']:,.0f} | {shown(row, 'vs_item')} "
            f"| {row['raw_drain_per_s']:,.0f} | {shown(row, 'item_vs_drain')} "
            f"| {row['toolstream_batches_per_s']:,.0f} | {shown(row, 'vs_drain')} |"
        )
    lines += [
        "",
        "### Publishing one tracked event vs a plain dict and one `send_nowait`",
        "",
        "Progress of a running call, timed once its session's replay window is full (each",
        "event then pays its share of trimming the window and folding what leaves it).",
        "",
        "| backend | toolstream µs/event | raw µs/event | cost ratio (target ≤ 2×) |",
        "|---|---:|---:|---:|",
    ]
    for backend, row in results["publish"].items():
        lines.append(
            f"| {backend} | {row['toolstream_us']:.2f} | {row['raw_us']:.2f} | {shown(row)} |"
        )
    lines += [
        "",
        "### A tracked no-op call vs two awaited raw `send()`s",
        "",
        "| backend | toolstream µs/call | raw µs/2 sends | cost ratio (target ≤ 3×) |",
        "|---|---:|---:|---:|",
    ]
    for backend, row in results["noop_call"].items():
        lines.append(
            f"| {backend} | {row['toolstream_us']:.2f} | {row['raw_us']:.2f} | {shown(row)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
