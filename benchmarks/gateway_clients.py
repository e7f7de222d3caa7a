"""The client process of the gateway benchmark: many raw-socket clients, one session each.

``python -m benchmarks.gateway_clients KIND PORT PID CLIENTS ROUNDS IDLE [WAIT [WARMUP]]``
opens CLIENTS connections to the server (process PID) on PORT — SSE ``GET /?session=c<k>``, or a
WebSocket subscribing to ``c<k>`` — and measures, printing one JSON object:

- the time to open them all (a response head, or ``subscribed``, received), and to open
  the second half;
- the server's memory per client (its RSS with them minus before) and its CPU while they
  are idle for IDLE seconds;
- with ``SIGUSR1`` sent, ROUNDS events to each client at one a second: every client must
  get every event, once and in order (else it exits 1, saying what went missing); after
  the first WARMUP rounds (0 by default: the steady state, once the server's first
  seconds are behind it), the latency from each event's ``ts`` to its receipt, how late
  after it was due it came, and the server's CPU per delivered event;
- with ``SIGTERM`` sent, how long until the server ended every stream (None: it had not
  after WAIT seconds, :data:`SHUTDOWN_WAIT` by default).

Asyncio protocols, parsing only what it must, so that one process keeps up with 10,000
clients at 10,000 events a second.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._processes import cpu_seconds
from benchmarks.gateway_server import raise_fd_limit

#: Connections being opened at once.
CONCURRENCY = 256
#: Seconds allowed for a shutdown to end every stream.
SHUTDOWN_WAIT = 10.0
#: A progress event's ts and message ("<round> <due>"), in the order both servers write
#: (a chat's AI SDK part has no ts: its latency is counted from when it was due).
PROGRESS = re.compile(rb'(?:"ts":([0-9.e+]+),[^\n]*?)?"message":"(\d+) ([0-9.]+)"')


def rss_bytes(pid: int) -> int:
    """A process's resident memory (Linux)."""
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def masked(opcode: int, payload: bytes) -> bytes:
    """One client frame (clients mask what they send; payloads under 126 bytes)."""
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + body


class Run:
    """What every client of a run shares: counters and the samples."""

    def __init__(self, clients: int, rounds: int, warmup: int = 0) -> None:
        self.clients = clients
        self.rounds = rounds
        self.warmup = warmup
        self.latencies: list[float] = []
        self.lateness: list[float] = []
        self.errors: list[str] = []
        self.complete = 0  # clients that got every event
        self.all_complete = asyncio.Event()
        self.open = 0
        self.all_closed = asyncio.Event()

    def got(self, client: Client, ts: float, round_: int, due: float, now: float) -> None:
        if round_ != client.next_round and len(self.errors) < 20:
            self.errors.append(f"c{client.k}: round {round_} came when {client.next_round} was due")
        client.next_round = round_ + 1
        if round_ >= self.warmup:
            self.latencies.append(now - ts)
            self.lateness.append(now - due)
        if client.next_round == self.rounds:
            self.complete += 1
            if self.complete == self.clients:
                self.all_complete.set()


