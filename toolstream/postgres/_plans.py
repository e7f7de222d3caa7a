"""What each :class:`~toolstream._core.driver.Broker` operation does in PostgreSQL, as a
*plan*: a generator that yields the statements of a step (run pipelined: one round
trip), receives their rows, decides in Python and yields the next step; its return
value is the operation's answer. One plan runs in one transaction, on an async or a
sync connection alike (:mod:`toolstream.postgres._broker` drives it), so the logic of
every operation is written once.

The writes to a session (append, resolve, reap) first lock the session's row: they
happen one at a time per session, whatever the processes, and each sees what the one
before it committed. The semantics are the Redis scripts' (toolstream/redis/_scripts.py:
FLUSH, RESOLVE, REAP, CLAIM...), step for step. The hot path, append, is one call of a
PL/pgSQL function (FLUSH record by record, in :mod:`toolstream.postgres._schema`): the
same steps as statements sent from Python cost three to five times its CPU.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, TypeVar

from toolstream._core.brokerstate import blob, lost_writer_events
from toolstream._core.driver import Appended, Decide, Record, Resolution, StoredState
from toolstream._core.jsonenc import dumps

from ._schema import Statements

__all__ = [
    "SCALE",
    "Plan",
    "Query",
    "append",
    "claim",
    "ensure_epoch",
    "ensure_schema",
    "read_state",
    "reap",
    "resolve",
    "seq_at",
]

T = TypeVar("T")

#: A statement, its parameters and whether its rows are wanted.
Query = tuple[bytes, Sequence[Any], bool]
#: Rows of each statement of a step (None where not wanted).
Rows = list[list[tuple[Any, ...]] | None]
Plan = Generator[list[Query], Rows, T]

#: An event's seq is ``ms * SCALE + n`` (the Redis stream entry id ``ms-n``).
SCALE = 1_000_000
#: What a tracker's own withdrawal of its approval records as the decision.
_CANCELLED = dumps({"approved": False, "by": "cancelled"})


def seq_at(now_ms: int, last: int) -> int:
    """The seq of an event the driver writes on its own at ``now_ms`` (the database's
    clock) after seq ``last``."""
    return max(now_ms * SCALE, last + 1)


def _rows(got: list[tuple[Any, ...]] | None) -> list[tuple[Any, ...]]:
    assert got is not None
    return got


def ensure_schema(s: Statements) -> Plan[bool]:
    """Create the tables unless they all exist (under an advisory lock: two processes
    starting at once do not collide); True if it created anything."""
    got = yield [(s.q["schema_present"], (s.append_signature, s.relations), True)]
    if _rows(got[0])[0][0]:
        return False
    yield [(s.q["schema_lock"], (s.schema_key,), False), *((d, (), False) for d in s.ddl)]
    return True


def ensure_epoch(s: Statements, token: str) -> Plan[str]:
    """The epoch, ``token`` stored as it if there is none."""
    got = yield [(s.q["epoch_insert"], (token,), False), (s.q["epoch"], (), True)]
    return str(_rows(got[1])[0][0])


def _payload(session: str) -> str:
    # A payload is at most 8,000 bytes: a longer name wakes every reader instead.
    return session if len(session.encode("utf-8", "surrogatepass")) < 7_000 else ""


def _notify(s: Statements, session: str) -> Query:
    return (s.q["notify"], (s.events_channel, _payload(session)), False)


def _notify_approval(s: Statements, session: str, approval_id: str) -> Query:
    payload = dumps([session, approval_id])
    if len(payload.encode("utf-8", "surrogatepass")) >= 7_000:
        payload = ""
    return (s.q["notify"], (s.approvals_channel, payload), False)


def append(
    s: Statements, session: str, token: str, records: Sequence[Record], incarnation: str
) -> Plan[Appended]:
    """:meth:`Broker.append`: one call of the append function (FLUSH's logic, in the
    database: see :mod:`toolstream.postgres._schema`); ``incarnation`` is the session's
    if this is its first write."""
    metas = [dumps(r.meta or {}) if r.kind == "A" else "" for r in records]
    args = (
        session,
        token,
        incarnation,
        [r.kind for r in records],
        [r.seq for r in records],
        [r.blob for r in records],
        [r.call_id for r in records],
        [r.run_id for r in records],
        [r.tool for r in records],
        [r.approval_id for r in records],
        metas,
        _payload(session),
        _CANCELLED,
    )
    got = yield [(s.q["append"], args, True)]
    inc, codes, moved = _rows(got[0])[0]
    return Appended(str(inc), [int(c) for c in codes], [int(m) for m in moved])


def read_state(s: Statements, session: str, upto: int | None) -> Plan[StoredState]:
    """:meth:`Broker.read_state`, in one statement (one snapshot)."""
    got = yield [(s.q["read_state"], (upto if upto is not None else 2**63 - 1, session), True)]
    rows = _rows(got[0])
    if not rows:
        return StoredState("", 0, 0, None, [])
    inc, last, floor, ck_seq, ck_state, _, _ = rows[0]
    events = [(seq, blob) for *_, seq, blob in rows if seq is not None]
    checkpoint = (int(ck_seq), str(ck_state)) if ck_state is not None else None
    return StoredState(str(inc), int(last), max(int(floor), int(ck_seq)), checkpoint, events)


def resolve(s: Statements, session: str, decide: Decide) -> Plan[Resolution]:
    """:meth:`Broker.resolve`: RESOLVE's logic."""
    approval_id, now, by_timeout = decide.approval_id, decide.now, decide.by_timeout
    variants = decide.variants
    got = yield [
        (s.q["lock"], (session,), True),
        (s.q["approval_for_update"], (session, approval_id), True),
        (s.q["now_ms"], (), True),
    ]
    locked, found, now_ms = _rows(got[0]), _rows(got[1]), int(_rows(got[2])[0][0])
    if not locked or not found:
        return Resolution("notfound", "", 0)
    last = int(locked[0][0])
    status, res, rid, expires, writer, call_id, fenced = found[0]
    if status == "r":
        return Resolution("resolved", str(res or ""), int(rid or 0))
    if fenced:  # the call was closed elsewhere (a reaper): the cancellation
        outcome, (blob, decision, denial) = "resolved", variants[2]
    elif not by_timeout and expires is not None and now >= expires:
        outcome, (blob, decision, denial) = "expired", variants[1]
    else:
        outcome, (blob, decision, denial) = "ok", variants[0]
    seq = seq_at(now_ms, last)
    seqs, blobs = [seq], [blob]
    writes: list[Query] = []
    if denial:
        seqs.append(seq + 1)
        blobs.append(denial)
        writes.append((s.q["fence"], (session, writer, ["c"], [call_id]), False))
        writes.append((s.q["open_delete"], (session, writer, ["c"], [call_id]), False))
    yield [
        (s.q["insert_events"], (session, seqs, blobs), False),
        *writes,
        (s.q["approval_decided"], (blob, seq, decision, session, approval_id), False),
        (s.q["session_written"], (seqs[-1], session), False),
        _notify(s, session),
        _notify_approval(s, session, approval_id),
    ]
    return Resolution(outcome, blob, seq)  # type: ignore[arg-type]  # a literal above


