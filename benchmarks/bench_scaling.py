"""Scaling curves, toolstream against raw anyio memory object streams in the same run
(asyncio; draining consumers on both sides: ``sub.batches()`` and ``receive()`` then
``receive_nowait()`` until empty):

- throughput vs the number of subscribers of one session (1 → 1,000);
- throughput vs the size of each event's payload (100 B → 32 KiB), one subscriber;
- throughput vs the number of sessions (1 → 10,000), one subscriber each, the events
  spread round-robin.

Plots go to docs/images/bench-*.png (``plot()``), the numbers to results.json.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts
from benchmarks import bench_bus
from benchmarks._common import (
    BURST,
    Countdown,
    alternate,
    compare,
    drain_batches,
    drain_raw,
    running_call,
    shown,
)


class CollectorTime:
    """Seconds the garbage collector ran while active (its own ``gc.callbacks``), and
    full collections: what grows with the number of sessions (docs/decisions.md)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.full += info["generation"] == 2

    def __enter__(self) -> CollectorTime:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


#: ``(elapsed, collector seconds, full collections)`` of each timed sessions round, by
#: side and session count (filled by ``run()`` for the last two counts).
Timings = dict[tuple[str, int], list[tuple[float, float, int]]]


async def _drain_sub(sub: ts.Subscription[Any], events: int, done: Any) -> None:
    await drain_batches(sub, events)
    done()


async def _drain_raw(receive: Any, events: int, done: Any) -> None:
    await drain_raw(receive, events)
    done()


async def payload_toolstream(size: int, events: int) -> float:
    bus, call = running_call(replay_bytes=2**30)
    text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    sub = bus.subscribe(session="s", buffer=4 * BURST)
    finished = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_drain_sub, sub, events, finished.set)
        await anyio.sleep(0.01)
        start = time.perf_counter()
        for i in range(events):
            call.output_delta(text)
            if i % BURST == BURST - 1:
                await checkpoint()
        await finished.wait()
        elapsed = time.perf_counter() - start
    assert bus.stats.coalesced == 0, bus.stats
    assert bus.stats.cut == 0, bus.stats
    sub.close()
    return events / elapsed


async def payload_raw(size: int, events: int) -> float:
    send, receive = anyio.create_memory_object_stream[Any](math.inf)
    text = ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    prebuilt = [
        {"type": "tool.output.delta", "id": f"e-{i}", "session": "s", "call_id": "c", "text": text}
        for i in range(events)
    ]
    finished = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_drain_raw, receive, events, finished.set)
        await anyio.sleep(0.01)
        start = time.perf_counter()
        for i, item in enumerate(prebuilt):
            send.send_nowait(item)
            if i % BURST == BURST - 1:
                await checkpoint()
        await finished.wait()
        elapsed = time.perf_counter() - start
    send.close()
    receive.close()
    return events / elapsed


