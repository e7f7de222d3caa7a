"""``toolstream demo``: the web gateway and the simulated agent, until Ctrl-C (or the end
of ``--turns``)."""

from __future__ import annotations

import errno
import socket
import sys

import anyio


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``OSError`` if it cannot be), for uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _why(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "the port is in use (another demo?)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "no such address on this machine"
    return exc.strerror or str(exc)


def run_web_demo(
    *, host: str, port: int, turns: int | None, speed: float, agent: str = "simulated"
) -> int:
    """Serve the demo; returns the exit code."""
    from toolstream.demo import serve

    try:
        sock = _listen(host, port)
    except (OSError, OverflowError) as exc:
        reason = _why(exc) if isinstance(exc, OSError) else "not a port number"
        print(
            f"toolstream demo: cannot listen on {host}:{port}: {reason}. "
            f"Choose another port: toolstream demo --port {port + 1} "
            f"(or make demo PORT={port + 1})",
            file=sys.stderr,
        )
        return 1

    def ready(url: str) -> None:
        ending = (
            f"stops after {turns} turn{'s' if turns != 1 else ''}" if turns else "Ctrl-C to stop"
        )
        print(
            f"toolstream demo: open {url}  (chat with the agent at {url}chat; SSE at "
            f"{url}events?session=demo, WebSocket at {url.replace('http', 'ws', 1)}ws) — "
            f"{ending}",
            flush=True,
        )

    try:
        anyio.run(
            lambda: serve(
                host=host,
                port=port,
                turns=turns,
                speed=speed,
                on_ready=ready,
                sock=sock,
                agent=agent,
            ),
            backend="asyncio",
        )
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    print("toolstream demo: stopped", file=sys.stderr)
    return 0