class Client(asyncio.Protocol):
    """One raw connection: SSE, or a WebSocket."""

    def __init__(self, run: Run, k: int, ws: bool, chat: bool = False) -> None:
        self.run = run
        self.k = k
        self.ws = ws
        self.chat = chat
        self.buf = b""
        self.head = False
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.next_round = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.run.open += 1
        if self.ws:
            key = base64.b64encode(os.urandom(16)).decode()
            request = (
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            )
        elif self.chat:  # a chat's resume (useChat's resume: true)
            request = f"GET /c{self.k}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        else:
            request = f"GET /?session=c{self.k} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        transport.write(request.encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.run.open -= 1
        if not self.opened.done():
            self.opened.set_exception(ConnectionError(f"c{self.k} closed before it opened"))
        if self.run.open == 0:
            self.run.all_closed.set()

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if not self.head:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = self.buf[:12]
            data, self.buf = self.buf[end + 4 :], b""
            self.head = True
            if status != (b"HTTP/1.1 101" if self.ws else b"HTTP/1.1 200"):
                self.opened.set_exception(ConnectionError(f"c{self.k}: {status!r}"))
                return
            if self.ws:
                subscribe = json.dumps({"op": "subscribe", "session": f"c{self.k}"}).encode()
                assert self.transport is not None
                self.transport.write(masked(0x1, subscribe))
            else:
                self.opened.set_result(None)
            if not data:
                return
        if self.ws:
            self.frames(data, now)
            return
        buf = self.buf + data
        end = buf.rfind(b"\n\n")
        if end < 0:
            self.buf = buf
            return
        complete, self.buf = buf[:end], buf[end + 2 :]
        for match in PROGRESS.finditer(complete):
            ts, round_, due = match.groups()
            self.run.got(self, float(ts or due), int(round_), float(due), now)

    def frames(self, data: bytes, now: float) -> None:
        buf = self.buf + data
        at = 0
        size = len(buf)
        transport = self.transport
        assert transport is not None
        while size - at >= 2:
            first, second = buf[at], buf[at + 1]
            n = second & 0x7F
            head = 2
            if n == 126:
                if size - at < 4:
                    break
                (n,) = struct.unpack_from("!H", buf, at + 2)
                head = 4
            elif n == 127:
                if size - at < 10:
                    break
                (n,) = struct.unpack_from("!Q", buf, at + 2)
                head = 10
            if size - at < head + n:
                break
            payload = buf[at + head : at + head + n]
            at += head + n
            opcode = first & 0x0F
            if opcode == 0x9:  # a protocol ping: pong
                transport.write(masked(0xA, payload))
            elif opcode == 0x1:
                match = PROGRESS.search(payload)
                if match is not None:
                    ts, round_, due = match.groups()
                    self.run.got(self, float(ts), int(round_), float(due), now)
                elif b'"op":"ping"' in payload:
                    transport.write(masked(0x1, b'{"op":"pong"}'))
                elif b'"op":"subscribed"' in payload and not self.opened.done():
                    self.opened.set_result(None)
        self.buf = buf[at:]


