"""RedisBus against raw redis-py doing the same Redis work, in the same run.

- throughput: N tracked-sized events published and delivered to one subscriber in the
  same process. toolstream: ``bus.publish`` (outbox, idempotent pipelined flush) and a
  subscription (blocking XREAD on its own connection, events decoded to objects). The
  peer: redis-py XADD in pipelines of the same batch size, and a task doing blocking
  XREAD of the same counts and ``json.loads`` of each entry. Rounds alternate A B A B.
- latency across processes: a publisher process (Tracker on RedisBus) at a steady
  1,000 events/s, a gateway process serving SSE from the same Redis, a raw-byte client
  here; p50 / p99 from the event's ``ts`` (publish time) to receipt.

Needs ``redis-server`` on PATH (Debian: ``apt install redis-server``).
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
from pathlib import Path
from typing import Any

from benchmarks._common import throughput, throughput_row
from benchmarks._processes import start_server

BATCH = 512
PAYLOAD = {"message": "fetched 6 of 12 pages", "data": {"pages": 6, "of": 12}}


async def _toolstream_once(url: str, events: int) -> float:
    from toolstream.redis import RedisBus

    # replay=events: the whole burst stays readable, as it does for the raw peer (a
    # subscriber further behind than the window is cut, by design).
    prefix = f"b{uuid.uuid4().hex[:8]}"
    return await broker_throughput(
        RedisBus(url, prefix=prefix, batch=BATCH, replay=events), events, BATCH
    )


async def broker_throughput(bus: Any, events: int, batch: int) -> float:
    """Events/s of ``events`` tracked-sized events published on a broker-backed ``bus``
    (yielding every ``batch``) and delivered to one subscriber of the same process."""

    async with bus:
        got = 0
        chunks = []
        async with bus.subscribe(session="bench", buffer=events + 1) as sub:
            await sub.prepare()
            start = time.perf_counter()

            async def produce() -> None:
                for i in range(events):
                    publish_one(bus, i)
                    if i % batch == batch - 1:
                        await asyncio.sleep(0)

            task = asyncio.create_task(produce())
            async for chunk in sub.batches():
                chunks.append(chunk)
                got += len(chunk)
                if got >= events:
                    break
            elapsed = time.perf_counter() - start
            await task
        if bus.stats.dropped or sub.coalesced:
            raise AssertionError(f"toolstream dropped events ({bus.stats}; nothing may be lost)")
        check_complete("toolstream", [e.current for c in chunks for e in c], events)
    return events / elapsed


def publish_one(bus: Any, i: int) -> Any:
    """Publish the ``i``-th tracked-sized progress event of session ``"bench"``."""
    import toolstream as ts

    return bus.publish(
        ts.ToolProgress,
        session="bench",
        call_id="c",
        tool="bench",
        current=i,
        message=PAYLOAD["message"],
        data=PAYLOAD["data"],
    )


def check_complete(side: str, currents: list[Any], events: int) -> None:
    """Raise unless ``currents`` (what one side delivered, in order) is every event
    published, once each, in order."""
    if currents != list(range(events)):
        raise AssertionError(
            f"{side} delivered {len(currents)} of {events} events, or not in order "
            "(every event must arrive, once, in order)"
        )


def raw_event(i: int) -> dict[str, Any]:
    """The event a raw peer publishes (the JSON a tracked progress event carries)."""
    return {
        "v": 1,
        "type": "tool.progress",
        "session": "bench",
        "ts": time.time(),
        "call_id": "c",
        "tool": "bench",
        "current": i,
        **PAYLOAD,
    }


async def raw_publish(writer: Any, key: str, events: int, start: int = 0) -> None:
    """Raw redis-py publishing events ``start`` to ``events - 1``: XADD of the JSON in
    pipelines of ``BATCH``."""
    for first in range(start, events, BATCH):
        async with writer.pipeline(transaction=False) as pipe:
            for i in range(first, min(first + BATCH, events)):
                pipe.xadd(key, {"e": json.dumps(raw_event(i), separators=(",", ":"))})
            await pipe.execute()


async def raw_consume(reader: Any, key: str, events: int) -> list[dict[str, Any]]:
    """Raw redis-py reading: blocking XREAD of ``BATCH`` after a cursor and
    ``json.loads`` of each entry, until ``events`` came; what came."""
    received: list[dict[str, Any]] = []
    cursor = "0-0"
    while len(received) < events:
        reply: Any = await reader.xread({key: cursor}, count=BATCH, block=5000)
        if not reply:
            continue
        entries = reply[0][1]
        for _, fields in entries:
            received.append(json.loads(fields["e"]))
        cursor = entries[-1][0]
    return received


async def _raw_once(url: str, events: int) -> float:
    import redis.asyncio as aredis

    key = f"raw{uuid.uuid4().hex[:8]}"
    writer = aredis.Redis.from_url(url, decode_responses=True)
    reader = aredis.Redis.from_url(url, decode_responses=True, single_connection_client=True)
    consumer = asyncio.create_task(raw_consume(reader, key, events))
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    await raw_publish(writer, key, events)
    received = await consumer
    elapsed = time.perf_counter() - start
    await writer.delete(key)
    await writer.aclose()
    await reader.aclose()
    check_complete("raw", [e["current"] for e in received], events)
    return events / elapsed


async def broker_latency(url: str, events: int, rate: float) -> dict[str, float]:
    """Publish-to-SSE latency across processes on the broker bus ``url`` names."""
    prefix = f"l{uuid.uuid4().hex[:8]}"
    gateway, gport = start_server("benchmarks.broker_procs", "gateway", url, prefix)
    publisher, pport = start_server(
        "benchmarks.broker_procs", "publisher", url, prefix, str(events), str(rate)
    )
    latencies: list[float] = []
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gport)
        writer.write(
            b"GET /?session=bench HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.2)  # the gateway's subscription is in place
        socket.create_connection(("127.0.0.1", pport)).close()  # go
        buffer = b""
        while len(latencies) < events:
            chunk = await asyncio.wait_for(reader.read(65536), 30)
            if not chunk:
                break
            now = time.time()
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                for line in frame.split(b"\n"):
                    if line.startswith(b"data:") and b'"tool.progress"' in line:
                        latencies.append(now - json.loads(line[5:])["ts"])
        writer.close()
    finally:
        for proc in (gateway, publisher):
            proc.kill()
            proc.wait()
    if len(latencies) != events:
        raise AssertionError(f"latency run received {len(latencies)} of {events}")
    latencies.sort()
    return {
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Start a redis-server of its own, measure, stop it."""
    from tests.redis_server import RedisServer

    if shutil.which("redis-server") is None:
        return {"skipped": "redis-server not installed"}
    directory = Path(tempfile.mkdtemp(prefix="toolstream-bench-redis-"))
    server = RedisServer(directory)
    server.start(persist=False)
    try:
        events = 2_000 if quick else 50_000
        rounds = 1 if quick else 5
        samples: dict[str, list[float]] = {"toolstream": [], "raw": []}
        for _ in range(rounds):
            samples["toolstream"].append(asyncio.run(_toolstream_once(server.url, events)))
            samples["raw"].append(asyncio.run(_raw_once(server.url, events)))
        latency = asyncio.run(broker_latency(server.url, 200 if quick else 5_000, 1000.0))
        cluster = _on_a_cluster(server.url, directory, events, rounds, quick)
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "events": events,
        "rounds": rounds,
        **throughput(samples),
        "latency": latency,
        "cluster": cluster,
    }


