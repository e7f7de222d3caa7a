"""Approvals: a person decides whether a call may run; the bus arbitrates.

What every bus shares: the :class:`Decision` a tracker receives, the checks a decision
passes before it is applied (:func:`check_decision`), the sentence of a denied call, and
:class:`ApprovalBook`, the in-memory record of pending and resolved approvals that
``EventBus`` keeps (``RedisBus`` keeps the same record in Redis, in its scripts).
"""

from __future__ import annotations

import json
import math
import secrets
from collections import OrderedDict
from typing import Any, Final

import attrs

from .errors import ApprovalInvalid
from .events import ApprovalRequested, ApprovalResolved, Event, JSONValue

__all__ = [
    "CANCELLED_BY",
    "TIMEOUT_BY",
    "ApprovalBook",
    "Asked",
    "Decision",
    "check_decision",
    "check_timeout",
    "denied_summary",
    "new_approval_id",
    "resolution_variants",
]

#: ``by`` of the resolution published when an approval expires.
TIMEOUT_BY: Final = "timeout"
#: ``by`` of the resolution published when the call ended while waiting.
CANCELLED_BY: Final = "cancelled"
#: Edited args are capped at this many bytes of JSON when the bus has no payload cap.
DEFAULT_MAX_EDIT_BYTES: Final = 32 * 1024
#: Resolved approvals an in-memory bus remembers by default (so a late decision learns
#: who won): ``EventBus(max_resolved=...)``.
MAX_RESOLVED: Final = 10_000


@attrs.frozen(kw_only=True)
class Decision:
    """The decision on one approval, as the waiting tool receives it.

    ``args`` holds the edited input (real values, unredacted: only the tool sees this
    object), or ``None`` when the input was not changed. ``by`` is the deciding
    principal's id, ``"timeout"`` when the approval expired, ``"cancelled"`` when the
    call ended while waiting.
    """

    approval_id: str
    approved: bool
    by: str | None = None
    reason: str | None = None
    args: dict[str, Any] | None = None


def new_approval_id() -> str:
    """An unguessable approval id (128 random bits)."""
    return f"apr_{secrets.token_hex(16)}"


