"""The resuming SSE and WebSocket clients."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from types import TracebackType
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import attrs

import toolstream as ts

logger = logging.getLogger("toolstream.client")

__all__ = ["ConnectionStatus", "Frame", "SSEClient", "WebSocketClient"]

_MAX_DELAY = 10.0  # the longest wait between two attempts


@attrs.frozen
class Frame:
    """One wire message as a client receives it."""

    #: The frame id (resume from it).
    id: str
    #: The SSE event name, if any.
    event: str | None
    #: The message: parsed JSON, or the verbatim text of a raw line (``[DONE]``).
    data: Any


@attrs.frozen
class ConnectionStatus:
    """Where a client's connection stands, for a user to see."""

    #: ``"connecting"``, ``"connected"``, ``"reconnecting"`` (after ``retry_in`` s),
    #: ``"ended"`` (the stream ended, or no more attempts).
    state: Literal["connecting", "connected", "reconnecting", "ended"]
    #: Why it is not connected (``"connection refused"``, ``"HTTP 503: …"``), if known.
    reason: str | None = None
    #: Seconds until the next attempt (``"reconnecting"``).
    retry_in: float | None = None

    def __str__(self) -> str:
        if self.state == "reconnecting":
            why = f": {self.reason}" if self.reason else ""
            return f"reconnecting in {self.retry_in:.1f} s{why}"
        return self.state if self.reason is None else f"{self.state}: {self.reason}"


class _Client:
    def __init__(
        self,
        *,
        reconnect_delay: float,
        max_reconnects: int | None,
        on_status: Callable[[ConnectionStatus], object] | None,
    ) -> None:
        #: The state of the session as the events received so far describe it.
        self.view = ts.LiveView()
        #: The id to resume from (the last frame received).
        self.last_id: str | None = None
        #: How many times the connection was re-established.
        self.reconnects = 0
        self.reconnect_delay = reconnect_delay
        self.max_reconnects = max_reconnects
        #: Where the connection stands now (see ``on_status`` for changes).
        self.status = ConnectionStatus("connecting")
        self._on_status = on_status
        self._delay = reconnect_delay

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

    def _set_status(self, status: ConnectionStatus) -> None:
        if status == self.status:
            return
        self.status = status
        if self._on_status is not None:
            self._on_status(status)

    def _connected(self) -> None:
        self._delay = self.reconnect_delay
        self._set_status(ConnectionStatus("connected"))

    async def _retry(self, reason: str) -> bool:
        """Wait before the next attempt (doubling up to 10 s while it keeps failing);
        False when no attempt is left."""
        if self.max_reconnects is not None and self.reconnects >= self.max_reconnects:
            self._set_status(ConnectionStatus("ended", reason))
            return False
        delay = self._delay
        self._delay = min(self._delay * 2, _MAX_DELAY)
        self._set_status(ConnectionStatus("reconnecting", reason, delay))
        await anyio.sleep(delay)
        self.reconnects += 1
        self._set_status(ConnectionStatus("connecting", reason))
        return True

    async def __aenter__(self) -> _Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


def _with_query(url: str, params: dict[str, str]) -> str:
    """``url`` with ``params`` in its query; a parameter the URL has already is replaced
    (never sent twice: a server would take the first)."""
    parts = urlsplit(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    query = urlencode([*kept, *params.items()])
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, parts.fragment))


def _reason(exc: BaseException) -> str:
    """A short reason for a failed connection: the OS error under httpx's (or trio's
    group of them), if any."""
    pending: list[BaseException] = [exc]
    while pending:
        seen = pending.pop(0)
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return f"unknown host ({seen.strerror})"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        group = getattr(seen, "exceptions", None)  # an exception group (3.10: a backport)
        if isinstance(group, tuple | list):
            pending.extend(e for e in group if isinstance(e, BaseException))
        pending.extend(e for e in (seen.__cause__, seen.__context__) if e is not None)
    return (str(exc) or type(exc).__name__)[:120]


def _not_a_stream(url: str, content_type: str) -> ts.ToolstreamError:
    parts = urlsplit(url)
    hint = ""
    if parts.path in ("", "/"):
        events = urlunsplit((parts.scheme, parts.netloc, "/events", "", ""))
        hint = f"; the demo's event stream is {events}"
    return ts.ToolstreamError(
        f"{urlunsplit((parts.scheme, parts.netloc, parts.path, '', ''))} is not an event "
        f"stream (it answers {content_type or 'no content type'}, not text/event-stream)"
        f"{hint}"
    )


