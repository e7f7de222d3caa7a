"""WebSocketApp: several sessions' tool lifecycles over one WebSocket."""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Iterable, MutableMapping
from contextlib import aclosing
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from toolstream import (
    EVENT_TYPES,
    MAX_ID_BYTES,
    Bus,
    BusClosed,
    BusUnavailable,
    DialectError,
    Event,
    SlowConsumer,
    StreamReset,
)
from toolstream import _serving as serving
from toolstream._core.codec import to_dict
from toolstream._core.jsonenc import dumps
from toolstream.dialects import DialectSpec, EncodedFrame
from toolstream.dialects._pump import FrameCache, Pump

logger = logging.getLogger("toolstream.websocket")

__all__ = ["BATCH_SUBPROTOCOL", "CLOSE_CODES", "WebSocketApp"]

#: The WebSocket subprotocol a client offers to receive a session's events batched: a
#: JSON array of ``event`` messages in one WebSocket message (see docs/websocket.md).
BATCH_SUBPROTOCOL = "toolstream.batch"

#: The most characters of events one batched message carries (below 1 MiB in UTF-8:
#: the default limit of the ``websockets`` client); a larger event goes alone.
BATCH_CHARS = 196_608

#: Close codes and what they mean.
CLOSE_CODES: dict[int, str] = {
    1000: "normal closure",
    1001: "the server is going away",
    1009: "message too big",
    1011: "the peer stopped answering pings",
    4401: "unauthenticated",
    4403: "forbidden origin",
    4408: "too slow: reconnect and resume each session with after=<last id>",
    4429: "too many messages: over the socket's inbound budget",
}

_TYPES = {cls.type: cls for cls in EVENT_TYPES if cls is not StreamReset}


class _ClientError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Gone(Exception):
    """The client went away while the server was sending to it."""


