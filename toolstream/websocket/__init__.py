"""WebSocket: :class:`WebSocketApp`, several sessions' tool lifecycles over one socket.

::

    from toolstream.websocket import WebSocketApp
    app = WebSocketApp(bus)          # ws://host/  then  {"op": "subscribe", "session": "s1"}
"""

from __future__ import annotations

from ._app import BATCH_SUBPROTOCOL, CLOSE_CODES, WebSocketApp

__all__ = ["BATCH_SUBPROTOCOL", "CLOSE_CODES", "WebSocketApp"]
