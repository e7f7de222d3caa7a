"""``toolstream demo``: a live gateway and web page of tool cards, fed by a simulated agent
(or a framework's agent), and two chat pages where a client drives the same agent turn
by turn: the AI SDK's own (``/chat``) and LangGraph's ``useStream`` (``/usestream``).

``build_app(bus)`` is the gateway (the page at ``/``, SSE at ``/events``, WebSocket at
``/ws``, the chat page at ``/chat`` on a ``ChatApp`` at ``/api/chat``, the useStream page
at ``/usestream`` on a ``ChatApp(dialect="langgraph")`` at ``/api/langgraph``, an A2A
server at ``/a2a``); ``serve(...)`` runs it under uvicorn with the agent. Needs the
``cli`` extra.
"""

from __future__ import annotations

import json
import logging
import mimetypes
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from typing import Any

import anyio

import toolstream as ts
from toolstream.a2a import A2AApp
from toolstream.chat import CancelTurn, ChatApp, StartTurn, TurnRequest
from toolstream.sse import SSEApp
from toolstream.websocket import WebSocketApp

from .agent import DEMO_SECRET, run_agent, run_turn
from .frameworks import agent_runner, chat_turns

logger = logging.getLogger("toolstream.demo")

__all__ = ["DEMO_SECRET", "Gateway", "build_app", "run_agent", "serve"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

SESSION = "demo"
#: Where the chat page's client posts its turns.
CHAT_API = "/api/chat"
#: Where the useStream page's ``FetchStreamTransport`` posts its turns.
LANGGRAPH_API = "/api/langgraph"
#: Where the A2A server answers (its card at ``/a2a/.well-known/agent-card.json``).
A2A_PATH = "/a2a"
#: The demo agent's A2A card (the app adds streaming, the extension and its URL).
A2A_CARD = {
    "name": "toolstream demo agent",
    "description": "Researches, summarizes and emails: every tool call's lifecycle in "
    "status updates (urn:toolstream:a2a:tool-lifecycle:v1), resumable by event id.",
    "version": "1.0.0",
    "skills": [
        {
            "id": "research",
            "name": "Research and report",
            "description": "Searches, reads, delegates to a researcher, emails the result "
            "after your approval.",
            "tags": ["research", "tools"],
        }
    ],
}
#: Seconds a chat turn's approval waits for the person at the page (at speed 1).
CHAT_APPROVAL_TIMEOUT = 300.0


#: The pages, by path.
_PAGES = {"/": "index.html", "/chat": "chat.html", "/usestream": "usestream.html"}


def _static(name: str) -> bytes | None:
    if "/" in name or name.startswith("."):
        return None
    path = resources.files(__package__).joinpath("static").joinpath(name)
    return path.read_bytes() if path.is_file() else None


class Gateway:
    """The demo's ASGI app: ``/`` (the page), ``/static/*``, ``/events`` (SSE, every
    dialect), ``/ws`` (WebSocket), ``/chat`` (the chat page) and its ``ChatApp`` at
    ``/api/chat``, ``/usestream`` (the useStream page) and its
    ``ChatApp(dialect="langgraph")`` at ``/api/langgraph``, ``/a2a`` (an ``A2AApp``: the
    same agent's tasks; ``GET /a2a`` is its card), ``/healthz``.

    Chat turns (both chat pages') run the simulated agent in this process (at ``speed``);
    with ``agent`` (``pydantic-ai``, ``openai-agents``, ``langgraph``), that framework's
    demo agent through its integration's ``chat_agent`` (``ImportError`` naming the extra
    when the framework is not installed); with ``start_turn``, whatever it does (a job
    for a worker process on a broker bus, with ``cancel_turn``)."""

    def __init__(
        self,
        bus: ts.Bus,
        *,
        retry_ms: int = 1000,
        speed: float = 1.0,
        start_turn: StartTurn | None = None,
        cancel_turn: CancelTurn | None = None,
        agent: str = "simulated",
    ) -> None:
        self.bus = bus
        self.speed = speed
        if start_turn is None and agent != "simulated":
            start_turn = chat_turns(agent, speed=speed, approval_timeout=CHAT_APPROVAL_TIMEOUT)
        self.sse = SSEApp(bus, retry_ms=retry_ms)
        self.ws = WebSocketApp(bus)
        turns = start_turn or self._start_turn
        self.chat = ChatApp(bus, turns, cancel_turn=cancel_turn)
        self.langgraph = ChatApp(bus, turns, dialect="langgraph", cancel_turn=cancel_turn)
        # A TaskRequest is a TurnRequest: the same agent serves A2A tasks.
        self.a2a = A2AApp(bus, turns, card=A2A_CARD, cancel_task=cancel_turn)

    async def _start_turn(self, request: TurnRequest) -> None:
        request.start_soon(self._chat_turn, request)

    async def _chat_turn(self, request: TurnRequest) -> None:
        """The simulated agent's turn, titled with what the person asked."""
        async with ts.Tracker(self.bus, request.session) as tracker:
            await run_turn(
                tracker,
                1,
                speed=self.speed,
                approval_timeout=CHAT_APPROVAL_TIMEOUT,
                run_id=request.run_id,
                title=request.user_text[:80] or None,
            )

    def shutdown(self) -> None:
        """End every open stream and socket."""
        self.sse.shutdown()
        self.ws.shutdown()
        self.chat.shutdown()
        self.langgraph.shutdown()
        self.a2a.shutdown()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.sse(scope, receive, send)
            return
        path = scope.get("path", "/")
        if kind == "websocket":
            if path == "/ws":
                await self.ws(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        if path == "/events":
            await self.sse(scope, receive, send)
            return
        if path in (A2A_PATH, A2A_PATH + "/") and scope.get("method") == "GET":
            scope = {**scope, "path": A2A_PATH + "/.well-known/agent-card.json"}  # the card
        for prefix, app in (
            (CHAT_API, self.chat),
            (LANGGRAPH_API, self.langgraph),
            (A2A_PATH, self.a2a),
        ):
            if path == prefix or path.startswith(prefix + "/"):
                await app(scope, receive, send)
                return
        if path == "/healthz":
            await _reply(send, 200, b'{"ok": true}', "application/json")
            return
        name = _PAGES.get(path) or (
            path.removeprefix("/static/") if path.startswith("/static/") else ""
        )
        body = _static(name) if name else None
        if body is None:
            await _reply(
                send,
                404,
                json.dumps({"error": f"no such page: {path}"}).encode(),
                "application/json",
            )
            return
        kind_of = mimetypes.guess_type(name)[0] or "application/octet-stream"
        await _reply(send, 200, body, f"{kind_of}; charset=utf-8", cache=False)


async def _reply(
    send: Send, status: int, body: bytes, content_type: str, *, cache: bool = True
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if not cache:
        headers.append((b"cache-control", b"no-cache"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(bus: ts.Bus, *, speed: float = 1.0, agent: str = "simulated") -> Gateway:
    """The demo gateway over ``bus``: chat turns at ``speed``, run by ``agent`` (the
    simulated agent, or a framework's through its ``chat_agent``)."""
    return Gateway(bus, speed=speed, agent=agent)


async def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    speed: float = 1.0,
    turns: int | None = None,
    bus: ts.EventBus | None = None,
    on_ready: Callable[[str], None] | None = None,
    sock: socket.socket | None = None,
    agent: str = "simulated",
) -> None:
    """Run the gateway under uvicorn and the simulated agent on session ``demo`` until
    the server exits (Ctrl-C), or, with ``turns``, until the agent's turns are done (the
    server then stops too, a second later: the page gets the last events). ``sock``: a
    socket already bound (uvicorn binds ``host:port`` itself otherwise). ``agent``: the
    simulated agent, or a framework driven by its own fake model (``pydantic-ai``,
    ``openai-agents``, ``langgraph``), for every page."""
    import uvicorn

    bus = bus if bus is not None else ts.EventBus()
    gateway = build_app(bus, speed=speed, agent=agent)
    config = uvicorn.Config(
        gateway, host=host, port=port, log_level="warning", ws="websockets-sansio", lifespan="on"
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:

        async def drive() -> None:
            while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag, not an event
                await anyio.sleep(0.05)
            if on_ready is not None:
                on_ready(f"http://{host}:{port}/")
            runner = agent_runner(agent)
            async with ts.Tracker(bus, SESSION) as tracker:
                await runner(tracker, turns=turns, speed=speed)
            if turns is not None:
                await anyio.sleep(1.0)
                server.should_exit = True

        async def server_task() -> None:
            await server.serve(sockets=None if sock is None else [sock])
            tg.cancel_scope.cancel()  # Ctrl-C: the agent stops with the server

        tg.start_soon(server_task)
        tg.start_soon(drive)