def _field(message: dict[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = message.get(name)
    if value is None:
        if required:
            raise _ClientError("invalid", f"missing field {name!r}")
        return None
    if not isinstance(value, kind) or (kind is str and not value):
        raise _ClientError("invalid", f"field {name!r} must be a non-empty {kind.__name__}")
    if kind is str and not serving.valid_session(value):
        raise _ClientError(
            "invalid", f"field {name!r} must be valid text of at most {MAX_ID_BYTES} bytes"
        )
    return value


def _batched(texts: list[str]) -> list[str]:
    """``texts`` (JSON objects) joined into JSON arrays of at most :data:`BATCH_CHARS`
    characters each (one text longer than that stays alone), in order."""
    out: list[str] = []
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) + 1 > BATCH_CHARS:
            out.append("[" + ",".join(group) + "]")
            group, size = [], 0
        group.append(text)
        size += len(text) + 1
    out.append("[" + ",".join(group) + "]")
    return out


class WSFormat:
    """Frames as this protocol's ``event`` messages for one session."""

    def __init__(self, session: str) -> None:
        self._prefix = '{"op":"event","session":' + json.dumps(session) + ","

    def frame(self, frame: EncodedFrame) -> str:
        """One ``event`` message: ``id``, ``event`` and ``raw`` when the frame has
        them, ``data`` (the payload as JSON)."""
        message = frame.message
        parts = [f'"id":{json.dumps(frame.id)}']
        if message.event is not None:
            parts.append(f'"event":{json.dumps(message.event)}')
        if message.raw is not None:
            parts.append(f'"raw":{json.dumps(message.raw)}')
        parts.append('"data":' + dumps(message.payload))
        return self._prefix + ",".join(parts) + "}"

    def native(self, event: Event) -> str:
        """The native dialect's message for ``event``, without its per-event objects."""
        return (
            f'{self._prefix}"id":{json.dumps(event.id)},"event":"{event.type}",'
            f'"data":{dumps(to_dict(event))}}}'
        )


class WebSocketApp:
    """An ASGI 3 WebSocket app: clients subscribe to sessions and receive their events.

    Client → server (JSON objects): ``{"op": "subscribe", "session", "after"?, "run"?,
    "types"?, "dialect"?}``, ``{"op": "unsubscribe", "session"}``, ``{"op": "approve",
    "session", "approval_id", "approved", "reason"?, "args"?}`` (answered ``approved``,
    or an ``error``: ``not_found``, ``already_resolved``, ``expired``, ``forbidden``,
    ``invalid``), ``{"op": "ping"}``
    (and ``{"op": "pong"}`` in answer to the server's pings).

    A client that offers the subprotocol ``toolstream.batch`` (:data:`BATCH_SUBPROTOCOL`)
    in its handshake gets each session's events as JSON arrays of ``event`` messages,
    several per WebSocket message; every other message stays a single object.

    Server → client: ``subscribed`` (once the subscription is active), ``event``
    (``session``, ``id``, ``data``: the dialect's payload, and ``event``/``raw`` when the
    dialect has them), ``unsubscribed``, ``error`` (``code``, ``message``), ``pong``,
    ``ping``. A subscribe without ``after`` starts with the session's reset; with
    ``after`` (any frame id) it resumes exactly.

    Bad messages get an ``error`` and the socket stays open. Unauthenticated: close
    4401; an origin not in ``allowed_origins``: close 4403; a session the principal may
    not read: an ``error`` with code ``forbidden``; a message over
    ``max_message_bytes``: close 1009; a client too slow to keep up: close 4408 (it
    resumes with ``after``). The server pings every ``ping_interval`` seconds and closes
    (1011) a peer silent for two intervals, releasing its subscriptions.

    A write that has not completed within ``write_timeout`` seconds (a client that
    stopped reading) closes the socket with 4408: its subscriptions and whatever they
    were writing are released at once, and the close frame is offered for
    ``write_timeout`` more. Each socket may send ``inbound_burst`` messages at once and
    ``inbound_rate`` a second after that (a token bucket); a message past that budget
    closes it with 4429. Messages are handled one per turn of the event loop, so one
    socket's flood never holds up the others.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        dialect: DialectSpec = "native",
        authorize: serving.Authorize | None = None,
        allowed_origins: Iterable[str] | None = None,
        max_message_bytes: int = 65536,
        ping_interval: float = 20.0,
        dialects: Iterable[DialectSpec] | None = None,
        buffer: int = 1024,
        max_subscriptions: int = 64,
        write_timeout: float = serving.DEFAULT_WRITE_TIMEOUT,
        inbound_rate: float = 50.0,
        inbound_burst: int = 200,
    ) -> None:
        if max_message_bytes < 64:
            raise ValueError("max_message_bytes must be at least 64")
        if not ping_interval > 0:
            raise ValueError("ping_interval must be positive seconds")
        if not inbound_rate > 0:
            raise ValueError(
                f"inbound_rate must be positive messages a second, got {inbound_rate!r}"
            )
        if inbound_burst < 1:
            raise ValueError(f"inbound_burst must be at least 1 message, got {inbound_burst!r}")
        #: Seconds a write to a client may take before its socket is closed (4408).
        self.write_timeout = serving.check_write_timeout(write_timeout)
        #: Messages a second a socket may send once its burst is spent (then: 4429).
        self.inbound_rate = inbound_rate
        #: Messages a socket may send at once.
        self.inbound_burst = inbound_burst
        self.bus = bus
        self.authorize = authorize
        self.allowed_origins = None if allowed_origins is None else frozenset(allowed_origins)
        self.max_message_bytes = max_message_bytes
        self.ping_interval = ping_interval
        self.buffer = buffer
        self.max_subscriptions = max_subscriptions
        self._dialects = serving.Dialects(dialect, dialects)
        self._sockets = serving.OpenStreams()
        # Messages of stateless dialects, shared by every socket: an event sent to 100
        # sockets is serialized once.
        self._cache: FrameCache[str] = FrameCache()

    @property
    def open_sockets(self) -> int:
        """How many sockets are connected now."""
        return len(self._sockets)

    def shutdown(self) -> None:
        """Close every socket (1001) and refuse new ones. Safe from any thread."""
        self._sockets.shutdown()

    async def __call__(
        self, scope: serving.Scope, receive: serving.Receive, send: serving.Send
    ) -> None:
        if scope["type"] == "lifespan":
            await serving.lifespan(receive, send, self.shutdown)
            return
        if scope["type"] == "http":
            body = b'{"error": "this endpoint speaks WebSocket"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 426,
                    "headers": [(b"content-type", b"application/json"), (b"upgrade", b"websocket")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "websocket":
            raise ValueError(f"WebSocketApp serves WebSockets, not {scope['type']!r}")
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        request = serving.request_info(scope)
        if self._sockets.closing:
            await send({"type": "websocket.close", "code": 1001})
            return
        origin = request.headers.get("origin")
        if self.allowed_origins is not None and origin not in self.allowed_origins:
            await self._refuse(send, 4403)
            return
        principal = await serving.authenticate(self.authorize, request)
        if principal is None:
            await self._refuse(send, 4401)
            return
        batch = BATCH_SUBPROTOCOL in scope.get("subprotocols", ())
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if batch:
            accept["subprotocol"] = BATCH_SUBPROTOCOL
        await send(accept)
        await _Connection(self, principal, receive, send, batch=batch).run()

    async def _refuse(self, send: serving.Send, code: int) -> None:
        # Accept, then close with the code: browsers see why (a refused handshake is
        # only "1006" to them).
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": code, "reason": CLOSE_CODES[code]})


class _Inbound:
    """A socket's inbound budget: a bucket of ``burst`` messages, refilled at ``rate`` a
    second."""

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self, now: float) -> bool:
        """Spend one message; False when the budget is spent."""
        tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if tokens < 1:
            self.tokens = tokens
            return False
        self.tokens = tokens - 1
        return True


class _Turns:
    """The socket's writers take turns: a flag while nobody else writes (the usual case,
    no await at all), a queue of events to wait in otherwise. ``anyio.Lock`` even with
    ``fast_acquire`` looks up the current task and its cancellation on every
    acquisition: a tenth of what an event cost a WebSocket at 10,000 sockets."""

    __slots__ = ("busy", "waiting")

    def __init__(self) -> None:
        #: True while a writer holds its turn.
        self.busy = False
        self.waiting: deque[anyio.Event] = deque()

    def locked(self) -> bool:
        return self.busy

    async def wait(self) -> None:
        """Wait until the turn is this caller's (``busy`` is then False: take it)."""
        while self.busy:
            turn = anyio.Event()
            self.waiting.append(turn)
            try:
                await turn.wait()
            except BaseException:
                if turn.is_set():  # handed the turn while being cancelled: pass it on
                    self._next()
                else:
                    self.waiting.remove(turn)
                raise

    def release(self) -> None:
        self.busy = False
        self._next()

    def _next(self) -> None:
        if self.waiting:
            self.waiting.popleft().set()


