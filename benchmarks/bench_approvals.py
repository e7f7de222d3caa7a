"""The approval round trip: from a person's decision (an HTTP POST) to the tool's
``tool.started`` reaching an SSE client.

The client here reads the session's SSE stream (raw bytes on one connection) and, for each
``tool.approval.requested``, POSTs an approval on a second, kept-alive connection and
times until the call's ``tool.started`` arrives on the stream. The agent waits in-process
for each decision (``tracker.call(..., approval=True)``), one call after the other.

- ``EventBus``: the gateway and the agent in one process (one loop).
- ``RedisBus``: the agent in one process, the gateway (stream and decisions) in another,
  one Redis between them: the decision goes through Redis to the agent, whose
  ``tool.started`` comes back through Redis to the gateway.

No peer ships this round trip as a component to measure against; the targets are
absolute (p99 ≤ 5 ms on EventBus, ≤ 15 ms across processes on RedisBus).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._processes import start_server

MODULE = "benchmarks.approval_procs"


async def _round_trips(port: int, rounds: int, go: int | None = None) -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"GET /?session=bench HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    )
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    post_reader, post_writer = await asyncio.open_connection("127.0.0.1", port)
    if go is not None:
        await asyncio.sleep(0.2)  # the gateway's subscription is in place
        socket.create_connection(("127.0.0.1", go)).close()
    latencies: list[float] = []
    sent: dict[str, float] = {}
    buffer = b""

    async def decide(approval_id: str) -> None:
        body = json.dumps({"approval_id": approval_id, "approved": True}).encode()
        post_writer.write(
            b"POST /?session=bench HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        await post_writer.drain()
        head = await post_reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await post_reader.readexactly(length)

    pending: set[asyncio.Task[None]] = set()
    while len(latencies) < rounds:
        chunk = await asyncio.wait_for(reader.read(65536), 30)
        if not chunk:
            break
        buffer += chunk
        *frames, buffer = buffer.split(b"\n\n")
        for frame in frames:
            for line in frame.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                if b'"tool.approval.requested"' in line:
                    event = json.loads(line[5:])
                    sent[event["call_id"]] = time.perf_counter()
                    task = asyncio.create_task(decide(event["approval_id"]))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                elif b'"tool.started"' in line:
                    now = time.perf_counter()
                    event = json.loads(line[5:])
                    latencies.append(now - sent.pop(event["call_id"]))
    writer.close()
    post_writer.close()
    if len(latencies) != rounds:
        raise AssertionError(f"{len(latencies)} of {rounds} round trips completed")
    return latencies


def _summary(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)
    return {
        "rounds": len(latencies),
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def _eventbus(rounds: int) -> dict[str, float]:
    server, port = start_server(MODULE, "eventbus", str(rounds))
    try:
        return _summary(asyncio.run(_round_trips(port, rounds)))
    finally:
        server.kill()
        server.wait()


def _redis(rounds: int) -> dict[str, Any]:
    from tests.redis_server import RedisServer

    if shutil.which("redis-server") is None:
        return {"skipped": "redis-server not installed"}
    directory = Path(tempfile.mkdtemp(prefix="toolstream-bench-approvals-"))
    redis = RedisServer(directory)
    redis.start(persist=False)
    prefix = f"a{uuid.uuid4().hex[:8]}"
    procs = []
    try:
        gateway, gport = start_server(MODULE, "redis-gateway", redis.url, prefix)
        procs.append(gateway)
        agent, aport = start_server(MODULE, "redis-agent", redis.url, prefix, str(rounds))
        procs.append(agent)
        return _summary(asyncio.run(_round_trips(gport, rounds, go=aport)))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        redis.stop()
        shutil.rmtree(directory, ignore_errors=True)


def run(*, quick: bool = False) -> dict[str, Any]:
    """Measure both buses."""
    rounds = 30 if quick else 500
    return {"eventbus": _eventbus(rounds), "redis": _redis(rounds)}


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    rows = []
    for key, name, target in (
        ("eventbus", "`EventBus` (one process)", 5.0),
        ("redis", "`RedisBus` (agent and gateway in two processes)", 15.0),
    ):
        r = results[key]
        if "skipped" in r:
            rows.append(f"| {name} | skipped: {r['skipped']} | | |")
            continue
        verdict = "met" if r["p99_ms"] <= target else "**missed**"
        p50, p99 = f"{r['p50_ms']:.2f} ms", f"{r['p99_ms']:.2f} ms"
        rows.append(f"| {name} | {p50} | {p99} | ≤ {target:g} ms ({verdict}) |")
    return "\n".join(
        [
            "### Approval round trip",
            "",
            "From a person's decision (POST on the SSE endpoint) to the tool's "
            f"`tool.started` reaching an SSE client, {results['eventbus'].get('rounds', 0)} "
            "calls one after the other, each waiting in the agent for its decision. No peer "
            "ships this round trip to compare with: the targets are absolute.",
            "",
            "| bus | p50 | p99 | target (p99) |",
            "|---|---:|---:|---|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