class SSEClient(_Client):
    """Reads an :class:`~toolstream.sse.SSEApp` stream; reconnects with
    ``Last-Event-ID`` after a drop, so it misses nothing (or receives a reset).

    A per-run stream (``run=``) ends when the server ends it; a session stream is
    followed until the iteration stops or ``max_reconnects`` is exhausted. While the
    server cannot be reached it retries, waiting ``reconnect_delay`` and twice as long
    each time (up to 10 s); ``status`` says where it stands, and ``on_status`` is called
    with each change. A URL that answers something other than an event stream, or an
    HTTP error other than 5xx, raises :class:`~toolstream.ToolstreamError` saying so.
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
        on_status: Callable[[ConnectionStatus], object] | None = None,
    ) -> None:
        super().__init__(
            reconnect_delay=reconnect_delay, max_reconnects=max_reconnects, on_status=on_status
        )
        params = {k: v for k, v in (("session", session), ("dialect", dialect), ("run", run)) if v}
        self.url = _with_query(url, params)
        self.run = run
        self.headers = dict(headers or {})
        self.last_id = last_event_id

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """Every frame, across reconnections."""
        import httpx
        from httpx_sse import EventSource

        # Redirects are followed: an SSEApp mounted under a path answers 307 to the same
        # path with a trailing slash (see docs/gateway.md).
        timeout = httpx.Timeout(10.0, read=None)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as http:
            while True:
                headers = {"Accept": "text/event-stream", **self.headers}
                if self.last_id:
                    headers["Last-Event-ID"] = self.last_id
                reason = "the stream ended"
                try:
                    async with http.stream("GET", self.url, headers=headers) as response:
                        code = response.status_code
                        if code != 200:
                            body = (await response.aread()).decode(errors="replace")
                            failure = f"HTTP {code}: {body[:200]}"
                            if code < 500:
                                raise ts.ToolstreamError(f"{self.url}: {failure}")
                            raise _Retry(failure)
                        kind = response.headers.get("content-type", "")
                        if not kind.startswith("text/event-stream"):
                            raise _not_a_stream(str(response.url), kind)
                        self._connected()
                        async for sse in EventSource(response).aiter_sse():
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
                    if self.run is not None:
                        self._set_status(ConnectionStatus("ended"))
                        return  # a per-run stream ends with its run
                except _Retry as exc:
                    reason = str(exc)
                except (httpx.TransportError, httpx.StreamError) as exc:
                    reason = _reason(exc)
                    logger.info("stream dropped (%s); resuming after %s", reason, self.last_id)
                if not await self._retry(reason):
                    return


class _Retry(Exception):
    """A failure worth another attempt (a 5xx)."""


class WebSocketClient(_Client):
    """Reads a :class:`~toolstream.websocket.WebSocketApp` socket for one session;
    reconnects and resubscribes with ``after`` its last id after a drop. Answers the
    server's pings. asyncio only (the ``websockets`` library). ``status`` and
    ``on_status`` as for :class:`SSEClient`."""

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
        on_status: Callable[[ConnectionStatus], object] | None = None,
    ) -> None:
        super().__init__(
            reconnect_delay=reconnect_delay, max_reconnects=max_reconnects, on_status=on_status
        )
        self.url = url
        self.session = session
        self.dialect = dialect
        self.run = run
        self.headers = dict(headers or {})
        self.last_id = after

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """Every frame, across reconnections."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
        from websockets.typing import Subprotocol

        from toolstream.websocket import BATCH_SUBPROTOCOL

        while True:
            reason = "the socket closed"
            try:
                async with connect(
                    self.url,
                    additional_headers=self.headers,
                    max_size=None,
                    subprotocols=[Subprotocol(BATCH_SUBPROTOCOL)],  # events in arrays
                ) as ws:
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
                        parsed = json.loads(text)
                        # A batch (the subprotocol accepted) is an array of messages.
                        for message in parsed if isinstance(parsed, list) else (parsed,):
                            op = message.get("op")
                            if op == "event":
                                self.last_id = message["id"]
                                data = (
                                    message.get("raw") if "raw" in message else message.get("data")
                                )
                                yield Frame(id=message["id"], event=message.get("event"), data=data)
                            elif op == "ping":
                                await ws.send('{"op":"pong"}')
                            elif op == "subscribed":
                                self._connected()
                            elif op == "error":
                                raise ts.ToolstreamError(
                                    f"{self.url}: {message.get('code')}: {message.get('message')}"
                                )
                            elif op == "unsubscribed":
                                self._set_status(ConnectionStatus("ended"))
                                return  # a run subscription ended
            except InvalidStatus as exc:
                code = exc.response.status_code
                if code < 500:
                    raise ts.ToolstreamError(
                        f"{self.url}: the WebSocket handshake was refused with HTTP {code}"
                        + (" (a trailing slash? see docs/gateway.md)" if code == 403 else "")
                    ) from None
                reason = f"HTTP {code}"
            except (ConnectionClosed, InvalidHandshake, OSError) as exc:
                reason = _reason(exc)
                logger.info("socket dropped (%s); resuming after %s", reason, self.last_id)
            if not await self._retry(reason):
                return
