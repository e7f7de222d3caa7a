"""Clients that misbehave: what a client that stops reading costs the server, and what one
that floods costs the other clients.

- Memory per stalled client: N raw clients (SSE, and WebSocket) that stop reading while
  their sessions get 10 KB events, against N that read, under uvicorn in this process
  (tracemalloc: bytes Python allocated and still holds). Measured while their writes are
  stuck, and again after the write deadline ended their streams; the server's own write
  buffers (what it had taken to write before the client stopped) are counted apart.
- Others' latency under one flooder: 20 WebSocket clients of a session that gets an event
  every 2 ms, and a plain HTTP request every 20 ms, with no flooder against one that
  offers 50,000 messages a second (and reconnects whenever it is closed), with the
  default inbound budget and with none (what fairness alone does). The server and the
  flooder are processes of their own; rounds alternate.
"""

from __future__ import annotations

import asyncio
import gc
import json
import selectors
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from typing import Any

import toolstream as ts
from benchmarks._common import ratio_of
from benchmarks._processes import ROOT, start_server
from tests import raw_clients as raw
from tests.servers import Served, serve, settles
from toolstream.sse import SSEApp
from toolstream.websocket import WebSocketApp

#: Seconds a write may take in the memory runs: long enough to measure a stall first.
WRITE_TIMEOUT = 8.0
#: The same in a quick run, whose publishing is short.
QUICK_WRITE_TIMEOUT = 1.0
#: The servers' socket send buffer in the memory runs (a modest WAN-like one, fixed), so a
#: client that stops reading stops the server's writes after little data.
SNDBUF = 64 * 1024


# -- memory per stalled client ----------------------------------------------------------


class Drainer(threading.Thread):
    """Reads every socket given to it, to the end (the clients that read)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.selector = selectors.DefaultSelector()
        self.running = True

    def add(self, sock: Any) -> None:
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)

    def run(self) -> None:
        while self.running:
            for key, _ in self.selector.select(0.05):
                try:
                    if not key.fileobj.recv(65536):  # type: ignore[union-attr]
                        self.selector.unregister(key.fileobj)
                except BlockingIOError:
                    pass


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _write_buffers(served: Served) -> int:
    """Bytes uvicorn's transports hold, waiting to be written."""
    total = 0
    for connection in list(served.server.server_state.connections):
        transport = getattr(connection, "transport", None)
        if transport is not None:
            total += transport.get_write_buffer_size()
    return total


def memory_run(
    transport: str, clients: int, stalled: bool, rounds: int, write_timeout: float = WRITE_TIMEOUT
) -> dict[str, float]:
    """Bytes held per client by ``clients`` that read, or that stopped reading: what the
    process held with them minus what it holds once they have gone (the bus's replay
    windows stay, and are not theirs)."""
    bus = ts.EventBus(replay=10_000)
    if transport == "sse":
        app: Any = SSEApp(bus, write_timeout=write_timeout)
        ws = "none"
    else:
        app = WebSocketApp(bus, write_timeout=write_timeout, ping_interval=600)
        ws = "websockets-sansio"
    drainer = Drainer()
    drainer.start()
    tracemalloc.start()
    try:
        # critical: uvicorn logs an error for each response the deadline left unfinished.
        with serve(app, ws=ws, sndbuf=SNDBUF, log_level="critical") as served:
            state = served.server.server_state
            socks = []
            for k in range(clients):
                # ai_sdk: frames no other client shares, so what is measured is each
                # client's own (native frames go through a cache shared by all).
                if transport == "sse":
                    sock = raw.sse_open(served.port, f"session=m{k}&dialect=ai_sdk")
                else:
                    sock = raw.ws_open(served.port)
                    subscribe = {"op": "subscribe", "session": f"m{k}", "dialect": "ai_sdk"}
                    sock.sendall(raw.ws_text(json.dumps(subscribe)))
                socks.append(sock)
                if not stalled:
                    drainer.add(sock)
            settles(lambda: bus.subscriber_count() == clients)
            # Output text: what the bus keeps of it is the events (a session's state keeps
            # a call's last 32 KiB), so what clients hold is what is measured.
            calls = [ts.Tracker(bus, f"m{k}").create("t") for k in range(clients)]
            for call in calls:
                call.start()
            for i in range(rounds):  # paced: the streams keep up until their writes block
                for call in calls:
                    call.output_delta(f"{i:06d}" + "x" * 10_000)
                time.sleep(0.005)
            time.sleep(0.3)
            during = _traced()
            after = buffers = 0.0
            if stalled:
                settles(lambda: not state.tasks, within=4 * write_timeout + 10)
                after = _traced()
                buffers = _write_buffers(served)
            for sock in socks:
                sock.close()
            settles(lambda: not state.tasks and not state.connections)
            # One more event: a bus may trim what departed subscribers held on publishing.
            bus.publish(ts.ToolProgress, session="tick", call_id="c", tool="t")
            gone = _traced()
    finally:
        tracemalloc.stop()
        drainer.running = False
        drainer.join()
        bus.close()
    return {
        "held_per_client": (during - gone) / clients,
        "after_deadline_per_client": (after - gone) / clients if stalled else 0.0,
        "server_buffers_per_client": buffers / clients,
    }


