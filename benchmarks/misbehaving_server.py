"""The processes of the misbehaving-clients benchmark.

``python -m benchmarks.misbehaving_server {budget|unlimited} PORT``: a WebSocketApp under
uvicorn whose session ``bench`` gets a tracked event every 2 ms, with the default inbound
budget or none (``unlimited``: what fairness alone does).

``python -m benchmarks.misbehaving_server flood PORT RATE``: a script that floods that
server with ``RATE`` pings a second over one WebSocket (reading the answers, so its own
socket never stalls), and reconnects whenever it is closed.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import sys
from typing import Any

import uvicorn

import toolstream as ts
from toolstream.websocket import WebSocketApp

SESSION = "bench"
#: Seconds between two published events.
TICK = 0.002


async def serve(port: int, unlimited: bool) -> None:
    bus = ts.EventBus()
    options: dict[str, Any] = {}
    if unlimited:
        options = {"inbound_rate": math.inf, "inbound_burst": 10**9}
    app = WebSocketApp(bus, ping_interval=600, **options)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="critical",
            lifespan="off",
            ws="websockets-sansio",
        )
    )

    async def publish() -> None:
        call = ts.Tracker(bus, SESSION).create("ticker")
        call.start()
        while True:
            call.progress(message="tick")
            await asyncio.sleep(TICK)

    await asyncio.gather(server.serve(), publish())


def masked_ping() -> bytes:
    """One client frame ``{"op":"ping"}`` (clients mask what they send)."""
    payload = b'{"op":"ping"}'
    mask = os.urandom(4)
    return (
        bytes([0x81, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )


async def drain(reader: asyncio.StreamReader) -> None:
    """Read and drop everything the server sends."""
    while await reader.read(65536):
        pass


async def flood(port: int, rate: int) -> None:
    burst = masked_ping() * max(1, rate // 100)  # every 10 ms
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        reading = asyncio.ensure_future(drain(reader))
        try:
            while not reading.done():
                writer.write(burst)
                await writer.drain()
                await asyncio.sleep(0.01)
        except OSError:
            pass
        reading.cancel()
        writer.close()


if __name__ == "__main__":
    kind, port = sys.argv[1:3]
    try:
        if kind == "flood":
            asyncio.run(flood(int(port), int(sys.argv[3])))
        else:
            asyncio.run(serve(int(port), kind == "unlimited"))
    except KeyboardInterrupt:
        pass
