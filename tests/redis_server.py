"""A real redis-server (Debian's package) on a free loopback port, for the RedisBus tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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


class RedisServer:
    """One redis-server process with an append-only file, so a restart keeps the data."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        assert REDIS_SERVER is not None
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, persist: bool = True) -> None:
        assert REDIS_SERVER is not None
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
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log}")

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
