"""Callback subscribers: toolstream's CallbackSink against pyee's EventEmitter.

N callbacks each count the events they get. toolstream publishes through a Tracker and
each sink calls its callback from a task of its own (isolated: an exception or a slow
callback affects only that sink). pyee calls every listener inline, inside ``emit``, on
the publisher's stack, for pre-built events. Rounds alternate; events/s delivered to
all callbacks together; ratio > 1: toolstream faster.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from functools import partial
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts
from benchmarks._common import BURST, alternate, compare, publish_progress, running_call, shown
from toolstream.callback import CallbackSink


async def toolstream_run(callbacks: int, events: int) -> float:
    bus, call = running_call()
    counts = [0] * callbacks
    done = anyio.Event()
    remaining = [callbacks]

    def make(k: int) -> Any:
        def count(event: ts.Event) -> None:
            counts[k] += 1
            if counts[k] == events:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return count

    sinks = [
        CallbackSink(bus, make(k), session="s", types=[ts.ToolProgress]) for k in range(callbacks)
    ]
    async with contextlib.AsyncExitStack() as stack:
        for sink in sinks:
            await stack.enter_async_context(sink)
        await anyio.sleep(0.01)
        start = time.perf_counter()
        await publish_progress(call, events)
        await done.wait()
        elapsed = time.perf_counter() - start
    assert counts == [events] * callbacks
    assert sum(s.errors for s in sinks) == 0
    return callbacks * events / elapsed


async def pyee_run(callbacks: int, events: int) -> float:
    from pyee import EventEmitter

    emitter = EventEmitter()
    counts = [0] * callbacks

    def make(k: int) -> Any:
        def count(event: dict[str, Any]) -> None:
            counts[k] += 1

        return count

    for k in range(callbacks):
        emitter.on("tool.progress", make(k))
    prebuilt = [
        {"type": "tool.progress", "id": f"e-{i}", "session": "s", "call_id": "c", "message": "step"}
        for i in range(events)
    ]
    start = time.perf_counter()
    for i, event in enumerate(prebuilt):
        emitter.emit("tool.progress", event)
        if i % BURST == BURST - 1:
            await checkpoint()
    elapsed = time.perf_counter() - start
    assert counts == [events] * callbacks
    return callbacks * events / elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 5
    results: list[dict[str, Any]] = []
    for backend in ("asyncio", "trio"):
        for callbacks in (1, 10, 100):
            events = (640 if quick else 64_000) // max(1, callbacks // 10)
            a, b = alternate(
                partial(toolstream_run, callbacks, events),
                partial(pyee_run, callbacks, events),
                rounds,
                backend,
            )
            results.append(
                {
                    "backend": backend,
                    "callbacks": callbacks,
                    "events": events,
                    "toolstream_per_s": statistics.median(a),
                    "pyee_per_s": statistics.median(b),
                    **compare(a, b),
                }
            )
    return {"rows": results}


def report(results: dict[str, Any]) -> str:
    lines = [
        "### Callback subscribers: CallbackSink vs pyee's EventEmitter",
        "",
        "Deliveries per second to all callbacks together. pyee runs every listener inside",
        "`emit`, on the publisher's stack, with pre-built events; each toolstream sink runs",
        "its callback in a task of its own, isolated from the publisher and from the other",
        "sinks, with events built and checked by a Tracker. The ratio is the median of the",
        "per-round ratios, their range in brackets.",
        "",
        "| backend | callbacks | toolstream deliveries/s | pyee deliveries/s | **ratio** |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['backend']} | {row['callbacks']} | {row['toolstream_per_s']:,.0f} "
            f"| {row['pyee_per_s']:,.0f} | {shown(row)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