class Profile:
    """With ``GATEWAY_PROFILE=<dir>`` in the environment, py-spy samples the server in
    each phase (``<dir>/<kind>-<phase>.txt``, collapsed stacks): for finding what costs."""

    def __init__(self, kind: str, pid: int) -> None:
        self.kind = kind
        self.pid = pid
        self.where = os.environ.get("GATEWAY_PROFILE")
        self.spy: Any = None

    def start(self, phase: str) -> None:
        self.stop()
        if self.where:
            import subprocess

            out = f"{self.where}/{self.kind}-{phase}.txt"
            command = ["py-spy", "record", "--format", "raw", "-r", "100", "-o", out]
            self.spy = subprocess.Popen(
                [*command, "-p", str(self.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.3)  # attached

    def stop(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            self.spy.wait()
            self.spy = None


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def measure(
    kind: str,
    port: int,
    pid: int,
    clients: int,
    rounds: int,
    idle: float,
    shutdown_wait: float = SHUTDOWN_WAIT,
    warmup: int = 0,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    run = Run(clients, rounds, warmup)
    ws = kind.endswith("_ws")
    chat = kind.endswith("_chat")
    gate = asyncio.Semaphore(CONCURRENCY)
    opened_at: list[float] = []
    conns: list[Client] = []

    async def open_one(k: int) -> None:
        async with gate:
            _, client = await loop.create_connection(
                lambda: Client(run, k, ws, chat), "127.0.0.1", port
            )
            conns.append(client)
            await client.opened
            opened_at.append(time.perf_counter())

    profile = Profile(kind, pid)
    profile.start("open")
    rss_before = rss_bytes(pid)
    open_cpu = cpu_seconds(pid)
    start = time.perf_counter()
    await asyncio.gather(*(open_one(k) for k in range(clients)))
    opened_at.sort()
    open_cpu = cpu_seconds(pid) - open_cpu
    open_s = opened_at[-1] - start
    second_half_s = opened_at[-1] - opened_at[clients // 2 - 1] if clients > 1 else open_s

    await asyncio.sleep(2.0 if clients >= 1000 else 0.5)  # settled
    rss_held = rss_bytes(pid)
    profile.start("idle")
    cpu = cpu_seconds(pid)
    await asyncio.sleep(idle)
    idle_cpu = (cpu_seconds(pid) - cpu) / idle

    profile.start("publish")
    os.kill(pid, signal.SIGUSR1)
    if warmup:  # its rounds are due one a second from the signal (and 50 ms)
        await asyncio.sleep(warmup + 0.05)
    cpu = cpu_seconds(pid)
    own = time.process_time()
    began = time.perf_counter()
    try:
        await asyncio.wait_for(run.all_complete.wait(), rounds + 60)
    except TimeoutError:
        pass
    publish_s = time.perf_counter() - began
    busy_cpu = cpu_seconds(pid) - cpu
    own = time.process_time() - own
    profile.start("shutdown")
    delivered = len(run.latencies)
    missing = [c.k for c in conns if c.next_round != rounds]
    if missing or run.errors:
        sys.stderr.write(
            f"{kind}: {len(missing)} of {clients} clients did not get every event "
            f"({delivered} of {clients * (rounds - warmup)} measured delivered); first: "
            f"{[f'c{k}: {conns_next(conns, k)}' for k in missing[:5]]}; {run.errors[:5]}\n"
        )
        raise SystemExit(1)

    os.kill(pid, signal.SIGTERM)
    stopping = time.perf_counter()
    shutdown_s: float | None
    try:
        await asyncio.wait_for(run.all_closed.wait(), shutdown_wait)
        shutdown_s = time.perf_counter() - stopping
    except TimeoutError:
        shutdown_s = None
    still_open = run.open
    profile.stop()
    for client in conns:
        if client.transport is not None:
            client.transport.abort()

    late = run.lateness
    return {
        "clients": clients,
        "rounds": rounds,
        "warmup": warmup,
        "open_s": open_s,
        "open_second_half_s": second_half_s,
        "opens_per_s": clients / open_s,
        "open_cpu_us_per_client": open_cpu / clients * 1e6,
        "rss_held_mib": rss_held / 2**20,
        "memory_per_client_kib": (rss_held - rss_before) / clients / 1024,
        "idle_cpu_pct": idle_cpu * 100,
        "delivered": delivered,
        "events_per_s": delivered / publish_s,
        "cpu_us_per_event": busy_cpu / delivered * 1e6,
        "busy_cpu_pct": busy_cpu / publish_s * 100,
        "client_cpu_pct": own / publish_s * 100,
        "p50_ms": quantile(run.latencies, 0.5) * 1000,
        "p99_ms": quantile(run.latencies, 0.99) * 1000,
        "late_p50_ms": quantile(late, 0.5) * 1000,
        "late_p99_ms": quantile(late, 0.99) * 1000,
        "on_time_pct": sum(1 for x in late if x <= 0.1) / len(late) * 100,
        "shutdown_s": shutdown_s,
        "open_after_shutdown": still_open,
    }


def conns_next(conns: list[Client], k: int) -> str:
    client = next(c for c in conns if c.k == k)
    return f"got {client.next_round} rounds"


if __name__ == "__main__":
    raise_fd_limit()
    kind, port, pid, clients, rounds, idle = sys.argv[1:7]
    wait = float(sys.argv[7]) if len(sys.argv) > 7 else SHUTDOWN_WAIT
    warmup = int(sys.argv[8]) if len(sys.argv) > 8 else 0
    result = asyncio.run(
        measure(kind, int(port), int(pid), int(clients), int(rounds), float(idle), wait, warmup)
    )
    print(json.dumps(result))
