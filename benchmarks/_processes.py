"""Starting the benchmark servers as processes of their own."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(module: str, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """``python -m <module> <kind> PORT <args...>`` on a free port; returns once it
    accepts connections."""
    port = free_port()
    kind, *rest = args
    server = subprocess.Popen(
        [sys.executable, "-m", module, kind, str(port), *rest],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                server.wait()
                raise RuntimeError(f"{module} {kind} did not start") from None
            time.sleep(0.05)


async def wait_for_go(port: int) -> socket.socket:
    """Listen on ``port`` and return once the benchmark says go: the first connection
    is :func:`start_server`'s probe, the second the signal. Close the listener after."""
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    for _ in range(2):
        conn, _ = await loop.sock_accept(listener)
        conn.close()
    return listener
