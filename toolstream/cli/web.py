"""``toolstream demo``: the web gateway and the simulated agent, until Ctrl-C."""

from __future__ import annotations

import sys

import anyio


def run_web_demo(*, host: str, port: int, turns: int | None, speed: float) -> int:
    """Serve the demo; returns the exit code."""
    from toolstream.demo import serve

    def ready(url: str) -> None:
        print(
            f"toolstream demo: open {url}  (SSE at {url}events?session=demo, WebSocket at "
            f"{url.replace('http', 'ws', 1)}ws) — Ctrl-C to stop",
            flush=True,
        )

    try:
        anyio.run(
            lambda: serve(host=host, port=port, turns=turns, speed=speed, on_ready=ready),
            backend="asyncio",
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"toolstream demo: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    print("toolstream demo: stopped", file=sys.stderr)
    return 0
