"""Wire dialects: the same lifecycle in the format each client already speaks.

- ``"native"``: toolstream's own events (:class:`Native`);
- ``"agui"``: the AG-UI protocol (:class:`AGUI`);
- ``"ai_sdk"``: the Vercel AI SDK UI message stream v1 (:class:`AISDK`);
- ``"hermes"``: hermes-agent's ``hermes.tool.progress`` companion events (:class:`Hermes`).

Any dialect works over any transport. :func:`get` returns a fresh instance (dialects
are stateful per connection); configured ones are built directly (``AGUI(...)``).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from toolstream import DialectError, Subscription

from ._base import BaseDialect, Cursor, Dialect, EncodedFrame, Encoder, WireMessage
from ._pump import FrameFormat, Pump
from .agui import AGUI
from .ai_sdk import AISDK
from .hermes import Hermes
from .native import Native

__all__ = [
    "AGUI",
    "AISDK",
    "NAMES",
    "BaseDialect",
    "Cursor",
    "Dialect",
    "DialectSpec",
    "EncodedFrame",
    "Encoder",
    "Hermes",
    "Native",
    "WireMessage",
    "get",
    "render",
    "resolve",
]

_BUILT_IN: dict[str, Callable[[], Dialect]] = {
    "native": Native,
    "agui": AGUI,
    "ai_sdk": AISDK,
    "hermes": Hermes,
}

#: The names :func:`get` knows.
NAMES: tuple[str, ...] = tuple(_BUILT_IN)

#: What transports accept for ``dialect=``: a name, a class, or a factory.
DialectSpec = str | Callable[[], Dialect]


def get(name: str) -> Dialect:
    """A fresh instance of the built-in dialect ``name`` (``DialectError`` if unknown)."""
    factory = _BUILT_IN.get(name)
    if factory is None:
        raise DialectError(f"unknown dialect {name!r}; known: {', '.join(NAMES)}")
    return factory()


def resolve(spec: DialectSpec) -> tuple[str, Callable[[], Dialect]]:
    """The name and a factory for ``spec`` (a name, a dialect class or a factory)."""
    if isinstance(spec, str):
        if spec not in _BUILT_IN:
            raise DialectError(f"unknown dialect {spec!r}; known: {', '.join(NAMES)}")
        return spec, _BUILT_IN[spec]
    if not callable(spec):
        raise DialectError(f"a dialect is a name, a class or a factory, not {spec!r}")
    probe = spec()
    if not isinstance(probe, Dialect):
        raise DialectError(
            f"{spec!r} does not make a Dialect: it needs name, headers, stateless, open, "
            "encode, close and prime (subclass BaseDialect for the defaults)"
        )
    return str(getattr(probe, "name", "custom")), spec


async def render(subscription: Subscription[Any], dialect: Dialect) -> AsyncIterator[WireMessage]:
    """The subscription's events as the dialect's messages, then its epilogue when the
    subscription ends: for hosts that interleave them with their own output (a
    chat-completions endpoint, an AG-UI ``HttpAgent`` endpoint)."""
    pump = Pump(subscription, Encoder(dialect), FrameFormat())
    async with aclosing(pump.chunks()) as chunks:
        async for chunk in chunks:
            for frame in chunk or ():
                yield frame.message


def __getattr__(name: str) -> Any:
    if name == "Frame":
        warnings.warn(
            "toolstream.dialects.Frame is now EncodedFrame; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return EncodedFrame
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
