"""The servers of the gateway benchmark: one process holding many clients, one session
each, under uvicorn — toolstream's apps, or a hand-rolled Starlette server doing the same.

``python -m benchmarks.gateway_server KIND PORT CLIENTS ROUNDS``

KIND is one of :data:`KINDS`. Sessions ``c0`` … ``c<CLIENTS-1>`` each have a running
call from the start. On ``SIGUSR1`` the server publishes ``ROUNDS`` rounds of one
progress event per session, spread evenly (``CLIENTS`` events a second: event ``i`` is
due ``i / CLIENTS`` seconds after the start), each carrying its round and the time it
was due in its ``message`` (``"<round> <due>"``). ``SIGTERM`` shuts the server down the
way uvicorn does (toolstream's streams must end; the hand-rolled ones do not).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import os
import resource
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn

import toolstream as ts

KINDS = ("toolstream_sse", "handrolled_sse", "toolstream_ws", "handrolled_ws", "toolstream_chat")
#: Seconds between keepalives on an idle stream, on both sides: longer than a run's idle
#: window, so that what is measured idle is what holding a client costs (a keepalive is
#: a small write, priced like an event; toolstream's default is every 15 s).
HEARTBEAT = 60.0


def raise_fd_limit() -> None:
    """Allow as many open files as the hard limit does (10,000 clients: 10,000 fds)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


Publish = Callable[[int, str], None]


async def next_item(queue: asyncio.Queue[tuple[str, str]]) -> tuple[str, str]:
    """The queue's next item, or TimeoutError after :data:`HEARTBEAT` seconds (the
    cheapest way the running Python has)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(HEARTBEAT):
            return await queue.get()
    return await asyncio.wait_for(queue.get(), HEARTBEAT)  # pragma: no cover


def toolstream_app(kind: str, clients: int) -> tuple[Any, Publish]:
    """The app and a ``publish(k, message)`` of session ``c<k>``'s progress. For
    ``toolstream_chat``, each session's call runs in an open run: a chat's turn, which
    the clients resume (``GET /c<k>/stream``)."""
    bus = ts.EventBus()
    calls = []

    def open_call(tracker: ts.Tracker) -> ts.CallHandle:
        if kind == "toolstream_chat":
            tracker.run().__enter__()  # the turn under way, for the whole benchmark
        call = tracker.create("bench")
        call.start()
        return call

    for k in range(clients):
        # Each session's turn in a context of its own, as a server's turns run in tasks
        # of their own (runs entered one after another in one context would nest).
        calls.append(contextvars.copy_context().run(open_call, ts.Tracker(bus, f"c{k}")))

    def publish(k: int, message: str) -> None:
        calls[k].progress(0.5, message=message)

    if kind == "toolstream_chat":
        from toolstream.chat import ChatApp

        async def no_turns(request: Any) -> Any:
            raise AssertionError("the benchmark's clients only resume")

        return ChatApp(bus, no_turns, heartbeat=HEARTBEAT), publish
    if kind == "toolstream_sse":
        from toolstream.sse import SSEApp

        return SSEApp(bus, heartbeat=HEARTBEAT), publish
    from toolstream.websocket import WebSocketApp

    return WebSocketApp(bus, ping_interval=HEARTBEAT), publish


def handrolled_app(kind: str, clients: int) -> tuple[Any, Publish]:
    """A Starlette app a developer would write: a queue per connected session, the same
    event JSON put on it, a keepalive comment after :data:`HEARTBEAT` idle seconds."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    queues: dict[str, asyncio.Queue[tuple[str, str]]] = {}
    ids = itertools.count(1)
    call_ids = [f"call_{k:016x}" for k in range(clients)]

    def publish(k: int, message: str) -> None:
        session = f"c{k}"
        eid = f"{next(ids)}"
        event = {
            "v": 1,
            "type": "tool.progress",
            "id": eid,
            "session": session,
            "ts": time.time(),
            "call_id": call_ids[k],
            "tool": "bench",
            "fraction": 0.5,
            "message": message,
        }
        queue = queues.get(session)
        if queue is not None:
            queue.put_nowait((eid, json.dumps(event, separators=(",", ":"))))

    async def events(request: Request) -> StreamingResponse:
        session = request.query_params["session"]
        queue = queues[session] = asyncio.Queue()

        async def stream() -> AsyncIterator[str]:
            try:
                while True:
                    try:
                        eid, data = await next_item(queue)
                    except TimeoutError:
                        yield ": ping\n\n"
                        continue
                    yield f"event: tool.progress\nid: {eid}\ndata: {data}\n\n"
            finally:
                queues.pop(session, None)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def socket(ws: WebSocket) -> None:
        await ws.accept()
        session = json.loads(await ws.receive_text())["session"]
        queue = queues[session] = asyncio.Queue()
        prefix = '{"op":"event","session":' + json.dumps(session) + ',"id":"'
        try:
            await ws.send_text(f'{{"op":"subscribed","session":{json.dumps(session)}}}')
            while True:
                eid, data = await queue.get()
                await ws.send_text(f'{prefix}{eid}","event":"tool.progress","data":{data}}}')
        finally:
            queues.pop(session, None)

    route = Route("/", events) if kind == "handrolled_sse" else WebSocketRoute("/", socket)
    return Starlette(routes=[route]), publish


