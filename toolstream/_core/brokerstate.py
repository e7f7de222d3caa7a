"""How a broker bus turns what its driver stored into events and session state, and
builds the records a driver appends: the part of the broker format every driver
shares (an event is stored as its native JSON without its id; the id is
``"<epoch>-<seq>"``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from .broker import ENDS_CALL, OPENS_CALL, SessionState
from .codec import from_dict, to_dict
from .driver import Record, RecordKind, StoredState
from .errors import EventDecodeError
from .events import (
    ApprovalRequested,
    ApprovalResolved,
    ErrorInfo,
    Event,
    RunFinished,
    RunStarted,
    ToolCancelled,
)
from .ids import event_seq
from .jsonenc import dumps, loads
from .view import LiveView

logger = logging.getLogger("toolstream.broker")

__all__ = ["blob", "decode", "lost_writer_events", "parse_state", "records"]

_KINDS: dict[type, RecordKind] = {
    **dict.fromkeys(OPENS_CALL, "o"),
    **dict.fromkeys(ENDS_CALL, "t"),
    RunStarted: "r",
    RunFinished: "f",
}


def blob(event: Event) -> str:
    """An event as a driver stores it: its native JSON without its id."""
    data = to_dict(event)
    del data["id"]
    return dumps(data)


def lost_writer_events(
    session: str,
    now: float,
    reason: str,
    calls: Iterable[tuple[str, str, str]],
    runs: Iterable[str],
) -> list[Event]:
    """What a reaper writes for a lost writer in ``session`` (the protocol's ``reap``):
    a ``tool.cancelled`` (``reason``) per open call ``(call_id, tool, run_id)``, then a
    ``run.finished`` (cancelled, error ``WorkerLost``) per open run; ids are the
    driver's to give."""
    events: list[Event] = [
        ToolCancelled(
            id="-",
            session=session,
            ts=now,
            call_id=call_id,
            tool=tool,
            run_id=run_id or None,
            reason=reason,
        )
        for call_id, tool, run_id in calls
    ]
    error = ErrorInfo(type="WorkerLost", message=reason)
    events += [
        RunFinished(
            id="-", session=session, ts=now, run_id=run_id, outcome="cancelled", error=error
        )
        for run_id in runs
    ]
    return events


def decode(epoch: str, seq: int, blob: str | bytes) -> Event | None:
    """The event stored at ``seq`` (None, logged, if it is malformed)."""
    try:
        data = loads(blob)
        data["id"] = f"{epoch}-{seq}"
        return from_dict(data)
    except (KeyError, ValueError, TypeError, EventDecodeError) as exc:
        logger.warning("skipped a malformed stored event at %s: %s", seq, exc)
        return None


def parse_state(
    stored: StoredState,
    epoch: str,
    *,
    max_finished: int,
    compare: Callable[[str, str], int],
) -> SessionState:
    """The session state a bus works with, from what its driver read."""
    view = LiveView(max_finished=max_finished, compare=compare)
    if stored.checkpoint is not None:
        try:
            view.apply(from_dict(loads(stored.checkpoint[1])))
        except (ValueError, TypeError, EventDecodeError) as exc:
            logger.error("checkpoint of a session unreadable, ignored: %s", exc)
    events = []
    for seq, blob in stored.events:
        event = decode(epoch, seq, blob)
        if event is not None:
            events.append((seq, event))
    return SessionState(epoch, stored.last, stored.floor, view, events, stored.incarnation)


def records(batch: Sequence[Event], token: str) -> list[Record]:
    """The records of one session's ``batch`` for writer ``token``."""
    out = []
    kinds = _KINDS
    for ev in batch:
        kind: RecordKind = kinds.get(type(ev), "-")
        approval_id, meta = "", None
        if isinstance(ev, ApprovalRequested):
            kind, approval_id = "A", ev.approval_id
            meta = {
                "s": ev.session,
                "exp": ev.expires_at,
                "running": ev.running,
                "cid": ev.call_id,
                "env": [ev.run_id, ev.call_id, ev.tool, ev.parent_call_id],
                "w": token,
            }
        elif isinstance(ev, ApprovalResolved):
            kind, approval_id = "R", ev.approval_id
        out.append(
            Record(
                kind=kind,
                seq=event_seq(ev.id),
                event=ev,
                blob=blob(ev),
                call_id=ev.call_id or "",
                run_id=ev.run_id or "",
                tool=ev.tool or "",
                approval_id=approval_id,
                meta=meta,
            )
        )
    return out
