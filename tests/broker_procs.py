"""Processes for the multi-process broker-bus test: an agent worker and an SSE gateway,
on RedisBus (``redis://`` URLs), NatsBus (``nats://`` URLs, comma-separated for a
cluster) or PostgresBus (``postgresql://`` URLs).

python -m tests.broker_procs worker URL PREFIX SESSION CALLS RATE
python -m tests.broker_procs gateway URL PREFIX PORT
python -m tests.broker_procs approvals URL PREFIX SESSION CALLS
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import uvicorn

import toolstream as ts
from toolstream.sse import SSEApp


def open_bus(url: str, prefix: str) -> Any:
    """The broker bus ``url`` names, with a one-second lease (fifteen on a cluster)."""
    if url.startswith(("postgresql://", "postgres://")):
        from toolstream.postgres import PostgresBus

        return PostgresBus(url, prefix=prefix, lease=1.0)
    if url.startswith("nats://"):
        from toolstream.nats import NatsBus

        if url.count(",") == 2:
            # A JetStream cluster takes 5-10 s to elect new leaders after losing a
            # server: a lease shorter than that gets live workers reaped.
            return NatsBus(url.split(","), prefix=prefix, lease=15.0, replicas=3)
        return NatsBus(url, prefix=prefix, lease=1.0)
    import redis

    from toolstream.redis import RedisBus

    # A Redis Cluster fails a master over in a few seconds too (its node timeout): a
    # one-second lease got live workers reaped while the test disrupted the cluster.
    with redis.Redis.from_url(url) as probe:
        clustered = probe.info("cluster").get("cluster_enabled") == 1
    return RedisBus(url, prefix=prefix, lease=15.0 if clustered else 1.0)


async def worker(url: str, prefix: str, session: str, calls: int, rate: float) -> None:
    """Publish a run of ``calls`` tool calls through a Tracker, then open one more call
    and hang (the test kills this process there)."""
    async with open_bus(url, prefix) as bus:
        tracker = ts.Tracker(bus, session=session)
        async with tracker.run(run_id="r1"):
            for i in range(calls):
                async with tracker.call("step", {"i": i}, call_id=f"c{i}") as call:
                    call.progress(0.5, message=f"step {i}")
                    call.complete(i)
                await asyncio.sleep(1 / rate)
            hang = tracker.create("hang", call_id="hang")
            hang.ready(args={})
            hang.start()
            await bus.flush()
            print("hanging", flush=True)
            await asyncio.sleep(3600)


async def approvals(url: str, prefix: str, session: str, calls: int) -> None:
    """Run ``calls`` calls that each wait for a person's decision (made in another
    process); an approved call runs with the args the person gave."""
    async with open_bus(url, prefix) as bus:
        tracker = ts.Tracker(bus, session=session)
        async with tracker.run(run_id="r1"):
            for i in range(calls):
                try:
                    async with tracker.call(
                        "send_email", {"to": "bob"}, approval="Sends mail", call_id=f"a{i}"
                    ) as call:
                        call.complete({"sent_to": call.args["to"]})
                except ts.ApprovalDenied:
                    pass
        await bus.flush()


def gateway(url: str, prefix: str, port: int) -> None:
    """Serve SSE from the shared broker on 127.0.0.1:port."""
    bus = open_bus(url, prefix)
    app = SSEApp(bus, heartbeat=1.0)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    import logging
    import os

    if os.environ.get("TOOLSTREAM_DEBUG_PROCS"):  # for a person chasing a failure
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {sys.argv[1]} %(message)s")
    role, *args = sys.argv[1:]
    if role == "worker":
        asyncio.run(worker(args[0], args[1], args[2], int(args[3]), float(args[4])))
    elif role == "approvals":
        asyncio.run(approvals(args[0], args[1], args[2], int(args[3])))
    elif role == "gateway":
        gateway(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown role {role!r}")