class _Connection:
    """One socket: its subscriptions, its reader, its keepalive."""

    def __init__(
        self,
        app: WebSocketApp,
        principal: Any,
        receive: serving.Receive,
        send: serving.Send,
        *,
        batch: bool = False,
    ) -> None:
        self.app = app
        #: Whether the client asked for batched events (the batch subprotocol).
        self.batch = batch
        self.principal = principal
        self.receive = receive
        self._raw_send = send
        # Every write goes through it: a write that does not complete in time closes
        # the socket (4408), watched from outside the writer (see run()).
        self._send = serving.WriteDeadline(send, app.write_timeout)
        # Writes in order, one sender at a time (see _Turns).
        self.lock = _Turns()
        self.subs: dict[str, anyio.CancelScope] = {}
        self.last_heard = time.monotonic()
        self.close_code: int | None = None
        self.disconnected = False
        self.scope = anyio.CancelScope()
        self.tg: anyio.abc.TaskGroup | None = None

    async def send_text(self, text: str) -> None:
        """Send one message; a client that went away ends the connection quietly."""
        await self.send_texts([text])

    async def send_texts(self, texts: list[str]) -> None:
        """Send messages in order under one hold of the lock (a pump's chunk: no other
        message comes between them; batched in arrays if the client asked for it). A
        client that went away ends the connection quietly."""
        if self.disconnected:
            raise _Gone
        if self.batch and len(texts) > 1:
            texts = _batched(texts)
        send = self._send
        lock = self.lock
        if lock.busy:
            await lock.wait()
        lock.busy = True
        try:
            for text in texts:
                await send({"type": "websocket.send", "text": text})
        except Exception as exc:  # servers differ: OSError, ClientDisconnected...
            logger.debug("a WebSocket client went away while being sent to: %r", exc)
            self.disconnected = True
            self.scope.cancel()
            raise _Gone from None
        finally:
            lock.release()

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_text(dumps(message))

    async def error(self, code: str, message: str, **extra: Any) -> None:
        await self.send({"op": "error", "code": code, "message": message, **extra})

    def close(self, code: int) -> None:
        if self.close_code is None:
            self.close_code = code
        self.scope.cancel()

    async def run(self) -> None:
        app = self.app
        try:
            with (
                self.scope,
                app._sockets.serving(self.scope),
                serving.watched(self.scope, self._send),
            ):
                async with anyio.create_task_group() as self.tg:
                    self.tg.start_soon(self.keepalive)
                    try:
                        await self.read()
                    except _Gone:
                        pass
                    self.tg.cancel_scope.cancel()
        finally:
            if self._send.expired and self.close_code is None:
                logger.info("closing a WebSocket that read nothing for %s s", app.write_timeout)
                self.close_code = 4408
            code = (
                self.close_code
                if self.close_code is not None
                else (1001 if app._sockets.closing else 1000)
            )
            if not self.disconnected:
                # A peer that does not read cannot take the close frame either: offered
                # for a write deadline, then the socket is left to the server.
                with anyio.move_on_after(app.write_timeout):
                    try:
                        await self._raw_send(
                            {
                                "type": "websocket.close",
                                "code": code,
                                "reason": CLOSE_CODES.get(code, ""),
                            }
                        )
                    except Exception:  # the client went away meanwhile
                        pass

    async def keepalive(self) -> None:
        interval = self.app.ping_interval
        while True:
            await anyio.sleep(interval)
            if time.monotonic() - self.last_heard > 2 * interval:
                logger.info("closing a WebSocket whose peer stopped answering pings")
                self.close(1011)
                return
            if self.lock.locked():
                # A write is under way (the write deadline watches it): a ping would only
                # wait behind it, and this check must come round again.
                continue
            try:
                await self.send({"op": "ping", "ts": time.time()})
            except _Gone:
                return

    async def read(self) -> None:
        app = self.app
        budget = _Inbound(app.inbound_rate, app.inbound_burst)
        while True:
            message = await self.receive()
            kind = message["type"]
            if kind == "websocket.disconnect":
                self.disconnected = True
                return
            if kind != "websocket.receive":
                continue
            await self.handle(message, budget)
            if self.close_code is not None:
                return
            # A server hands over every message one read from the network brought
            # without yielding (thousands, from a flood), and writing the answer seldom
            # yields: one turn of the loop per message keeps the other sockets served,
            # and lets the server notice that this one is gone.
            await anyio.lowlevel.checkpoint()

    async def handle(self, message: MutableMapping[str, Any], budget: _Inbound) -> None:
        """One message from the client: spend the budget, check, parse and dispatch it."""
        now = self.last_heard = time.monotonic()
        if not budget.take(now):
            logger.info("closing a WebSocket that sent more than its inbound budget")
            self.close(4429)
            return
        text = message.get("text")
        data = message.get("bytes")
        size = len(text.encode("utf-8", "surrogatepass")) if text is not None else len(data or b"")
        if size > self.app.max_message_bytes:
            self.close(1009)
            return
        try:
            payload = json.loads(text if text is not None else (data or b"").decode())
        except (ValueError, UnicodeDecodeError, RecursionError):
            await self.error("bad_json", "messages are JSON objects (nested at most a little)")
            return
        try:
            await self.dispatch(payload)
        except _ClientError as exc:
            session = payload.get("session") if isinstance(payload, dict) else None
            extra = {"session": session} if serving.valid_session(session) else {}
            await self.error(exc.code, str(exc), **extra)

    async def dispatch(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise _ClientError("invalid", "messages are JSON objects")
        op = message.get("op")
        if op == "ping":
            ping_id = message.get("id")
            echo = isinstance(ping_id, (str, int, float)) and not isinstance(ping_id, bool)
            await self.send({"op": "pong", **({"id": ping_id} if echo else {})})
        elif op == "pong":
            pass
        elif op == "subscribe":
            await self.subscribe(message)
        elif op == "approve":
            await self.approve(message)
        elif op == "unsubscribe":
            session = _field(message, "session", str, required=True)
            scope = self.subs.pop(session, None)
            if scope is None:
                raise _ClientError("not_subscribed", f"not subscribed to session {session!r}")
            scope.cancel()
            await self.send({"op": "unsubscribed", "session": session})
        else:
            raise _ClientError("unknown_op", "unknown op: subscribe, unsubscribe, approve or ping")

    async def approve(self, message: dict[str, Any]) -> None:
        """``approve``: a decision on one of a session's approvals."""
        session = _field(message, "session", str, required=True)
        if not await serving.may_read(self.principal, session):
            raise _ClientError("forbidden", f"not allowed to read session {session!r}")
        outcome = await serving.decide(
            self.app.bus, self.principal, session, message, extra=("op", "session")
        )
        if outcome.code:
            body = dict(outcome.body)
            text = str(body.pop("error"))
            body.pop("code", None)
            await self.error(outcome.code, text, session=session, **body)
            return
        await self.send({"op": "approved", **outcome.body})

    async def subscribe(self, message: dict[str, Any]) -> None:
        session = _field(message, "session", str, required=True)
        after = _field(message, "after", str)
        run = _field(message, "run", str)
        names = _field(message, "types", list)
        dialect_name = _field(message, "dialect", str)
        types: tuple[type[Event], ...] = ()
        if names is not None:
            unknown = [n for n in names if not isinstance(n, str) or n not in _TYPES]
            if unknown:
                raise _ClientError("invalid", f"unknown event types {unknown!r:.200}")
            types = tuple(_TYPES[n] for n in names)
        if session in self.subs:
            raise _ClientError("already_subscribed", f"already subscribed to session {session!r}")
        if len(self.subs) >= self.app.max_subscriptions:
            raise _ClientError(
                "too_many", f"at most {self.app.max_subscriptions} subscriptions per socket"
            )
        chosen = self.app._dialects.get(dialect_name)
        if chosen is None:
            raise _ClientError("invalid", f"unknown dialect {dialect_name!r}")
        if not await serving.may_read(self.principal, session):
            raise _ClientError("forbidden", f"not allowed to read session {session!r}")
        try:
            pump = await serving.open_pump(
                self.app.bus,
                session=session,
                run=run,
                cursor=after,
                dialect=chosen[1](),
                fmt=WSFormat(session),
                cache=self.app._cache,
                buffer=self.app.buffer,
                types=types,
            )
        except (ValueError, DialectError) as exc:
            raise _ClientError("invalid", str(exc)) from None
        except (BusUnavailable, BusClosed) as exc:
            raise _ClientError("unavailable", f"the event bus is unavailable: {exc}") from None
        scope = anyio.CancelScope()
        self.subs[session] = scope
        try:
            await self.send({"op": "subscribed", "session": session, "dialect": chosen[0]})
        except BaseException:
            self.subs.pop(session, None)
            pump.subscription.close()
            raise
        assert self.tg is not None
        self.tg.start_soon(self.pump, session, pump, scope)

    async def pump(self, session: str, pump: Pump[str], scope: anyio.CancelScope) -> None:
        cache = self.app._cache
        cache.join(session)
        try:
            with scope:
                async with aclosing(pump.chunks()) as chunks:
                    async for chunk in chunks:
                        if chunk:
                            await self.send_texts(chunk)
                if self.subs.get(session) is scope:
                    del self.subs[session]
                    await self.send({"op": "unsubscribed", "session": session, "reason": "ended"})
        except _Gone:
            pass
        except SlowConsumer:
            self.close(4408)
        except DialectError as exc:
            logger.exception("a dialect could not encode an event")
            try:
                await self.error("internal", f"could not encode an event: {exc}", session=session)
            except _Gone:
                pass
        finally:
            cache.leave(session)
            pump.subscription.close()
