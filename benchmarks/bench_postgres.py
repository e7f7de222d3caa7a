"""PostgresBus against raw psycopg doing the same PostgreSQL work, in the same run.

- throughput: N tracked-sized events published and delivered to one subscriber in the
  same process. toolstream: ``bus.publish`` (outbox, one transaction per batch: the
  session's row locked, the writer's high-water mark, the inserts, NOTIFY) and a
  subscription (a SELECT after its cursor on the shared pool, woken by the listener,
  events decoded to objects). The peer: psycopg inserting the same JSON in batches of
  the same size (one INSERT of arrays, and NOTIFY, in a transaction, pipelined), and a
  task that LISTENs on a connection of its own and, when notified, SELECTs after its
  cursor on another (the same batch size) with ``json.loads`` of each row. Rounds
  alternate A B A B.
- latency across processes: a publisher process (Tracker on PostgresBus) at a steady
  1,000 events/s, a gateway process serving SSE from the same database, a raw-byte
  client here; p50 / p99 from the event's ``ts`` to receipt.

Needs a PostgreSQL server's binaries (Debian: ``apt install postgresql``); the server it
starts runs with ``fsync=off`` (both sides alike: a commit does not wait for the disk).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import throughput, throughput_row
from benchmarks.bench_redis import broker_latency, broker_throughput, check_complete, raw_event

BATCH = 512


async def _toolstream_once(dsn: str, events: int) -> float:
    from toolstream.postgres import PostgresBus

    prefix = f"b{uuid.uuid4().hex[:8]}"
    return await broker_throughput(PostgresBus(dsn, prefix=prefix, batch=BATCH), events, BATCH)


async def raw_create(conn: Any, table: str) -> None:
    """The raw peer's table."""
    await conn.execute(
        f"CREATE TABLE {table} (session text, seq bigint, blob text, "
        "written_at timestamptz DEFAULT now(), PRIMARY KEY (session, seq))"
    )


async def raw_publish(writer: Any, table: str, events: int, start: int = 0) -> None:
    """Raw psycopg publishing events ``start`` to ``events - 1`` (seq ``start + 1``...):
    per batch of ``BATCH``, one INSERT of arrays and a NOTIFY in a transaction,
    pipelined."""
    # Arrays in binary (%b): in text format psycopg escapes every quote of the JSON.
    insert = (
        f"INSERT INTO {table} (session, seq, blob) "
        "SELECT %s, * FROM unnest(%b::bigint[], %b::text[])"
    )
    seq = start
    for first in range(start, events, BATCH):
        seqs, blobs = [], []
        for i in range(first, min(first + BATCH, events)):
            seq += 1
            seqs.append(seq)
            blobs.append(json.dumps(raw_event(i), separators=(",", ":")))
        async with writer.pipeline(), writer.transaction():
            await writer.execute(insert, ("bench", seqs, blobs))
            await writer.execute("SELECT pg_notify(%s, %s)", (f"{table}_events", "bench"))


async def raw_consume(
    listener: Any, reader: Any, table: str, events: int, ready: asyncio.Event | None = None
) -> list[dict[str, Any]]:
    """Raw psycopg reading: LISTEN on one connection and, when notified, SELECT of
    ``BATCH`` after a cursor on another, ``json.loads`` of each row, until ``events``
    came; what came. ``ready`` is set once it listens."""
    await listener.execute(f"LISTEN {table}_events")
    if ready is not None:
        ready.set()
    select = f"SELECT seq, blob FROM {table} WHERE session = %s AND seq > %s ORDER BY seq LIMIT %s"
    received: list[dict[str, Any]] = []
    notified = asyncio.Event()

    async def listen() -> None:
        async for _ in listener.notifies():
            notified.set()

    listening = asyncio.create_task(listen())
    cursor = 0
    try:
        while len(received) < events:
            notified.clear()
            cur = await reader.execute(select, ("bench", cursor, BATCH))
            rows = await cur.fetchall()
            for _, blob in rows:
                received.append(json.loads(blob))
            if rows:
                cursor = rows[-1][0]
            if len(rows) < BATCH and len(received) < events:
                try:
                    await asyncio.wait_for(notified.wait(), 5)
                except TimeoutError:
                    pass
    finally:
        listening.cancel()
        try:
            await listening
        except asyncio.CancelledError:
            pass
    return received


async def _raw_once(dsn: str, events: int) -> float:
    import psycopg

    table = f"raw{uuid.uuid4().hex[:8]}"
    writer = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    reader = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    listener = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await raw_create(writer, table)
    ready = asyncio.Event()
    consumer = asyncio.create_task(raw_consume(listener, reader, table, events, ready))
    await ready.wait()
    start = time.perf_counter()
    await raw_publish(writer, table, events)
    received = await consumer
    elapsed = time.perf_counter() - start
    await writer.execute(f"DROP TABLE {table}")
    for conn in (writer, reader, listener):
        await conn.close()
    check_complete("raw", [e["current"] for e in received], events)
    return events / elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    """Start a PostgreSQL server of its own, measure, stop it."""
    from tests.postgres_server import INITDB, POSTGRES, PostgresServer

    if POSTGRES is None or INITDB is None:
        return {"skipped": "PostgreSQL not installed"}
    directory = Path(tempfile.mkdtemp(prefix="toolstream-bench-postgres-"))
    server = PostgresServer(directory)
    server.start()
    events = 2_000 if quick else 50_000
    rounds = 1 if quick else 5
    try:
        samples: dict[str, list[float]] = {"toolstream": [], "raw": []}
        for _ in range(rounds):
            samples["toolstream"].append(asyncio.run(_toolstream_once(server.dsn, events)))
            samples["raw"].append(asyncio.run(_raw_once(server.dsn, events)))
        latency = asyncio.run(broker_latency(server.dsn, 200 if quick else 5_000, 1000.0))
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "events": events,
        "rounds": rounds,
        **throughput(samples),
        "latency": latency,
    }


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    if "skipped" in results:
        return f"### PostgresBus\n\nSkipped: {results['skipped']}.\n"
    lat = results["latency"]
    return "\n".join(
        [
            "### PostgresBus vs raw psycopg (INSERT + NOTIFY transactions + LISTEN/SELECT)",
            "",
            f"{results['events']:,} events published and delivered to one subscriber, "
            f"median of {results['rounds']} alternating rounds (server with `fsync=off`). "
            "toolstream adds the outbox, the session's row locked per batch (renumbering, "
            "the writer's high-water mark, open-call bookkeeping, leases), the shared "
            "read pool and typed events; the peer only inserts, notifies and reads JSON.",
            "",
            "| toolstream ev/s | raw psycopg ev/s | **throughput** (median of rounds) "
            "| ratio of medians | spread |",
            "|---:|---:|---:|---:|---:|",
            throughput_row(results),
            "",
            "Across processes (a Tracker in a publisher process, SSE from a gateway process, "
            "at a steady 1,000 events/s): publish-to-receipt latency "
            f"p50 **{lat['p50_ms']:.2f} ms**, p99 **{lat['p99_ms']:.2f} ms**.",
            "",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
