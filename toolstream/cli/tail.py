"""``toolstream tail URL``: a toolstream endpoint's calls, live, in the terminal."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

import toolstream as ts


async def _tail(
    url: str, *, session: str, dialect: str, as_json: bool, headers: dict[str, str]
) -> None:
    from toolstream.client import SSEClient, WebSocketClient

    client: SSEClient | WebSocketClient
    if url.startswith(("ws://", "wss://")):
        client = WebSocketClient(url, session=session, dialect=dialect, headers=headers)
    else:
        client = SSEClient(url, session=session, dialect=dialect, headers=headers)
    if as_json or dialect != "native":
        async for frame in client.frames():
            line: Any = (
                frame.data
                if dialect == "native"
                else {"id": frame.id, "event": frame.event, "data": frame.data}
            )
            print(json.dumps(line, ensure_ascii=False), flush=True)
        return
    from .terminal import LiveRenderer

    with LiveRenderer(client.view, title=f"toolstream tail {url} — session {session}") as screen:
        async with anyio.create_task_group() as tg:

            async def tick() -> None:
                while True:
                    await anyio.sleep(0.1)
                    screen.refresh()

            tg.start_soon(tick)
            async for _ in client.events():
                screen.refresh()
            tg.cancel_scope.cancel()


def run_tail(
    url: str, *, session: str, dialect: str, as_json: bool, headers: dict[str, str]
) -> int:
    """Follow ``url`` until Ctrl-C; returns the exit code."""
    try:
        anyio.run(
            lambda: _tail(url, session=session, dialect=dialect, as_json=as_json, headers=headers),
            backend="asyncio",
        )
    except KeyboardInterrupt:
        return 0
    except ts.ToolstreamError as exc:
        print(f"toolstream tail: {exc}", file=sys.stderr)
        return 1
    return 0
