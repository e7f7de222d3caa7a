"""Processes for the approval benchmark: ``python -m benchmarks.approval_procs KIND PORT ...``.

- ``eventbus PORT ROUNDS``: an SSEApp on an EventBus under uvicorn, and in the same loop an
  agent that makes ROUNDS calls, each waiting for approval (it starts once a client reads).
- ``redis-gateway PORT URL PREFIX``: an SSEApp on a RedisBus (stream and decisions).
- ``redis-agent PORT URL PREFIX ROUNDS``: waits for a second connection on PORT (the go
  signal), then makes ROUNDS calls on a RedisBus, each waiting for approval.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn

import toolstream as ts
from benchmarks._processes import wait_for_go
from toolstream.sse import SSEApp

SESSION = "bench"


async def _agent(bus: ts.Bus, rounds: int) -> None:
    tracker = ts.Tracker(bus, session=SESSION)
    async with tracker.run(run_id="bench"):
        for i in range(rounds):
            async with tracker.call("send_email", {"i": i}, approval=True, call_id=f"a{i}") as c:
                c.complete(None)


async def eventbus(port: int, rounds: int) -> None:
    bus = ts.EventBus(replay=10 * rounds + 100)
    config = uvicorn.Config(SSEApp(bus), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def agent() -> None:
        while bus.subscriber_count(SESSION) == 0:  # noqa: ASYNC110 - a count, not an event
            await asyncio.sleep(0.01)
        await _agent(bus, rounds)

    task = asyncio.create_task(agent())
    await server.serve()
    task.cancel()


def redis_gateway(port: int, url: str, prefix: str) -> None:
    from toolstream.redis import RedisBus

    app = SSEApp(RedisBus(url, prefix=prefix), heartbeat=5.0)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


async def redis_agent(port: int, url: str, prefix: str, rounds: int) -> None:
    from toolstream.redis import RedisBus

    listener = await wait_for_go(port)
    async with RedisBus(url, prefix=prefix) as bus:
        await _agent(bus, rounds)
        await bus.flush(timeout=30)
    listener.close()


if __name__ == "__main__":
    kind, port, *rest = sys.argv[1:]
    if kind == "eventbus":
        asyncio.run(eventbus(int(port), int(rest[0])))
    elif kind == "redis-gateway":
        redis_gateway(int(port), rest[0], rest[1])
    elif kind == "redis-agent":
        asyncio.run(redis_agent(int(port), rest[0], rest[1], int(rest[2])))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
