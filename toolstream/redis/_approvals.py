"""How ``RedisBus`` arbitrates approvals: a Lua script decides and appends in one step,
so exactly one decision wins whichever process makes it; a waiting tracker is woken by a
blocking pop on the approval's own key."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from toolstream._core.approvals import (
    TIMEOUT_BY,
    Decision,
    resolution_variants,
)
from toolstream._core.codec import from_dict
from toolstream._core.errors import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    BusClosed,
    BusUnavailable,
)
from toolstream._core.events import ApprovalResolved
from toolstream._core.ids import make_id
from toolstream._core.jsonenc import dumps
from toolstream.redis import _scripts

from ._common import RETRYABLE, AsyncScript, entry_seq, redact_url, session_base

if TYPE_CHECKING:
    from ._bus import RedisBus

logger = logging.getLogger("toolstream.redis")

__all__ = ["RedisArbiter"]


class RedisArbiter:
    """The approvals of one :class:`~toolstream.redis.RedisBus` (see its
    ``resolve_approval``, ``decision`` and ``wait_decision`` for the contract)."""

    def __init__(self, bus: RedisBus) -> None:
        self.bus = bus
        self._resolve_script: AsyncScript = bus._redis.register_script(_scripts.RESOLVE)
        self._approval_script: AsyncScript = bus._redis.register_script(_scripts.APPROVAL)
        # The same two for synchronous code (``snapshot()`` touching an expired approval).
        self._sync_resolve = bus._sync.register_script(_scripts.RESOLVE)
        self._sync_approval = bus._sync.register_script(_scripts.APPROVAL)

    async def _run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=keys, args=args)
        except RETRYABLE as exc:
            url = redact_url(self.bus.url)
            raise BusUnavailable(f"cannot reach Redis at {url}: {exc}") from exc

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
        """Decide an approval (``edited``: checked already): the script picks, among
        this decision and the two it may find instead (expired meanwhile, the call
        closed elsewhere), the one that wins, and appends its events."""
        bus = self.bus
        if bus._closed:
            raise BusClosed("the bus is closed")
        state = await self.state(session, approval_id)
        if state is None:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        keys, args = self._resolve_call(
            session, approval_id, state[1], (approved, by, reason, edited, ends_call)
        )
        return self._outcome(approval_id, await self._run(self._resolve_script, keys, args))

    def _resolve_call(
        self,
        session: str,
        approval_id: str,
        meta: dict[str, Any],
        decision: tuple[bool, str | None, str | None, dict[str, Any] | None, bool],
    ) -> tuple[list[str], list[Any]]:
        """The RESOLVE script's keys and arguments for ``decision`` (approved, by,
        reason, edited args, ends_call) on the approval whose meta is ``meta``."""
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
        variants: list[str] = []
        for res, dec, den in resolution_variants(
            bus.payload, bus._clock, approval_id, envelope, before_run, decision
        ):
            variants += [dumps(res), dumps(dec), dumps(den) if den is not None else ""]
        kind = "t" if decision[1] == TIMEOUT_BY else "d"
        base = session_base(bus.prefix, session)
        args = [base, session, approval_id, bus._clock(), int(bus.session_ttl), kind, *variants]
        return [f"{base}:s"], args

    def _outcome(self, approval_id: str, reply: Any) -> ApprovalResolved:
        """The resolution the RESOLVE script answered, or the error it means."""
        outcome, res_json, rid = reply
        if outcome == "notfound":
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        event = from_dict({**json.loads(res_json), "id": make_id(self.bus.epoch, entry_seq(rid))})
        assert isinstance(event, ApprovalResolved)
        if outcome == "resolved":
            raise ApprovalAlreadyResolved(
                f"approval {approval_id!r} was already decided", resolution=event
            )
        if outcome == "expired":
            raise ApprovalExpired(f"approval {approval_id!r} expired", resolution=event)
        return event

    def expire_now(self, session: str, approval_id: str) -> None:
        """Resolve by ``"timeout"`` an approval past its expiry, from synchronous code
        (``snapshot()``): the same scripts on the bus's synchronous client."""
        bus = self.bus
        base = session_base(bus.prefix, session)
        st, meta, _ = bus._sync_run(
            lambda client: self._sync_approval(
                keys=[f"{base}:s"], args=[base, session, approval_id], client=client
            )
        )
        if st != "p":
            return
        decided = json.loads(meta)
        if decided.get("exp") is None or bus._clock() < decided["exp"]:
            return
        keys, args = self._resolve_call(
            session, approval_id, decided, (False, TIMEOUT_BY, None, None, True)
        )
        bus._sync_run(lambda client: self._sync_resolve(keys=keys, args=args, client=client))

    async def state(
        self, session: str, approval_id: str
    ) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
        """(``p``/``r``, its meta, its decision) of an approval of ``session``, or None.
        A request this bus published and has not written yet is waited for first."""
        bus = self.bus
        base = session_base(bus.prefix, session)

        async def read() -> tuple[str, str, str] | None:
            st, meta, dec = await self._run(
                self._approval_script, [f"{base}:s"], [base, session, approval_id]
            )
            return (st, meta, dec) if st else None

        got = await bus._outbox.read_own(session, approval_id, read, lambda: bus._closed)
        if got is None:
            return None
        st, meta, dec = got
        return st, json.loads(meta), json.loads(dec) if dec else None

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first. ``ApprovalNotFound`` for an
        unknown id or another session's."""
        bus = self.bus
        state = await self.state(session, approval_id)
        if state is None:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        status, meta, dec = state
        if status == "p":
            expires = meta.get("exp")
            if expires is None or bus._clock() < expires:
                return None
            try:
                await self.resolve(session, approval_id, False, TIMEOUT_BY, None, None, True)
            except (ApprovalAlreadyResolved, ApprovalExpired):
                pass
            state = await self.state(session, approval_id)
            if state is None or state[2] is None:
                return None
            dec = state[2]
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
        """Wait for the decision on an approval, woken by the script that resolves it (a
        blocking pop on the approval's own key); bound it with a cancel scope.
        ``ApprovalNotFound`` as for :meth:`decision`."""
        bus = self.bus
        bus._start_here()  # our request is written (``state`` waits for it)
        key = f"{session_base(bus.prefix, session)}:dn:{approval_id}"
        while True:
            try:
                decision = await self.decision(session, approval_id)
            except BusUnavailable as exc:
                # Nobody can decide while Redis is away: the wait goes on (bounded by
                # the approval's expiry or the caller's cancel scope).
                decision = None
                logger.debug("waiting for a decision: %s", exc)
                await asyncio.sleep(0.2)
            if decision is not None:
                return decision
            if bus._closed:
                raise BusClosed(f"the bus closed before approval {approval_id!r} was decided")
            try:
                await bus._redis.blpop([key], timeout=1)
            except RETRYABLE as exc:
                logger.debug("waiting for a decision: %s", exc)
                await asyncio.sleep(0.1)
