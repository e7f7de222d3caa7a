"""Memory, measured with tracemalloc (bytes Python allocated, not RSS), side by side with
the hand-rolled equivalent:

- an idle subscription vs an idle anyio memory object stream pair (buffer 1024);
- a typical event kept in the replay window vs the same event as a dict in a list;
- a tracked session (a tracker, a run, one completed call, its events retained) vs a dict
  holding that session's event dicts.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import anyio

import toolstream as ts


def _measure(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated by ``build()`` while its result is alive."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, kept


def _typical_call(tracker: ts.Tracker, i: int) -> None:
    """One web search as an agent reports it: 5 events."""
    call = tracker.create("web_search", call_id=f"c{i}")
    call.ready(args={"q": f"anyio memory object streams {i}", "max_results": 3})
    call.start()
    call.progress(0.5, message="fetched 6 of 12 pages")
    call.complete([f"https://example.com/result/{i}/{k}" for k in range(3)])


def _event_dicts(i: int) -> list[dict[str, Any]]:
    base = {"session": "s", "call_id": f"c{i}", "tool": "web_search", "ts": 1.0}
    return [
        {**base, "type": "tool.created", "id": f"e-{i}-0"},
        {
            **base,
            "type": "tool.ready",
            "id": f"e-{i}-1",
            "args": {"q": f"anyio memory object streams {i}", "max_results": 3},
        },
        {**base, "type": "tool.started", "id": f"e-{i}-2"},
        {**base, "type": "tool.progress", "id": f"e-{i}-3", "message": "fetched 6 of 12 pages"},
        {
            **base,
            "type": "tool.completed",
            "id": f"e-{i}-4",
            "result": [f"https://example.com/result/{i}/{k}" for k in range(3)],
        },
    ]


def idle_subscriptions(n: int) -> tuple[float, float]:
    bus = ts.EventBus()
    bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
    ours, subs = _measure(lambda: [bus.subscribe(session="s") for _ in range(n)])
    raw, streams = _measure(
        lambda: [anyio.create_memory_object_stream[Any](1024) for _ in range(n)]
    )
    for sub in subs:
        sub.close()
    for send, receive in streams:
        send.close()
        receive.close()
    return ours / n, raw / n


def window_events(calls: int) -> tuple[float, float]:
    def build() -> ts.EventBus:
        bus = ts.EventBus(replay=calls * 5, replay_bytes=2**30)
        tracker = ts.Tracker(bus, "s")
        for i in range(calls):
            _typical_call(tracker, i)
        return bus

    ours, bus = _measure(build)
    assert bus.stats.published == calls * 5
    raw, _ = _measure(lambda: [e for i in range(calls) for e in _event_dicts(i)])
    return ours / (calls * 5), raw / (calls * 5)


def sessions(n: int) -> tuple[float, float]:
    def build() -> tuple[ts.EventBus, list[ts.Tracker]]:
        bus = ts.EventBus(replay=100, replay_bytes=2**30)
        trackers = []
        for k in range(n):
            tracker = ts.Tracker(bus, f"session-{k}")
            _typical_call(tracker, k)
            trackers.append(tracker)
        return bus, trackers

    ours, _ = _measure(build)
    raw, _ = _measure(lambda: {f"session-{k}": _event_dicts(k) for k in range(n)})
    return ours / n, raw / n


def run(*, quick: bool = False) -> dict[str, Any]:
    n = 500 if quick else 10_000
    sub_ours, sub_raw = idle_subscriptions(n)
    ev_ours, ev_raw = window_events(n // 5)
    ses_ours, ses_raw = sessions(n // 10)
    return {
        "idle_subscription": {"toolstream_bytes": sub_ours, "raw_bytes": sub_raw, "n": n},
        "window_event": {"toolstream_bytes": ev_ours, "raw_bytes": ev_raw, "n": n},
        "session": {"toolstream_bytes": ses_ours, "raw_bytes": ses_raw, "n": n // 10},
        "window_10k_mib": ev_ours * 10_000 / 2**20,
    }


def report(results: dict[str, Any]) -> str:
    rows = [
        ("an idle subscription", "idle_subscription", "an anyio stream pair (buffer 1024)"),
        ("a typical event in the replay window", "window_event", "the event as a dict in a list"),
        ("a tracked session (one call, 5 events)", "session", "a dict of its event dicts"),
    ]
    lines = [
        "### Memory",
        "",
        "Bytes allocated per item (tracemalloc), averaged over many; ratio < 1: toolstream "
        "uses less.",
        "",
        "| what | toolstream bytes | hand-rolled equivalent | its bytes | **ratio** |",
        "|---|---:|---|---:|---:|",
    ]
    for label, key, peer in rows:
        row = results[key]
        lines.append(
            f"| {label} | {row['toolstream_bytes']:,.0f} | {peer} | {row['raw_bytes']:,.0f} "
            f"| **{row['toolstream_bytes'] / row['raw_bytes']:.2f}×** |"
        )
    lines += [
        "",
        f"10,000 typical events in the replay window: **{results['window_10k_mib']:.1f} MiB** "
        "(target ≤ 20 MiB); an idle subscription: "
        f"**{results['idle_subscription']['toolstream_bytes']:,.0f} bytes** (target ≤ 4 KiB).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
