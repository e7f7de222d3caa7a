"""What spans cost: a tool call untracked, tracked, and tracked with every call exported
as an OpenTelemetry span (``ToolSpans`` with the SDK's in-memory exporter), per call.

The call is ``async with tracker.call(...)`` around a no-op tool with one progress report;
rounds alternate and each figure is the median of its rounds.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import anyio

import toolstream as ts


async def _untracked(calls: int) -> float:
    async def tool(n: int) -> int:
        return n

    start = time.perf_counter()
    for i in range(calls):
        await tool(i)
    return (time.perf_counter() - start) / calls


async def _tracked(calls: int, spans: bool) -> float:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from toolstream.otel import ToolSpans

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "bench")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sub = bus.subscribe(session="bench", buffer=10**7)
    following: Any = ToolSpans(bus, session="bench", tracer_provider=provider) if spans else None
    if following is not None:
        await following.__aenter__()
    start = time.perf_counter()
    for i in range(calls):
        async with tracker.call("lookup", {"n": i}) as call:
            call.progress(0.5)
            call.complete(i)
        if i % 64 == 63:
            sub.take_nowait()
            await anyio.lowlevel.checkpoint()  # the span follower runs as a gateway's would
    if following is not None:
        await following.__aexit__(None, None, None)
        assert len(exporter.get_finished_spans()) == calls
    elapsed = (time.perf_counter() - start) / calls
    sub.close()
    provider.shutdown()
    return elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    """Microseconds per call, untracked / tracked / tracked with spans."""
    calls, rounds = (200, 1) if quick else (5_000, 5)
    samples: dict[str, list[float]] = {"untracked": [], "tracked": [], "spans": []}
    for _ in range(rounds):
        samples["untracked"].append(anyio.run(_untracked, calls))
        samples["tracked"].append(anyio.run(_tracked, calls, False))
        samples["spans"].append(anyio.run(_tracked, calls, True))
    us = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    return {"calls": calls, "us_per_call": us}


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    us = results["us_per_call"]
    return "\n".join(
        [
            "### OpenTelemetry spans",
            "",
            "A no-op tool call (one progress report), per call: untracked, tracked on an "
            "EventBus, and tracked with `ToolSpans` exporting every call as a span (the "
            "SDK's in-memory exporter).",
            "",
            "| untracked | tracked | tracked + spans | the spans' own cost |",
            "|---:|---:|---:|---:|",
            f"| {us['untracked']:.2f} µs | {us['tracked']:.1f} µs | {us['spans']:.1f} µs "
            f"| {us['spans'] - us['tracked']:.1f} µs |",
            "",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