# -- others' latency under one flooder ------------------------------------------------------

SCENARIOS = ("none", "flooder", "flooder_no_budget")
FLOOD_RATE = 50_000


async def _measure(port: int, seconds: float, clients: int) -> tuple[list[float], list[float]]:
    """Publish-to-receive latencies of ``clients`` subscribers, and round trips of plain
    HTTP requests, over ``seconds`` (ms)."""
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    trips: list[float] = []
    stop = time.monotonic() + seconds

    async def subscriber() -> None:
        async with connect(f"ws://127.0.0.1:{port}/", ping_interval=None, max_size=None) as ws:
            await ws.send(json.dumps({"op": "subscribe", "session": "bench"}))
            async for message in ws:
                data = json.loads(message)
                if data.get("op") == "event" and data["data"]["type"] == "tool.progress":
                    latencies.append((time.time() - data["data"]["ts"]) * 1000)
                if time.monotonic() > stop:
                    return

    async def prober() -> None:
        while time.monotonic() < stop:
            start = time.perf_counter()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            await reader.read()
            writer.close()
            trips.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.02)

    await asyncio.gather(*(subscriber() for _ in range(clients)), prober())
    return latencies, trips


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else float("nan")


def flood_run(scenario: str, seconds: float, clients: int) -> dict[str, float]:
    kind = "unlimited" if scenario == "flooder_no_budget" else "budget"
    server, port = start_server("benchmarks.misbehaving_server", kind)
    flooder = None
    try:
        if scenario != "none":
            flooder = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "benchmarks.misbehaving_server", "flood"),
                    *(str(port), str(FLOOD_RATE)),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)  # the flood is under way
        latencies, trips = asyncio.run(_measure(port, seconds, clients))
    finally:
        if flooder is not None:
            flooder.kill()
            flooder.wait()
        server.kill()
        server.wait()
    return {
        "event_p50_ms": statistics.median(latencies),
        "event_p99_ms": p99(latencies),
        "http_p99_ms": p99(trips),
        "events": len(latencies),
    }


# -- running ------------------------------------------------------------------------------


