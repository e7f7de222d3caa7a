"""SSEApp: a session's tool lifecycle as Server-Sent Events, for browsers and HTTP clients."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import aclosing
from typing import Any

from toolstream import (
    MAX_ID_BYTES,
    Bus,
    BusClosed,
    BusUnavailable,
    DialectError,
    Event,
    Principal,
    RequestInfo,
    SlowConsumer,
    Subscription,
)
from toolstream import _serving as serving
from toolstream._core.codec import to_dict
from toolstream._core.jsonenc import dumpb, dumps
from toolstream.dialects import Dialect, DialectSpec, EncodedFrame, Encoder
from toolstream.dialects._pump import FrameCache, Pump

logger = logging.getLogger("toolstream.sse")

__all__ = ["SSEApp", "encode_frame", "frames"]

_PING = b": ping\n\n"


def encode_frame(frame: EncodedFrame) -> bytes:
    """One SSE frame: ``event:`` (if any), ``id:``, one ``data:`` line, a blank line.

    The data is JSON on one line (JSON escapes every CR and LF inside strings), so no
    value can add or alter a frame; event names and ids with CR, LF or NUL were
    refused by the encoder already.
    """
    message = frame.message
    data = message.raw if message.raw is not None else dumps(message.payload)
    head = f"event: {message.event}\n" if message.event is not None else ""
    if frame.id:
        head += f"id: {frame.id}\n"
    return f"{head}data: {data}\n\n".encode()


class SSEFormat:
    """Frames as SSE bytes."""

    def frame(self, frame: EncodedFrame) -> bytes:
        """One frame (see :func:`encode_frame`)."""
        return encode_frame(frame)

    def native(self, event: Event) -> bytes:
        """What ``Encoder(Native())`` and :func:`encode_frame` give for one event, without
        their per-event objects: the type is a class constant and the id the bus's
        (neither holds CR or LF), and the JSON is on one line."""
        return b"".join(
            (
                b"event: ",
                event.type.encode(),
                b"\nid: ",
                event.id.encode(),
                b"\ndata: ",
                dumpb(to_dict(event)),
                b"\n\n",
            )
        )


_SSE = SSEFormat()


async def frames(
    subscription: Subscription[Any],
    dialect: Dialect,
    *,
    heartbeat: float | None = 15.0,
    retry_ms: int | None = 3000,
) -> AsyncGenerator[bytes, None]:
    """The subscription as encoded SSE bytes, one chunk per batch of events, for
    frameworks that prefer their own streaming response class: a ``retry:`` hint
    first, a ``: ping`` comment after ``heartbeat`` idle seconds (None: never), and the
    dialect's epilogue when the subscription ends."""
    pump: Pump[bytes] = Pump(subscription, Encoder(dialect), _SSE)
    retry = b"" if retry_ms is None else f"retry: {retry_ms}\n".encode()
    async with aclosing(pump.chunks(heartbeat)) as chunks:
        async for chunk in chunks:
            if chunk is None:
                yield _PING
                continue
            yield retry + b"".join(chunk)
            retry = b""


