"""The servers of the SSE benchmark: toolstream's SSEApp, or sse-starlette serving the
same events, each in its own process under uvicorn.

``python -m benchmarks.sse_server {toolstream|sse_starlette} PORT CLIENTS EVENTS RATE``

Once CLIENTS streams are open, a Tracker publishes EVENTS progress events of one call
(RATE events/s, or as fast as possible with RATE 0), from the server's own loop.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn

import toolstream as ts
from toolstream.sse import SSEApp

SESSION = "bench"


def make_app(kind: str, bus: ts.EventBus) -> Any:
    if kind == "toolstream":
        return SSEApp(bus, heartbeat=60.0, buffer=100_000)
    from sse_starlette.sse import EventSourceResponse
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    async def events(request: Request) -> EventSourceResponse:
        sub = bus.subscribe(session=request.query_params["session"], buffer=100_000)

        async def generate() -> AsyncIterator[dict[str, Any]]:
            async with sub:
                async for event in sub:
                    yield {
                        "event": event.type,
                        "id": event.id,
                        "data": json.dumps(ts.to_dict(event), separators=(",", ":")),
                    }

        return EventSourceResponse(generate(), ping=60)

    return Starlette(routes=[Route("/", events)])


async def publish(bus: ts.EventBus, clients: int, events: int, rate: float) -> None:
    while bus.subscriber_count(SESSION) < clients:  # noqa: ASYNC110 - counted by the bus
        await anyio.sleep(0.01)
    await anyio.sleep(0.1)
    tracker = ts.Tracker(bus, SESSION)
    call = tracker.create("bench")
    call.start()
    if rate > 0:
        interval = 1.0 / rate
        start = anyio.current_time()
        for i in range(events):
            call.progress(0.5, message="step")
            await anyio.sleep_until(start + (i + 1) * interval)
    else:
        for i in range(events):
            call.progress(0.5, message="step")
            if i % 64 == 63:
                await anyio.lowlevel.checkpoint()


async def main(kind: str, port: int, clients: int, events: int, rate: float) -> None:
    bus = ts.EventBus(replay=10_000)
    config = uvicorn.Config(
        make_app(kind, bus), host="127.0.0.1", port=port, log_level="error", lifespan="off"
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        await publish(bus, clients, events, rate)
        await anyio.sleep(3600)  # the benchmark kills the process when it is done


if __name__ == "__main__":
    kind, port, clients, events, rate = sys.argv[1:6]
    try:
        anyio.run(main, kind, int(port), int(clients), int(events), float(rate))
    except KeyboardInterrupt:
        pass
