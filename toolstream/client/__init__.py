"""A Python client for toolstream's SSE and WebSocket endpoints: resumes by id after a
drop and keeps a :class:`~toolstream.LiveView` (used by ``toolstream tail`` and tests).

Needs the ``client`` extra (``httpx``, ``httpx-sse``, ``websockets``)::

    from toolstream.client import SSEClient

    async with SSEClient("http://127.0.0.1:8765/events", session="demo") as client:
        async for event in client.events():
            print(event.type, client.view.calls.get(event.call_id))
"""

from __future__ import annotations

from toolstream._extras import require

for _module in ("httpx", "httpx_sse", "websockets"):
    require(_module, "client", "toolstream.client")

from ._client import ConnectionStatus, Frame, SSEClient, WebSocketClient  # noqa: E402

__all__ = ["ConnectionStatus", "Frame", "SSEClient", "WebSocketClient"]
