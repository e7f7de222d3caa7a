"""NatsBus against raw nats-py JetStream doing the same work, in the same run.

- throughput: N tracked-sized events published and delivered to one subscriber in the
  same process. toolstream: ``bus.publish`` (outbox, pipelined publishes each asking for
  its sequence, lease and checkpoint bookkeeping) and a subscription (a pull consumer,
  events decoded to objects). The peer: nats-py publishing the same JSON pipelined
  (``publish_async``, acknowledgements awaited per batch) and a pull consumer (made
  before the clock starts) fetching the same batch sizes with ``json.loads`` of each
  message. Rounds alternate A B A B; each side's delivery is checked complete and in
  order; the ratio reported is the median of the rounds' ratios.
- latency across processes: a publisher process (Tracker on NatsBus) at a steady 1,000
  events/s, a gateway process serving SSE from the same NATS, a raw-byte client here;
  p50 / p99 from the event's ``ts`` to receipt — on one server, and on a cluster of three
  (R3 stream: every event acknowledged by a quorum).

Needs ``nats-server`` (Debian: ``apt install nats-server``).
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

BATCH = 256


async def _toolstream_once(servers: list[str], events: int) -> float:
    from toolstream.nats import NatsBus

    prefix = f"b{uuid.uuid4().hex[:8]}"
    return await broker_throughput(
        NatsBus(servers, prefix=prefix, batch=BATCH, replay=events), events, BATCH
    )


async def raw_publish(js: Any, subject: str, events: int, start: int = 0) -> None:
    """Raw nats-py publishing events ``start`` to ``events - 1``: the JSON pipelined
    (``publish_async``), acknowledgements awaited per batch of ``BATCH``."""
    for first in range(start, events, BATCH):
        futures = []
        for i in range(first, min(first + BATCH, events)):
            blob = json.dumps(raw_event(i), separators=(",", ":")).encode()
            futures.append(await js.publish_async(subject, blob))
        await asyncio.gather(*futures)


async def raw_subscribe(js: Any, stream: str, subject: str) -> Any:
    """Raw nats-py's consumer: an ack-free pull consumer of ``subject``."""
    from nats.js import api

    return await js.pull_subscribe(
        subject,
        durable=None,
        stream=stream,
        config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE),
    )


async def raw_consume(sub: Any, events: int) -> list[dict[str, Any]]:
    """Raw nats-py reading: ``fetch`` of ``BATCH`` and ``json.loads`` of each message,
    until ``events`` came; what came."""
    import nats

    received: list[dict[str, Any]] = []
    while len(received) < events:
        try:
            msgs = await sub.fetch(BATCH, timeout=5)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            received.append(json.loads(msg.data))
    return received


async def _raw_once(servers: list[str], events: int) -> float:
    import nats
    from nats.js import api

    nc = await nats.connect(servers)
    js = nc.jetstream()
    name = f"raw{uuid.uuid4().hex[:8]}"
    await js.add_stream(name=name, subjects=[f"{name}.*"], storage=api.StorageType.FILE)
    # The consumer is in place before the clock starts, as the subscription is.
    sub = await raw_subscribe(js, name, f"{name}.bench")
    consumer = asyncio.create_task(raw_consume(sub, events))
    start = time.perf_counter()
    await raw_publish(js, f"{name}.bench", events)
    received = await consumer
    elapsed = time.perf_counter() - start
    await js.delete_stream(name)
    await nc.close()
    check_complete("raw", [e["current"] for e in received], events)
    return events / elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    """Start a nats-server (then a cluster of three) of its own, measure, stop them."""
    from tests.nats_server import NATS_SERVER, NatsCluster, NatsServer

    if NATS_SERVER is None:
        return {"skipped": "nats-server not installed"}
    directory = Path(tempfile.mkdtemp(prefix="toolstream-bench-nats-"))
    server = NatsServer(directory / "one")
    (directory / "one").mkdir()
    server.start()
    events = 2_000 if quick else 20_000
    rounds = 1 if quick else 5
    try:
        samples: dict[str, list[float]] = {"toolstream": [], "raw": []}
        for _ in range(rounds):
            samples["toolstream"].append(asyncio.run(_toolstream_once([server.url], events)))
            samples["raw"].append(asyncio.run(_raw_once([server.url], events)))
        latency = asyncio.run(broker_latency(server.url, 200 if quick else 5_000, 1000.0))
    finally:
        server.stop()
    cluster = NatsCluster(directory / "cluster")
    cluster.start()
    try:
        cluster_latency = asyncio.run(
            broker_latency(",".join(cluster.urls), 200 if quick else 5_000, 1000.0)
        )
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "events": events,
        "rounds": rounds,
        **throughput(samples),
        "latency": latency,
        "cluster_latency": cluster_latency,
    }


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    if "skipped" in results:
        return f"### NatsBus\n\nSkipped: {results['skipped']}.\n"
    lat, clat = results["latency"], results["cluster_latency"]
    return "\n".join(
        [
            "### NatsBus vs raw nats-py JetStream (pipelined publishes + pull consumer)",
            "",
            f"{results['events']:,} events published and delivered to one subscriber reading "
            f"the live stream (as a gateway does), {results['rounds']} alternating rounds; "
            "every event of every round checked delivered, in order. toolstream adds the "
            "outbox, a sequence pinned by every message (two headers each), the lease "
            "entry written before calls open, checkpoints and typed events; the peer only "
            "appends and reads JSON.",
            "",
            "| toolstream ev/s | raw nats-py ev/s | **throughput** (median of rounds) "
            "| ratio of medians | spread |",
            "|---:|---:|---:|---:|---:|",
            throughput_row(results),
            "",
            "Across processes (a Tracker in a publisher process, SSE from a gateway process, "
            "at a steady 1,000 events/s): publish-to-receipt latency on one server "
            f"p50 **{lat['p50_ms']:.2f} ms**, p99 **{lat['p99_ms']:.2f} ms**; on a cluster of "
            f"three (R3) p50 **{clat['p50_ms']:.2f} ms**, p99 **{clat['p99_ms']:.2f} ms**.",
            "",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
