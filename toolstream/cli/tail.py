"""``toolstream tail URL``: a toolstream endpoint's calls, live, in the terminal.

With ``--json`` it is a Unix filter: one JSON line per event on stdout, flushed as it
comes; where the connection stands goes to stderr; a closed pipe (``| head``) or a
SIGTERM ends it quietly with what was written intact.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

import toolstream as ts

if TYPE_CHECKING:
    from toolstream.client import ConnectionStatus, SSEClient, WebSocketClient

__all__ = ["run_tail"]


def _client(
    url: str,
    *,
    session: str,
    dialect: str,
    headers: dict[str, str],
    on_status: Callable[[ConnectionStatus], object],
) -> SSEClient | WebSocketClient:
    from toolstream.client import SSEClient, WebSocketClient

    if url.startswith(("ws://", "wss://")):
        return WebSocketClient(
            url, session=session, dialect=dialect, headers=headers, on_status=on_status
        )
    return SSEClient(url, session=session, dialect=dialect, headers=headers, on_status=on_status)


async def _print_json(client: SSEClient | WebSocketClient, dialect: str) -> None:
    async with aclosing(client.frames()) as frames:
        async for frame in frames:
            line: Any = (
                frame.data
                if dialect == "native"
                else {"id": frame.id, "event": frame.event, "data": frame.data}
            )
            sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
            sys.stdout.flush()


async def _show(
    client: SSEClient | WebSocketClient, title: str, tg: TaskGroup, *, expand: bool = False
) -> None:
    from .terminal import LiveRenderer

    with LiveRenderer(
        client.view, title=title, status=lambda: client.status, expand=expand
    ) as screen:

        async def tick() -> None:  # spinners, elapsed times, the connection status
            while True:
                await anyio.sleep(0.1)
                screen.refresh()

        tg.start_soon(tick)  # cancelled with the task group when this returns
        async with aclosing(client.events()) as events:
            async for _ in events:
                screen.refresh()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _tail(
    url: str,
    *,
    session: str,
    dialect: str,
    as_json: bool,
    headers: dict[str, str],
    expand: bool = False,
) -> None:
    raw = as_json or dialect != "native"

    def on_status(status: ConnectionStatus) -> None:
        if raw and status.state != "connecting":
            print(f"toolstream tail: {status}", file=sys.stderr, flush=True)

    client = _client(url, session=session, dialect=dialect, headers=headers, on_status=on_status)
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        if sys.platform != "win32":
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
        try:
            if raw:
                await _print_json(client, dialect)
            else:
                title = f"toolstream tail {url} — session {session}"
                await _show(client, title, tg, expand=expand)
        except (ts.ToolstreamError, BrokenPipeError) as exc:
            failure = exc  # raised below, outside the task group (not in a group)
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


def run_tail(
    url: str,
    *,
    session: str,
    dialect: str,
    as_json: bool,
    headers: dict[str, str],
    expand: bool = False,
) -> int:
    """Follow ``url`` until Ctrl-C, SIGTERM or a closed stdout; returns the exit code.
    A sub-agent's calls are indented under their call, collapsed to one line once it
    ended (``expand``: always shown)."""
    try:
        anyio.run(
            lambda: _tail(
                url,
                session=session,
                dialect=dialect,
                as_json=as_json,
                headers=headers,
                expand=expand,
            ),
            backend="asyncio",
        )
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # The reader went away (`| head -3`): stop quietly, as Unix tools do. Python
        # would flush stdout again at exit and complain; point it at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except ts.ToolstreamError as exc:
        print(f"toolstream tail: {exc}", file=sys.stderr)
        return 1
    return 0
