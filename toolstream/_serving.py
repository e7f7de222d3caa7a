"""What the SSE and WebSocket transports share: authorization and opening a stream.

Private: the transports are the public face.
"""

from __future__ import annotations

import inspect
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import anyio
import attrs

from toolstream import Bus, Principal, RequestInfo, StreamReset, Subscription
from toolstream.dialects import Cursor, Dialect, DialectSpec, Encoder, Frame, resolve

logger = logging.getLogger("toolstream.serving")

#: ``authorize(request) -> Principal | None`` (sync or async).
Authorize = Callable[[RequestInfo], "Principal | Awaitable[Principal | None] | None"]


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


@attrs.define
class Stream:
    """An opened stream: its subscription, its encoder, and frames to send first."""

    subscription: Subscription[Any]
    encoder: Encoder
    initial: list[Frame]


async def open_stream(
    bus: Bus,
    *,
    session: str,
    run: str | None,
    cursor: str | None,
    dialect: Dialect,
    buffer: int = 1024,
    types: tuple[type, ...] = (),
) -> Stream:
    """Subscribe where the client left off and set the dialect up to continue exactly.

    - no cursor: a reset (the session's state), then live events;
    - ``<id>``: the events after it, the dialect primed with the state at ``<id>``;
    - ``<id>/<k>``: from event ``<id>`` itself, dialect primed with the state before
      it, its first ``k + 1`` messages skipped (the client has them);
    - ``<id>/r<k>``: the reset the client was cut in, re-encoded, its first ``k + 1``
      messages skipped;
    - a cursor the bus cannot serve: a reset.

    Waits for the subscription to learn where it starts (a round trip on a
    broker-backed bus): ``BusUnavailable`` if the broker cannot be reached.
    """
    parsed = Cursor.parse(cursor)
    sub = _subscribe(bus, session, run, parsed, buffer, types)
    await _prepared(sub)
    return _stream(sub, session, run, parsed, dialect)


def open_stream_ready(
    bus: Bus,
    *,
    session: str,
    run: str | None,
    cursor: str | None,
    dialect: Dialect,
    buffer: int = 1024,
    types: tuple[type, ...] = (),
) -> Stream:
    """:func:`open_stream` without waiting, for a bus whose subscriptions know where
    they start when created (``EventBus``): for synchronous callers."""
    parsed = Cursor.parse(cursor)
    sub = _subscribe(bus, session, run, parsed, buffer, types)
    return _stream(sub, session, run, parsed, dialect)


def _subscribe(
    bus: Bus,
    session: str,
    run: str | None,
    parsed: Cursor | None,
    buffer: int,
    types: tuple[type, ...],
) -> Subscription[Any]:
    kinds: tuple[Any, ...] = types
    if parsed is None:
        return bus.subscribe(*kinds, session=session, run=run, snapshot=True, buffer=buffer)
    return bus.subscribe(
        *kinds,
        session=session,
        run=run,
        after=parsed.event_id,
        inclusive=parsed.part is not None and not parsed.reset,
        with_state=True,
        with_history=not parsed.reset,
        buffer=buffer,
    )


def _stream(
    sub: Subscription[Any],
    session: str,
    run: str | None,
    parsed: Cursor | None,
    dialect: Dialect,
) -> Stream:
    if parsed is None or sub.starts_with_reset or sub.state is None:
        return Stream(sub, Encoder(dialect), [])
    inclusive = parsed.part is not None and not parsed.reset
    if parsed.reset:
        assert parsed.part is not None
        encoder = Encoder(dialect, skip_event=parsed.event_id, skip=parsed.part + 1)
        reset = StreamReset(
            id=parsed.event_id, session=session, ts=time.time(), run_id=run, snapshot=sub.state
        )
        return Stream(sub, encoder, encoder.encode(reset))
    # Bring the dialect to exactly where the client was: the state before the retained
    # window, then every retained event up to the cursor, encoded and thrown away.
    if sub.history_state is not None:
        dialect.prime(sub.history_state)
        for event in sub.history:
            dialect.encode(event)
    else:
        dialect.prime(sub.state)
    if inclusive:
        assert parsed.part is not None
        return Stream(sub, Encoder(dialect, skip_event=parsed.event_id, skip=parsed.part + 1), [])
    return Stream(sub, Encoder(dialect), [])


async def _prepared(sub: Subscription[Any]) -> None:
    """``sub.prepare()``, releasing the subscription if that fails (broker down)."""
    try:
        await sub.prepare()
    except BaseException:
        await sub.aclose()
        raise


def loop_caller() -> Callable[[Callable[[], None]], None]:
    """A thread-safe way to run a callable inside the current event loop (asyncio or
    trio), from any thread: for ``shutdown()`` called outside the server's loop."""
    import asyncio
    import sys

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
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


def server_exiting() -> bool:
    """True when the server this process runs is shutting down.

    uvicorn does not disconnect streaming responses on shutdown: it waits for them to
    end, and tells the application (lifespan) only after that. Its signal handler is
    a bound method of the server, whose ``should_exit`` flag says it is exiting; an
    open stream that sees it ends, so Ctrl-C never hangs on open streams.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            handler = signal.getsignal(sig)
        except (ValueError, OSError):  # pragma: no cover - exotic platforms
            continue
        server = getattr(handler, "__self__", None)
        if server is not None and getattr(server, "should_exit", False) is True:
            return True
    return False


async def watch_server_exit(scope: anyio.CancelScope, interval: float = 0.25) -> None:
    """Cancel ``scope`` when :func:`server_exiting` says so."""
    while not server_exiting():  # noqa: ASYNC110 - a flag set by a signal handler
        await anyio.sleep(interval)
    scope.cancel()
