"""WebSocket: toolstream's WebSocketApp against the websockets library's ``broadcast()``
of the same events, to 1 and to 100 clients (events/s received, server CPU per event).
Each server in its own process; rounds alternate."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from benchmarks._common import compare, shown
from benchmarks._processes import cpu_seconds, start_server

#: toolstream with a client offering the batch subprotocol, toolstream with one event per
#: message (a client that does not offer it), and the hand-rolled broadcast server.
KINDS = ("toolstream", "single", "broadcast")


async def _client(url: str, events: int, batch: bool) -> tuple[int, float, float]:
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    from toolstream.websocket import BATCH_SUBPROTOCOL

    got = 0
    first = last = 0.0
    # The client counts the events in each message; offered the batch subprotocol,
    # toolstream accepts it, the broadcast server declines it.
    async with connect(
        url,
        max_size=None,
        ping_interval=None,
        subprotocols=[Subprotocol(BATCH_SUBPROTOCOL)] if batch else None,
    ) as ws:
        await ws.send(json.dumps({"op": "subscribe", "session": "bench"}))
        async for message in ws:
            n = message.count('"tool.progress"')  # type: ignore[arg-type]
            if n:
                now = time.perf_counter()
                if not got:
                    first = now
                got += n
                last = now
                if got >= events:
                    break
    return got, first, last


def run_once(kind: str, clients: int, events: int) -> dict[str, float]:
    server_kind = "toolstream" if kind == "single" else kind
    server, port = start_server("benchmarks.ws_server", server_kind, str(clients), str(events))
    try:
        cpu_before = cpu_seconds(server.pid)

        async def go() -> list[tuple[int, float, float]]:
            return await asyncio.gather(
                *(
                    _client(f"ws://127.0.0.1:{port}/", events, kind != "single")
                    for _ in range(clients)
                )
            )

        reads = asyncio.run(go())
        cpu = cpu_seconds(server.pid) - cpu_before
        elapsed = max(r[2] for r in reads) - min(r[1] for r in reads)
        delivered = sum(r[0] for r in reads)
        return {"events_per_s": delivered / elapsed, "cpu_us_per_event": cpu / delivered * 1e6}
    finally:
        server.kill()
        server.wait()


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 3
    results: dict[str, Any] = {}
    for name, clients, events in (
        ("1 client", 1, 2_000 if quick else 50_000),
        ("100 clients", 5 if quick else 100, 300 if quick else 3_000),
    ):
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for _ in range(rounds):
            for kind in KINDS:
                samples[kind].append(run_once(kind, clients, events))
        row: dict[str, Any] = {"clients": clients, "events": events}
        for kind in KINDS:
            for key in samples[kind][0]:
                row[f"{kind}_{key}"] = statistics.median(s[key] for s in samples[kind])
        ours, peer = samples["toolstream"], samples["broadcast"]
        row |= compare(
            [s["events_per_s"] for s in samples["single"]],
            [s["events_per_s"] for s in peer],
            "single_ratio",
        )
        row |= compare(
            [s["events_per_s"] for s in ours], [s["events_per_s"] for s in peer], "throughput_ratio"
        )
        row |= compare(
            [s["cpu_us_per_event"] for s in ours],
            [s["cpu_us_per_event"] for s in peer],
            "cpu_ratio",
        )
        results[name] = row
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "### WebSocket: toolstream's WebSocketApp vs `websockets.broadcast()`",
        "",
        "The same tracked events; the peer is a websockets server that serializes each event",
        "once and broadcasts it (the hand-rolled design). toolstream runs under uvicorn.",
        "*batched*: the client offers the `toolstream.batch` subprotocol (each wake-up's",
        "events in one message; the broadcast server declines it and sends one message per",
        "event); *single*: it does not (one event per message, like the peer). Ratios: the",
        "median of the per-round ratios, their range in brackets.",
        "",
        "| scenario | toolstream batched ev/s | toolstream single ev/s | broadcast ev/s "
        "| **batched vs broadcast** | **single vs broadcast** | toolstream batched CPU µs/ev "
        "| broadcast CPU µs/ev | **CPU** |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        lines.append(
            f"| {name} | {row['toolstream_events_per_s']:,.0f} "
            f"| {row['single_events_per_s']:,.0f} "
            f"| {row['broadcast_events_per_s']:,.0f} "
            f"| {shown(row, 'throughput_ratio')} | {shown(row, 'single_ratio')} "
            f"| {row['toolstream_cpu_us_per_event']:.1f} "
            f"| {row['broadcast_cpu_us_per_event']:.1f} | {shown(row, 'cpu_ratio')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