def check_decision(
    approved: object, by: object, reason: object, args: object, max_bytes: int | None
) -> dict[str, Any] | None:
    """Check a decision's values (they may come from a client); returns the edited args.

    ``ApprovalInvalid`` for a non-boolean ``approved``, a ``by`` or ``reason`` that is
    not text, edited args that are not a JSON object, or are over ``max_bytes`` of JSON
    (``too_large``), or edited args on a refusal.
    """
    if not isinstance(approved, bool):
        raise ApprovalInvalid(f"approved must be true or false, got {approved!r:.40}")
    if by is not None and not isinstance(by, str):
        raise ApprovalInvalid(f"by must be a string, got {type(by).__name__}")
    if reason is not None and not isinstance(reason, str):
        raise ApprovalInvalid(f"reason must be a string, got {type(reason).__name__}")
    if reason is not None and len(reason) > 4096:
        raise ApprovalInvalid("reason is longer than 4096 characters", too_large=True)
    if args is None:
        return None
    if not isinstance(args, dict):
        raise ApprovalInvalid(f"edited args must be a JSON object, got {type(args).__name__}")
    if not approved:
        raise ApprovalInvalid("edited args come with an approval, not a refusal")
    try:
        text = json.dumps(args, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ApprovalInvalid(f"edited args are not plain JSON: {exc}") from None
    cap = DEFAULT_MAX_EDIT_BYTES if max_bytes is None else max_bytes
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > cap:
        raise ApprovalInvalid(
            f"edited args are {size} bytes of JSON; the limit is {cap}", too_large=True
        )
    parsed: dict[str, Any] = json.loads(text)  # a private copy: later edits do not leak in
    return parsed


def check_timeout(timeout: object) -> float | None:
    """A positive, finite number of seconds, or None."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def denied_summary(tool: str, by: str | None, reason: str | None) -> str:
    """ "send_email was not approved in time"; "send_email was denied by alice: no"."""
    if by == TIMEOUT_BY:
        return f"{tool} was not approved in time"
    who = f" by {by}" if by and by != "anonymous" else ""
    return f"{tool} was denied{who}" + (f": {reason}" if reason else "")


@attrs.define(kw_only=True)
class Asked:
    """A pending approval as a bus records it."""

    session: str
    run_id: str | None
    call_id: str
    tool: str
    parent_call_id: str | None
    expires_at: float | None
    running: bool
    request_id: str

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def envelope(self) -> dict[str, Any]:
        """The identifier fields the approval's events carry."""
        return {
            "session": self.session,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "parent_call_id": self.parent_call_id,
        }


@attrs.define(kw_only=True)
class Resolved:
    """A resolved approval: the event that won and the decision (real edited args)."""

    session: str
    event: ApprovalResolved
    decision: Decision


def decision_of(event: ApprovalResolved, args: dict[str, Any] | None = None) -> Decision:
    """The :class:`Decision` an ``ApprovalResolved`` event announces (``args``: the real
    edited args when known; else the published ones)."""
    edited = args
    if edited is None and isinstance(event.args, dict):
        edited = event.args
    return Decision(
        approval_id=event.approval_id,
        approved=event.approved,
        by=event.by,
        reason=event.reason,
        args=edited,
    )


class ApprovalBook:
    """Pending and resolved approvals of an in-memory bus (guarded by the bus's lock)."""

    def __init__(self, max_resolved: int = MAX_RESOLVED) -> None:
        self.pending: dict[str, Asked] = {}
        #: The newest ``max_resolved`` resolutions (older ones are forgotten: a decision
        #: on one of them is answered as for an unknown id).
        self.resolved: OrderedDict[str, Resolved] = OrderedDict()
        self.max_resolved = max_resolved
        self._per_session: dict[str, int] = {}

    def observe(self, event: Event) -> None:
        """Record a published approval event."""
        if isinstance(event, ApprovalRequested):
            if event.approval_id in self.pending or event.approval_id in self.resolved:
                return
            self.pending[event.approval_id] = Asked(
                session=event.session,
                run_id=event.run_id,
                call_id=event.call_id,
                tool=event.tool,
                parent_call_id=event.parent_call_id,
                expires_at=event.expires_at,
                running=event.running,
                request_id=event.id,
            )
            self._per_session[event.session] = self._per_session.get(event.session, 0) + 1
        elif isinstance(event, ApprovalResolved):
            self.settle(event, decision_of(event))

    def settle(self, event: ApprovalResolved, decision: Decision) -> None:
        asked = self.pending.pop(event.approval_id, None)
        if asked is not None:
            left = self._per_session.get(asked.session, 1) - 1
            if left > 0:
                self._per_session[asked.session] = left
            else:
                self._per_session.pop(asked.session, None)
        elif event.approval_id in self.resolved:
            self.resolved[event.approval_id].decision = decision
            return
        self.resolved[event.approval_id] = Resolved(
            session=event.session, event=event, decision=decision
        )
        while len(self.resolved) > self.max_resolved:
            self.resolved.popitem(last=False)

    def lookup(self, session: str, approval_id: str) -> tuple[Asked | None, Resolved | None]:
        """The approval of this session (another session's is not found)."""
        asked = self.pending.get(approval_id)
        if asked is not None:
            return (asked, None) if asked.session == session else (None, None)
        done = self.resolved.get(approval_id)
        if done is not None and done.session == session:
            return None, done
        return None, None

    def has_pending(self, session: str) -> bool:
        return session in self._per_session

    def due(self, session: str | None, now: float) -> list[str]:
        """Ids of the pending approvals (of ``session``, or all) past their expiry."""
        return [
            aid
            for aid, asked in self.pending.items()
            if asked.expired(now) and (session is None or asked.session == session)
        ]


def published_decision_fields(
    payload: Any, approved: bool, by: str | None, reason: str | None, edited: JSONValue
) -> dict[str, Any]:
    """The fields of an ``ApprovalResolved`` through the payload policy ``payload``."""
    return {
        "approved": approved,
        "by": payload.text(by) if by is not None else None,
        "reason": payload.text(reason) if reason is not None else None,
        "args": None if edited is None else payload.value(edited),
    }


def resolution_variants(
    payload: Any,
    clock: Any,
    approval_id: str,
    envelope: dict[str, Any],
    before_run: bool,
    decision: tuple[bool, str | None, str | None, dict[str, Any] | None, bool],
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]]:
    """What a broker bus may write when it arbitrates a decision, decided there in one
    step: for ``decision`` (approved, by, reason, edited args, ends_call), for an expiry
    found meanwhile, and for a call closed elsewhere (in that order), the resolution
    event, the decision as the waiting tool reads it, and the denial event (or None),
    each as a dict without its id. ``envelope`` holds the call's session, run_id,
    call_id, tool and parent_call_id; ``before_run``: the call has not started."""
    from toolstream._core.codec import to_dict
    from toolstream._core.events import ApprovalResolved, ToolDenied

    variants = []
    for ok, who, why, changes, ends in (
        decision,
        (False, TIMEOUT_BY, None, None, True),  # expired meanwhile
        (False, CANCELLED_BY, None, None, False),  # the call was closed elsewhere
    ):
        fields = published_decision_fields(payload, ok, who, why, changes)
        ts = clock()
        res = to_dict(
            ApprovalResolved(id="-", ts=ts, approval_id=approval_id, **envelope, **fields)
        )
        del res["id"]
        dec = {"approved": ok, "by": who, "reason": why, "args": changes}
        den: dict[str, Any] | None = None
        if not ok and before_run and ends:
            den = to_dict(
                ToolDenied(
                    id="-",
                    ts=ts,
                    **envelope,
                    reason=fields["reason"],
                    by=fields["by"],
                    summary=payload.text(denied_summary(envelope["tool"], who, why)),
                )
            )
            del den["id"]
        variants.append((res, dec, den))
    return variants