async def sessions_toolstream(
    sessions: int, events: int, *, full: bool = False, timings: Timings | None = None
) -> float:
    """``full``: every session's replay window is full before the timing starts (a
    small window, filled by a warm-up), so each event published drops an older one:
    the steady state of a long-running gateway rather than windows filling up.
    ``timings``: where to record the round's elapsed and collector time."""
    replay = 8 if full else BURST * 4
    bus = ts.EventBus(replay=replay, replay_bytes=2**30)
    calls = []
    for k in range(sessions):
        call = ts.Tracker(bus, f"s{k}").create("t")
        call.start()
        calls.append(call)
    warm = replay + max(32, replay // 4) + 2 if full else 0  # past the trimming mark
    per = events // sessions
    subs = [bus.subscribe(session=f"s{k}", buffer=4 * BURST) for k in range(sessions)]
    countdown = Countdown(sessions)

    async def publish(rounds: int) -> None:
        i = 0
        for _ in range(rounds):
            for call in calls:
                call.progress(0.5, message="step")
                i += 1
                if i % BURST == 0:
                    await checkpoint()

    async with anyio.create_task_group() as tg:
        for sub in subs:
            tg.start_soon(_drain_sub, sub, warm + per, countdown.one)
        await anyio.sleep(0.05)
        if warm:
            await publish(warm)
            await anyio.sleep(0.2)
        with CollectorTime() as collector:
            start = time.perf_counter()
            await publish(per)
            await countdown.done.wait()
            elapsed = time.perf_counter() - start
    if timings is not None:
        timings.setdefault(("toolstream", sessions), []).append(
            (elapsed, collector.seconds, collector.full)
        )
    assert bus.stats.coalesced == 0, bus.stats
    assert bus.stats.cut == 0, bus.stats
    for sub in subs:
        sub.close()
    return per * sessions / elapsed


async def sessions_raw(
    sessions: int, events: int, *, keep: bool = False, timings: Timings | None = None
) -> float:
    """The raw peer: one stream per session, the same dict sent to each. ``keep``: the
    peer keeps a replay window as toolstream does (a fresh dict per event, appended to
    its session's ``deque(maxlen=...)`` before it is sent), to show what keeping history
    costs any Python program as sessions grow (docs/decisions.md)."""
    streams = [anyio.create_memory_object_stream[Any](math.inf) for _ in range(sessions)]
    per = events // sessions
    shared = {"type": "tool.progress", "session": "s", "call_id": "c", "message": "step"}
    windows = [deque[dict[str, Any]](maxlen=BURST * 4) for _ in range(sessions)]
    names = [f"s{k}" for k in range(sessions)]
    countdown = Countdown(sessions)

    async with anyio.create_task_group() as tg:
        for _, receive in streams:
            tg.start_soon(_drain_raw, receive, per, countdown.one)
        await anyio.sleep(0.05)
        sends = [send for send, _ in streams]
        with CollectorTime() as collector:
            start = time.perf_counter()
            i = 0
            for _ in range(per):
                for k, send in enumerate(sends):
                    if keep:
                        item = {
                            "type": "tool.progress",
                            "id": f"raw-{i}",
                            "session": names[k],
                            "call_id": "c",
                            "message": "step",
                        }
                        windows[k].append(item)
                        send.send_nowait(item)
                    else:
                        send.send_nowait(shared)
                    i += 1
                    if i % BURST == 0:
                        await checkpoint()
            await countdown.done.wait()
            elapsed = time.perf_counter() - start
    if timings is not None:
        side = "raw, keeping its events" if keep else "raw"
        timings.setdefault((side, sessions), []).append(
            (elapsed, collector.seconds, collector.full)
        )
    for send, receive in streams:
        send.close()
        receive.close()
    return per * sessions / elapsed


def _growth(xs: list[int], ours: list[float], *, per_byte: bool = False) -> list[str]:
    """Where the cost grows faster than linearly: the cost per delivered event (per
    byte, for the payload curve) rising by more than 1.5x from one point to the next."""
    unit = "byte" if per_byte else "event"
    notes = []
    for k in range(1, len(xs)):
        before = 1 / ours[k - 1] / (xs[k - 1] if per_byte else 1)
        after = 1 / ours[k] / (xs[k] if per_byte else 1)
        if after > 1.5 * before:
            notes.append(f"{xs[k - 1]:,} → {xs[k]:,}: cost per {unit} ×{after / before:.1f}")
    return notes


def _collector_rows(timings: Timings) -> list[dict[str, Any]]:
    """Per side and session count: the median share of the timed part the collector
    ran, its full collections per round, and the median time without it."""
    rows = []
    order = ["toolstream", "raw", "raw, keeping its events"]
    for (side, n), rounds in sorted(
        timings.items(), key=lambda kv: (kv[0][1], order.index(kv[0][0]))
    ):
        rows.append(
            {
                "side": side,
                "x": n,
                "collector_share": statistics.median(gc_s / el for el, gc_s, _ in rounds),
                "full_collections": statistics.median(full for _, _, full in rounds),
                "elapsed": statistics.median(el for el, _, _ in rounds),
                "elapsed_without": statistics.median(el - gc_s for el, gc_s, _ in rounds),
            }
        )
    return rows


def _row(x: int, ours: list[float], raw: list[float]) -> dict[str, Any]:
    """A point of a curve: medians of the alternated rounds and their ratio."""
    return {
        "x": x,
        "toolstream_per_s": statistics.median(ours),
        "raw_per_s": statistics.median(raw),
        **compare(ours, raw),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 3
    curves: dict[str, Any] = {}

    subs = [1, 10] if quick else [1, 3, 10, 30, 100, 300, 1000]
    rows = []
    for s in subs:
        total = 2_000 if quick else 400_000
        events = max(BURST, min(50_000, total // s))
        events -= events % BURST

        async def ours_s(s: int = s, events: int = events) -> float:
            return s * events / await bench_bus.fanout_toolstream(s, events, drain=True)

        async def raw_s(s: int = s, events: int = events) -> float:
            return s * events / await bench_bus.fanout_raw(s, events, drain=True)

        rows.append(_row(s, *alternate(ours_s, raw_s, rounds, "asyncio")))
    curves["subscribers"] = rows

    sizes = [100, 4096] if quick else [100, 1024, 4096, 16384, 32768]
    rows = []
    for size in sizes:
        events = 640 if quick else max(2_048, 40_960 * 100 // size // 64 * 64)
        a, b = alternate(
            partial(payload_toolstream, size, events),
            partial(payload_raw, size, events),
            rounds,
            "asyncio",
        )
        rows.append(_row(size, a, b))
    curves["payload"] = rows

    counts = [1, 100] if quick else [1, 10, 100, 1000, 10000]
    rows = []
    timings: Timings = {}
    for n in counts:
        events = 1_000 if quick else 100_000
        kept = timings if n in counts[-2:] else None
        a, b = alternate(
            partial(sessions_toolstream, n, events, timings=kept),
            partial(sessions_raw, n, events, timings=kept),
            rounds,
            "asyncio",
        )
        rows.append(_row(n, a, b))
    curves["sessions"] = rows

    # The same at the two ends, with every session's replay window full.
    full = []
    for n in counts[-2:]:
        events = 1_000 if quick else 100_000
        a, b = alternate(
            partial(sessions_toolstream, n, events, full=True),
            partial(sessions_raw, n, events),
            rounds,
            "asyncio",
        )
        full.append(_row(n, a, b))

    # The raw peer keeping a replay window, against toolstream, at the same two ends.
    keeping = []
    for n in counts[-2:]:
        events = 1_000 if quick else 100_000
        a, b = alternate(
            partial(sessions_toolstream, n, events),
            partial(sessions_raw, n, events, keep=True, timings=timings),
            rounds,
            "asyncio",
        )
        keeping.append(_row(n, a, b))

    return {
        "curves": curves,
        "sessions_full": full,
        "sessions_keeping": keeping,
        "sessions_collector": _collector_rows(timings),
        "growth": {
            name: _growth(
                [r["x"] for r in rows],
                [r["toolstream_per_s"] for r in rows],
                per_byte=name == "payload",
            )
            for name, rows in curves.items()
        },
    }


_TITLES = {
    "subscribers": ("subscribers of one session", "events delivered/s (all subscribers)"),
    "payload": ("payload bytes per event (one subscriber)", "events/s"),
    "sessions": ("sessions (one subscriber each)", "events delivered/s"),
}


def plot(results: dict[str, Any], directory: Path) -> list[Path]:
    """One PNG per curve in ``directory``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, rows in results["curves"].items():
        xs = [r["x"] for r in rows]
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        ax.plot(xs, [r["toolstream_per_s"] for r in rows], "o-", label="toolstream")
        ax.plot(xs, [r["raw_per_s"] for r in rows], "s--", label="raw anyio streams")
        ax.set_xscale("log")
        ax.set_yscale("log")
        xlabel, ylabel = _TITLES[name]
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = directory / f"bench-{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def report(results: dict[str, Any]) -> str:
    lines = [
        "### Scaling curves",
        "",
        "toolstream against raw anyio streams (draining consumers), asyncio; ratio > 1:",
        "toolstream faster. Plots: `docs/images/bench-subscribers.png`, `bench-payload.png`,",
        "`bench-sessions.png`.",
        "",
        "![throughput vs subscribers](images/bench-subscribers.png)",
        "![throughput vs payload size](images/bench-payload.png)",
        "![throughput vs sessions](images/bench-sessions.png)",
        "",
    ]
    for name, rows in results["curves"].items():
        lines += [
            f"| {_TITLES[name][0]} | toolstream ev/s | raw ev/s | **ratio** |",
            "|---:|---:|---:|---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r['x']:,} | {r['toolstream_per_s']:,.0f} | {r['raw_per_s']:,.0f} "
                f"| {shown(r)} |"
            )
        growth = results["growth"][name]
        lines += [
            "",
            "Cost per event grows faster than linearly: "
            + ("; ".join(growth) if growth else "nowhere on this curve")
            + ".",
            "",
        ]
    lines += _sessions_growth(results["curves"]["sessions"], results.get("sessions_full"))
    lines += _collector_lines(
        results.get("sessions_collector") or [], results.get("sessions_keeping") or []
    )
    return "\n".join(lines)


def _collector_lines(rows: list[dict[str, Any]], keeping: list[dict[str, Any]]) -> list[str]:
    """What the garbage collector takes at the sessions curve's last two points, for
    toolstream, the raw peer, and the raw peer keeping a replay window."""
    by = {(r["side"], r["x"]): r for r in rows}
    xs = sorted({r["x"] for r in rows})
    sides = [
        side for side in ("toolstream", "raw", "raw, keeping its events") if (side, xs[0]) in by
    ]
    if len(xs) != 2 or any((side, x) not in by for side in sides for x in xs):
        return []
    lines = []
    if keeping:
        lines += [
            "| sessions | toolstream ev/s | raw, keeping its events ev/s | **ratio** |",
            "|---:|---:|---:|---:|",
        ]
        for r in keeping:
            lines.append(
                f"| {r['x']:,} | {r['toolstream_per_s']:,.0f} | {r['raw_per_s']:,.0f} "
                f"| {shown(r)} |"
            )
        lines.append("")
    lines += [
        "| sessions | side | collector's share of the timed part | full collections "
        "| time without the collector |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['x']:,} | {r['side']} | {r['collector_share']:.0%} "
            f"| {r['full_collections']:g} | {r['elapsed_without'] * 1e3:.0f} ms |"
        )
    low, high = xs

    def growth(side: str) -> str:
        a, b = by[(side, low)], by[(side, high)]
        return (
            f"{side} ×{b['elapsed'] / a['elapsed']:.2f}, "
            f"without the collector ×{b['elapsed_without'] / a['elapsed_without']:.2f}"
        )

    lines += [
        "",
        f"Cost per delivered event, {low:,} → {high:,} sessions: "
        + "; ".join(growth(side) for side in sides)
        + ".",
        "",
    ]
    return lines


def _sessions_growth(rows: list[dict[str, Any]], full: list[dict[str, Any]] | None) -> list[str]:
    """The cost per delivered event from the second-largest to the largest session
    count (1,000 → 10,000), both sides, and the same with full replay windows."""

    def growth(pair: list[dict[str, Any]], key: str) -> str:
        return f"×{pair[0][key] / pair[1][key]:.2f}"

    pair = rows[-2:]
    span = f"{pair[0]['x']:,} → {pair[1]['x']:,} sessions"
    target = " (target ≤ ×1.2)" if pair[1]["x"] == 10_000 else ""
    lines = [
        f"Cost per delivered event, {span}: toolstream {growth(pair, 'toolstream_per_s')}, "
        f"raw {growth(pair, 'raw_per_s')}{target}.",
        "",
    ]
    if full:
        lines += [
            "| sessions, replay windows full (each event drops an older one) "
            "| toolstream ev/s | raw ev/s | **ratio** |",
            "|---:|---:|---:|---:|",
        ]
        for r in full:
            lines.append(
                f"| {r['x']:,} | {r['toolstream_per_s']:,.0f} | {r['raw_per_s']:,.0f} "
                f"| {shown(r)} |"
            )
        lines += [
            "",
            f"With full windows, {span}: toolstream {growth(full, 'toolstream_per_s')}, "
            f"raw {growth(full, 'raw_per_s')}.",
            "",
        ]
    return lines


if __name__ == "__main__":
    data = run()
    plot(data, Path(__file__).resolve().parent.parent / "docs" / "images")
    print(report(data))