def _on_a_cluster(
    single: str, directory: Path, events: int, rounds: int, quick: bool
) -> dict[str, Any]:
    """RedisBus on a three-master cluster against the same bus on one server, rounds
    alternating; and the cross-process latency on the cluster."""
    import warnings

    from tests.redis_server import RedisClusterServers

    cluster = RedisClusterServers(directory / "cluster")
    cluster.start()
    try:
        with warnings.catch_warnings():
            # redis-py's asyncio cluster client leaves node objects to the collector
            warnings.simplefilter("ignore", ResourceWarning)
            samples: dict[str, list[float]] = {"cluster": [], "single": []}
            for _ in range(rounds):
                samples["cluster"].append(asyncio.run(_toolstream_once(cluster.url, events)))
                samples["single"].append(asyncio.run(_toolstream_once(single, events)))
            lat = asyncio.run(broker_latency(cluster.url, 200 if quick else 5_000, 1000.0))
    finally:
        cluster.stop()
    tput = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "cluster_events_per_s": tput["cluster"],
        "single_events_per_s": tput["single"],
        "ratio": tput["cluster"] / tput["single"],
        "latency": lat,
    }


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    if "skipped" in results:
        return f"### RedisBus\n\nSkipped: {results['skipped']}.\n"
    lat = results["latency"]
    return "\n".join(
        [
            "### RedisBus vs raw redis-py (XADD pipelines + blocking XREAD)",
            "",
            f"{results['events']:,} events published and delivered to one subscriber, "
            f"median of {results['rounds']} alternating rounds. toolstream adds the outbox, "
            "the idempotent flush script (open-call bookkeeping, leases, TTLs), checkpoints "
            "and typed events; the peer only appends and reads JSON.",
            "",
            "| toolstream ev/s | raw redis-py ev/s | **throughput** (median of rounds) "
            "| ratio of medians | spread |",
            "|---:|---:|---:|---:|---:|",
            throughput_row(results),
            "",
            "Across processes (a Tracker in a publisher process, SSE from a gateway process, "
            "at a steady 1,000 events/s): publish-to-receipt latency "
            f"p50 **{lat['p50_ms']:.2f} ms**, p99 **{lat['p99_ms']:.2f} ms**.",
            "",
            *_cluster_report(results.get("cluster")),
        ]
    )


def _cluster_report(cluster: dict[str, Any] | None) -> list[str]:
    if not cluster:
        return []
    lat = cluster["latency"]
    return [
        "On a Redis Cluster (three masters, a replica each) against one server, same run: "
        f"{cluster['cluster_events_per_s']:,.0f} vs {cluster['single_events_per_s']:,.0f} "
        f"events/s (**{cluster['ratio']:.2f}×**; one session lives on one master); across "
        f"processes on the cluster p50 **{lat['p50_ms']:.2f} ms**, p99 "
        f"**{lat['p99_ms']:.2f} ms**.",
        "",
    ]


if __name__ == "__main__":
    print(report(run()))
