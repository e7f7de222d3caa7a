"""Processes for the broker-bus benchmarks: ``python -m benchmarks.broker_procs KIND PORT ...``.

``URL`` picks the bus: ``redis://`` a RedisBus (a cluster is detected), ``nats://`` a
NatsBus (comma-separated: the servers of a cluster, with three replicas),
``postgresql://`` a PostgresBus.

- ``gateway PORT URL PREFIX``: SSEApp on the bus, under uvicorn.
- ``publisher PORT URL PREFIX EVENTS RATE``: waits for a second connection on PORT
  (the go signal), then publishes EVENTS progress events at RATE per second through a Tracker.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import uvicorn

import toolstream as ts
from benchmarks._processes import wait_for_go
from toolstream.sse import SSEApp


def open_bus(url: str, prefix: str, **options: Any) -> Any:
    """The broker bus ``url`` names (``options``: the bus's, e.g. ``replay``)."""
    if url.startswith(("postgresql://", "postgres://")):
        from toolstream.postgres import PostgresBus

        return PostgresBus(url, prefix=prefix, **options)
    if url.startswith("nats://"):
        from toolstream.nats import NatsBus

        servers = url.split(",")
        replicas = 3 if len(servers) == 3 else 1
        return NatsBus(servers, prefix=prefix, replicas=replicas, **options)
    from toolstream.redis import RedisBus

    return RedisBus(url, prefix=prefix, **options)


def gateway(port: int, url: str, prefix: str) -> None:
    app = SSEApp(open_bus(url, prefix), heartbeat=5.0)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


async def publisher(port: int, url: str, prefix: str, events: int, rate: float) -> None:
    listener = await wait_for_go(port)
    async with open_bus(url, prefix) as bus:
        tracker = ts.Tracker(bus, session="bench")
        call = tracker.create("bench", call_id="c")
        call.start()
        start = time.perf_counter()
        for i in range(events):
            call.progress(i / events, message="step")
            delay = start + (i + 1) / rate - time.perf_counter()
            await asyncio.sleep(max(delay, 0))
        call.complete(None)
        await bus.flush(timeout=30)
    listener.close()


if __name__ == "__main__":
    kind, port, *rest = sys.argv[1:]
    if kind == "gateway":
        gateway(int(port), rest[0], rest[1])
    elif kind == "publisher":
        asyncio.run(publisher(int(port), rest[0], rest[1], int(rest[2]), float(rest[3])))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
