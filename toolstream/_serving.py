"""What the SSE and WebSocket transports share: one way to serve a stream.

Both transports authorize a request the same way, open a stream the same way (subscribe,
or resume a client exactly where it was), pump it through the same
:class:`~toolstream.dialects._pump.Pump`, keep a registry of their open streams for
``shutdown()``, answer the ASGI lifespan, and end their streams when the server exits.
Each of those lives here, once. Private: the transports are the public face.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import anyio
import attrs

from toolstream import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalInvalid,
    ApprovalNotFound,
    ApprovalResolved,
    Bus,
    BusClosed,
    BusUnavailable,
    Principal,
    RequestInfo,
    Snapshot,
    StreamReset,
    Subscription,
)
from toolstream._core.identifiers import identifier_fits
from toolstream._core.jsonenc import is_utf8
from toolstream._watch import WriteDeadline, asyncio_loop, watched
from toolstream.dialects import Cursor, Dialect, DialectSpec, Encoder, resolve
from toolstream.dialects._pump import FrameCache, Pump, WireFormat

logger = logging.getLogger("toolstream.serving")

T = TypeVar("T")

__all__ = [
    "DEFAULT_WRITE_TIMEOUT",
    "TOO_SLOW",
    "Authorize",
    "Decided",
    "Dialects",
    "OpenStreams",
    "Receive",
    "Scope",
    "Send",
    "authenticate",
    "decide",
    "lifespan",
    "may_read",
    "open_pump",
    "pump_for",
    "admit",
    "event_stream",
    "stream_headers",
    "http_only",
    "origin_refused",
    "prepared",
    "read_body",
    "respond",
    "send_json",
    "unavailable",
    "request_info",
    "subscribe_at",
    "watched",
    "WriteDeadline",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: ``authorize(request) -> Principal | None`` (sync or async).
Authorize = Callable[[RequestInfo], "Principal | Awaitable[Principal | None] | None"]

#: Seconds a write to a client may take before its stream ends (``write_timeout``).
DEFAULT_WRITE_TIMEOUT = 30.0

#: The last thing an event stream cut for a slow client says (a comment: clients skip it).
TOO_SLOW = b": too slow; reconnect with Last-Event-ID to resume\n\n"


def check_write_timeout(value: float) -> float:
    """``value`` if it is a valid ``write_timeout`` (positive seconds), else ValueError."""
    if not value > 0:
        raise ValueError(f"write_timeout must be positive seconds, got {value!r}")
    return value


def request_info(scope: Mapping[str, Any]) -> RequestInfo:
    """The ``RequestInfo`` of an ASGI HTTP or WebSocket scope."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    query: dict[str, str] = {}
    for key, value in parse_qsl(
        scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
    ):
        query.setdefault(key, value)
    client = scope.get("client")
    return RequestInfo(
        headers=headers,
        query=query,
        client=(str(client[0]), int(client[1])) if client else None,
        path=str(scope.get("path", "")),
    )


def valid_session(session: object) -> bool:
    """A session name (or another identifier) a client may ask for: a non-empty string
    of valid text, at most ``MAX_ID_BYTES`` of UTF-8 (a broker could not carry more)."""
    return (
        isinstance(session, str) and bool(session) and is_utf8(session) and identifier_fits(session)
    )


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def authenticate(hook: Authorize | None, request: RequestInfo) -> Principal | bool | None:
    """The principal (``True`` without a hook: everything readable), or None."""
    if hook is None:
        return True
    return await _maybe_await(hook(request))  # type: ignore[no-any-return]


async def may_read(principal: Principal | bool, session: str) -> bool:
    """Whether the principal may read ``session`` (a failing check is a refusal)."""
    if principal is True:
        return True
    try:
        return bool(await _maybe_await(principal.can_read(session)))  # type: ignore[union-attr]
    except Exception:
        logger.exception("can_read(%r) failed; refusing", session)
        return False


async def may_approve(principal: Principal | bool, session: str) -> bool:
    """Whether the principal may decide the approvals of ``session``: without an
    ``authorize`` hook, whoever may read; otherwise only a principal whose
    ``can_approve(session)`` says so (a failing check is a refusal)."""
    if principal is True:
        return True
    check = getattr(principal, "can_approve", None)
    if check is None:
        return False
    try:
        return bool(await _maybe_await(check(session)))
    except Exception:
        logger.exception("can_approve(%r) failed; refusing", session)
        return False


def decider_id(principal: Principal | bool) -> str | None:
    """The ``by`` of a principal's decisions: ``"anonymous"`` without an ``authorize``
    hook, else the principal's ``id`` attribute (never a value from the request)."""
    if principal is True:
        return "anonymous"
    pid = getattr(principal, "id", None)
    if isinstance(pid, (str, int)) and not isinstance(pid, bool):
        text = str(pid)
        return text if text and is_utf8(text) else None
    return None


