"""A tracker's ``coalesce``: each call's deltas and progress held for an interval, then
published as one event of each kind.

Trackers may be driven from any thread or event loop, so the delayed publish cannot rely
on one loop's timers: it runs on the scheduler thread (:mod:`toolstream._core.scheduler`).
"""

from __future__ import annotations

import threading
from typing import Any, Final, Protocol

from .scheduler import call_later

__all__ = ["Coalescer", "Held", "Holder"]

#: No partial output is held.
NOTHING: Final[Any] = object()


class Holder(Protocol):
    """A call's or a message's handle: publishes what is held for it."""

    def _flush(self) -> None: ...


class Held:
    """What is held for one call (streamed input and output text, the newest progress
    and partial output) or one message (its text and reasoning, in order)."""

    __slots__ = ("args", "message", "output", "partial", "progress")

    def __init__(self) -> None:
        self.args: list[str] = []
        self.output: list[str] = []
        self.message: list[tuple[Any, str]] = []
        self.progress: dict[str, Any] | None = None
        self.partial: Any = NOTHING


class Coalescer:
    """Holds each call's deltas and progress for ``interval`` seconds (the tracker's lock
    guards it), then asks each call or message to publish what is held (``_flush``)."""

    __slots__ = ("_held", "_lock", "_scheduled", "interval")

    def __init__(self, interval: float, lock: threading.RLock) -> None:
        self.interval = interval
        self._lock = lock
        self._held: dict[Holder, Held] = {}
        self._scheduled = False

    def _for(self, handle: Holder) -> Held:
        held = self._held.get(handle)
        if held is None:
            held = self._held[handle] = Held()
        if not self._scheduled:
            self._scheduled = True
            call_later(self.interval, self._due)
        return held

    def args(self, handle: Holder, text: str) -> None:
        """Hold input text (lock held)."""
        self._for(handle).args.append(text)

    def output(self, handle: Holder, text: str) -> None:
        """Hold output text (lock held)."""
        self._for(handle).output.append(text)

    def message(self, handle: Holder, kind: str, text: str) -> None:
        """Hold a message's text or reasoning (lock held)."""
        self._for(handle).message.append((kind, text))

    def progress(self, handle: Holder, fields: dict[str, Any]) -> None:
        """Hold the newest progress; a message stays until a newer one replaces it."""
        held = self._for(handle)
        if held.progress is not None and fields["message"] is None:
            fields["message"] = held.progress["message"]
        held.progress = fields

    def partial(self, handle: Holder, value: Any) -> None:
        """Hold the newest partial output (lock held)."""
        self._for(handle).partial = value

    def release(self, handle: Holder) -> Held | None:
        """What is held for ``handle``, no longer held (lock held)."""
        return self._held.pop(handle, None)

    def flush(self) -> None:
        """Every call publishes what is held for it (lock held)."""
        while self._held:
            handle = next(iter(self._held))
            handle._flush()
            self._held.pop(handle, None)

    def _due(self) -> None:
        with self._lock:
            self._scheduled = False
            self.flush()
