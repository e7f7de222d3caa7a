"""Several processes, one stream: an agent worker publishing through a Tracker, two
uvicorn gateways serving SSE from the same broker (Redis, NATS JetStream, a JetStream
cluster of three, PostgreSQL), and a client that moves between them while a gateway is
killed, the broker restarts (or loses a server) and the worker dies."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any, cast

import anyio
import httpx
import pytest
import redis
from httpx_sse import aconnect_sse

from tests.nats_server import NatsCluster, NatsServer, require_nats
from tests.postgres_server import PostgresServer, require_postgres
from tests.redis_server import RedisClusterServers, RedisServer, free_port, require_redis
from tests.servers import eventually, spawn_module

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
SESSION = "agent-1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the test's own client; the processes run the buses on asyncio


class Broker:
    """A broker the test starts: its URL, a hard restart (or the loss of one server of
    a cluster) mid-stream, and what it stored for a session."""

    url: str
    prefix: str = ""

    def disrupt(self) -> None:
        raise NotImplementedError

    async def stored(self, prefix: str, session: str) -> list[str]:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class RedisBroker(Broker):
    def __init__(self, directory: Path) -> None:
        self.server = RedisServer(directory)
        self.server.start()
        self.url = self.server.url

    def disrupt(self) -> None:
        self.server.restart(kill=True)  # SIGKILL, append-only file

    async def stored(self, prefix: str, session: str) -> list[str]:
        r = redis.Redis.from_url(self.url, decode_responses=True)
        entries = cast(list[tuple[str, dict[str, str]]], r.xrange(f"{{{prefix}:{session}}}:s"))
        r.close()
        return [json.loads(fields["e"])["type"] for _, fields in entries]

    def stop(self) -> None:
        self.server.stop()


async def nats_stored(urls: list[str], prefix: str, session: str) -> list[str]:
    """The types of the events a NatsBus stored for ``session``, in stream order (read
    again from the start if the cluster is still electing a leader)."""
    import nats
    from nats.js import api

    nc = await nats.connect(urls)
    try:
        js = nc.jetstream(timeout=5)
        with anyio.fail_after(60):
            while True:
                try:
                    sub = await js.pull_subscribe(
                        f"{prefix}.{session}",
                        durable=None,
                        stream=prefix,
                        config=api.ConsumerConfig(ack_policy=api.AckPolicy.NONE),
                    )
                    out: list[str] = []
                    while True:
                        msgs = await sub.fetch(500, timeout=5)
                        out += [json.loads(m.data)["type"] for m in msgs]
                        if msgs[-1].metadata.num_pending == 0:
                            return out
                except (nats.errors.TimeoutError, nats.js.errors.Error) as exc:
                    print(f"reading the stream again: {exc!r}")
                    await anyio.sleep(0.5)
    finally:
        await nc.close()


class RedisClusterBroker(RedisBroker):
    """Three masters with a replica each: the master holding the shared keys (leases,
    epoch) is SIGKILLed mid-stream and its replica takes over. (A master holding the
    session itself, with asynchronous replication, may lose its last writes: see
    test_redis_cluster.py, which waits for the replica before killing.)"""

    def __init__(self, directory: Path) -> None:
        self.cluster = RedisClusterServers(directory)
        self.cluster.start()
        self.url = self.cluster.url
        self.prefix = ""

    def disrupt(self) -> None:
        session = self.cluster.owner(f"{{{self.prefix}:{SESSION}}}:s")
        shared = self.cluster.owner(f"{{{self.prefix}}}:workers")
        victim = (
            shared
            if shared is not session
            else next(n for n in self.cluster.masters() if n is not session)
        )
        victim.stop(kill=True)

    async def stored(self, prefix: str, session: str) -> list[str]:
        await anyio.to_thread.run_sync(self.cluster.wait_ok)  # the failover is over
        key = f"{{{prefix}:{session}}}:s"
        r = redis.Redis(port=self.cluster.owner(key).port, decode_responses=True)
        try:
            entries = cast(Any, r.xrange(key))
            return [json.loads(fields["e"])["type"] for _, fields in entries]
        finally:
            r.close()

    def stop(self) -> None:
        self.cluster.stop()


class NatsBroker(Broker):
    def __init__(self, directory: Path) -> None:
        self.server = NatsServer(directory)
        self.server.start()
        self.url = self.server.url

    def disrupt(self) -> None:
        self.server.restart(kill=True)  # SIGKILL; the file store is kept

    async def stored(self, prefix: str, session: str) -> list[str]:
        return await nats_stored([self.url], prefix, session)

    def stop(self) -> None:
        self.server.stop()


class NatsClusterBroker(Broker):
    """Three servers, R3 streams: one server is SIGKILLed mid-stream and stays down."""

    def __init__(self, directory: Path) -> None:
        self.cluster = NatsCluster(directory)
        self.cluster.start()
        self.url = ",".join(self.cluster.urls)

    def disrupt(self) -> None:
        self.cluster.servers[0].stop(kill=True)

    async def stored(self, prefix: str, session: str) -> list[str]:
        live = [s.url for s in self.cluster.servers if s.proc is not None]
        return await nats_stored(live, prefix, session)

    def stop(self) -> None:
        self.cluster.stop()


class PostgresDatabase(Broker):
    """A PostgreSQL server, SIGKILLed mid-stream and started again (its data kept)."""

    def __init__(self, directory: Path) -> None:
        self.server = PostgresServer(directory)
        self.server.start()
        self.url = self.server.dsn

    def disrupt(self) -> None:
        self.server.restart(kill=True)

    async def stored(self, prefix: str, session: str) -> list[str]:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            cur = await conn.execute(
                f'SELECT blob FROM "{prefix}_events" WHERE session = %s ORDER BY seq', (session,)
            )
            return [json.loads(blob)["type"] for (blob,) in await cur.fetchall()]

    def stop(self) -> None:
        self.server.close()


@pytest.fixture(
    params=[
        "redis",
        "redis-cluster",
        "nats",
        "nats-cluster",
        "postgres",
    ]
)
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "redis":
        require_redis()
        made: Broker = RedisBroker(tmp_path)
    elif request.param == "redis-cluster":
        require_redis()
        made = RedisClusterBroker(tmp_path)
    elif request.param == "nats":
        require_nats()
        made = NatsBroker(tmp_path)
    elif request.param == "postgres":
        require_postgres()
        made = PostgresDatabase(tmp_path)
    else:
        require_nats()
        made = NatsClusterBroker(tmp_path)
    yield made
    made.stop()


def spawn(*args: str) -> subprocess.Popen[str]:
    return spawn_module("tests.broker_procs", *args)


class Gateway:
    def __init__(self, url: str, prefix: str) -> None:
        self.port = free_port()
        self.proc = spawn("gateway", url, prefix, str(self.port))
        self.url = f"http://127.0.0.1:{self.port}/?session={SESSION}"

    async def ready(self) -> None:
        async def up() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    await client.get(f"http://127.0.0.1:{self.port}/", timeout=0.5)
                return True
            except httpx.HTTPError:
                return False

        with anyio.fail_after(30):
            while not await up():
                if self.proc.poll() is not None:
                    raise RuntimeError("the gateway process exited")
                await anyio.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


class Client:
    """An SSE client that remembers the last id it saw and resumes from it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.last_id: str | None = None

    async def read(self, url: str, *, until: Any, action: Any = None) -> None:
        """Read from ``url`` (resuming) until ``until(event)``; ``action(event)`` may
        do something mid-stream (kill a process...). A broken connection ends it."""
        headers = {"Last-Event-ID": self.last_id} if self.last_id else {}
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http,
                aconnect_sse(http, "GET", url, headers=headers) as source,
            ):
                assert source.response.status_code == 200
                async for sse in source.aiter_sse():
                    if not sse.data:
                        continue
                    event = json.loads(sse.data)
                    event["_sse_id"] = sse.id
                    self.events.append(event)
                    self.last_id = sse.id
                    if action is not None:
                        await action(event)
                    if until(event):
                        return
        except (httpx.HTTPError, httpx.StreamError):
            return  # the gateway died: the caller resumes elsewhere

    def count(self) -> int:
        return len([e for e in self.events if e["type"] != "stream.reset"])


