"""The resuming SSE and WebSocket clients."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import anyio
import attrs

import toolstream as ts

logger = logging.getLogger("toolstream.client")

__all__ = ["Frame", "SSEClient", "WebSocketClient"]


@attrs.frozen
class Frame:
    """One wire message as a client receives it."""

    #: The frame id (resume from it).
    id: str
    #: The SSE event name, if any.
    event: str | None
    #: The message: parsed JSON, or the verbatim text of a raw line (``[DONE]``).
    data: Any


def _with_query(url: str, params: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, parts.fragment))


class _Client:
    def __init__(self, *, reconnect_delay: float, max_reconnects: int | None) -> None:
        #: The state of the session as the events received so far describe it.
        self.view = ts.LiveView()
        #: The id to resume from (the last frame received).
        self.last_id: str | None = None
        #: How many times the connection was re-established.
        self.reconnects = 0
        self.reconnect_delay = reconnect_delay
        self.max_reconnects = max_reconnects

    def frames(self) -> AsyncGenerator[Frame, None]:  # pragma: no cover - abstract
        """Every frame, across reconnections."""
        raise NotImplementedError

    async def events(self) -> AsyncGenerator[ts.Event, None]:
        """The native events (``dialect="native"``), each applied to ``view`` first.
        (Stopping early? ``async with contextlib.aclosing(client.events()) as events``
        closes the connection at once.)"""
        async with aclosing(self.frames()) as frames:
            async for frame in frames:
                if not isinstance(frame.data, dict):
                    continue
                try:
                    event = ts.from_dict(frame.data)
                except ts.EventDecodeError:
                    logger.warning("not a native event (wrong dialect?): %.80s", frame.data)
                    continue
                self.view.apply(event)
                yield event

    def _may_retry(self) -> bool:
        return self.max_reconnects is None or self.reconnects < self.max_reconnects

    async def __aenter__(self) -> _Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class SSEClient(_Client):
    """Reads an :class:`~toolstream.sse.SSEApp` stream; reconnects with
    ``Last-Event-ID`` after a drop, so it misses nothing (or receives a reset).

    A per-run stream (``run=``) ends when the server ends it; a session stream is
    followed until the iteration stops or ``max_reconnects`` is exhausted.
    """

    def __init__(
        self,
        url: str,
        *,
        session: str | None = None,
        dialect: str | None = None,
        run: str | None = None,
        headers: dict[str, str] | None = None,
        last_event_id: str | None = None,
        reconnect_delay: float = 0.5,
        max_reconnects: int | None = None,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnects=max_reconnects)
        params = {k: v for k, v in (("session", session), ("dialect", dialect), ("run", run)) if v}
        self.url = _with_query(url, params)
        self.run = run
        self.headers = dict(headers or {})
        self.last_id = last_event_id

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """Every frame, across reconnections."""
        import httpx
        from httpx_sse import aconnect_sse

        # Redirects are followed: an SSEApp mounted under a path answers 307 to the same
        # path with a trailing slash (see docs/gateway.md).
        timeout = httpx.Timeout(10.0, read=None)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http:
            while True:
                headers = dict(self.headers)
                if self.last_id:
                    headers["Last-Event-ID"] = self.last_id
                ended = False
                try:
                    async with aconnect_sse(http, "GET", self.url, headers=headers) as source:
                        response = source.response
                        if response.status_code != 200:
                            body = (await response.aread()).decode(errors="replace")
                            raise ts.ToolstreamError(
                                f"{self.url}: HTTP {response.status_code}: {body[:200]}"
                            )
                        async for sse in source.aiter_sse():
                            if not sse.data:
                                continue  # a heartbeat comment, as httpx-sse reports it
                            if sse.id:
                                self.last_id = sse.id
                            try:
                                data: Any = json.loads(sse.data)
                            except ValueError:
                                data = sse.data
                            yield Frame(
                                id=sse.id or "",
                                event=sse.event if sse.event != "message" else None,
                                data=data,
                            )
                    ended = True
                except (httpx.TransportError, httpx.StreamError) as exc:
                    logger.info("stream dropped (%s); resuming after %s", exc, self.last_id)
                if ended and self.run is not None:
                    return  # a per-run stream ends with its run
                if not self._may_retry():
                    return
                self.reconnects += 1
                await anyio.sleep(self.reconnect_delay)


class WebSocketClient(_Client):
    """Reads a :class:`~toolstream.websocket.WebSocketApp` socket for one session;
    reconnects and resubscribes with ``after`` its last id after a drop. Answers the
    server's pings. asyncio only (the ``websockets`` library)."""

    def __init__(
        self,
        url: str,
        *,
        session: str,
        dialect: str | None = None,
        run: str | None = None,
        headers: dict[str, str] | None = None,
        after: str | None = None,
        reconnect_delay: float = 0.5,
        max_reconnects: int | None = None,
    ) -> None:
        super().__init__(reconnect_delay=reconnect_delay, max_reconnects=max_reconnects)
        self.url = url
        self.session = session
        self.dialect = dialect
        self.run = run
        self.headers = dict(headers or {})
        self.last_id = after

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """Every frame, across reconnections."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                async with connect(self.url, additional_headers=self.headers, max_size=None) as ws:
                    request: dict[str, Any] = {"op": "subscribe", "session": self.session}
                    for key, value in (
                        ("after", self.last_id),
                        ("dialect", self.dialect),
                        ("run", self.run),
                    ):
                        if value:
                            request[key] = value
                    await ws.send(json.dumps(request))
                    async for text in ws:
                        message = json.loads(text)
                        op = message.get("op")
                        if op == "ping":
                            await ws.send('{"op":"pong"}')
                        elif op == "event":
                            self.last_id = message["id"]
                            data = message.get("raw") if "raw" in message else message.get("data")
                            yield Frame(id=message["id"], event=message.get("event"), data=data)
                        elif op == "error":
                            raise ts.ToolstreamError(
                                f"{self.url}: {message.get('code')}: {message.get('message')}"
                            )
                        elif op == "unsubscribed":
                            return  # a run subscription ended
            except (ConnectionClosed, OSError) as exc:
                logger.info("socket dropped (%s); resuming after %s", exc, self.last_id)
            if not self._may_retry():
                return
            self.reconnects += 1
            await anyio.sleep(self.reconnect_delay)
