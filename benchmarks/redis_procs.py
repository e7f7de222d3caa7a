"""Processes for the RedisBus benchmark: ``python -m benchmarks.redis_procs KIND PORT ...``.

- ``gateway PORT URL PREFIX``: SSEApp on a RedisBus, under uvicorn.
- ``publisher PORT URL PREFIX EVENTS RATE``: waits for a second connection on PORT
  (the go signal), then publishes EVENTS progress events at RATE per second through a Tracker.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import uvicorn

import toolstream as ts
from toolstream.redis import RedisBus
from toolstream.sse import SSEApp


def gateway(port: int, url: str, prefix: str) -> None:
    app = SSEApp(RedisBus(url, prefix=prefix), heartbeat=5.0)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


async def publisher(port: int, url: str, prefix: str, events: int, rate: float) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    for _ in range(2):  # the first connection is start_server's probe; the second: go
        conn, _ = await loop.sock_accept(listener)
        conn.close()
    async with RedisBus(url, prefix=prefix) as bus:
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
