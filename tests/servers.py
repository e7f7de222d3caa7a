"""A real uvicorn server on 127.0.0.1 for tests, in a thread (the bus is thread-safe)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import uvicorn

ROOT = Path(__file__).resolve().parent.parent


def spawn_module(module: str, *args: str) -> subprocess.Popen[str]:
    """``python -m <module> <args>`` from the repository root (for the tests' helper
    processes: workers, gateways)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        text=True,
    )


class Served:
    """A running server: its base URL, and how to stop it."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, port: int) -> None:
        self.server = server
        self.thread = thread
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def stop(self, timeout: float = 10.0) -> float:
        """Ask the server to exit; returns how long it took."""
        start = time.monotonic()
        self.server.should_exit = True
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"uvicorn did not stop within {timeout} s")
        return time.monotonic() - start


def bind(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for a server started later)."""
    with bind() as sock:
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def serve(
    app: Any, *, port: int = 0, ws: str = "none", sndbuf: int | None = None, **config: Any
) -> Iterator[Served]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port unless given). ``sndbuf``: the
    kernel's send buffer of every connection (inherited from the listening socket; fixed,
    not grown by the kernel), so a client that stops reading stops the server's writes
    after little data."""
    sock = bind(port)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    actual = sock.getsockname()[1]
    server = uvicorn.Server(
        # A server in a thread has no signal handler for toolstream to watch: let
        # uvicorn end the open streams itself, after a short grace period.
        uvicorn.Config(
            app,
            lifespan=config.pop("lifespan", "off"),
            log_level=config.pop("log_level", "warning"),
            ws=ws,
            timeout_graceful_shutdown=config.pop("timeout_graceful_shutdown", 0.5),
            **config,
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.005)
    served = Served(server, thread, actual)
    try:
        yield served
    finally:
        if thread.is_alive():
            served.stop()
        sock.close()


def settles(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait (blocking: for sync tests) until ``condition()`` holds; AssertionError after
    ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s")
        time.sleep(0.01)


async def eventually(condition: Callable[[], bool], *, within: float = 5.0) -> None:
    """Wait until ``condition()`` holds. For conditions that change in another thread
    (the server's), where no event can be awaited: poll, briefly."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - the state changes in the server's thread
            await anyio.sleep(0.005)


async def take(sub: Any, count: int, within: float = 10.0) -> list[Any]:
    """The next ``count`` events of a subscription (``TimeoutError`` after ``within`` s)."""
    out: list[Any] = []
    with anyio.fail_after(within):
        async for event in sub:
            out.append(event)
            if len(out) >= count:
                break
    return out


async def asgi_get(app: Any, target: str, *, within: float = 10.0) -> tuple[int, bytes]:
    """GET ``target`` (path and query) from an ASGI ``app`` in this event loop: the
    status and the first body the app sends (a stream's first frames), then the client
    goes away. For a bus that must live in the test's own loop (a broker bus)."""
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    status = 0
    body = b""
    answered = anyio.Event()
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")
            if body or not message.get("more_body"):
                answered.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(app, scope, receive, send)
        with anyio.fail_after(within):
            await answered.wait()
        gone.set()
    return status, body