class SSEApp:
    """An ASGI 3 app that streams one session's tool lifecycle as Server-Sent Events.

    ``GET ?session=s1`` (or whatever ``session_from(scope)`` says): a
    ``stream.reset`` of the session first, then live events. With ``Last-Event-ID``
    (or ``&last_event_id=``): exactly the missed events, or a reset when they are
    gone. ``&run=<id>``: only that run, and the response ends after it.
    ``&dialect=``: one of ``dialects`` (by default the four built-in ones;
    ``dialect`` is the default).

    Without ``authorize`` every session is readable: for local use only. With it,
    ``authorize(RequestInfo)`` returns a principal (or None: 401) whose
    ``can_read(session)`` decides (False: 403).

    ``POST ?session=s1`` with ``Content-Type: application/json`` and a body
    ``{"approval_id", "approved", "reason"?, "args"?}`` decides an approval: 200 and
    the resolution, or 400 / 401 / 403 / 404 / 409 (already decided; the winner in
    ``resolution``) / 410 (expired) / 413 / 415 with ``{"error", "code"}``. Who may
    decide: the principal's ``can_approve(session)`` (anyone who can read, without
    ``authorize``); ``by`` is the principal's ``id``. With ``allowed_origins``, a
    request whose ``Origin`` is not in it is refused (403).

    A write to a client that has not completed within ``write_timeout`` seconds (a
    client that stopped reading) ends its response: the stream releases its
    subscription and what it was writing at once, and offers the client a last
    ``: too slow`` comment and the end of the body for ``write_timeout`` more.

    Mount it in any ASGI framework, or serve it bare (``uvicorn module:app``).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        dialect: DialectSpec = "native",
        authorize: serving.Authorize | None = None,
        heartbeat: float = 15.0,
        retry_ms: int = 3000,
        session_from: Callable[[serving.Scope], str | None] | None = None,
        dialects: Iterable[DialectSpec] | None = None,
        buffer: int = 1024,
        allowed_origins: Iterable[str] | None = None,
        max_decision_bytes: int = 64 * 1024,
        write_timeout: float = serving.DEFAULT_WRITE_TIMEOUT,
    ) -> None:
        if not heartbeat > 0:
            raise ValueError(f"heartbeat must be positive seconds, got {heartbeat!r}")
        #: Seconds a write to a client may take before its response ends.
        self.write_timeout = serving.check_write_timeout(write_timeout)
        if retry_ms < 0:
            raise ValueError(f"retry_ms must be >= 0, got {retry_ms!r}")
        self.bus = bus
        self.authorize = authorize
        self.heartbeat = heartbeat
        self.retry_ms = retry_ms
        self.session_from = session_from
        self.buffer = buffer
        #: Origins allowed to open a stream or post a decision (None: any).
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        #: The largest decision body accepted (413 past it).
        self.max_decision_bytes = max_decision_bytes
        self._dialects = serving.Dialects(dialect, dialects)
        # Encodings of stateless dialects, shared by every client of this app: an event
        # sent to 100 clients is serialized once.
        self._cache: FrameCache[bytes] = FrameCache()
        self._streams = serving.OpenStreams()

    @property
    def open_streams(self) -> int:
        """How many responses are streaming now."""
        return len(self._streams)

    def shutdown(self) -> None:
        """End every open stream now, and refuse new ones (503). For servers that do
        not disconnect streaming responses on shutdown. Safe from any thread (the ASGI
        lifespan shutdown of a bare ``SSEApp`` calls it)."""
        self._streams.shutdown()

    async def __call__(
        self, scope: serving.Scope, receive: serving.Receive, send: serving.Send
    ) -> None:
        if await serving.http_only(scope, receive, send, self.shutdown, "SSEApp"):
            return
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            await serving.respond(
                send, 405, "only GET and POST are allowed", [(b"allow", b"GET, POST")]
            )
            return
        request = serving.request_info(scope)
        if await serving.origin_refused(request, self.allowed_origins, send):
            return
        session = self.session_from(scope) if self.session_from else request.query.get("session")
        if not session:
            await serving.respond(send, 400, "missing session: add ?session=<id>")
            return
        if not serving.valid_session(session):
            await serving.respond(
                send, 400, f"the session must be valid text of at most {MAX_ID_BYTES} bytes"
            )
            return
        if method == "POST":
            await self._decide(request, session, receive, send)
            return
        chosen = self._dialects.get(request.query.get("dialect"))
        if chosen is None:
            known = ", ".join(self._dialects.factories)
            await serving.respond(send, 400, f"unknown dialect; this endpoint serves: {known}")
            return
        principal = await self._admit(request, session, send)
        if principal is None:
            return
        if self._streams.closing:
            await serving.respond(send, 503, "the server is shutting down")
            return
        name, factory = chosen
        dialect = factory()
        cursor = request.headers.get("last-event-id") or request.query.get("last_event_id")
        run = request.query.get("run") or None
        if run is not None and not serving.valid_session(run):
            await serving.respond(
                send, 400, f"the run must be valid text of at most {MAX_ID_BYTES} bytes"
            )
            return
        try:
            pump = await serving.open_pump(
                self.bus,
                session=session,
                run=run,
                cursor=cursor,
                dialect=dialect,
                fmt=_SSE,
                cache=self._cache,
                buffer=self.buffer,
            )
        except DialectError as exc:
            await serving.respond(send, 500, f"dialect {name}: {exc}")
            return
        except (BusUnavailable, BusClosed) as exc:
            await serving.unavailable(send, exc)
            return
        headers = serving.stream_headers(dialect)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope["method"] == "HEAD":
            pump.subscription.close()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        await self._serve(pump, receive, send)

    async def _admit(
        self, request: RequestInfo, session: str, send: serving.Send
    ) -> Principal | bool | None:
        """The principal that may read ``session``; None once refused (401 / 403 sent)."""
        refusal = f"not allowed to read session {session!r}"
        return await serving.admit(self.authorize, request, session, send, refusal)

    async def _decide(
        self,
        request: RequestInfo,
        session: str,
        receive: serving.Receive,
        send: serving.Send,
    ) -> None:
        """``POST``: a decision on one of the session's approvals."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            await serving.respond(
                send, 415, "a decision is sent as application/json", code="invalid"
            )
            return
        body = await serving.read_body(receive, self.max_decision_bytes)
        if body is None:
            limit = self.max_decision_bytes
            await serving.respond(send, 413, f"the body is over {limit} bytes", code="invalid")
            return
        principal = await self._admit(request, session, send)
        if principal is None:
            return
        try:
            decision = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            await serving.respond(send, 400, "the body is not JSON", code="invalid")
            return
        outcome = await serving.decide(self.bus, principal, session, decision)
        await serving.send_json(send, outcome.status, outcome.body)

    async def _serve(self, pump: Pump[bytes], receive: serving.Receive, send: serving.Send) -> None:
        session = pump.subscription.session
        self._cache.join(session)
        try:
            await serving.event_stream(
                self._streams,
                receive,
                send,
                lambda guarded: self._pump(pump, guarded),
                write_timeout=self.write_timeout,
            )
        finally:
            self._cache.leave(session)
            pump.subscription.close()  # released at once, whatever ended the stream

    async def _pump(self, pump: Pump[bytes], send: serving.Send) -> None:
        """Write the stream until it ends, or the client is cut (after telling it to
        resume)."""
        # The reconnection hint rides on the first frame: a block holding only
        # "retry:" is an empty event to some clients.
        retry = f"retry: {self.retry_ms}\n".encode()
        try:
            async with aclosing(pump.chunks(self.heartbeat)) as chunks:
                async for chunk in chunks:
                    if chunk is None:
                        body = _PING
                    else:
                        body, retry = retry + b"".join(chunk), b""
                    await send({"type": "http.response.body", "body": body, "more_body": True})
        except SlowConsumer as exc:
            logger.info("cutting a slow SSE client: %s", exc)
            await send({"type": "http.response.body", "body": serving.TOO_SLOW, "more_body": True})
        except DialectError:
            logger.exception("a dialect could not encode an event; ending the stream")
