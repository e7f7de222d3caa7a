"""What every dialect shares: the message type, the protocol, frame ids and resume."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from toolstream import DialectError, Event, JSONValue, Snapshot, StreamReset

__all__ = [
    "BaseDialect",
    "Cursor",
    "Dialect",
    "EncodedFrame",
    "Encoder",
    "WireMessage",
    "drop_none",
]


@attrs.frozen
class WireMessage:
    """One message of a dialect: what one SSE frame or WebSocket message carries.

    ``event``: the SSE event name (``None``: no ``event:`` line); ``payload``: the
    message (a dict for every built-in dialect); ``raw``: a verbatim data line
    instead of a payload (``"[DONE]"``).
    """

    event: str | None = None
    payload: JSONValue = None
    raw: str | None = None


@runtime_checkable
class Dialect(Protocol):
    """Maps lifecycle events to the wire messages one kind of client expects.

    A dialect is stateful per connection: it remembers what it already sent for
    each call, and emits zero or more messages per event.
    """

    #: The dialect's name (``"native"``, ``"agui"``...).
    name: str
    #: Extra HTTP headers (the content type stays the transport's).
    headers: Mapping[str, str]
    #: True when one event always becomes the same messages, whatever came before:
    #: transports then encode an event once for all their clients.
    stateless: bool

    def open(self) -> list[WireMessage]:
        """The preamble of a connection (may be empty)."""
        ...

    def encode(self, event: Event) -> list[WireMessage]:
        """The messages for one event."""
        ...

    def close(self) -> list[WireMessage]:
        """The epilogue: ends, in the dialect's own terms, what it opened and did not close."""
        ...

    def prime(self, snapshot: Snapshot) -> None:
        """Take on the state a client has after everything up to a resume cursor,
        emitting nothing (``snapshot`` is the session's state at that cursor)."""
        ...


class BaseDialect:
    """A convenient base for dialects: no preamble, no epilogue, nothing to prime."""

    name = "custom"
    headers: Mapping[str, str] = {}
    stateless = False

    def open(self) -> list[WireMessage]:
        """No preamble."""
        return []

    def encode(self, event: Event) -> list[WireMessage]:  # pragma: no cover - abstract
        """Override: the messages for ``event``."""
        raise NotImplementedError

    def close(self) -> list[WireMessage]:
        """No epilogue."""
        return []

    def prime(self, snapshot: Snapshot) -> None:
        """Nothing to remember."""


_CURSOR = re.compile(r"^(?P<id>[^/\s]{1,200})(?:/(?P<reset>r?)(?P<part>[0-9]{1,6}))?$")


@attrs.frozen
class Cursor:
    """Where a client resumes: after event ``event_id``, or inside the wire messages of
    one event (``part``: the client has messages 0..part) or of a reset (``reset``)."""

    event_id: str
    part: int | None = None
    reset: bool = False

    @classmethod
    def parse(cls, text: str | None) -> Cursor | None:
        """``"<id>"``, ``"<id>/<k>"`` or ``"<id>/r<k>"``; None for anything else."""
        if not text:
            return None
        m = _CURSOR.match(text.strip())
        if m is None:
            return None
        part = m.group("part")
        return cls(
            event_id=m.group("id"),
            part=int(part) if part is not None else None,
            reset=bool(m.group("reset")),
        )


@attrs.frozen
class EncodedFrame:
    """A message of a dialect with the id a client resumes from: what one SSE frame or
    WebSocket ``event`` message carries."""

    id: str
    message: WireMessage


def _check_line(value: str, what: str) -> str:
    if "\r" in value or "\n" in value or "\x00" in value:
        raise DialectError(f"{what} {value[:40]!r} contains CR, LF or NUL")
    return value


class Encoder:
    """Encodes one connection's events with a dialect, giving every message a frame id.

    When one event becomes several messages, the last carries the event's id and the
    earlier ones ``<id>/<k>`` (``<id>/r<k>`` for a reset), so a client cut between
    them resumes exactly. ``skip`` drops the first messages of event ``skip_event``
    (what the client already has).
    """

    def __init__(self, dialect: Dialect, *, skip_event: str | None = None, skip: int = 0) -> None:
        self.dialect = dialect
        self._skip_event = skip_event
        self._skip = skip
        #: The id of the last frame produced (where a client would resume).
        self.last_id: str | None = None

    def _frames(
        self, messages: list[WireMessage], event_id: str, *, reset: bool
    ) -> list[EncodedFrame]:
        n = len(messages)
        if n == 0:
            return []
        if n == 1 and not reset:  # the common case: one message, the event's own id
            message = messages[0]
            _check_line(event_id, "frame id")
            if message.event is not None or message.raw is not None:
                _check_message(message)
            return [EncodedFrame(event_id, message)]
        marker = "r" if reset else ""
        frames = [
            EncodedFrame(event_id if k == n - 1 else f"{event_id}/{marker}{k}", m)
            for k, m in enumerate(messages)
        ]
        for frame in frames:
            _check_line(frame.id, "frame id")
            _check_message(frame.message)
        return frames

    def open(self) -> list[EncodedFrame]:
        """The dialect's preamble."""
        messages = self.dialect.open()
        return [EncodedFrame(self.last_id or "", m) for m in messages if _check_message(m)]

    def encode(self, event: Event) -> list[EncodedFrame]:
        """The frames for one event."""
        frames = self._frames(
            self.dialect.encode(event), event.id, reset=isinstance(event, StreamReset)
        )
        if self._skip_event is not None:
            if event.id == self._skip_event:
                frames = frames[self._skip :]
            self._skip_event = None
        if frames:
            self.last_id = frames[-1].id
        return frames

    @property
    def skipping(self) -> bool:
        """True while the first messages of an event this client has are still to skip."""
        return self._skip_event is not None

    def shares(self, event: Event) -> bool:
        """Whether this connection's frames for ``event`` are the same as every other
        connection's: a stateless dialect, an event every client gets whole (not a
        reset, which is per subscription, nor the event whose first messages this
        client already has)."""
        return (
            self.dialect.stateless
            and self._skip_event is None
            and not isinstance(event, StreamReset)
        )

    def passed(self, event: Event) -> None:
        """``event`` was sent from encodings shared with other connections (it
        ``shares``): the encoder moves past it as if it had encoded it."""
        self.last_id = event.id

    def close(self) -> list[EncodedFrame]:
        """The dialect's epilogue (frames carry the last id: nothing to resume into)."""
        return self.trailing(self.dialect.close())

    def trailing(self, messages: list[WireMessage]) -> list[EncodedFrame]:
        """Frames for messages that end a stream (an epilogue, a pause, an error): they
        carry the last id, so a client resumes after them as after the last event."""
        return [EncodedFrame(self.last_id or "", m) for m in messages if _check_message(m)]


def _check_message(message: WireMessage) -> bool:
    if message.event is not None:
        _check_line(message.event, "event name")
    if message.raw is not None:
        _check_line(message.raw, "raw data")
    return True


def drop_none(data: Mapping[str, Any]) -> dict[str, Any]:
    """A payload with ``None`` values dropped (wire formats that forbid nulls)."""
    return {k: v for k, v in data.items() if v is not None}


def typed(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``{"type": kind, **fields}`` without the ``None`` values, in one pass."""
    payload: dict[str, Any] = {"type": kind}
    for key, value in fields.items():
        if value is not None:
            payload[key] = value
    return payload
