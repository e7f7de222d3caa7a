"""The servers of the chat benchmark, each in its own process under uvicorn:
toolstream's ``ChatApp``, or the minimal hand-written FastAPI endpoint the AI SDK's docs
describe (sse-starlette streaming the UI message chunks of a turn, an in-memory list of
each active turn's chunks for the resume ``GET``).

``python -m benchmarks.chat_server {toolstream|handwritten} PORT``

Both run the same turn, as fast as it goes: a message of ``TOKENS`` text deltas, one
tool call, a closing message. A body whose last user text is ``"long"`` runs a long
turn instead: ``LONG`` text deltas, then the turn stays open (what a resume catches up
on).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from sse_starlette.sse import EventSourceResponse

import toolstream as ts

TOKENS = 20
LONG = 2_000


def user_text(body: dict[str, Any]) -> str:
    message = body["messages"][-1]
    return "".join(p.get("text", "") for p in message.get("parts", []))


def toolstream_app() -> Any:
    from toolstream.chat import ChatApp, TurnRequest

    bus = ts.EventBus(replay=100_000)

    async def agent(request: TurnRequest) -> None:
        async with ts.Tracker(bus, request.session) as tracker, tracker.run(request.run_id):
            if request.user_text == "long":
                message = tracker.message()
                for i in range(LONG):
                    message.delta(f"d{i} ")
                message.delta("caught-up ")
                await anyio.sleep(3600)
            with tracker.message() as message:
                for i in range(TOKENS):
                    message.delta(f"t{i} ")
            with tracker.call("lookup", {"q": "x"}) as call:
                call.complete({"ok": 1})
            with tracker.message() as message:
                message.delta("done ")

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(agent, request)

    return ChatApp(bus, start_turn, buffer=100_000)


def handwritten_app() -> Any:
    """What a user writes by hand: FastAPI, sse-starlette, the chunks typed out, the
    active turns' chunks kept for a resume."""
    import asyncio
    import secrets

    app = FastAPI()
    active: dict[str, list[dict[str, Any]]] = {}
    waiters: dict[str, asyncio.Event] = {}
    tasks: set[asyncio.Task[None]] = set()

    def emit(chat: str, chunk: dict[str, Any]) -> None:
        active[chat].append(chunk)
        waiters[chat].set()

    async def agent(chat: str, text: str) -> None:
        message_id = f"run_{secrets.token_hex(8)}"
        emit(chat, {"type": "start", "messageId": message_id})
        emit(chat, {"type": "start-step"})
        emit(chat, {"type": "text-start", "id": "m1"})
        if text == "long":
            for i in range(LONG):
                emit(chat, {"type": "text-delta", "id": "m1", "delta": f"d{i} "})
            emit(chat, {"type": "text-delta", "id": "m1", "delta": "caught-up "})
            await asyncio.sleep(3600)
        for i in range(TOKENS):
            emit(chat, {"type": "text-delta", "id": "m1", "delta": f"t{i} "})
        emit(chat, {"type": "text-end", "id": "m1"})
        call = f"call_{secrets.token_hex(8)}"
        emit(chat, {"type": "tool-input-start", "toolCallId": call, "toolName": "lookup"})
        emit(
            chat,
            {
                "type": "tool-input-available",
                "toolCallId": call,
                "toolName": "lookup",
                "input": {"q": "x"},
            },
        )
        emit(chat, {"type": "tool-output-available", "toolCallId": call, "output": {"ok": 1}})
        emit(chat, {"type": "text-start", "id": "m2"})
        emit(chat, {"type": "text-delta", "id": "m2", "delta": "done "})
        emit(chat, {"type": "text-end", "id": "m2"})
        emit(chat, {"type": "finish-step"})
        emit(chat, {"type": "finish"})
        emit(chat, {"type": "[DONE]"})

    async def follow(chat: str) -> AsyncIterator[dict[str, Any]]:
        chunks = active[chat]
        sent = 0
        while True:
            while sent < len(chunks):
                chunk = chunks[sent]
                sent += 1
                if chunk["type"] == "[DONE]":
                    yield {"data": "[DONE]"}
                    return
                yield {"data": json.dumps(chunk)}
            waiters[chat].clear()
            await waiters[chat].wait()

    @app.post("/api/chat")
    async def post(request: Request) -> EventSourceResponse:
        body = await request.json()
        chat = body["id"]
        active[chat] = []
        waiters[chat] = asyncio.Event()
        task = asyncio.get_running_loop().create_task(agent(chat, user_text(body)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return EventSourceResponse(
            follow(chat), ping=60, headers={"x-vercel-ai-ui-message-stream": "v1"}
        )

    @app.get("/api/chat/{chat}/stream")
    async def resume(chat: str) -> Any:
        if chat not in active:
            return Response(status_code=204)
        return EventSourceResponse(
            follow(chat), ping=60, headers={"x-vercel-ai-ui-message-stream": "v1"}
        )

    return app


def main(kind: str, port: int) -> None:
    app = toolstream_app() if kind == "toolstream" else handwritten_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="off")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
