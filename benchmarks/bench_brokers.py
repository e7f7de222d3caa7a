"""What each broker bus costs the broker per event: round trips and bytes, beside the raw
client doing the same work, for the scale sheet of docs/scaling.md (``make bench``
writes its rows there, between ``<!-- brokers:start -->`` and ``<!-- brokers:end -->``).

Every connection under measure goes through a counting TCP proxy on 127.0.0.1
(:class:`CountingProxy`): bytes each way, and *round trips* — a burst of client writes
followed by a server reply. Two phases per bus, each on a broker of its own:

- **published**: a bus (no subscriber anywhere) publishes N events and flushes; the
  proxy stands between it and the broker. The raw peer: the publishing half of the
  bench_redis / bench_nats / bench_postgres raw side (pipelined XADD; ``publish_async``
  awaited per batch; INSERT of arrays + NOTIFY per batch).
- **delivered to one subscriber**: a writer connected directly publishes N events; a
  second bus, through the proxy, holds one subscription that reads them all (as a
  gateway does). The raw peer: the reading half of the same raw sides (blocking XREAD;
  a pull consumer's ``fetch``; LISTEN + SELECT).

Counted from after warm-up (connections made, stream/table created, a subscription in
place) to the last event flushed or received; divided by N; medians of the rounds.
Round trips depend on timing (how many events a batch or a read finds), so they are
what this machine measured, not constants.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks import bench_nats, bench_postgres, bench_redis
from benchmarks._common import write_between
from benchmarks.bench_redis import check_complete, publish_one

BROKERS = ("redis", "nats", "postgres")
SHEET_START = "<!-- brokers:start -->"
SHEET_END = "<!-- brokers:end -->"
NAMES = {"redis": "RedisBus", "nats": "NatsBus", "postgres": "PostgresBus"}
RAW = {"redis": "redis-py", "nats": "nats-py", "postgres": "psycopg"}
BATCH = 256
#: Between two events published one at a time (a trickle, as a live session writes).
GAP = 0.002
FIGURES = ("round_trips", "bytes_up", "bytes_down")


class CountingProxy:
    """A TCP proxy on 127.0.0.1 to ``port`` (running in a thread of its own), counting
    the bytes each way and the round trips (client bursts answered by the server) of
    every connection through it."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = 0
        self.counts = {"round_trips": 0, "bytes_up": 0, "bytes_down": 0}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._main, name="counting-proxy", daemon=True)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._thread.join(10)

    async def _stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        asyncio.get_running_loop().stop()

    def url(self, url: str) -> str:
        """``url`` (of the broker) pointed at the proxy instead."""
        return url.replace(f":{self.target}", f":{self.port}", 1)

    def snapshot(self) -> dict[str, int]:
        """The counts so far."""
        return dict(self.counts)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(client_r, client_w)
        except asyncio.CancelledError:
            client_w.close()
        finally:
            self._tasks.discard(task)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        last = ["down"]  # which way the connection's last bytes went
        counts = self.counts

        async def pump(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool
        ) -> None:
            try:
                while data := await reader.read(1 << 16):
                    if up:
                        counts["bytes_up"] += len(data)
                        last[0] = "up"
                    else:
                        counts["bytes_down"] += len(data)
                        if last[0] == "up":
                            counts["round_trips"] += 1
                        last[0] = "down"
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        pumps = [
            asyncio.ensure_future(pump(client_r, server_w, True)),
            asyncio.ensure_future(pump(server_r, client_w, False)),
        ]
        try:
            await asyncio.gather(*pumps)
        finally:
            for p in pumps:
                p.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            server_w.close()


def _per_event(before: dict[str, int], after: dict[str, int], events: int) -> dict[str, float]:
    return {key: (after[key] - before[key]) / events for key in FIGURES}


async def _publish(bus: Any, events: int, trickle: bool = False) -> None:
    """Publish ``events`` tracked-sized progress events on ``bus``: in a burst (yielding
    every batch), or one at a time (``trickle``: each on its own, ``GAP`` apart)."""
    for i in range(events):
        publish_one(bus, i)
        if trickle:
            await bus.flush()
            await asyncio.sleep(GAP)
        elif i % BATCH == BATCH - 1:
            await asyncio.sleep(0)


