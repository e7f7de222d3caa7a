"""A gateway developer's path: SSEApp and WebSocketApp in real FastAPI and Starlette apps
under uvicorn, with the agent hosted in the app's lifespan (docs/gateway.md)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount, Route, WebSocketRoute
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import toolstream as ts
from toolstream.client import SSEClient
from toolstream.sse import SSEApp
from toolstream.websocket import WebSocketApp

from .servers import Served, serve


def fastapi_routes(bus: ts.EventBus) -> FastAPI:
    api = FastAPI()
    api.routes.append(Route("/events", SSEApp(bus)))
    api.routes.append(WebSocketRoute("/ws", WebSocketApp(bus)))
    return api


def starlette_routes(bus: ts.EventBus) -> Starlette:
    return Starlette(
        routes=[Route("/events", SSEApp(bus)), WebSocketRoute("/ws", WebSocketApp(bus))]
    )


def fastapi_mounts(bus: ts.EventBus) -> FastAPI:
    api = FastAPI()
    api.mount("/events", SSEApp(bus))
    api.mount("/ws", WebSocketApp(bus))
    return api


def starlette_mounts(bus: ts.EventBus) -> Starlette:
    return Starlette(routes=[Mount("/events", SSEApp(bus)), Mount("/ws", WebSocketApp(bus))])


@contextlib.contextmanager
def served(app: Any) -> Iterator[Served]:
    with serve(app, ws="websockets-sansio") as server:
        yield server


def status_of(url: str) -> tuple[int, str | None, str | None]:
    with httpx.Client() as client, client.stream("GET", url) as response:
        return (
            response.status_code,
            response.headers.get("location"),
            response.headers.get("content-type"),
        )


def ws_answers(url: str) -> int:
    """101 when the socket answers a ping, else the status the handshake was refused with."""
    try:
        with connect(url) as ws:
            ws.send(json.dumps({"op": "ping", "id": 1}))
            assert json.loads(ws.recv()) == {"op": "pong", "id": 1}
            return 101
    except InvalidStatus as refused:
        return int(refused.response.status_code)


@pytest.mark.parametrize("make", [fastapi_routes, starlette_routes], ids=["fastapi", "starlette"])
def test_the_documented_routes_serve_the_paths_as_written(make: Any) -> None:
    bus = ts.EventBus()
    with served(make(bus)) as server:
        code, location, kind = status_of(f"{server.url}/events?session=s1")
        assert (code, location) == (200, None)
        assert kind == "text/event-stream; charset=utf-8"
        assert ws_answers(server.url.replace("http", "ws") + "/ws") == 101
        # the other form, as docs/gateway.md says
        assert status_of(f"{server.url}/events/?session=s1")[0] == 307
        assert ws_answers(server.url.replace("http", "ws") + "/ws/") == 403


@pytest.mark.parametrize("make", [fastapi_mounts, starlette_mounts], ids=["fastapi", "starlette"])
def test_mounts_serve_the_slashed_paths_as_the_docs_say(make: Any) -> None:
    bus = ts.EventBus()
    with served(make(bus)) as server:
        code, location, _ = status_of(f"{server.url}/events?session=s1")
        assert code == 307
        assert location is not None and location.endswith("/events/?session=s1")
        assert status_of(f"{server.url}/events/?session=s1")[0] == 200
        assert ws_answers(server.url.replace("http", "ws") + "/ws/") == 101
        assert ws_answers(server.url.replace("http", "ws") + "/ws") == 403


async def test_the_python_client_follows_a_mounts_redirect() -> None:
    bus = ts.EventBus()
    ts.Tracker(bus, "s1").create("t", call_id="a").complete(1)
    with served(fastapi_mounts(bus)) as server:
        client = SSEClient(f"{server.url}/events", session="s1", max_reconnects=0)
        got: list[str] = []
        with anyio.fail_after(10):
            async with aclosing(client.events()) as events:
                async for event in events:
                    got.append(event.type)
                    break
        assert got == ["stream.reset"]


def gateway(bus: ts.EventBus, started: list[str], ended: list[str]) -> FastAPI:
    """The app of docs/gateway.md, with a slow turn (to see shutdown end it)."""

    async def handle_turn(session: str, run_id: str, seconds: float) -> None:
        started.append(run_id)
        try:
            async with (
                ts.Tracker(bus, session) as tracker,
                tracker.run(run_id=run_id),
                tracker.call("slow_tool", {"seconds": seconds}) as call,
            ):
                await anyio.sleep(seconds)
                call.complete("done")
        finally:
            ended.append(run_id)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as turns:
            app.state.turns = turns
            yield
            turns.cancel_scope.cancel()

    api = FastAPI(lifespan=lifespan)
    api.routes.append(Route("/events", SSEApp(bus)))
    api.routes.append(WebSocketRoute("/ws", WebSocketApp(bus)))

    @api.post("/chats/{session}/turns", status_code=202)
    async def start_turn(session: str, body: dict[str, Any]) -> dict[str, str]:
        run_id = f"turn-{time.monotonic_ns()}"
        api.state.turns.start_soon(handle_turn, session, run_id, float(body["seconds"]))
        return {"run_id": run_id, "events": f"/events?session={session}&run={run_id}"}

    return api


def test_an_agent_hosted_in_the_lifespan_streams_and_stops_with_the_server() -> None:
    bus = ts.EventBus()
    started: list[str] = []
    ended: list[str] = []
    sub = bus.subscribe(session="c1")
    with (
        serve(gateway(bus, started, ended), lifespan="on") as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        quick = client.post("/chats/c1/turns", json={"seconds": 0.05}).json()
        with client.stream("GET", quick["events"]) as response:
            kinds = [line for line in response.iter_lines() if line.startswith("event:")]
        assert kinds[-1] == "event: run.finished", "a per-run stream ends with its run"
        client.post("/chats/c1/turns", json={"seconds": 60})  # still running at shutdown
        deadline = time.monotonic() + 5
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sorted(ended) == sorted(started), "shutdown ended every turn"
    events = sub.take_nowait()
    slow = [e for e in events if e.tool == "slow_tool" and e.run_id == started[1]]
    assert isinstance(slow[-1], ts.ToolCancelled), slow
    finished = [e for e in events if isinstance(e, ts.RunFinished)]
    assert [e.outcome for e in finished] == ["completed", "cancelled"]