#: The fields a decision may carry (besides a transport's own: WebSocket's op, session).
DECISION_FIELDS = frozenset({"approval_id", "approved", "reason", "args"})


@attrs.frozen
class Decided:
    """The outcome of a decision sent by a client: an HTTP status, a short error code
    (``""`` on success; the WebSocket error codes) and the JSON body to answer with."""

    status: int
    code: str
    body: dict[str, Any]
    #: The resolution that stands (this decision's, or the one that won before it):
    #: its envelope names the call and run the approval was for.
    resolution: ApprovalResolved | None = None


def _refusal(
    status: int,
    code: str,
    message: str,
    winner: ApprovalResolved | None = None,
    **extra: Any,
) -> Decided:
    return Decided(status, code, {"error": message, "code": code, **extra}, winner)


def _resolution(session: str, event: Any) -> dict[str, Any]:
    body = {
        "session": session,
        "approval_id": event.approval_id,
        "approved": event.approved,
        "by": event.by,
    }
    if event.reason is not None:
        body["reason"] = event.reason
    return body


async def decide(
    bus: Bus, principal: Principal | bool, session: str, body: object, *, extra: Iterable[str] = ()
) -> Decided:
    """Apply a client's decision ``body`` (a parsed JSON object) on ``session``: the
    checks both transports make, then ``bus.resolve_approval``, each outcome mapped to
    a status and an error code. Never raises for anything a client can send."""
    if not isinstance(body, dict):
        return _refusal(400, "invalid", "the decision is a JSON object")
    unknown = sorted(k for k in body if k not in DECISION_FIELDS and k not in extra)
    if unknown:
        return _refusal(400, "invalid", f"unknown fields: {', '.join(map(str, unknown))[:200]}")
    approval_id = body.get("approval_id")
    if not isinstance(approval_id, str) or not approval_id or not is_utf8(approval_id):
        return _refusal(400, "invalid", "approval_id must be a non-empty string")
    if len(approval_id) > 200:
        return _refusal(404, "not_found", "no such approval in this session")
    if "approved" not in body:
        return _refusal(400, "invalid", "missing field 'approved' (true or false)")
    reason = body.get("reason")
    if isinstance(reason, str) and not is_utf8(reason):
        return _refusal(400, "invalid", "reason must be valid text")
    if not await may_approve(principal, session):
        return _refusal(403, "forbidden", f"not allowed to decide in session {session!r}")
    try:
        event = await bus.resolve_approval(
            session,
            approval_id,
            approved=body["approved"],
            by=decider_id(principal),
            reason=reason,
            args=body.get("args"),
        )
    except ApprovalInvalid as exc:
        return _refusal(413 if exc.too_large else 400, "invalid", str(exc))
    except ApprovalNotFound:
        return _refusal(404, "not_found", "no such approval in this session")
    except ApprovalAlreadyResolved as exc:
        won = _resolution(session, exc.resolution)
        text = "the approval was already decided"
        return _refusal(409, "already_resolved", text, exc.resolution, resolution=won)
    except ApprovalExpired as exc:
        won = _resolution(session, exc.resolution)
        return _refusal(410, "expired", "the approval expired", exc.resolution, resolution=won)
    except (BusUnavailable, BusClosed) as exc:
        return _refusal(503, "unavailable", f"the event bus is unavailable: {exc}")
    return Decided(200, "", _resolution(session, event), event)


class Dialects:
    """The dialects a transport allows, by name."""

    def __init__(self, default: DialectSpec, allowed: Iterable[DialectSpec] | None) -> None:
        from toolstream.dialects import NAMES

        self.factories: dict[str, Callable[[], Dialect]] = {}
        for spec in allowed if allowed is not None else NAMES:
            name, factory = resolve(spec)
            self.factories[name] = factory
        default_name, default_factory = resolve(default)
        self.factories.setdefault(default_name, default_factory)
        self.default = default_name

    def get(self, name: str | None) -> tuple[str, Callable[[], Dialect]] | None:
        """The named dialect (the default for None), or None if not allowed."""
        key = name or self.default
        factory = self.factories.get(key)
        return None if factory is None else (key, factory)


