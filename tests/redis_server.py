"""A real redis-server (Debian's package) on a free loopback port, for the RedisBus tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REDIS_SERVER = shutil.which("redis-server")


def require_redis() -> None:
    """Skip (or, under TOOLSTREAM_REQUIRE_ALL=1, fail) a test that needs redis-server."""
    from tests.conftest import require

    require(
        REDIS_SERVER is not None, "redis-server not installed (Debian: apt install redis-server)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortTaken(Exception):
    """The free port chosen for a server was taken before it could bind it."""


def start_on_a_free_port(
    server: Any, start: Callable[[], None], pick: Callable[[], int] = free_port
) -> None:
    """``start()`` the server; if the port it chose was taken meanwhile (``PortTaken``),
    ``pick()`` another (five tries). A restart keeps its port: clients know it."""
    for _ in range(5):
        try:
            start()
        except PortTaken:
            server.port = pick()
            continue
        server._may_move = False
        return
    raise RuntimeError(f"{type(server).__name__} found no free port in five tries")


class RedisServer:
    """One redis-server process with an append-only file, so a restart keeps the data."""

    def __init__(
        self, directory: Path, *, port: int | None = None, pick: Callable[[], int] = free_port
    ) -> None:
        assert REDIS_SERVER is not None
        self.directory = directory
        self._pick = pick
        self.port = port or pick()
        # A port chosen here may be taken by another process before the server binds
        # it (a client's ephemeral port): the first start then tries another.
        self._may_move = port is None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, persist: bool = True, extra: list[str] | None = None) -> None:
        start_on_a_free_port(self, lambda: self._start(persist=persist, extra=extra), self._pick)

    def _start(self, *, persist: bool, extra: list[str] | None) -> None:
        assert REDIS_SERVER is not None
        if extra is not None:
            self._extra = extra
        extra = getattr(self, "_extra", [])
        args = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes" if persist else "no",
            "--appendfsync",
            "always",
            "--logfile",
            str(self.directory / "redis.log"),
            *extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.proc.poll() is None:  # never answered: do not leave it running
            self.proc.kill()
        self.proc.wait()
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        if self._may_move and self.proc.poll() is not None and "Address already in use" in log:
            (self.directory / "redis.log").unlink()
            raise PortTaken(self.port)
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log}")

    def command(self, line: bytes) -> bytes:
        """One inline command's raw reply (for the cluster helper's checks)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(line + b"\r\n")
            data = b""
            s.settimeout(0.3)
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            return data

    def stop(self, *, kill: bool = False) -> None:
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait()

    def restart(self, *, kill: bool = False, wipe: bool = False) -> None:
        self.stop(kill=kill)
        if wipe:
            for path in self.directory.iterdir():
                if path.name != "redis.log":
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        os.unlink(path)
        self.start()


def free_low_port(count: int = 1, *, also: int | None = None) -> list[int]:
    """``count`` distinct free ports below Linux's ephemeral range (32768 up), so no
    client's outgoing connection takes one between this check and a server's bind
    (another listener still may). With ``also``, port + ``also`` is free too."""
    import random

    found: list[int] = []
    for _ in range(200 * count):
        port = random.randint(10_000, 22_000)
        if port in found:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                if also is not None:
                    b.bind(("127.0.0.1", port + also))
        except OSError:
            continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"no {count} free ports below the ephemeral range")


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, both below the
    ephemeral range; if another listener takes one before the bind, the node moves
    (``start_on_a_free_port``)."""
    return free_low_port(also=10_000)[0]


class RedisClusterServers:
    """A Redis Cluster of three masters, each with one replica (six redis-servers,
    append-only files), created with ``redis-cli --cluster create``."""

    def __init__(self, directory: Path, *, replicas: int = 1) -> None:
        self.directory = directory
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        for i in range(3 * (1 + replicas)):
            d = directory / f"r{i}"
            d.mkdir(parents=True, exist_ok=True)
            self.nodes.append(RedisServer(d, pick=free_cluster_port))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> None:
        """Start the nodes and create the cluster; on any failure, stop what started
        (no redis-server outlives a failed fixture)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        for node in self.nodes:
            node.start(
                extra=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-replica-validity-factor",
                    "0",  # a replica may take over however fresh the cluster is
                    "--repl-diskless-sync-delay",
                    "0",  # replicas sync at once (Redis waits 5 s by default)
                ]
            )
        cli = shutil.which("redis-cli")
        assert cli is not None
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *[f"127.0.0.1:{n.port}" for n in self.nodes],
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        self.wait_ok()

    def wait_ok(self, within: float = 30.0) -> None:
        """Wait until every live node says ``cluster_state:ok`` and knows all slots."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            live = [n for n in self.nodes if n.proc is not None]
            states = [n.command(b"CLUSTER INFO") for n in live]
            links = [n.command(b"INFO replication") for n in live]
            synced = all(b"role:master" in r or b"master_link_status:up" in r for r in links)
            if synced and all(b"cluster_state:ok" in s for s in states):
                return
            time.sleep(0.1)
        raise RuntimeError("the Redis cluster did not become ok in time")

    def owner(self, key: str) -> RedisServer:
        """The master node that holds ``key``'s slot now."""
        import redis

        live = next(n for n in self.nodes if n.proc is not None)
        client = redis.Redis(port=live.port)
        try:
            run: Any = client.execute_command
            slot = int(run("CLUSTER KEYSLOT", key))
            for start, end, master, *_ in run("CLUSTER SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        finally:
            client.close()
        raise LookupError(f"no master holds {key!r}")

    def masters(self) -> list[RedisServer]:
        """The nodes that are masters now."""
        out = []
        for n in self.nodes:
            if n.proc is not None and b"role:master" in n.command(b"INFO replication"):
                out.append(n)
        return out

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