async def publish_rounds(publish: Publish, clients: int, rounds: int) -> None:
    """``rounds`` events to each session, ``clients`` a second, evenly spread."""
    total = clients * rounds
    start = time.time() + 0.05
    i = 0
    while i < total:
        now = time.time()
        due = min(total, int((now - start) * clients) + 1)
        while i < due:
            round_, k = divmod(i, clients)
            publish(k, f"{round_} {start + i / clients:.6f}")
            i += 1
        # The next event's time (at most a few ms ahead, so bursts stay small).
        await asyncio.sleep(max(0.0, min(0.005, start + i / clients - time.time())))


#: What :func:`log_collections` counts (its seconds, and objects promoted).
GC_STATE: dict[str, float] = {"start": 0.0, "young": 0.0, "full": 0.0, "promoted": 0, "n": 0}


def log_collections(path: str) -> None:
    """Append each full collection of the garbage collector to ``path`` (when, its
    seconds so far, the younger generations' seconds so far, and how many objects
    the younger collections moved to the oldest generation so far): for profiling."""
    import gc

    state = GC_STATE
    counting = os.environ.get("GATEWAY_GC_PROMOTED") == "1"  # slow: lists every object

    def callback(phase: str, info: dict[str, int]) -> None:
        gen = info["generation"]
        if phase == "start":
            state["start"] = time.perf_counter()
            if gen == 1 and counting:
                state["n"] = len(gc.get_objects(0)) + len(gc.get_objects(1))
            return
        took = time.perf_counter() - state["start"]
        if gen == 1 and counting:
            state["promoted"] += state["n"] - info["collected"]
        if gen < 2:
            state["young"] += took
            return
        state["full"] += took
        with open(path, "a") as out:
            out.write(
                f"{time.time():.3f} {state['full']:.3f} {state['young']:.3f} "
                f"{state['promoted']} {took:.3f}\n"
            )

    gc.callbacks.append(callback)


_TYPES: dict[str, int] = {}


def mark(what: str) -> None:
    """A line in the collections' log (``GATEWAY_GC_LOG``), if kept; with
    ``GATEWAY_GC_TYPES=1`` too, how many objects of each type the heap gained since
    the previous mark (the most first): what stays alive while events are published."""
    log = os.environ.get("GATEWAY_GC_LOG")
    if log:
        with open(log, "a") as out:
            out.write(f"{time.time():.3f} {what} {GC_STATE['promoted']}\n")
            if os.environ.get("GATEWAY_GC_TYPES"):
                import collections
                import gc

                now = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
                if _TYPES:
                    diff = {k: now[k] - _TYPES.get(k, 0) for k in now}
                    for k, n in sorted(diff.items(), key=lambda kv: -kv[1])[:25]:
                        out.write(f"    {n:+8d} {k}\n")
                _TYPES.clear()
                _TYPES.update(now)


async def main(kind: str, port: int, clients: int, rounds: int) -> None:
    raise_fd_limit()
    if os.environ.get("GATEWAY_GC_LOG"):
        log_collections(os.environ["GATEWAY_GC_LOG"])
    make = toolstream_app if kind.startswith("toolstream") else handrolled_app
    app, publish = make(kind, clients)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="critical",
        lifespan="off",
        ws="websockets-sansio",
        backlog=4096,
        ws_ping_interval=HEARTBEAT,
    )
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()
    go = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, go.set)

    async def publisher() -> None:
        await go.wait()
        mark("publishing")
        await publish_rounds(publish, clients, rounds)
        mark("published")

    task = asyncio.ensure_future(publisher())
    await server.serve()
    task.cancel()


if __name__ == "__main__":
    kind, port, clients, rounds = sys.argv[1:5]
    if kind not in KINDS:
        raise SystemExit(f"kind must be one of {KINDS}")
    asyncio.run(main(kind, int(port), int(clients), int(rounds)))
