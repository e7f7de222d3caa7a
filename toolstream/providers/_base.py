"""What every provider ingest shares: chunk normalization, pending calls, finishing."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import toolstream as ts

logger = logging.getLogger("toolstream.providers")

__all__ = ["Ingest"]


def as_mapping(chunk: object, what: str) -> Mapping[str, Any]:
    """A chunk as a mapping: plain dicts as they are, SDK objects (pydantic models,
    duck-typed) through ``model_dump``."""
    if isinstance(chunk, Mapping):
        return chunk
    dump = getattr(chunk, "model_dump", None)
    if callable(dump):
        try:
            data = dump()
        except Exception as exc:  # pragma: no cover - a broken SDK object
            raise ts.ProviderStreamError(f"{what}: cannot read the SDK object ({exc})") from None
        if isinstance(data, Mapping):
            return data
    if isinstance(chunk, (str, bytes, bytearray)):
        try:
            text = chunk.decode() if isinstance(chunk, (bytes, bytearray)) else chunk
            data = json.loads(text)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise ts.ProviderStreamError(f"{what}: not JSON: {chunk[:60]!r}") from None
        if isinstance(data, Mapping):
            return data
    raise ts.ProviderStreamError(f"{what}: expected an object, got {type(chunk).__name__}")


def field(
    data: Mapping[str, Any],
    name: str,
    kind: type | tuple[type, ...],
    where: str,
    *,
    required: bool = True,
) -> Any:
    """``data[name]`` checked against ``kind``; None (absent) allowed unless required."""
    value = data.get(name)
    if value is None:
        if required:
            raise ts.ProviderStreamError(f"{where}: missing field {name!r}")
        return None
    if kind is str and value == "" and required:
        raise ts.ProviderStreamError(f"{where}: field {name!r} is empty")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ts.ProviderStreamError(
            f"{where}: field {name!r} should be {expected}, got {type(value).__name__}"
        )
    return value


class Ingest:
    """Turns one model turn's stream into tracker calls, and its text and reasoning into
    a message (``tracker.message``; ``messages=False``: calls only). Subclasses parse
    chunks.

    ``feed(chunk)`` one chunk (or event) at a time; ``finish(error=None)`` returns the
    calls whose input is complete. Used as a context manager, leaving it with an
    exception fails every call not yet ready, exactly once.
    """

    def __init__(
        self,
        tracker: ts.Tracker,
        on_text: Callable[[str], object] | None = None,
        *,
        messages: bool = True,
    ) -> None:
        self.tracker = tracker
        self.on_text = on_text
        #: Whether the stream's text and reasoning are published as a message.
        self.messages = messages
        #: The message the stream's text and reasoning went to (made at the first text).
        self.message: ts.MessageHandle | None = None
        self._begin()
        #: Every call announced in this stream, in order.
        self.calls: list[ts.CallHandle] = []
        self._finished = False
        self._failed: BaseException | str | None = None

    # -- for subclasses --------------------------------------------------------------

    def _announce(
        self, tool: str, call_id: str | None, *, parent_id: str | None = None
    ) -> ts.CallHandle:
        """Announce a call; a call id the stream already announced (a provider that
        repeats a start event) gives that call again, listed once."""
        try:
            handle = self.tracker.create(tool, call_id=call_id or None, parent_id=parent_id)
        except ValueError as exc:  # a tool name or id the tracker refuses
            raise ts.ProviderStreamError(f"cannot announce {tool!r:.60}: {exc}") from None
        if not any(known is handle for known in self.calls):
            self.calls.append(handle)
        return handle

    def _text(self, text: object, message_id: object = None) -> None:
        """Answer text the model wrote: to ``on_text`` and the stream's message."""
        if not isinstance(text, str) or not text:
            return
        if self.on_text is not None:
            self.on_text(text)
        if self.messages:
            self._message(message_id).delta(text)

    def _reasoning(self, text: object, message_id: object = None) -> None:
        """Reasoning the model wrote: to the stream's message."""
        if self.messages and isinstance(text, str) and text:
            self._message(message_id).reasoning(text)

    def _message(self, message_id: object) -> ts.MessageHandle:
        """The stream's message (the provider's id for it, when it has a usable one)."""
        message = self.message
        if message is None or message.finished:
            given = message_id if isinstance(message_id, str) and message_id else None
            try:
                message = self.tracker.message(given)
            except ValueError:
                message = self.tracker.message()
            self.message = message
        return message

    @staticmethod
    def _complete_input(handle: ts.CallHandle) -> None:
        """The call's input is complete: ``tool.ready`` (invalid JSON stays flagged)."""
        if handle.state is ts.CallState.CREATED:
            handle.ready()

    def _fail_pending(self, error: BaseException | str) -> None:
        """An error: every call not yet ready fails, exactly once."""
        self._failed = error
        for handle in self.calls:
            if handle.state is ts.CallState.CREATED:
                handle.fail(error)

    def _close_open_inputs(self) -> None:
        """The stream ended: whatever input is still open is all there is."""
        for handle in self.calls:
            self._complete_input(handle)

    def _begin(self) -> None:
        """Set up a subclass's parsing state (called by ``__init__``)."""

    def _feed(self, chunk: object) -> None:  # pragma: no cover - abstract
        """Parse one chunk (raising ProviderStreamError for what is malformed)."""
        raise NotImplementedError

    # -- public ------------------------------------------------------------------------

    def feed(self, chunk: object) -> None:
        """Take one chunk (a dict of parsed SSE data, or an SDK object).

        A malformed chunk raises :class:`~toolstream.ProviderStreamError` naming the
        chunk and the field; nothing else escapes, and the ingest stays usable.
        """
        try:
            self._feed(chunk)
        except (ts.ProviderStreamError, ts.LifecycleError):
            raise
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            shown = repr(chunk)
            raise ts.ProviderStreamError(
                f"{type(self).__name__}: malformed chunk {shown[:80]}: {exc}"
            ) from None

    def finish(self, error: BaseException | str | None = None) -> list[ts.CallHandle]:
        """End of the stream. With ``error`` (or after a provider failure event), every
        call not yet ready fails, exactly once. Returns the calls that are ready, in
        order, for the agent loop to run (``async with tracker.call(h.tool, h.args,
        call_id=h.call_id)`` adopts each)."""
        if not self._finished:
            self._finished = True
            if error is not None:
                self._fail_pending(error)
            elif self._failed is None:
                self._close_open_inputs()
            if self.message is not None and not self.message.finished:
                self.message.finish()
        return [h for h in self.calls if not h.done]

    def __enter__(self) -> Ingest:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish(exc)