async def _raw_publish(
    publish: Callable[[int, int], Awaitable[None]], n: int, trickle: bool
) -> None:
    """A raw peer's ``publish(events, start)``: in a burst, or one at a time ``GAP``
    apart."""
    if not trickle:
        await publish(n, 0)
        return
    for i in range(n):
        await publish(i + 1, i)
        await asyncio.sleep(GAP)


MakeBus = Callable[[str, str], Any]


async def toolstream_published(
    make: MakeBus, url: str, proxy: CountingProxy, n: int, trickle: bool
) -> Any:
    """Per event published by a bus through the proxy."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    async with make(proxy.url(url), prefix) as bus:
        await _publish(bus, 10)  # warm-up: the lease entry, the session's first write
        await bus.flush()
        before = proxy.snapshot()
        await _publish(bus, n, trickle)
        await bus.flush()
        return _per_event(before, proxy.snapshot(), n)


async def toolstream_delivered(
    make: MakeBus, url: str, proxy: CountingProxy, n: int, trickle: bool
) -> Any:
    """Per event delivered to one subscription of a bus through the proxy."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    got: list[int] = []
    async with (
        make(url, prefix) as writer,
        make(proxy.url(url), prefix) as gateway,
        gateway.subscribe(session="bench", buffer=n + 1) as sub,
    ):
        await sub.prepare()
        before = proxy.snapshot()
        task = asyncio.create_task(_publish(writer, n, trickle))
        async for chunk in sub.batches():
            got.extend(e.current for e in chunk)
            if len(got) >= n:
                break
        after = proxy.snapshot()
        await task
    check_complete("toolstream", got, n)
    return _per_event(before, after, n)


# -- the raw peers ----------------------------------------------------------------------