async def test_two_gateways_one_worker_exactly_once(broker: Broker) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    broker.prefix = prefix
    g1, g2 = Gateway(broker.url, prefix), Gateway(broker.url, prefix)
    worker: subprocess.Popen[str] | None = None
    try:
        await g1.ready()
        await g2.ready()
        worker = spawn("worker", broker.url, prefix, SESSION, "150", "60")
        client = Client()
        # 1. Read from gateway 1, then the connection is cut.
        await client.read(g1.url, until=lambda e: client.count() >= 60)
        # 2. Resume on gateway 2 with Last-Event-ID; gateway 2 is killed mid-stream.
        mark = client.count()

        async def kill_g2(event: dict[str, Any]) -> None:
            if client.count() >= mark + 60:
                g2.kill()

        await client.read(g2.url, until=lambda e: False, action=kill_g2)
        assert g2.proc.poll() is not None
        # 3. Resume on gateway 1; the broker is restarted (SIGKILL; Redis keeps its
        #    append-only file, NATS its store, PostgreSQL its data directory) or, in a
        #    cluster, loses one server for good, while the client reads and the worker
        #    publishes.
        mark = client.count()
        restarted = False

        async def restart_redis(event: dict[str, Any]) -> None:
            nonlocal restarted
            if not restarted and client.count() >= mark + 30:
                restarted = True
                await anyio.to_thread.run_sync(broker.disrupt)

        # 4. The worker hangs with a call open and is killed: a gateway closes the call.
        async def kill_worker(event: dict[str, Any]) -> None:
            await restart_redis(event)
            if event["type"] == "tool.started" and event["call_id"] == "hang":
                assert worker is not None
                worker.send_signal(signal.SIGKILL)

        await client.read(g1.url, until=lambda e: e["type"] == "run.finished", action=kill_worker)
        assert restarted
        assert worker.wait(10) == -signal.SIGKILL
        await anyio.sleep(0.5)  # time for a second terminal to show up, if there were one
        # Every event exactly once, in order: the client's view equals the stored stream.
        stored = await broker.stored(prefix, SESSION)
        seen = [e for e in client.events if e["type"] != "stream.reset"]
        assert [e["type"] for e in seen] == stored
        ids = [int(e["id"].rpartition("-")[2]) for e in seen]
        assert ids == sorted(set(ids)), "ids strictly increasing: no duplicate, no reordering"
        assert [e["type"] for e in client.events].count("stream.reset") == 1, "only the first"
        # Exactly one terminal per call; the hung call closed by a gateway.
        terminals: dict[str, list[dict[str, Any]]] = {}
        for e in seen:
            if e["type"] in ("tool.completed", "tool.failed", "tool.cancelled"):
                terminals.setdefault(e["call_id"], []).append(e)
        assert all(len(v) == 1 for v in terminals.values())
        assert set(terminals) == {f"c{i}" for i in range(150)} | {"hang"}
        assert terminals["hang"][0]["type"] == "tool.cancelled"
        assert terminals["hang"][0]["reason"] == "worker lost"
        assert seen[-1]["type"] == "run.finished" and seen[-1]["outcome"] == "cancelled"
    finally:
        for proc in (worker, g1.proc, g2.proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
        await eventually(lambda: True)


async def test_an_agent_waits_in_one_process_a_person_decides_through_another(
    broker: Broker,
) -> None:
    """The agent waits in a worker; the decision is POSTed to a gateway process; the
    tool runs (with the edited args) or ends denied, once, seen by an SSE client."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    gateway = Gateway(broker.url, prefix)
    worker: subprocess.Popen[str] | None = None
    try:
        await gateway.ready()
        worker = spawn("approvals", broker.url, prefix, SESSION, "4")
        client = Client()
        decided: list[str] = []

        async def decide(event: dict[str, Any]) -> None:
            if event["type"] != "tool.approval.requested":
                return
            n = len(decided)
            body: dict[str, Any] = {"approval_id": event["approval_id"], "approved": n % 2 == 0}
            if n % 2 == 0:
                body["args"] = {"to": f"carol{n}"}
            async with httpx.AsyncClient() as http:
                response = await http.post(gateway.url, json=body)
            assert response.status_code == 200, response.text
            decided.append(event["call_id"])
            # a second gateway process deciding the same approval loses
            async with httpx.AsyncClient() as http:
                again = await http.post(gateway.url, json={**body, "approved": True})
            assert again.status_code == 409

        await client.read(gateway.url, until=lambda e: e["type"] == "run.finished", action=decide)
        assert worker.wait(30) == 0
        seen = [e for e in client.events if e["type"] != "stream.reset"]
        ends = {e["call_id"]: e for e in seen if e["type"] in ("tool.completed", "tool.denied")}
        assert decided == ["a0", "a1", "a2", "a3"]
        assert ends["a0"]["type"] == "tool.completed"
        assert ends["a0"]["result"] == {"sent_to": "carol0"}, "the edited args ran"
        assert ends["a1"]["type"] == "tool.denied" and ends["a1"]["by"] == "anonymous"
        for call_id in decided:
            kinds = [e["type"] for e in seen if e["call_id"] == call_id]
            assert kinds.count("tool.approval.resolved") == 1, kinds
            assert sum(k in ("tool.completed", "tool.denied", "tool.cancelled") for k in kinds) == 1
    finally:
        for proc in (worker, gateway.proc):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
