"""Real nats-server processes (Debian's package) with JetStream on free loopback ports:
one server, or a cluster of three, each with its own store directory."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.redis_server import PortTaken, free_low_port, free_port, start_on_a_free_port

NATS_SERVER = shutil.which("nats-server") or (
    "/usr/sbin/nats-server" if Path("/usr/sbin/nats-server").exists() else None
)


def require_nats() -> None:
    """Skip (or, under TOOLSTREAM_REQUIRE_ALL=1, fail) a test that needs nats-server."""
    from tests.conftest import require

    require(NATS_SERVER is not None, "nats-server not installed (Debian: apt install nats-server)")


class NatsServer:
    """One ``nats-server -js`` on 127.0.0.1; a restart keeps its store (file storage)."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        name: str = "n1",
        cluster_port: int | None = None,
        routes: list[int] | None = None,
    ) -> None:
        assert NATS_SERVER is not None
        self.directory = directory
        self.port = port or free_port()
        self._may_move = port is None  # see RedisServer: a port taken before the bind
        self.name = name
        self.cluster_port = cluster_port
        self.routes = routes or []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        start_on_a_free_port(self, self._start)

    def _start(self) -> None:
        assert NATS_SERVER is not None
        args = [
            NATS_SERVER,
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.directory / "store"),
            "-n",
            self.name,
            "-l",
            str(self.directory / "nats.log"),
        ]
        if self.cluster_port is not None:
            args += [
                "--cluster_name",
                "toolstream",
                "--cluster",
                f"nats://127.0.0.1:{self.cluster_port}",
                "--routes",
                ",".join(f"nats://127.0.0.1:{p}" for p in self.routes),
            ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    if s.recv(16).startswith(b"INFO"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.proc.poll() is None:  # never answered: do not leave it running
            self.proc.kill()
        self.proc.wait()
        log = self.log()[-2000:]
        taken = f"127.0.0.1:{self.port}" in log and "address already in use" in log.lower()
        if self._may_move and self.proc.poll() is not None and taken:
            (self.directory / "nats.log").unlink()
            raise PortTaken(self.port)
        raise RuntimeError(f"nats-server did not start on port {self.port}:\n{log}")

    def log(self) -> str:
        path = self.directory / "nats.log"
        return path.read_text(errors="replace") if path.exists() else ""

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

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()


class NatsCluster:
    """Three nats-servers routed into one JetStream cluster (for R3 streams)."""

    def __init__(self, directory: Path) -> None:
        # Route ports below the ephemeral range: no client connection takes one before
        # its server binds it (the routes are fixed, so a node cannot move).
        cluster_ports = free_low_port(3)
        self.servers = []
        for i in range(3):
            d = directory / f"n{i + 1}"
            d.mkdir(parents=True, exist_ok=True)
            others = [p for j, p in enumerate(cluster_ports) if j != i]
            self.servers.append(
                NatsServer(d, name=f"n{i + 1}", cluster_port=cluster_ports[i], routes=others)
            )

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> None:
        """Start the three servers; on any failure, stop what started."""
        try:
            for server in self.servers:
                server.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, within: float = 30.0) -> None:
        """Wait until the cluster has elected its JetStream meta leader."""
        import asyncio

        import nats

        async def ready() -> bool:
            nc = await nats.connect(self.urls, connect_timeout=1)
            try:
                await nc.jetstream(timeout=1).account_info()
                return True
            except Exception:
                return False
            finally:
                await nc.close()

        from concurrent.futures import ThreadPoolExecutor

        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with ThreadPoolExecutor(1) as pool:  # callable from inside a running loop
                if pool.submit(asyncio.run, ready()).result():
                    return
            time.sleep(0.1)
        raise RuntimeError("the NATS cluster elected no JetStream leader in time")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
