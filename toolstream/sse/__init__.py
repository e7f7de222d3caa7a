"""Server-Sent Events: :class:`SSEApp`, an ASGI app streaming a session's tool lifecycle.

::

    from toolstream.sse import SSEApp
    app = SSEApp(bus)                  # uvicorn module:app  ->  GET /?session=s1

Resumable (``Last-Event-ID``), heartbeats, authorization, injection-proof frames,
every dialect (``&dialect=agui``), per-run streams (``&run=<id>``).
"""

from __future__ import annotations

from ._app import SSEApp, encode_frame, frames

__all__ = ["SSEApp", "encode_frame", "frames"]