async def redis_published(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import redis.asyncio as aredis

    writer = aredis.Redis.from_url(proxy.url(url), decode_responses=True)
    await writer.ping()
    key = f"raw{uuid.uuid4().hex[:8]}"
    before = proxy.snapshot()
    await _raw_publish(lambda e, s: bench_redis.raw_publish(writer, key, e, s), n, trickle)
    after = proxy.snapshot()
    await writer.delete(key)
    await writer.aclose()
    return _per_event(before, after, n)


async def redis_delivered(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import redis.asyncio as aredis

    writer = aredis.Redis.from_url(url, decode_responses=True)
    reader = aredis.Redis.from_url(
        proxy.url(url), decode_responses=True, single_connection_client=True
    )
    await reader.ping()
    key = f"raw{uuid.uuid4().hex[:8]}"
    before = proxy.snapshot()
    consumer = asyncio.create_task(bench_redis.raw_consume(reader, key, n))
    await _raw_publish(lambda e, s: bench_redis.raw_publish(writer, key, e, s), n, trickle)
    received = await consumer
    after = proxy.snapshot()
    await writer.delete(key)
    await writer.aclose()
    await reader.aclose()
    check_complete("raw", [e["current"] for e in received], n)
    return _per_event(before, after, n)


async def _nats_stream(url: str) -> tuple[Any, Any, str]:
    import nats
    from nats.js import api

    nc = await nats.connect([url])
    js = nc.jetstream()
    name = f"raw{uuid.uuid4().hex[:8]}"
    await js.add_stream(name=name, subjects=[f"{name}.*"], storage=api.StorageType.FILE)
    return nc, js, name


async def nats_published(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import nats

    direct, djs, name = await _nats_stream(url)
    nc = await nats.connect([proxy.url(url)])
    before = proxy.snapshot()
    js = nc.jetstream()
    await _raw_publish(lambda e, s: bench_nats.raw_publish(js, f"{name}.bench", e, s), n, trickle)
    after = proxy.snapshot()
    await nc.close()
    await djs.delete_stream(name)
    await direct.close()
    return _per_event(before, after, n)


async def nats_delivered(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import nats

    direct, djs, name = await _nats_stream(url)
    nc = await nats.connect([proxy.url(url)])
    sub = await bench_nats.raw_subscribe(nc.jetstream(), name, f"{name}.bench")
    before = proxy.snapshot()
    consumer = asyncio.create_task(bench_nats.raw_consume(sub, n))
    await _raw_publish(lambda e, s: bench_nats.raw_publish(djs, f"{name}.bench", e, s), n, trickle)
    received = await consumer
    after = proxy.snapshot()
    await nc.close()
    await djs.delete_stream(name)
    await direct.close()
    check_complete("raw", [e["current"] for e in received], n)
    return _per_event(before, after, n)


async def _postgres_table(url: str) -> tuple[Any, str]:
    """A direct connection and a new table of the raw peer's."""
    import psycopg

    table = f"raw{uuid.uuid4().hex[:8]}"
    direct = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await bench_postgres.raw_create(direct, table)
    return direct, table


async def postgres_published(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import psycopg

    direct, table = await _postgres_table(url)
    writer = await psycopg.AsyncConnection.connect(proxy.url(url), autocommit=True)
    before = proxy.snapshot()
    await _raw_publish(lambda e, s: bench_postgres.raw_publish(writer, table, e, s), n, trickle)
    after = proxy.snapshot()
    await direct.execute(f"DROP TABLE {table}")
    for conn in (writer, direct):
        await conn.close()
    return _per_event(before, after, n)


async def postgres_delivered(url: str, proxy: CountingProxy, n: int, trickle: bool) -> Any:
    import psycopg

    writer, table = await _postgres_table(url)
    listener = await psycopg.AsyncConnection.connect(proxy.url(url), autocommit=True)
    reader = await psycopg.AsyncConnection.connect(proxy.url(url), autocommit=True)
    ready = asyncio.Event()
    consumer = asyncio.create_task(bench_postgres.raw_consume(listener, reader, table, n, ready))
    await ready.wait()
    before = proxy.snapshot()
    await _raw_publish(lambda e, s: bench_postgres.raw_publish(writer, table, e, s), n, trickle)
    received = await consumer
    after = proxy.snapshot()
    await writer.execute(f"DROP TABLE {table}")
    for conn in (writer, listener, reader):
        await conn.close()
    check_complete("raw", [e["current"] for e in received], n)
    return _per_event(before, after, n)


def _make(broker: str) -> MakeBus:
    """How a bus of ``broker`` is made from a URL and a prefix (as bench_* make theirs)."""

    def make(url: str, prefix: str) -> Any:
        if broker == "redis":
            from toolstream.redis import RedisBus

            return RedisBus(url, prefix=prefix, batch=BATCH, replay=100_000)
        if broker == "nats":
            from toolstream.nats import NatsBus

            return NatsBus([url], prefix=prefix, batch=BATCH, replay=100_000)
        from toolstream.postgres import PostgresBus

        return PostgresBus(url, prefix=f"c_{prefix}", batch=BATCH)

    return make


RawSide = Callable[[str, CountingProxy, int, bool], Awaitable[Any]]
RAW_SIDES: dict[str, tuple[RawSide, RawSide]] = {
    "redis": (redis_published, redis_delivered),
    "nats": (nats_published, nats_delivered),
    "postgres": (postgres_published, postgres_delivered),
}


def _server(broker: str, directory: Path) -> Any:
    """A started server of ``broker`` (``None``: not installed), with ``url`` and
    ``port``; ``stop()`` / ``close()`` ends it."""
    if broker == "redis":
        from tests.redis_server import RedisServer

        if shutil.which("redis-server") is None:
            return None
        server: Any = RedisServer(directory)
        server.start(persist=False)
        return server
    if broker == "nats":
        from tests.nats_server import NATS_SERVER, NatsServer

        if NATS_SERVER is None:
            return None
        server = NatsServer(directory)
        server.start()
        return server
    from tests.postgres_server import INITDB, POSTGRES, PostgresServer

    if POSTGRES is None or INITDB is None:
        return None
    server = PostgresServer(directory)
    server.start()
    return server


#: The measurements of one round: (side, phase, one at a time?).
KEYS = [
    (side, phase, trickle)
    for trickle in (False, True)
    for phase in ("published", "delivered")
    for side in ("toolstream", "raw")
]


def _key(side: str, phase: str, trickle: bool) -> str:
    return f"{side}_{phase}" + ("_trickle" if trickle else "")


def _measure(broker: str, events: int, trickled: int, rounds: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix=f"toolstream-bench-cost-{broker}-"))
    server = _server(broker, directory)
    if server is None:
        return {"skipped": f"{broker} server not installed"}
    make = _make(broker)
    raw_sides = dict(zip(("published", "delivered"), RAW_SIDES[broker], strict=True))
    samples: dict[str, list[dict[str, float]]] = {_key(*key): [] for key in KEYS}
    try:
        for _ in range(rounds):  # alternating, each measurement on a proxy of its own
            for side, phase, trickle in KEYS:
                n = trickled if trickle else events
                with CountingProxy(server.port) as proxy:
                    got: Awaitable[Any]
                    if side == "raw":
                        got = raw_sides[phase](server.url, proxy, n, trickle)
                    elif phase == "published":
                        got = toolstream_published(make, server.url, proxy, n, trickle)
                    else:
                        got = toolstream_delivered(make, server.url, proxy, n, trickle)
                    samples[_key(side, phase, trickle)].append(asyncio.run(_awaited(got)))
    finally:
        (server.close if broker == "postgres" else server.stop)()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        key: {fig: statistics.median(s[fig] for s in runs) for fig in FIGURES}
        for key, runs in samples.items()
    }


async def _awaited(work: Awaitable[Any]) -> Any:
    return await work


def run(*, quick: bool = False) -> dict[str, Any]:
    """Measure each broker bus and its raw peer on a server of its own."""
    events = 500 if quick else 5_000
    trickled = 50 if quick else 500
    rounds = 1 if quick else 3
    out: dict[str, Any] = {
        "events": events,
        "trickled": trickled,
        "rounds": rounds,
        "date": time.strftime("%Y-%m-%d"),
    }
    for broker in BROKERS:
        out[broker] = _measure(broker, events, trickled, rounds)
    return out


def rows(results: dict[str, Any]) -> list[str]:
    """The broker rows of the scale sheet (a table of their own)."""
    lines = [
        f"Broker cost per event (measured {results.get('date', '')} by the brokers suite, "
        f"medians of {results['rounds']} alternating rounds), through a counting proxy: "
        "*round trips* are client writes answered by the broker, *up* the bytes sent to "
        "it, *down* the bytes it sent back. *Published*: one bus writing, nobody "
        "subscribed. *Delivered*: one subscriber's connection(s), reading what another "
        f"process wrote. *In a burst*: {results['events']:,} events as fast as they go "
        f"(batches); *one at a time*: {results.get('trickled', 0):,} events "
        f"{GAP * 1000:.0f} ms apart, each flushed alone (a live session). Raw: the client "
        "library doing the same work (the raw sides of the broker benchmarks).",
        "",
        "| per event | round trips | bytes up | bytes down | raw round trips "
        "| raw bytes up | raw bytes down |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for broker in BROKERS:
        got = results.get(broker) or {"skipped": "not measured"}
        if "skipped" in got:
            lines.append(f"| {NAMES[broker]} | {got['skipped']} | | | | | |")
            continue
        for _, phase, trickle in KEYS[::2]:
            ours, raw = (
                got.get(_key("toolstream", phase, trickle)),
                got.get(_key("raw", phase, trickle)),
            )
            if ours is None or raw is None:
                continue
            label = "published" if phase == "published" else "delivered to one subscriber"
            label += ", one at a time" if trickle else ", in a burst"
            cells = [
                f"{side['round_trips']:.3f} | {side['bytes_up']:,.0f} | {side['bytes_down']:,.0f}"
                for side in (ours, raw)
            ]
            lines.append(
                f"| {NAMES[broker]} ({RAW[broker]} raw): {label} | " + " | ".join(cells) + " |"
            )
    lines.append("")
    return lines


def write_sheet(results: dict[str, Any], doc: Path) -> bool:
    """Replace the broker rows of ``doc`` (between the markers); False without them."""
    return write_between(doc, SHEET_START, SHEET_END, "\n".join(rows(results)))


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    return "\n".join(["### Broker round trips and bytes per event", "", *rows(results)])


if __name__ == "__main__":
    print(report(run()))
