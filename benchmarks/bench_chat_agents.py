"""``chat_agent`` against the framework's own way of serving the same turn to an AI SDK
client: pydantic-ai's ``VercelAIAdapter``, and a LangGraph graph streamed to UI message
chunks by hand through sse-starlette (benchmarks/chat_agents_server.py). Each server in
its own process under uvicorn, the same agent and fake model on both sides.

- **turn**: from sending the POST to the response's ``[DONE]`` (a whole turn: 20 text
  deltas, a tool call, 20 text deltas), one turn at a time on a new connection;
- **server CPU per turn**: the server process's user + system CPU over the round, per
  turn.

Rounds alternate the two servers of a pair; each figure is the median of its round, the
ratio the median of the per-round ratios, toolstream / the peer (the target is ≤ 1.10:
at most 10 % more than the framework's own endpoint), with the range of the rounds.
Every response is checked: it ends with ``[DONE]`` and holds the tool's output and both
texts.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from benchmarks._common import compare, shown
from benchmarks._processes import cpu_seconds, start_server

MODULE = "benchmarks.chat_agents_server"
#: (name, toolstream's server, the peer's server, what the peer is)
PAIRS = [
    ("pydantic-ai", "pydantic-ai", "pydantic-ai-adapter", "pydantic-ai `VercelAIAdapter`"),
    ("langgraph", "langgraph", "langgraph-handwritten", "LangGraph streamed to SSE by hand"),
]


def _post(body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: "
        + str(len(data)).encode()
        + b"\r\n\r\n"
        + data
    )


async def _one_turn(port: int) -> float:
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}
    body = {"id": f"c{uuid.uuid4().hex}", "trigger": "submit-message", "messages": [message]}
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        start = time.perf_counter()
        writer.write(_post(body))
        await writer.drain()
        received = b""
        while b"[DONE]" not in received[-64:]:
            chunk = await asyncio.wait_for(reader.read(65536), 30)
            if not chunk:
                raise RuntimeError(f"the response ended early: {received[-300:]!r}")
            received += chunk
        elapsed = time.perf_counter() - start
    finally:
        writer.close()
    if b"tool-output-available" not in received or received.count(b"t19 ") < 2:
        raise RuntimeError(f"an incomplete turn: {received[-600:]!r}")
    return elapsed


def run_once(kind: str, turns: int) -> dict[str, float]:
    """One server, ``turns`` turns one after another."""
    server, port = start_server(MODULE, kind)

    async def go() -> dict[str, float]:
        for _ in range(5):  # warm up (imports, first compiles)
            await _one_turn(port)
        cpu = cpu_seconds(server.pid)
        times = [await _one_turn(port) for _ in range(turns)]
        return {
            "turn_ms": statistics.median(times) * 1000,
            "cpu_ms": (cpu_seconds(server.pid) - cpu) / turns * 1000,
        }

    try:
        return asyncio.run(go())
    finally:
        server.kill()
        server.wait()


FIGURES = ("turn_ms", "cpu_ms")


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 5
    turns = 5 if quick else 60
    results: dict[str, Any] = {"rounds": rounds, "turns": turns}
    for name, ours, peer, _ in PAIRS:
        samples: dict[str, list[dict[str, float]]] = {ours: [], peer: []}
        for _ in range(rounds):
            for kind in (ours, peer):
                samples[kind].append(run_once(kind, turns))
        pair: dict[str, Any] = {}
        for figure in FIGURES:
            mine = [s[figure] for s in samples[ours]]
            theirs = [s[figure] for s in samples[peer]]
            pair[figure] = {
                "toolstream": statistics.median(mine),
                "peer": statistics.median(theirs),
                **compare(mine, theirs),
            }
        results[name] = pair
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "### `chat_agent` against the framework's own endpoint",
        "",
        "The same agent and fake model, served to an AI SDK client by",
        "`ChatApp(bus, chat_agent(agent))` or by the framework's own way, each server in its",
        "own process under uvicorn; a turn is 20 text deltas, a tool call, 20 text deltas,",
        "read to `[DONE]`. toolstream also publishes each event to the bus (replayable,",
        "redacted, resumable from any process); the peers stream and forget. Ratio:",
        "toolstream / the peer (target ≤ 1.10).",
        "",
        f"{results['rounds']} alternating rounds of {results['turns']} turns (medians):",
        "",
        "| framework | peer | figure | toolstream ms | peer ms | **ratio** (rounds) |",
        "|---|---|---|---:|---:|---:|",
    ]
    names = {"turn_ms": "POST → [DONE]", "cpu_ms": "server CPU per turn"}
    for name, _, _, peer in PAIRS:
        pair = results.get(name)
        if pair is None:
            continue
        for figure in FIGURES:
            row = pair[figure]
            lines.append(
                f"| {name} | {peer} | {names[figure]} | {row['toolstream']:.2f} "
                f"| {row['peer']:.2f} | {shown(row)} |"
            )
    return "\n".join(lines) + "\n"
