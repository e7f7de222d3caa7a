"""What the in-process benchmarks share: the tracked producer, draining consumers, a
countdown and the interleaved A-B runner."""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts

BURST = 64  # events a producer publishes between two checkpoints (both sides alike)


def running_call(**bus_options: Any) -> tuple[ts.EventBus, ts.CallHandle]:
    """A bus (a replay window of four bursts unless told otherwise) and a running call
    of session ``"s"`` whose progress the benchmarks publish."""
    bus = ts.EventBus(**{"replay": BURST * 4, **bus_options})
    call = ts.Tracker(bus, "s").create("t")
    call.start()
    return bus, call


async def publish_progress(call: ts.CallHandle, events: int) -> None:
    """``events`` tracked progress events, yielding to the loop after each burst."""
    for i in range(events):
        call.progress(0.5, message="step")
        if i % BURST == BURST - 1:
            await checkpoint()


class Countdown:
    """Set ``done`` once ``n`` consumers called ``one()``."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.done = anyio.Event()

    def one(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


async def drain_batches(sub: ts.Subscription[Any], events: int) -> int:
    """Take ``sub.batches()`` until ``events`` arrived; returns how many did."""
    n = 0
    async for batch in sub.batches():
        n += len(batch)
        if n >= events:
            break
    return n


async def drain_raw(receive: Any, events: int) -> int:
    """The raw peer's best: ``receive()``, then ``receive_nowait()`` until empty, until
    ``events`` arrived; returns how many did."""
    n = 0
    while n < events:
        await receive.receive()
        n += 1
        while True:
            try:
                receive.receive_nowait()
            except anyio.WouldBlock:
                break
            n += 1
    return n


def alternate(
    a: Callable[[], Awaitable[float] | float],
    b: Callable[[], Awaitable[float] | float],
    rounds: int,
    backend: str,
) -> tuple[list[float], list[float]]:
    """The per-round results of ``a`` and ``b`` (a number, or an awaitable of one, run
    on ``backend``), measured A B A B so a noisy neighbour hurts both alike."""
    ta: list[float] = []
    tb: list[float] = []

    def run(fn: Callable[[], Awaitable[float] | float]) -> float:
        gc.collect()
        result = fn()
        if isinstance(result, float):
            return result

        async def wrap() -> float:
            return await result

        return anyio.run(wrap, backend=backend)

    for _ in range(rounds):
        ta.append(run(a))
        tb.append(run(b))
    return ta, tb


def ratio_of(num: float, den: float) -> float:
    """``num / den``, or NaN when ``den`` measured zero (below the clock's resolution)."""
    return num / den if den > 0 else math.nan


def compare(num: list[float], den: list[float], key: str = "ratio") -> dict[str, float]:
    """The ratio ``num / den`` of two alternated series, estimated honestly: the median
    of the per-round ratios (``<key>``, what the reports show), the ratio of the
    medians (``<key>_of_medians``) and the spread of the per-round ratios
    (``<key>_min``, ``<key>_max``). A round whose denominator measured zero (below the
    clock's resolution: CPU time counts in ticks) gives no ratio; with none left, every
    figure is NaN, which :func:`shown` reports as such."""
    ratios = [n / d for n, d in zip(num, den, strict=True) if d > 0]
    if not ratios:
        nan = math.nan
        return {key: nan, f"{key}_of_medians": nan, f"{key}_min": nan, f"{key}_max": nan}
    return {
        key: statistics.median(ratios),
        f"{key}_of_medians": ratio_of(statistics.median(num), statistics.median(den)),
        f"{key}_min": min(ratios),
        f"{key}_max": max(ratios),
    }


def shown(row: dict[str, Any], key: str = "ratio") -> str:
    """A ratio for a report: the median of per-round ratios in bold, the range of the
    rounds after it, e.g. ``**1.42x** (1.38-1.45)`` (with the real signs)."""
    if math.isnan(row[key]):
        return "n/a (too short to measure)"
    low, high = row.get(f"{key}_min"), row.get(f"{key}_max")
    spread = "" if low is None or high is None else f" ({low:.2f}–{high:.2f})"
    return f"**{row[key]:.2f}×**{spread}"


def write_between(doc: Path, start: str, end: str, text: str) -> bool:
    """Replace what ``doc`` has between the markers ``start`` and ``end`` with ``text``;
    False (the file untouched) when it lacks them."""
    current = doc.read_text()
    if start not in current or end not in current:
        return False
    head, rest = current.split(start, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{text}{end}{tail}")
    return True


def throughput(samples: dict[str, list[float]]) -> dict[str, Any]:
    """A broker benchmark's throughput from alternated rounds of events/s
    (``samples["toolstream"]``, ``samples["raw"]``): each side's median and its rounds,
    and toolstream / raw as :func:`compare` gives it (``throughput_ratio``, the median of
    the rounds' ratios; ``…_of_medians``, ``…_min``, ``…_max``)."""
    ours, raw = samples["toolstream"], samples["raw"]
    return {
        "toolstream_events_per_s": statistics.median(ours),
        "raw_events_per_s": statistics.median(raw),
        "toolstream_rounds": ours,
        "raw_rounds": raw,
        **compare(ours, raw, "throughput_ratio"),
    }


def throughput_row(results: dict[str, Any]) -> str:
    """The report's table row of :func:`throughput`'s figures (toolstream, raw, the ratio
    in bold, the ratio of medians, the rounds' spread)."""
    return (
        f"| {results['toolstream_events_per_s']:,.0f} | {results['raw_events_per_s']:,.0f} "
        f"| **{results['throughput_ratio']:.2f}×** "
        f"| {results['throughput_ratio_of_medians']:.2f}× "
        f"| {results['throughput_ratio_min']:.2f}–{results['throughput_ratio_max']:.2f}× |"
    )
