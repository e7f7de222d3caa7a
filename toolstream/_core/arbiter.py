"""How an in-memory bus arbitrates approvals: exactly one decision wins.

The :class:`Arbiter` keeps the bus's :class:`~toolstream._core.approvals.ApprovalBook`
(what is pending, what was decided), takes deciders in turn under its own lock, and
publishes each resolution (and a refused call's ``tool.denied``) on the bus. Expired
approvals are resolved by ``"timeout"`` when anyone looks at them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .approvals import (
    TIMEOUT_BY,
    ApprovalBook,
    Asked,
    Decision,
    check_decision,
    denied_summary,
    published_decision_fields,
)
from .errors import ApprovalAlreadyResolved, ApprovalExpired, ApprovalNotFound, BusClosed
from .events import ApprovalResolved, ToolDenied

if TYPE_CHECKING:
    from .bus import EventBus

__all__ = ["Arbiter"]


class Arbiter:
    """The approvals of one :class:`~toolstream.EventBus` (see its ``resolve_approval``,
    ``decision`` and ``wait_decision`` for the contract)."""

    def __init__(self, bus: EventBus, max_resolved: int) -> None:
        self.bus = bus
        #: Guarded by the bus's lock.
        self.book = ApprovalBook(max_resolved)
        # Held across a decision's check and its events (deciders take turns); taken
        # before the bus's lock, never while holding it.
        self._lock = threading.Lock()

    def resolve(
        self,
        session: str,
        approval_id: str,
        approved: bool,
        by: str | None,
        reason: str | None,
        args: dict[str, Any] | None,
        ends_call: bool,
    ) -> ApprovalResolved:
        """Decide an approval; the first decision wins."""
        bus = self.bus
        edited = check_decision(approved, by, reason, args, bus.payload.max_bytes)
        with self._lock:
            with bus._lock:
                asked, done = self.book.lookup(session, approval_id)
            if done is not None:
                raise ApprovalAlreadyResolved(
                    f"approval {approval_id!r} was already decided", resolution=done.event
                )
            if asked is None:
                raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
            if asked.expired(bus._clock()) and by != TIMEOUT_BY:
                expired = self._decide(approval_id, asked, False, TIMEOUT_BY, None, None, True)
                raise ApprovalExpired(f"approval {approval_id!r} expired", resolution=expired)
            return self._decide(approval_id, asked, approved, by, reason, edited, ends_call)

    def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision, or None while pending (an expired approval is resolved first)."""
        self.expire_due(session)
        with self._lock, self.bus._lock:
            asked, done = self.book.lookup(session, approval_id)
        if done is not None:
            return done.decision
        if asked is None:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        return None

    async def wait(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision: a subscription to the session's resolutions, from the
        request on, asked again at each one (and at a reset)."""
        known = self.decision(session, approval_id)
        if known is not None:
            return known
        bus = self.bus
        with bus._lock:
            asked = self.book.pending.get(approval_id)
            after = None if asked is None else asked.request_id
        sub = (
            bus.subscribe(ApprovalResolved, session=session, after=after)
            if after is not None
            else bus.subscribe(ApprovalResolved, session=session)
        )
        async with sub:
            known = self.decision(session, approval_id)  # decided meanwhile?
            if known is not None:
                return known
            async for event in sub:
                if not isinstance(event, ApprovalResolved) or event.approval_id == approval_id:
                    known = self.decision(session, approval_id)  # (a reset: ask)
                    if known is not None:
                        return known
        known = self.decision(session, approval_id)
        if known is None:
            raise BusClosed(f"the bus closed before approval {approval_id!r} was decided")
        return known

    def _decide(
        self,
        approval_id: str,
        asked: Asked,
        approved: bool,
        by: str | None,
        reason: str | None,
        edited: dict[str, Any] | None,
        ends_call: bool,
    ) -> ApprovalResolved:
        """Publish the resolution (the approval lock held: no other decision runs)."""
        bus = self.bus
        envelope = asked.envelope()
        fields = published_decision_fields(bus.payload, approved, by, reason, edited)
        event = bus.publish(ApprovalResolved, approval_id=approval_id, **envelope, **fields)
        decision = Decision(
            approval_id=approval_id, approved=approved, by=by, reason=reason, args=edited
        )
        with bus._lock:
            self.book.settle(event, decision)
        if not approved and not asked.running and ends_call:
            bus.publish(
                ToolDenied,
                **envelope,
                reason=fields["reason"],
                by=fields["by"],
                summary=bus.payload.text(denied_summary(asked.tool, by, reason)),
            )
        return event

    def expire_due(self, session: str | None) -> None:
        """Resolve by ``"timeout"`` the pending approvals past their expiry."""
        if not self.book.pending:
            return
        bus = self.bus
        now = bus._clock()
        with self._lock:
            with bus._lock:
                due = self.book.due(session, now)
            for approval_id in due:
                with bus._lock:
                    asked = self.book.pending.get(approval_id)
                if asked is not None and not bus.closed:
                    self._decide(approval_id, asked, False, TIMEOUT_BY, None, None, True)