async def open_pump(
    bus: Bus,
    *,
    session: str,
    run: str | None,
    cursor: str | None,
    dialect: Dialect,
    fmt: WireFormat[Any],
    cache: FrameCache[Any] | None,
    buffer: int = 1024,
    types: tuple[type, ...] = (),
) -> Pump[Any]:
    """Subscribe where the client left off and set its dialect up to continue exactly.

    - no cursor: a reset (the session's state), then live events;
    - ``<id>``: the events after it, the dialect brought to where the client was by
      re-encoding what it already received (``sub.origin``), throwing the output away;
    - ``<id>/<k>``: from event ``<id>`` itself, its first ``k + 1`` messages skipped
      (the client has them);
    - ``<id>/r<k>``: the reset the client was cut in, re-encoded, its first ``k + 1``
      messages skipped;
    - a cursor the bus cannot serve: a reset.

    Waits for the subscription to learn where it starts (a round trip on a
    broker-backed bus): ``BusUnavailable`` if the broker cannot be reached, and the
    subscription released whatever fails.
    """
    parsed = Cursor.parse(cursor)
    sub = subscribe_at(bus, session=session, run=run, cursor=parsed, buffer=buffer, types=types)
    await prepared(sub)
    try:
        return pump_for(
            sub, session=session, run=run, cursor=parsed, dialect=dialect, fmt=fmt, cache=cache
        )
    except BaseException:
        await sub.aclose()
        raise


def subscribe_at(
    bus: Bus,
    *,
    session: str,
    run: str | None,
    cursor: Cursor | None,
    buffer: int = 1024,
    types: tuple[type, ...] = (),
) -> Subscription[Any]:
    """The subscription for a client at ``cursor``: a snapshot first without one,
    :meth:`Bus.resume` with one (at the event itself for a cursor inside it)."""
    kinds: tuple[Any, ...] = types
    if cursor is None:
        return bus.subscribe(*kinds, session=session, run=run, snapshot=True, buffer=buffer)
    at = cursor.part is not None and not cursor.reset
    return bus.resume(*kinds, session=session, after=cursor.event_id, at=at, run=run, buffer=buffer)


def pump_for(
    sub: Subscription[Any],
    *,
    session: str,
    run: str | None,
    cursor: Cursor | None,
    dialect: Dialect,
    fmt: WireFormat[T],
    cache: FrameCache[T] | None = None,
) -> Pump[T]:
    """The pump of a prepared subscription, its dialect brought to where the client at
    ``cursor`` was (see :func:`open_pump`)."""
    origin = sub.origin
    if cursor is None or origin is None or origin.reset:
        return Pump(sub, Encoder(dialect), fmt, cache=cache)
    assert origin.state is not None
    assert origin.base is not None
    if cursor.reset:
        assert cursor.part is not None
        encoder = Encoder(dialect, skip_event=cursor.event_id, skip=cursor.part + 1)
        reset = StreamReset(
            id=cursor.event_id, session=session, ts=time.time(), run_id=run, snapshot=origin.state
        )
        return Pump(sub, encoder, fmt, initial=encoder.encode(reset), cache=cache)
    # Bring the dialect to exactly where the client was: the state before the retained
    # window, then every event the client received up to the cursor, encoded and
    # thrown away.
    dialect.prime(origin.base)
    for event in origin.history:
        dialect.encode(event)
    if cursor.part is not None:
        encoder = Encoder(dialect, skip_event=cursor.event_id, skip=cursor.part + 1)
        return Pump(sub, encoder, fmt, cache=cache)
    return Pump(sub, Encoder(dialect), fmt, cache=cache)


def loop_caller() -> Callable[[Callable[[], None]], None]:
    """A thread-safe way to run a callable inside the current event loop (asyncio or
    trio), from any thread: for ``shutdown()`` called outside the server's loop."""
    import sys

    loop = asyncio_loop()
    if loop is None:
        trio = sys.modules["trio"]
        token = trio.lowlevel.current_trio_token()

        def call_trio(fn: Callable[[], None]) -> None:
            try:
                token.run_sync_soon(fn)
            except trio.RunFinishedError:
                pass

        return call_trio

    def call_asyncio(fn: Callable[[], None]) -> None:
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: nothing left to stop
            pass

    return call_asyncio


class OpenStreams:
    """The streams (or sockets) an app is serving, so that :meth:`shutdown` ends them
    all, from any thread; after it, the app refuses new ones (``closing``)."""

    def __init__(self) -> None:
        self._scopes: dict[anyio.CancelScope, Callable[[Callable[[], None]], None]] = {}
        #: True once :meth:`shutdown` was called.
        self.closing = False

    def __len__(self) -> int:
        return len(self._scopes)

    @contextmanager
    def serving(self, scope: anyio.CancelScope) -> Iterator[None]:
        """Register a stream (its cancel scope) while the block runs."""
        self._scopes[scope] = loop_caller()
        try:
            yield
        finally:
            self._scopes.pop(scope, None)

    def shutdown(self) -> None:
        """Cancel every open stream and refuse new ones. Safe from any thread."""
        self.closing = True
        for scope, call in list(self._scopes.items()):
            call(scope.cancel)


