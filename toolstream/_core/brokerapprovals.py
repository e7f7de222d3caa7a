"""How a broker bus arbitrates approvals: its driver decides and appends in one atomic
step, so exactly one decision wins whichever process makes it; a waiting tracker is
woken by the driver (:meth:`~toolstream._core.driver.Broker.wait_approval`)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from .approvals import TIMEOUT_BY, Decision, resolution_variants
from .codec import from_dict
from .driver import ApprovalState, Decide, Resolution, Variant
from .errors import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    BusClosed,
    BusUnavailable,
)
from .events import ApprovalResolved
from .ids import make_id
from .jsonenc import dumps, loads

if TYPE_CHECKING:
    from .brokerbus import BrokerBus

logger = logging.getLogger("toolstream.broker")

__all__ = ["BrokerArbiter"]

#: (approved, by, reason, edited args, ends_call)
_Decided = tuple[bool, "str | None", "str | None", "dict[str, Any] | None", bool]


class BrokerArbiter:
    """The approvals of one :class:`~toolstream._core.brokerbus.BrokerBus` (see its
    ``resolve_approval``, ``decision`` and ``wait_decision`` for the contract)."""

    def __init__(self, bus: BrokerBus) -> None:
        self.bus = bus
        self.broker = bus.broker

    def _unavailable(self, exc: BaseException) -> BusUnavailable:
        return BusUnavailable(f"cannot reach {self.broker.where}: {exc}")

    async def resolve(
        self,
        session: str,
        approval_id: str,
        approved: bool,
        by: str | None,
        reason: str | None,
        edited: dict[str, Any] | None,
        ends_call: bool,
    ) -> ApprovalResolved:
        """Decide an approval (``edited``: checked already): the driver picks, among this
        decision and the two it may find instead (expired meanwhile, the call closed
        elsewhere), the one that wins, and appends its events."""
        if self.bus.closed:
            raise BusClosed("the bus is closed")
        state = await self.state(session, approval_id)
        if state is None:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        decided: _Decided = (approved, by, reason, edited, ends_call)
        variants = self._variants(session, approval_id, state.meta, decided)
        try:
            decide = Decide(approval_id, self.bus.clock(), by == TIMEOUT_BY, variants)
            got = await self.broker.resolve(session, decide)
        except self.broker.retryable as exc:
            raise self._unavailable(exc) from exc
        return self._outcome(approval_id, got)

    def _variants(
        self, session: str, approval_id: str, meta: dict[str, Any], decided: _Decided
    ) -> list[Variant]:
        """The decision, the expiry and the cancellation of the approval whose meta is
        ``meta``, as the driver writes them."""
        bus = self.bus
        run_id, call_id, tool, parent = meta["env"]
        envelope = {
            "session": session,
            "run_id": run_id,
            "call_id": call_id,
            "tool": tool,
            "parent_call_id": parent,
        }
        before_run = not meta.get("running", False)
        return [
            (dumps(res), dumps(dec), dumps(den) if den is not None else None)
            for res, dec, den in resolution_variants(
                bus.payload, bus.clock, approval_id, envelope, before_run, decided
            )
        ]

    def _outcome(self, approval_id: str, got: Resolution) -> ApprovalResolved:
        """The resolution the driver wrote or found, or the error it means."""
        if got.outcome == "notfound":
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        event = from_dict({**loads(got.blob), "id": make_id(self.bus.epoch, got.seq)})
        assert isinstance(event, ApprovalResolved)
        if got.outcome == "resolved":
            raise ApprovalAlreadyResolved(
                f"approval {approval_id!r} was already decided", resolution=event
            )
        if got.outcome == "expired":
            raise ApprovalExpired(f"approval {approval_id!r} expired", resolution=event)
        return event

    def expire_now(self, session: str, approval_id: str) -> None:
        """Resolve by ``"timeout"`` an approval past its expiry, from synchronous code
        (``snapshot()``)."""
        broker = self.broker
        state = broker.approval_sync(session, approval_id)
        if state is None or state.status != "p":
            return
        expires = state.meta.get("exp")
        now = self.bus.clock()
        if expires is None or now < expires:
            return
        variants = self._variants(
            session, approval_id, state.meta, (False, TIMEOUT_BY, None, None, True)
        )
        broker.resolve_sync(session, Decide(approval_id, now, True, variants))

    async def state(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval as stored, or None. A request this bus published and has not
        written yet is waited for first."""
        bus = self.bus

        async def read() -> ApprovalState | None:
            try:
                return await self.broker.approval(session, approval_id)
            except self.broker.retryable as exc:
                raise self._unavailable(exc) from exc

        return await bus.outbox.read_own(session, approval_id, read, lambda: bus.closed)

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first. ``ApprovalNotFound`` for an
        unknown id or another session's."""
        state = await self.state(session, approval_id)
        if state is None:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        dec = state.decision
        if state.status == "p":
            expires = state.meta.get("exp")
            if expires is None or self.bus.clock() < expires:
                return None
            try:
                await self.resolve(session, approval_id, False, TIMEOUT_BY, None, None, True)
            except (ApprovalAlreadyResolved, ApprovalExpired):
                pass
            again = await self.state(session, approval_id)
            if again is None or again.decision is None:
                return None
            dec = again.decision
        assert dec is not None
        args = dec.get("args")
        return Decision(
            approval_id=approval_id,
            approved=bool(dec.get("approved")),
            by=dec.get("by"),
            reason=dec.get("reason"),
            args=args if isinstance(args, dict) else None,
        )

    async def wait(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision on an approval, woken by the driver; bound it with a
        cancel scope. ``ApprovalNotFound`` as for :meth:`decision`."""
        bus = self.bus
        bus.start_here()  # our request is written (``state`` waits for it)
        while True:
            try:
                decision = await self.decision(session, approval_id)
            except BusUnavailable as exc:
                # Nobody can decide while the broker is away: the wait goes on (bounded
                # by the approval's expiry or the caller's cancel scope).
                decision = None
                logger.debug("waiting for a decision: %s", exc)
                await asyncio.sleep(0.2)
            if decision is not None:
                return decision
            if bus.closed:
                raise BusClosed(f"the bus closed before approval {approval_id!r} was decided")
            try:
                await self.broker.wait_approval(session, approval_id, 1.0)
            except self.broker.retryable as exc:
                logger.debug("waiting for a decision: %s", exc)
                await asyncio.sleep(0.1)
