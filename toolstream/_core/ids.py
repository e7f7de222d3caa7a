"""Event ids: ``"<epoch>-<seq>"``, and everything that reads or orders them.

Every bus gives its events ids of this shape (the epoch names one run of the bus, the
sequence orders events within it), so clients, cursors, dialects and ``LiveView``
parse them here and nowhere else. Ids are ordered by :func:`compare_ids`, never as
strings; ids of different epochs do not compare.
"""

from __future__ import annotations

__all__ = ["compare_ids", "event_seq", "make_id", "parse_event_id", "seq_key"]

#: A sequence number longer than this is not an id of ours (and would be slow to parse).
_MAX_DIGITS = 20


def make_id(epoch: str, seq: int) -> str:
    """The id of event ``seq`` of ``epoch``."""
    return f"{epoch}-{seq}"


def parse_event_id(event_id: str) -> tuple[str, int]:
    """Split an ``"<epoch>-<seq>"`` id; ``ValueError`` if it is not one."""
    if not isinstance(event_id, str):
        raise ValueError(f"an event id is a string, not {type(event_id).__name__}")
    epoch, sep, seq = event_id.rpartition("-")
    if not sep or not epoch or not seq.isdigit() or not seq.isascii() or len(seq) > _MAX_DIGITS:
        raise ValueError(f"not an event id: {event_id[:80]!r}")
    return epoch, int(seq)


def event_seq(event_id: str) -> int:
    """The sequence number of an id the bus made (``ValueError`` otherwise)."""
    return parse_event_id(event_id)[1]


def compare_ids(a: str, b: str) -> int:
    """-1, 0 or 1 as event id ``a`` is before, equal to or after ``b``.

    ``ValueError`` for ids of different epochs (another bus, e.g. before a restart) or
    strings that are not ids of this kind.
    """
    ea, sa = parse_event_id(a)
    eb, sb = parse_event_id(b)
    if ea != eb:
        raise ValueError(f"ids of different epochs do not compare: {a!r}, {b!r}")
    return (sa > sb) - (sa < sb)


def seq_key(event_id: str | None) -> tuple[int, str]:
    """A sort key that orders the ids of one epoch by sequence; ``None`` and strings that
    are not ids sort last (for ordering what a snapshot holds, where ids may be absent)."""
    if event_id:
        try:
            return parse_event_id(event_id)[1], event_id
        except ValueError:
            pass
    return 2**62, event_id or ""