async def lifespan(receive: Receive, send: Send, on_shutdown: Callable[[], None]) -> None:
    """Answer the ASGI lifespan protocol; ``on_shutdown`` runs at its shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            on_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


# -- small HTTP responses (the SSE app's and the chat app's) ---------------------------------


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None when it is over ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def respond(
    send: Send,
    status: int,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    code: str | None = None,
) -> None:
    body: dict[str, Any] = {"error": message}
    if code is not None:
        body["code"] = code
    await send_json(send, status, body, headers)


async def send_json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def http_only(
    scope: Scope, receive: Receive, send: Send, on_shutdown: Callable[[], None], name: str
) -> bool:
    """What an HTTP app does with the rest: the lifespan answered (``on_shutdown`` at
    its end), a WebSocket closed (1003). True when the request was one of those."""
    kind = scope["type"]
    if kind == "lifespan":
        await lifespan(receive, send, on_shutdown)
        return True
    if kind == "websocket":
        await send({"type": "websocket.close", "code": 1003})
        return True
    if kind != "http":
        raise ValueError(f"{name} serves HTTP, not {kind!r}")
    return False


async def origin_refused(
    request: RequestInfo, allowed: frozenset[str] | None, send: Send, *, code: str | None = None
) -> bool:
    """A request whose ``Origin`` is not ``allowed`` is refused (403 sent): True."""
    if allowed is None:
        return False
    origin = request.headers.get("origin")
    if origin is None or origin in allowed:
        return False
    await respond(send, 403, "forbidden origin", code=code)
    return True


async def admit(
    hook: Authorize | None, request: RequestInfo, session: str, send: Send, refusal: str
) -> Principal | bool | None:
    """The principal that may read ``session``; None once refused (401, or 403 with
    ``refusal`` as the message)."""
    principal = await authenticate(hook, request)
    if principal is None:
        await respond(send, 401, "authentication required", [(b"www-authenticate", b"Bearer")])
        return None
    if not await may_read(principal, session):
        await respond(send, 403, refusal, code="forbidden")
        return None
    return principal


async def unavailable(send: Send, exc: BaseException) -> None:
    """503: the bus cannot be reached."""
    await respond(send, 503, f"the event bus is unavailable: {exc}", code="unavailable")


async def snapshot_of(bus: Bus, session: str) -> Snapshot:
    """The session's state: read without blocking the loop on a broker bus."""
    fetch = getattr(bus, "fetch_snapshot", None)
    if fetch is not None:
        snapshot: Snapshot = await fetch(session)
        return snapshot
    return bus.snapshot(session)


async def prepared(sub: Subscription[Any]) -> Subscription[Any]:
    """``sub`` once it knows where it starts (:meth:`Subscription.prepare`); released
    whatever fails."""
    try:
        await sub.prepare()
    except BaseException:
        await sub.aclose()
        raise
    return sub


def sse_headers() -> list[tuple[bytes, bytes]]:
    """The headers of an event stream (not cached, not buffered by a proxy)."""
    return [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ]


def stream_headers(dialect: Dialect) -> list[tuple[bytes, bytes]]:
    """The headers of an event stream in ``dialect`` (its own headers included)."""
    headers = sse_headers()
    headers += [
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in dialect.headers.items()
    ]
    return headers


async def event_stream(
    streams: OpenStreams,
    receive: Receive,
    send: Send,
    write: Callable[[Send], Awaitable[None]],
    *,
    write_timeout: float | None = None,
) -> None:
    """Run ``write(send)`` (which sends the body of a started response through the
    ``send`` it is given) until it returns, the client disconnects, the server exits or
    a write has not completed within ``write_timeout`` seconds (None:
    :data:`DEFAULT_WRITE_TIMEOUT`), then end the body. Registered in ``streams``
    meanwhile (``shutdown()`` ends it).

    A client that stopped reading is cut at the write deadline: everything the stream
    holds is released at once; :data:`TOO_SLOW` and the end of the body are offered for
    ``write_timeout`` more, then the response is left to the server, unfinished (it
    closes the connection)."""
    if write_timeout is None:
        write_timeout = DEFAULT_WRITE_TIMEOUT
    deadline = WriteDeadline(send, write_timeout)
    disconnected = False
    try:
        with (
            anyio.CancelScope() as cancel,
            streams.serving(cancel),
            watched(cancel, deadline),
        ):
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    nonlocal disconnected
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    disconnected = True
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                await write(deadline)
                tg.cancel_scope.cancel()
    except OSError:  # the connection went away while we wrote
        disconnected = True
    if disconnected:
        return
    body = b""
    if deadline.expired:
        logger.info("cutting a client that read nothing for %s s", write_timeout)
        body = TOO_SLOW
    with anyio.move_on_after(write_timeout):
        try:
            await send({"type": "http.response.body", "body": body, "more_body": False})
        except OSError:  # the connection went away meanwhile
            pass
