"""Identifiers a client or an agent chooses — session names, run, call, message and
approval ids, tool names — and the one bound every bus and transport holds them to.

A broker carries them in subjects, keys and control lines of bounded size (NATS closes
the connection past its 4,096-byte control line), and every event carries them, so an
identifier of any length cannot work on every bus. Past :data:`MAX_ID_BYTES` one is
refused where it enters: :class:`~toolstream.IdTooLong` from the API, 400 over HTTP, an
``invalid`` error over WebSocket.
"""

from __future__ import annotations

from typing import Final

from .errors import IdTooLong

__all__ = ["MAX_ID_BYTES", "check_identifier", "identifier_fits"]

#: The longest identifier accepted, in bytes of UTF-8 (so 1,024 ASCII characters).
MAX_ID_BYTES: Final = 1024


def identifier_fits(value: str) -> bool:
    """True when ``value`` is at most :data:`MAX_ID_BYTES` bytes of UTF-8."""
    n = len(value)
    if n <= MAX_ID_BYTES // 4:  # the common case: no character takes more than 4 bytes
        return True
    if n > MAX_ID_BYTES:
        return False
    return value.isascii() or len(value.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES


def check_identifier(what: str, value: str) -> None:
    """:class:`~toolstream.IdTooLong` when ``value`` (a ``what``: "session", "call_id"...)
    is longer than :data:`MAX_ID_BYTES` bytes of UTF-8."""
    if not identifier_fits(value):
        size = len(value.encode("utf-8", "surrogatepass"))
        raise IdTooLong(
            f"{what} is {size} bytes of UTF-8; the limit is {MAX_ID_BYTES} "
            f"(it starts {value[:40]!r})"
        )
