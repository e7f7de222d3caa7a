"""A stalled subscriber among 100: the other 99's throughput with one subscriber that
never reads, against none stalled. toolstream's stalled subscriber is a cursor that does
not move (cut once it is twice ``buffer`` behind); the hand-rolled peer (one unbounded
anyio stream per subscriber) keeps buffering for it. Rounds alternate."""

from __future__ import annotations

import gc
import math
import statistics
import time
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts
from benchmarks._common import (
    BURST,
    Countdown,
    drain_batches,
    drain_raw,
    publish_progress,
    running_call,
)

SUBSCRIBERS = 100


async def toolstream_run(events: int, stalled: bool) -> float:
    """Events/s delivered to the subscribers that read."""
    bus, call = running_call()
    readers = [bus.subscribe(session="s", buffer=4 * BURST) for _ in range(SUBSCRIBERS - 1)]
    extra = bus.subscribe(session="s", buffer=4 * BURST)  # stalled: never iterated
    counts = [0] * len(readers)
    countdown = Countdown(len(readers))

    async def consume(k: int, sub: ts.Subscription[Any]) -> None:
        counts[k] = await drain_batches(sub, events)
        countdown.one()

    async with anyio.create_task_group() as tg:
        for k, sub in enumerate(readers):
            tg.start_soon(consume, k, sub)
        if not stalled:
            tg.start_soon(drain_batches, extra, events)
        await anyio.sleep(0.01)
        start = time.perf_counter()
        await publish_progress(call, events)
        await countdown.done.wait()
        elapsed = time.perf_counter() - start
    assert counts == [events] * len(readers), "every reading subscriber got every event"
    assert bus.stats.coalesced == 0
    assert bus.stats.cut == (1 if stalled else 0), bus.stats
    for sub in (*readers, extra):
        sub.close()
    return events * len(readers) / elapsed


async def raw_run(events: int, stalled: bool) -> float:
    streams = [anyio.create_memory_object_stream[Any](math.inf) for _ in range(SUBSCRIBERS)]
    countdown = Countdown(SUBSCRIBERS - 1)
    item = {"type": "tool.progress", "session": "s", "call_id": "c", "message": "step"}

    async def consume(receive: Any, signal: bool) -> None:
        await drain_raw(receive, events)
        if signal:
            countdown.one()

    async with anyio.create_task_group() as tg:
        for k, (_, receive) in enumerate(streams):
            if k < SUBSCRIBERS - 1:
                tg.start_soon(consume, receive, True)
            elif not stalled:
                tg.start_soon(consume, receive, False)
        await anyio.sleep(0.01)
        sends = [send for send, _ in streams]
        start = time.perf_counter()
        for i in range(events):
            for send in sends:
                send.send_nowait(item)
            if i % BURST == BURST - 1:
                await checkpoint()
        await countdown.done.wait()
        elapsed = time.perf_counter() - start
    for send, receive in streams:
        send.close()
        receive.close()
    return events * (SUBSCRIBERS - 1) / elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    events = 640 if quick else 20_032
    rounds = 1 if quick else 5
    results: dict[str, Any] = {}
    for backend in ("asyncio", "trio"):
        samples: dict[str, list[float]] = {
            k: [] for k in ("ts_none", "ts_one", "raw_none", "raw_one")
        }
        for _ in range(rounds):
            for key, fn, stalled in (
                ("ts_none", toolstream_run, False),
                ("ts_one", toolstream_run, True),
                ("raw_none", raw_run, False),
                ("raw_one", raw_run, True),
            ):
                gc.collect()
                samples[key].append(anyio.run(fn, events, stalled, backend=backend))
        med = {k: statistics.median(v) for k, v in samples.items()}
        results[backend] = {
            **{f"{k}_per_s": v for k, v in med.items()},
            "toolstream_kept": med["ts_one"] / med["ts_none"],
            "raw_kept": med["raw_one"] / med["raw_none"],
        }
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "### A stalled subscriber among 100",
        "",
        "Events/s delivered to the 99 subscribers that read, with the 100th never reading "
        "and with it reading; *kept* = with a stalled one / with none (target ≥ 0.90, i.e. "
        "it costs the others < 10%).",
        "",
        "| backend | toolstream none stalled | one stalled | **kept** "
        "| raw none stalled | one stalled | kept |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, row in results.items():
        lines.append(
            f"| {backend} | {row['ts_none_per_s']:,.0f} | {row['ts_one_per_s']:,.0f} "
            f"| **{row['toolstream_kept']:.2f}** | {row['raw_none_per_s']:,.0f} "
            f"| {row['raw_one_per_s']:,.0f} | {row['raw_kept']:.2f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
