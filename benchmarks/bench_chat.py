"""Chat endpoints: toolstream's ``ChatApp`` against the minimal hand-written FastAPI +
sse-starlette endpoint the AI SDK's docs describe (benchmarks/chat_server.py), each in its
own process under uvicorn, driven the way ``useChat``'s transport drives them.

- **first byte**: from sending the POST of a turn to the response's first byte;
- **first tool part**: from the POST to the turn's first ``tool-input-start`` chunk (the
  agent writes 20 text deltas first);
- **resume catch-up**: a turn has published 2,000 text deltas and is still running; from
  a ``GET …/<chat>/stream`` to the last of them arriving.

Rounds alternate the two servers; each figure is the median of its round, the ratio the
median of the per-round ratios (peer time / toolstream time: > 1 means toolstream is
faster), with the range of the rounds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from benchmarks._common import compare, shown
from benchmarks._processes import start_server

MODULE = "benchmarks.chat_server"
KINDS = ("toolstream", "handwritten")


def _post(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: "
        + str(len(data)).encode()
        + b"\r\n\r\n"
        + data
    )


def _turn(chat: str, text: str) -> dict[str, Any]:
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat, "trigger": "submit-message", "messages": [message]}


async def _read_until(
    reader: asyncio.StreamReader, marks: list[bytes], start: float
) -> dict[bytes, float]:
    """The time each mark first appears in the response (b"" = its first byte)."""
    seen: dict[bytes, float] = {}
    buffer = b""
    while len(seen) < len(marks):
        chunk = await asyncio.wait_for(reader.read(65536), 30)
        if not chunk:
            raise RuntimeError(f"the response ended before {marks}: {buffer[-300:]!r}")
        now = time.perf_counter() - start
        buffer = buffer[-64:] + chunk
        for mark in marks:
            if mark not in seen and (mark == b"" or mark in buffer):
                seen[mark] = now
    return seen


async def _one_turn(port: int) -> tuple[float, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        start = time.perf_counter()
        writer.write(_post(_turn(f"c{uuid.uuid4().hex}", "go")))
        await writer.drain()
        seen = await _read_until(reader, [b"", b"tool-input-start", b"[DONE]"], start)
        return seen[b""], seen[b"tool-input-start"]
    finally:
        writer.close()


async def _one_resume(port: int) -> float:
    chat = f"c{uuid.uuid4().hex}"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post(_turn(chat, "long")))
    await writer.drain()
    await _read_until(reader, [b"caught-up"], time.perf_counter())
    writer.close()  # the client goes away; the turn goes on
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        start = time.perf_counter()
        writer.write(
            f"GET /api/chat/{chat}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Connection: close\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        return (await _read_until(reader, [b"caught-up"], start))[b"caught-up"]
    finally:
        writer.close()


def run_once(kind: str, turns: int, resumes: int) -> dict[str, float]:
    """One server, ``turns`` turns one after another, then ``resumes`` resumes."""
    server, port = start_server(MODULE, kind)

    async def go() -> dict[str, float]:
        for _ in range(3):  # warm up
            await _one_turn(port)
        firsts: list[float] = []
        tools: list[float] = []
        for _ in range(turns):
            first, tool = await _one_turn(port)
            firsts.append(first)
            tools.append(tool)
        catchups = [await _one_resume(port) for _ in range(resumes)]
        return {
            "first_byte_ms": statistics.median(firsts) * 1000,
            "first_tool_ms": statistics.median(tools) * 1000,
            "resume_ms": statistics.median(catchups) * 1000,
        }

    try:
        return asyncio.run(go())
    finally:
        server.kill()
        server.wait()


FIGURES = ("first_byte_ms", "first_tool_ms", "resume_ms")


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 5
    turns = 5 if quick else 40
    resumes = 1 if quick else 5
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
    for _ in range(rounds):
        for kind in KINDS:
            samples[kind].append(run_once(kind, turns, resumes))
    results: dict[str, Any] = {"rounds": rounds, "turns": turns, "resumes": resumes}
    for figure in FIGURES:
        ours = [s[figure] for s in samples["toolstream"]]
        peer = [s[figure] for s in samples["handwritten"]]
        results[figure] = {
            "toolstream": statistics.median(ours),
            "handwritten": statistics.median(peer),
            **compare(peer, ours),
        }
    return results


def report(results: dict[str, Any]) -> str:
    names = {
        "first_byte_ms": "POST → first byte",
        "first_tool_ms": "POST → first tool part",
        "resume_ms": "resume: GET → caught up on 2,000 deltas",
    }
    lines = [
        "### Chat endpoints: ChatApp vs a hand-written FastAPI + sse-starlette endpoint",
        "",
        "Each server in its own process under uvicorn; the same turn (20 text deltas, a",
        "tool call, a closing text) as AI SDK UI message chunks; one request at a time,",
        "a new connection each, as `useChat`'s transport sends them. The hand-written",
        "endpoint is what the AI SDK's docs describe: the chunks typed out, each active",
        "turn's chunks kept in memory for the resume GET (no snapshot, no redaction, no",
        "approvals). Ratio: the peer's time / toolstream's (> 1: toolstream is faster).",
        "",
        f"{results['rounds']} alternating rounds of {results['turns']} turns and "
        f"{results['resumes']} resumes each (medians):",
        "",
        "| figure | toolstream ms | hand-written ms | **ratio** (rounds) |",
        "|---|---:|---:|---:|",
    ]
    for figure in FIGURES:
        row = results[figure]
        lines.append(
            f"| {names[figure]} | {row['toolstream']:.2f} | {row['handwritten']:.2f} "
            f"| {shown(row)} |"
        )
    return "\n".join(lines) + "\n"
