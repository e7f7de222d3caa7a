"""What a resume and a gateway failover cost, on each broker bus (Redis, NATS, PostgreSQL).

- **Resume against backlog**: a gateway process serves SSE from the broker. A client
  reads a session's state, leaves, misses K events (1,000, then 10,000), and comes back
  with ``Last-Event-ID``: the time until it has all K, and the gateway's CPU for them,
  per 1,000 missed events — beside the same K events delivered live to a client that
  stayed (same gateway, same round; rounds alternate). Every event must arrive exactly
  once, in order, with no reset.
- **Failover**: two gateway processes on one broker; M clients on the first, a publisher
  process at a steady rate. The first gateway is killed (SIGKILL); each client
  reconnects to the second with its ``Last-Event-ID``. Per client: from the kill to its
  first event again, and to the first event published after the kill; every event of
  the run must arrive exactly once, in order, with no reset. No baseline exists: a
  hand-rolled SSE server has no ``Last-Event-ID`` to resume from (its clients lose what
  was published while they reconnected).

``make bench`` writes these rows into the scale sheet of docs/scaling.md (between
``<!-- failover:start -->`` and ``<!-- failover:end -->``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import write_between
from benchmarks._processes import cpu_seconds, start_server
from benchmarks.broker_procs import open_bus

SHEET_START = "<!-- failover:start -->"
SHEET_END = "<!-- failover:end -->"
BROKERS = ("redis", "nats", "postgres")
NAMES = {"redis": "RedisBus", "nats": "NatsBus", "postgres": "PostgresBus"}
#: Events kept per session for resuming (the default is 1,000: a client further behind
#: gets a reset, the session's state, instead of what it missed).
REPLAY = 20_000


class Frames:
    """One SSE client on raw sockets: its frames as (event, id, data)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buffer = b""

    @classmethod
    async def open(cls, port: int, session: str, last_id: str | None = None) -> Frames:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        resume = f"Last-Event-ID: {last_id}\r\n" if last_id else ""
        writer.write(
            f"GET /?session={session} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Accept: text/event-stream\r\n{resume}\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise AssertionError(f"the gateway refused the stream: {head[:80]!r}")
        return cls(reader, writer)

    async def frames(self) -> list[tuple[str, str | None, Any]]:
        """The frames that arrive next (at least one); EOFError when the server is gone."""
        while True:
            chunk = await asyncio.wait_for(self.reader.read(262144), 60)
            if not chunk:
                raise EOFError
            self.buffer += chunk
            *raw, self.buffer = self.buffer.split(b"\n\n")
            out = []
            for frame in raw:
                event, eid, data = "message", None, None
                for line in frame.split(b"\n"):
                    if line.startswith(b"event:"):
                        event = line[6:].strip().decode()
                    elif line.startswith(b"id:"):
                        eid = line[3:].strip().decode()
                    elif line.startswith(b"data:"):
                        data = json.loads(line[5:])
                if data is not None:
                    out.append((event, eid, data))
            if out:
                return out

    def close(self) -> None:
        self.writer.close()


class Received:
    """What one client got: the progress fractions in order, the last id, resets."""

    def __init__(self) -> None:
        self.fractions: list[float] = []
        self.last_id: str | None = None
        self.resets = 0
        self.completed = False

    def take(self, frames: list[tuple[str, str | None, Any]], *, resumed: bool) -> None:
        for event, eid, data in frames:
            if eid:
                self.last_id = eid
            kind = data.get("type", event) if isinstance(data, dict) else event
            if kind == "stream.reset" and resumed:
                self.resets += 1
            elif kind == "tool.progress":
                self.fractions.append(float(data["fraction"]))
            elif kind == "tool.completed":
                self.completed = True

    def check(self, events: int, who: str) -> None:
        want = [i / events for i in range(events)]
        if self.fractions != want:
            missing = len(set(want) - set(self.fractions))
            doubled = len(self.fractions) - len(set(self.fractions))
            raise AssertionError(
                f"{who}: {len(self.fractions)} of {events} events, {missing} missing, "
                f"{doubled} doubled, or out of order"
            )
        if self.resets:
            raise AssertionError(f"{who}: {self.resets} resets on resume")


async def _publish(url: str, prefix: str, session: str, events: int | None) -> None:
    """A started call on ``session`` (``events=None``), or ``events`` progress reports
    of it; flushed to the broker."""
    # PostgresBus keeps history by time (a week by default), not by count.
    kept = {} if url.startswith("postgresql://") else {"replay": REPLAY}
    async with open_bus(url, prefix, **kept) as bus:
        import toolstream as ts

        tracker = ts.Tracker(bus, session=session)
        if events is None:
            tracker.create("bench", call_id="state").start()
        else:
            call = tracker.create("bench", call_id="backlog")
            call.start()
            for i in range(events):
                call.progress(i / events, message="step")
        await bus.flush(timeout=120)


async def _read_until(client: Frames, got: Received, events: int, *, resumed: bool) -> None:
    while len(got.fractions) < events:
        got.take(await client.frames(), resumed=resumed)


async def _with_state(url: str, prefix: str, port: int, session: str) -> tuple[Frames, Received]:
    """A client of a new ``session`` (a started call), once it has read its state."""
    await _publish(url, prefix, session, None)
    client = await Frames.open(port, session)
    got = Received()
    while got.last_id is None:
        got.take(await client.frames(), resumed=False)
    return client, got


async def _resume_round(
    url: str, prefix: str, port: int, pid: int, backlog: int, tag: str
) -> dict[str, float]:
    """One round: a resume of ``backlog`` missed events, then the same delivered live."""
    out: dict[str, float] = {}
    # Resumed: read the state, leave, miss the backlog, come back.
    session = f"r{tag}"
    client, got = await _with_state(url, prefix, port, session)
    client.close()
    await _publish(url, prefix, session, backlog)
    cpu, start = cpu_seconds(pid), time.perf_counter()
    client = await Frames.open(port, session, got.last_id)
    await _read_until(client, got, backlog, resumed=True)
    out["resume_s"] = time.perf_counter() - start
    out["resume_cpu_s"] = cpu_seconds(pid) - cpu
    client.close()
    got.check(backlog, "resumed client")
    # Live: a client that stays while the same events are published.
    session = f"l{tag}"
    client, live = await _with_state(url, prefix, port, session)
    cpu, start = cpu_seconds(pid), time.perf_counter()
    publishing = asyncio.ensure_future(_publish(url, prefix, session, backlog))
    await _read_until(client, live, backlog, resumed=False)
    await publishing
    out["live_s"] = time.perf_counter() - start
    out["live_cpu_s"] = cpu_seconds(pid) - cpu
    client.close()
    live.check(backlog, "live client")
    return out


def resume_cost(url: str, backlogs: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Per backlog: ms and gateway CPU ms per 1,000 missed events, resumed and live."""
    prefix = f"f{uuid.uuid4().hex[:8]}"
    gateway, port = start_server("benchmarks.broker_procs", "gateway", url, prefix)
    rows: dict[str, Any] = {}
    try:
        for backlog in backlogs:
            samples: dict[str, list[float]] = {}
            for r in range(rounds):
                one = asyncio.run(
                    _resume_round(url, prefix, port, gateway.pid, backlog, f"{backlog}x{r}")
                )
                for key, value in one.items():
                    samples.setdefault(key, []).append(value * 1_000_000 / backlog)
            per = {f"{k}_ms_per_1000": statistics.median(v) for k, v in samples.items()}
            ratios = [
                a / b
                for a, b in zip(samples["resume_cpu_s"], samples["live_cpu_s"], strict=True)
                if b
            ]
            per["cpu_ratio"] = statistics.median(ratios) if ratios else float("nan")
            rows[str(backlog)] = per
    finally:
        gateway.kill()
        gateway.wait()
    return rows


async def _failover_run(
    url: str, prefix: str, clients: int, events: int, rate: float, kill_after: float
) -> dict[str, Any]:
    first, first_port = start_server("benchmarks.broker_procs", "gateway", url, prefix)
    second, second_port = start_server("benchmarks.broker_procs", "gateway", url, prefix)
    publisher, go_port = start_server(
        "benchmarks.broker_procs", "publisher", url, prefix, str(events), str(rate)
    )
    killed = asyncio.get_running_loop().create_future()
    back: list[float] = []
    recovered: list[float] = []

    opened: list[int] = []
    everyone = asyncio.Event()

    async def client(k: int) -> Received:
        got = Received()
        conn = await Frames.open(first_port, "bench")
        opened.append(k)
        if len(opened) == clients:
            everyone.set()
        try:
            while not got.completed:
                got.take(await conn.frames(), resumed=False)
        except (EOFError, ConnectionError):
            conn.close()
            if not killed.done():
                raise AssertionError(
                    f"client {k}: the stream ended before the kill (cut as too slow?)"
                ) from None
        else:
            return got  # the run ended before the kill (a run too short)
        at = await killed
        conn = await Frames.open(second_port, "bench", got.last_id)
        first_back = True
        while not got.completed:
            frames = await conn.frames()
            now = time.time()
            before = len(got.fractions)
            got.take(frames, resumed=True)
            if first_back and (len(got.fractions) > before or got.completed):
                back.append(now - at)
                first_back = False
            for _, _, data in frames:
                if isinstance(data, dict) and data.get("ts", 0) >= at:
                    recovered.append(now - at)
                    break
            else:
                continue
            break
        while not got.completed:
            got.take(await conn.frames(), resumed=True)
        conn.close()
        return got

    try:
        tasks = [asyncio.ensure_future(client(k)) for k in range(clients)]
        await asyncio.wait_for(everyone.wait(), 120)
        await asyncio.sleep(0.5)  # every subscription in place
        socket.create_connection(("127.0.0.1", go_port)).close()  # go
        await asyncio.sleep(kill_after)
        first.kill()
        killed.set_result(time.time())
        got = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    finally:
        for proc in (first, second, publisher):
            proc.kill()
            proc.wait()
    for k, one in enumerate(got):
        one.check(events, f"client {k}")
    if len(back) != clients or len(recovered) != clients:
        raise AssertionError(f"{len(back)} of {clients} clients came back")
    back.sort()
    recovered.sort()

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(len(values) * q))] * 1000

    return {
        "back_p50_ms": pct(back, 0.5),
        "back_p99_ms": pct(back, 0.99),
        "recovered_p50_ms": pct(recovered, 0.5),
        "recovered_p99_ms": pct(recovered, 0.99),
    }


def failover(url: str, clients: int, events: int, rate: float, rounds: int) -> dict[str, Any]:
    """Medians over ``rounds`` runs of :func:`_failover_run`."""
    runs = [
        asyncio.run(
            _failover_run(url, f"g{uuid.uuid4().hex[:8]}", clients, events, rate, events / rate / 3)
        )
        for _ in range(rounds)
    ]
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out.update(clients=clients, rate=rate, events=events)
    return out


def _server(kind: str, directory: Path) -> Any:
    """A server of ``kind`` of its own (not started), or None when it is not installed."""
    if kind == "redis":
        from tests.redis_server import RedisServer

        return None if shutil.which("redis-server") is None else RedisServer(directory)
    if kind == "nats":
        from tests.nats_server import NATS_SERVER, NatsServer

        return None if NATS_SERVER is None else NatsServer(directory)
    from tests.postgres_server import INITDB, POSTGRES, PostgresServer

    return None if INITDB is None or POSTGRES is None else PostgresServer(directory)


@contextmanager
def _broker(kind: str, directory: Path) -> Iterator[str | None]:
    """A server of ``kind`` of its own, running (its URL), or None when not installed."""
    server = _server(kind, directory)
    if server is None:
        yield None
        return
    server.start(**({"persist": False} if kind == "redis" else {}))
    try:
        yield str(server.url)
    finally:
        server.stop()


def run(*, quick: bool = False, brokers: tuple[str, ...] = BROKERS) -> dict[str, Any]:
    """Resume and failover on each of ``brokers`` whose server is installed."""
    backlogs = (200,) if quick else (1_000, 10_000)
    rounds = 1 if quick else 3
    # clients x rate deliveries a second: a fifth of this machine's core for a gateway
    clients, events, rate = (10, 300, 100.0) if quick else (100, 600, 60.0)
    results: dict[str, Any] = {"rounds": rounds}
    for kind in brokers:
        directory = Path(tempfile.mkdtemp(prefix=f"toolstream-bench-failover-{kind}-"))
        try:
            with _broker(kind, directory) as url:
                if url is None:
                    results[kind] = {"skipped": f"{kind} server not installed"}
                    continue
                results[kind] = {
                    "resume": resume_cost(url, backlogs, rounds),
                    "failover": failover(url, clients, events, rate, rounds),
                }
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return results


def _rows(results: dict[str, Any]) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = []
    backlogs: list[str] = []
    for kind in BROKERS:
        backlogs += [b for b in results.get(kind, {}).get("resume", {}) if b not in backlogs]
    for backlog in backlogs:
        n = f"{int(backlog):,}"

        def resume(key: str, b: str = backlog) -> Callable[[dict[str, Any]], str]:
            return lambda r: f"{r['resume'][b][key]:.1f}" if b in r.get("resume", {}) else "—"

        rows += [
            (f"resume after {n} missed: ms per 1,000 missed", resume("resume_s_ms_per_1000")),
            (
                f"resume after {n} missed: gateway CPU ms per 1,000",
                resume("resume_cpu_s_ms_per_1000"),
            ),
            (f"the same {n} live: gateway CPU ms per 1,000", resume("live_cpu_s_ms_per_1000")),
        ]
    for key, label in (
        ("back_p50_ms", "failover: kill → first event again, p50 (ms)"),
        ("back_p99_ms", "failover: kill → first event again, p99 (ms)"),
    ):
        rows.append((label, _failover_cell(key)))
    return rows


def _failover_cell(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f"{r['failover'][key]:.0f}" if "failover" in r else "—"


def _table(results: dict[str, Any]) -> list[str]:
    kinds = [k for k in BROKERS if "skipped" not in results.get(k, {"skipped": 1})]
    lines = [
        "| | " + " | ".join(NAMES[k] for k in kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for label, value in _rows(results):
        lines.append(f"| {label} | " + " | ".join(value(results[k]) for k in kinds) + " |")
    lines.append("")
    return lines


def _what(results: dict[str, Any]) -> str:
    kinds = [k for k in BROKERS if "skipped" not in results.get(k, {"skipped": 1})]
    some = results[kinds[0]]["failover"] if kinds else {}
    return (
        "Gateway processes serving SSE from each broker bus on a server of its own; "
        f"medians of {results['rounds']} rounds. Resume: a client misses K events and comes "
        "back with `Last-Event-ID`, beside the same K delivered live to a client that "
        f"stayed (the sessions keep `replay={REPLAY}` events; past the default 1,000 a "
        "client gets a reset, the session's state, instead). "
        f"Failover: {some.get('clients', 0):,} clients on one gateway, "
        f"{some.get('rate', 0):,.0f} events/s, the gateway killed (SIGKILL) a third of the "
        "way through, each client back on a second gateway with its `Last-Event-ID`. "
        "Every client got every event exactly once, in order, with no reset, or the run "
        "failed. No baseline: a hand-rolled SSE server cannot resume."
    )


def sheet(results: dict[str, Any], machine: dict[str, Any]) -> str:
    """The resume and failover rows of the scale sheet (its generated part)."""
    head = (
        f"Measured {machine['date']} by `make bench` on {machine['platform']}, "
        f"{machine['cpus']} CPUs, {machine['implementation']} {machine['python']}. "
    )
    return "\n".join([head + _what(results), "", *_table(results)])


def report(results: dict[str, Any]) -> str:
    """The benchmarks page's part."""
    lines = ["### Resume and failover on the broker buses", "", _what(results), ""]
    return "\n".join([*lines, *_table(results)])


def write_sheet(results: dict[str, Any], machine: dict[str, Any], doc: Path) -> bool:
    """Replace the generated part of ``doc`` (between the markers); False without them."""
    return write_between(doc, SHEET_START, SHEET_END, sheet(results, machine))


if __name__ == "__main__":
    print(report(run(quick=True)))
