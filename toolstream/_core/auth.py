"""What an ``authorize`` hook sees and returns (SSE and WebSocket alike)."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Protocol, runtime_checkable

import attrs

__all__ = ["Principal", "RequestInfo"]


@attrs.frozen(kw_only=True)
class RequestInfo:
    """The request a client opened: given to ``authorize(request) -> Principal | None``."""

    #: Request headers, lower-case names (repeated headers joined with ", ").
    headers: Mapping[str, str]
    #: Query parameters (the first value of each).
    query: Mapping[str, str]
    #: The client's (host, port), when the server knows it.
    client: tuple[str, int] | None
    #: The request path.
    path: str


@runtime_checkable
class Principal(Protocol):
    """Who a client is, as ``authorize`` decided. ``None`` from ``authorize`` means
    unauthenticated (401 / close 4401)."""

    def can_read(self, session: str) -> bool | Awaitable[bool]:
        """True when this principal may read ``session`` (sync or async)."""
        ...
