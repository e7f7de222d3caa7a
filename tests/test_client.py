"""toolstream.client against real servers: it resumes, it says where its connection
stands, and a wrong URL is a clear error, never a silent hang."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import aclosing

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute

import toolstream as ts
from toolstream.client import ConnectionStatus, SSEClient, WebSocketClient
from toolstream.sse import SSEApp
from toolstream.websocket import WebSocketApp

from .servers import Served, free_port, serve


@pytest.fixture
def bus() -> ts.EventBus:
    return ts.EventBus()


@pytest.fixture
def server(bus: ts.EventBus) -> Iterator[Served]:
    async def page(request: Request) -> Response:
        return HTMLResponse("<!doctype html><title>demo</title>")

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/events", SSEApp(bus)),
            WebSocketRoute("/ws", WebSocketApp(bus)),
            Mount("/mounted", WebSocketApp(bus)),
        ]
    )
    with serve(app, ws="websockets-sansio") as served:
        yield served


async def test_sse_client_reads_the_session_and_reports_connected(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s1")
    tracker.create("search", call_id="c1").complete({"hits": 3})
    seen: list[ConnectionStatus] = []
    async with SSEClient(
        f"{server.url}/events", session="s1", on_status=seen.append, max_reconnects=0
    ) as client:
        with anyio.fail_after(10):
            async with aclosing(client.events()) as events:
                async for event in events:
                    assert event.type == "stream.reset"  # a new client: the state first
                    break
    assert client.view.calls["c1"].state is ts.CallState.COMPLETED
    assert seen[0] == ConnectionStatus("connected")
    assert client.status == ConnectionStatus("connected")


async def test_an_unreachable_server_shows_reconnecting_with_the_reason() -> None:
    url = f"http://127.0.0.1:{free_port()}/events"
    seen: list[ConnectionStatus] = []
    client = SSEClient(
        url, session="s", reconnect_delay=0.01, max_reconnects=3, on_status=seen.append
    )
    with anyio.fail_after(10):
        async for _ in client.frames():
            pytest.fail("no frame can come from a closed port")
    states = [s.state for s in seen]
    assert states == ["reconnecting", "connecting"] * 3 + ["ended"]
    assert {s.reason for s in seen} == {"connection refused"}, seen
    delays = [s.retry_in for s in seen if s.state == "reconnecting"]
    assert delays == [0.01, 0.02, 0.04]  # doubling, up to 10 s
    assert str(seen[0]) == "reconnecting in 0.0 s: connection refused"


async def test_the_page_url_is_a_clear_error_naming_the_event_stream(server: Served) -> None:
    client = SSEClient(f"{server.url}/", session="demo")
    with anyio.fail_after(10), pytest.raises(ts.ToolstreamError) as caught:
        async for _ in client.frames():
            pass
    message = str(caught.value)
    assert "is not an event stream" in message and "text/html" in message
    assert f"{server.url}/events" in message


async def test_a_client_error_is_raised_and_a_server_error_retried(server: Served) -> None:
    with anyio.fail_after(10), pytest.raises(ts.ToolstreamError, match="HTTP 404"):
        async for _ in SSEClient(f"{server.url}/nowhere", session="s").frames():
            pass
    # A 400 from the endpoint itself (no session) is not retried either.
    with anyio.fail_after(10), pytest.raises(ts.ToolstreamError, match="HTTP 400"):
        async for _ in SSEClient(f"{server.url}/events").frames():
            pass


async def test_a_5xx_is_retried_until_the_server_is_back(bus: ts.EventBus) -> None:
    answers = iter([503, 502])
    inner = SSEApp(bus)

    async def flaky(scope, receive, send):  # type: ignore[no-untyped-def]
        code = next(answers, None)
        if code is None:
            await inner(scope, receive, send)
            return
        await Response("busy", status_code=code)(scope, receive, send)

    ts.Tracker(bus, "s").create("t", call_id="c").complete(None)
    seen: list[ConnectionStatus] = []
    with serve(flaky) as served:
        client = SSEClient(served.url, session="s", reconnect_delay=0.01, on_status=seen.append)
        with anyio.fail_after(10):
            async with aclosing(client.events()) as events:
                async for _ in events:
                    break
    reasons = [s.reason for s in seen if s.state == "reconnecting"]
    assert reasons == ["HTTP 503: busy", "HTTP 502: busy"]
    assert seen[-1].state == "connected"


def test_websocket_client_status_and_a_refused_handshake(bus: ts.EventBus, server: Served) -> None:
    ts.Tracker(bus, "s1").create("t", call_id="c1").complete(None)
    ws_url = server.url.replace("http", "ws")
    seen: list[ConnectionStatus] = []

    async def read() -> ts.LiveView:
        async with (
            WebSocketClient(
                f"{ws_url}/ws", session="s1", on_status=seen.append, max_reconnects=0
            ) as client,
            aclosing(client.events()) as events,
        ):
            async for _ in events:
                break
        return client.view

    view = asyncio.run(asyncio.wait_for(read(), 10))
    assert view.calls["c1"].state is ts.CallState.COMPLETED
    assert seen == [ConnectionStatus("connected")]

    async def refused() -> None:
        # A WebSocketApp under Mount("/mounted") answers only /mounted/: the path
        # without its slash is refused with 403, and the client says why it may be.
        async for _ in WebSocketClient(f"{ws_url}/mounted", session="s1").frames():
            pass

    with pytest.raises(ts.ToolstreamError, match=r"HTTP 403 \(a trailing slash\?"):
        asyncio.run(asyncio.wait_for(refused(), 10))


def test_websocket_client_reconnects_while_the_server_is_down() -> None:
    seen: list[ConnectionStatus] = []
    url = f"ws://127.0.0.1:{free_port()}/ws"

    async def read() -> None:
        client = WebSocketClient(
            url, session="s", reconnect_delay=0.01, max_reconnects=2, on_status=seen.append
        )
        async for _ in client.frames():
            pass

    asyncio.run(asyncio.wait_for(read(), 10))
    assert [s.state for s in seen] == ["reconnecting", "connecting"] * 2 + ["ended"]
    assert seen[0].reason is not None