def run(*, quick: bool = False) -> dict[str, Any]:
    clients = 3 if quick else 20
    rounds = 40 if quick else 200  # 0.4 / 2 MB a client: more than the socket buffers hold
    memory: dict[str, Any] = {}
    timeout = QUICK_WRITE_TIMEOUT if quick else WRITE_TIMEOUT
    for transport in ("sse", "websocket"):
        reading = memory_run(transport, clients, False, rounds, timeout)
        stalled = memory_run(transport, clients, True, rounds, timeout)
        memory[transport] = {
            "clients": clients,
            "reading_kib": reading["held_per_client"] / 1024,
            "stalled_kib": stalled["held_per_client"] / 1024,
            "after_deadline_kib": stalled["after_deadline_per_client"] / 1024,
            "server_buffers_kib": stalled["server_buffers_per_client"] / 1024,
            "stalled_ratio": ratio_of(stalled["held_per_client"], reading["held_per_client"]),
            "after_ratio": ratio_of(
                stalled["after_deadline_per_client"], reading["held_per_client"]
            ),
        }
    seconds = 1.0 if quick else 3.0
    subscribers = 3 if quick else 20
    samples: dict[str, list[dict[str, float]]] = {k: [] for k in SCENARIOS}
    for _ in range(1 if quick else 3):
        for scenario in SCENARIOS:
            samples[scenario].append(flood_run(scenario, seconds, subscribers))
    flood: dict[str, Any] = {"subscribers": subscribers, "offered_per_s": FLOOD_RATE}
    for scenario in SCENARIOS:
        for key in ("event_p50_ms", "event_p99_ms", "http_p99_ms"):
            flood[f"{scenario}_{key}"] = statistics.median(s[key] for s in samples[scenario])
    for scenario in SCENARIOS[1:]:
        for key in ("event_p99_ms", "http_p99_ms"):
            flood[f"{scenario}_{key}_ratio"] = ratio_of(
                flood[f"{scenario}_{key}"], flood[f"none_{key}"]
            )
    return {"memory": memory, "flood": flood}


def report(results: dict[str, Any]) -> str:
    memory, flood = results["memory"], results["flood"]
    lines = [
        "### Clients that misbehave",
        "",
        "**Memory per stalled client.** Raw clients that stop reading while their sessions "
        "get 2 MB of output text each (10 KB deltas), against as many that read (uvicorn "
        "in the benchmark's process, "
        f"a {SNDBUF // 1024} KiB socket send buffer; tracemalloc: what the process held "
        "with the clients minus what it holds once they have gone). *Stalled*: while their "
        "writes wait; *after the deadline*: once `write_timeout` ended their streams, while "
        "they still read nothing — what is left is mostly the server's own write buffers "
        "(what it had taken to write before the client stopped), which ASGI cannot drop.",
        "",
        "| transport | clients | reading KiB/client | stalled KiB/client | **stalled vs "
        "reading** | after the deadline KiB/client | of which the server's buffers "
        "| **after vs reading** |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for transport, row in memory.items():
        lines.append(
            f"| {transport} | {row['clients']} | {row['reading_kib']:,.0f} "
            f"| {row['stalled_kib']:,.0f} | **{row['stalled_ratio']:.2f}×** "
            f"| {row['after_deadline_kib']:,.0f} | {row['server_buffers_kib']:,.0f} "
            f"| **{row['after_ratio']:.2f}×** |"
        )
    lines += [
        "",
        f"**Others' latency under one flooder.** {flood['subscribers']} WebSocket clients of "
        "a session that gets an event every 2 ms, and a plain HTTP request every 20 ms; "
        f"one more client offers {flood['offered_per_s']:,} messages a second (and "
        "reconnects whenever it is closed). Medians of the rounds' p99; ratios against no "
        "flooder.",
        "",
        "| | event p50 ms | **event p99 ms** | event p99 vs none | HTTP p99 ms "
        "| HTTP p99 vs none |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = {
        "none": "no flooder",
        "flooder": "one flooder (default inbound budget)",
        "flooder_no_budget": "one flooder, no inbound budget (fairness alone)",
    }
    for scenario in SCENARIOS:
        ratio = "" if scenario == "none" else f"{flood[f'{scenario}_event_p99_ms_ratio']:.2f}×"
        http = "" if scenario == "none" else f"{flood[f'{scenario}_http_p99_ms_ratio']:.2f}×"
        lines.append(
            f"| {names[scenario]} | {flood[f'{scenario}_event_p50_ms']:.1f} "
            f"| **{flood[f'{scenario}_event_p99_ms']:.1f}** | {ratio} "
            f"| {flood[f'{scenario}_http_p99_ms']:.1f} | {http} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
