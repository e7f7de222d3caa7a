"""The data a :class:`~toolstream._core.memory_broker.MemoryBroker` holds: a session
(everything a session's keys hold in Redis) and its approvals."""

from __future__ import annotations

from bisect import bisect_right
from typing import Literal

import attrs

__all__ = ["Approval", "Session"]


@attrs.define
class Approval:
    """An approval as a MemoryBroker holds it."""

    meta: str  # JSON text (as the decision): every reader gets a copy of its own
    status: Literal["p", "r"] = "p"
    resolution: str = ""
    seq: int = 0
    decision: str = ""


class Session:
    """One session's data (everything a session's keys hold in Redis)."""

    def __init__(self, touched: float) -> None:
        self.incarnation = ""
        self.events: list[tuple[int, str | bytes]] = []  # (seq, blob), seq increasing
        self.last = 0  # the last seq ever given (deleting never lowers it)
        self.deleted = 0  # the highest seq deleted
        self.checkpoint: tuple[int, str] | None = None
        self.marks: dict[str, int] = {}  # writer token -> high-water mark (its numbering)
        self.open: dict[tuple[str, str, str], tuple[str, str]] = {}  # (c|r, w, id) -> (tool, run)
        self.fenced: set[tuple[str, str, str]] = set()
        self.approvals: dict[str, Approval] = {}
        self.touched = touched

    def add(self, blob: str, seq: int) -> int:
        """Append ``blob`` at ``seq`` (above ``last``)."""
        self.events.append((seq, blob))
        self.last = seq
        return seq

    def after(self, seq: int) -> int:
        """The index of the first event after ``seq``."""
        return bisect_right(self.events, seq, key=lambda e: e[0])
