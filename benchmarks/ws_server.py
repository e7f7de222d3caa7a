"""The servers of the WebSocket benchmark: toolstream's WebSocketApp under uvicorn, or a
websockets server that hand-rolls the same stream with ``websockets.broadcast()``.

``python -m benchmarks.ws_server {toolstream|broadcast} PORT CLIENTS EVENTS``
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn

import toolstream as ts
from toolstream.websocket import WebSocketApp

SESSION = "bench"


async def publish(bus: ts.EventBus, ready: asyncio.Event, events: int) -> None:
    await ready.wait()
    await asyncio.sleep(0.1)
    call = ts.Tracker(bus, SESSION).create("bench")
    call.start()
    for i in range(events):
        call.progress(0.5, message="step")
        if i % 64 == 63:
            await asyncio.sleep(0)


async def serve_toolstream(port: int, clients: int, events: int) -> None:
    bus = ts.EventBus(replay=10_000)
    app = WebSocketApp(bus, buffer=100_000, ping_interval=600)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="error",
            lifespan="off",
            ws="websockets-sansio",
        )
    )
    ready = asyncio.Event()

    async def watch() -> None:
        while bus.subscriber_count(SESSION) < clients:  # noqa: ASYNC110 - counted by the bus
            await asyncio.sleep(0.01)
        ready.set()

    await asyncio.gather(server.serve(), watch(), publish(bus, ready, events))


async def serve_broadcast(port: int, clients: int, events: int) -> None:
    from websockets.asyncio.server import broadcast, serve

    bus = ts.EventBus(replay=10_000)
    connections: set[object] = set()
    ready = asyncio.Event()

    async def handler(ws: object) -> None:
        await ws.recv()  # type: ignore[attr-defined]  # the subscribe message
        connections.add(ws)
        if len(connections) >= clients:
            ready.set()
        await ws.wait_closed()  # type: ignore[attr-defined]
        connections.discard(ws)

    async def pump() -> None:
        async with bus.subscribe(session=SESSION, buffer=100_000) as sub:
            async for batch in sub.batches():
                for event in batch:
                    message = json.dumps(
                        {
                            "op": "event",
                            "session": SESSION,
                            "id": event.id,
                            "data": ts.to_dict(event),
                        },
                        separators=(",", ":"),
                    )
                    broadcast(connections, message)  # type: ignore[arg-type]

    async with serve(handler, "127.0.0.1", port, ping_interval=None, max_queue=None):
        await asyncio.gather(pump(), publish(bus, ready, events))
        await asyncio.sleep(3600)


if __name__ == "__main__":
    kind, port, clients, events = sys.argv[1:5]
    runner = serve_toolstream if kind == "toolstream" else serve_broadcast
    try:
        asyncio.run(runner(int(port), int(clients), int(events)))
    except KeyboardInterrupt:
        pass