def reap(s: Statements, session: str, token: str, reason: str, now: float) -> Plan[int]:
    """:meth:`Broker.reap`: REAP's logic (a ``tool.cancelled`` per open call, then a
    ``run.finished`` per open run, each fenced)."""
    got = yield [
        (s.q["lock"], (session,), True),
        (s.q["open_of"], (session, token), True),
        (s.q["now_ms"], (), True),
    ]
    locked, items, now_ms = _rows(got[0]), _rows(got[1]), int(_rows(got[2])[0][0])
    if not locked or not items:
        return 0
    last = int(locked[0][0])
    events = lost_writer_events(
        session,
        now,
        reason,
        [(i, tool, rid) for kind, i, tool, rid in items if kind == "c"],
        [i for kind, i, _, _ in items if kind == "r"],
    )
    first = seq_at(now_ms, last)
    seqs = list(range(first, first + len(events)))
    kinds, ids = [str(k) for k, *_ in items], [str(i) for _, i, *_ in items]
    yield [
        (s.q["insert_events"], (session, seqs, [blob(e) for e in events]), False),
        (s.q["fence"], (session, token, kinds, ids), False),
        (s.q["open_clear"], (session, token), False),
        (s.q["session_written"], (seqs[-1], session), False),
        _notify(s, session),
    ]
    return len(events)


def claim(s: Statements, token: str, force: bool) -> Plan[list[str] | None]:
    """:meth:`Broker.claim`: CLAIM's logic."""
    got = yield [(s.q["claim_lock"], (token,), True)]
    rows = _rows(got[0])
    if not rows:
        return None  # never held a lease, or reaped and released
    held, lost, alive = rows[0]
    if alive and not force:
        return None
    if not held and not lost:
        return None  # reaped already
    got = yield [(s.q["claim"], (token,), False), (s.q["writer_sessions"], (token,), True)]
    return [str(r[0]) for r in _rows(got[1])]
