"""How ``NatsBus`` arbitrates approvals: each approval is one entry of the KV bucket
``<prefix>_ap``; a decision is a compare-and-swap on the entry's revision, so exactly
one wins whichever process makes it; the winner then appends the resolution (and the
denial) to the session and records where. A waiting tracker watches the entry."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from toolstream._core.approvals import TIMEOUT_BY, Decision, resolution_variants
from toolstream._core.codec import from_dict, to_dict
from toolstream._core.errors import (
    ApprovalAlreadyResolved,
    ApprovalExpired,
    ApprovalNotFound,
    BusClosed,
    BusUnavailable,
)
from toolstream._core.events import ApprovalRequested, ApprovalResolved, Event
from toolstream._core.ids import make_id

from ._common import NATS_ERRORS, RETRYABLE, JetStreamContext, KeyValue, nats, session_token

if TYPE_CHECKING:
    from ._bus import NatsBus

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsArbiter"]


class NatsArbiter:
    """The approvals of one :class:`~toolstream.nats.NatsBus` (see its
    ``resolve_approval``, ``decision`` and ``wait_decision`` for the contract).

    It talks to NATS through ``kv_of(bucket)`` and ``js_of()``: the bus's own connection
    by default (and then it reads its own writes); another connection's (``snapshot()``
    on a thread of its own) when given.
    """

    def __init__(
        self,
        bus: NatsBus,
        *,
        kv_of: Callable[[str], Awaitable[KeyValue]] | None = None,
        js_of: Callable[[], Awaitable[JetStreamContext]] | None = None,
    ) -> None:
        self.bus = bus
        self._kv_of = kv_of or bus.kv
        self._js_of = js_of or bus._ready
        self._own = kv_of is None  # on the bus's connection: its outbox is ours

    async def _kv(self) -> KeyValue:
        try:
            return await self._kv_of(self.bus.names.approvals)
        except RETRYABLE as exc:
            raise BusUnavailable(f"cannot reach NATS at {self.bus._where}: {exc}") from exc

    async def _get(self, approval_id: str) -> tuple[dict[str, Any], int] | None:
        kv = await self._kv()
        try:
            entry = await kv.get(session_token(approval_id))
        except nats.js.errors.KeyNotFoundError:
            return None
        except RETRYABLE as exc:
            raise BusUnavailable(f"cannot reach NATS at {self.bus._where}: {exc}") from exc
        return json.loads(entry.value or b"{}"), entry.revision or 0

    async def _entry(self, session: str, approval_id: str) -> tuple[dict[str, Any], int]:
        bus = self.bus
        if self._own:
            got = await bus._outbox.read_own(
                session, approval_id, lambda: self._get(approval_id), lambda: bus._closed
            )
        else:
            got = await self._get(approval_id)
        if got is None or got[0].get("meta", {}).get("s") != session:
            raise ApprovalNotFound(f"no approval {approval_id!r} in this session")
        return got

    # -- what the writer's flusher does ----------------------------------------------------

    async def record(self, ev: ApprovalRequested) -> None:
        """An approval is requested: its entry is created pending (before the event is
        written, so a decider that sees the event finds the entry)."""
        meta = {
            "s": ev.session,
            "exp": ev.expires_at,
            "running": ev.running,
            "cid": ev.call_id,
            "env": [ev.run_id, ev.call_id, ev.tool, ev.parent_call_id],
            "w": self.bus.token,
        }
        kv = await self._kv_of(self.bus.names.approvals)
        try:
            await kv.create(
                session_token(ev.approval_id), json.dumps({"st": "p", "meta": meta}).encode()
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # a retried batch: recorded already

    async def own(self, ev: ApprovalResolved) -> bool:
        """A tracker resolves its own approval (its call was cancelled): it wins only
        while the approval is pending; False if it was decided first (drop the event)."""
        kv = await self._kv_of(self.bus.names.approvals)
        key = session_token(ev.approval_id)
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return True
        record = json.loads(entry.value or b"{}")
        if record.get("st") != "p":
            return bool(record.get("mine") == ev.id)  # our own earlier attempt
        data = to_dict(ev)
        del data["id"]
        record.update(
            st="r",
            res=data,
            dec={"approved": False, "by": "cancelled"},
            den=None,
            rid=None,
            mine=ev.id,
        )
        try:
            await kv.update(key, json.dumps(record).encode(), last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def written(self, ev: ApprovalResolved, seq: int) -> None:
        """Where a tracker's own resolution landed (for a later loser's error)."""
        kv = await self._kv_of(self.bus.names.approvals)
        key = session_token(ev.approval_id)
        try:
            entry = await kv.get(key)
            record = json.loads(entry.value or b"{}")
            if record.get("rid") is None:
                record["rid"] = seq
                await kv.update(key, json.dumps(record).encode(), last=entry.revision)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyWrongLastSequenceError):
            pass

    async def ended(self, session: str, approval_id: str) -> bool:
        """Whether approval ``approval_id`` ended its call (a denial written elsewhere)."""
        got = await self._get(approval_id)
        return got is not None and got[0].get("st") == "r" and bool(got[0].get("den"))

    # -- deciding ------------------------------------------------------------------------

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
        """Decide an approval (``edited``: checked already): pick among this decision
        and what wins instead (expired meanwhile, the call closed by a reaper), swap it
        into the entry if it is still pending, then append its events."""
        bus = self.bus
        if bus._closed:
            raise BusClosed("the bus is closed")
        kv = await self._kv()
        key = session_token(approval_id)
        while True:
            record, rev = await self._entry(session, approval_id)
            if record.get("st") != "p":
                raise ApprovalAlreadyResolved(
                    f"approval {approval_id!r} was already decided",
                    resolution=await self._resolution(session, approval_id),
                )
            meta = record["meta"]
            run_id, call_id, tool, parent = meta["env"]
            envelope = {
                "session": session,
                "run_id": run_id,
                "call_id": call_id,
                "tool": tool,
                "parent_call_id": parent,
            }
            variants = resolution_variants(
                bus.payload,
                bus._clock,
                approval_id,
                envelope,
                not meta.get("running", False),
                (approved, by, reason, edited, ends_call),
            )
            outcome, pick = "ok", 0
            if await self._reaped(meta):
                outcome, pick = "resolved", 2
            elif by != TIMEOUT_BY and meta.get("exp") is not None and bus._clock() >= meta["exp"]:
                outcome, pick = "expired", 1
            res, dec, den = variants[pick]
            record.update(st="r", res=res, dec=dec, den=den, rid=None)
            try:
                rev = await kv.update(key, json.dumps(record).encode(), last=rev)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # decided meanwhile: the loop answers with the winner
            except RETRYABLE as exc:
                raise BusUnavailable(f"cannot reach NATS at {bus._where}: {exc}") from exc
            break
        event = await self._append(session, approval_id, record, rev)
        if outcome == "resolved":
            raise ApprovalAlreadyResolved(
                f"approval {approval_id!r} was already decided", resolution=event
            )
        if outcome == "expired":
            raise ApprovalExpired(f"approval {approval_id!r} expired", resolution=event)
        return event

    async def _reaped(self, meta: dict[str, Any]) -> bool:
        """Whether a reaper closed the call (its writer was lost)."""
        kv = await self._kv_of(self.bus.names.writers)
        try:
            entry = await kv.get(meta.get("w", ""))
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.InvalidKeyError):
            return False
        record = json.loads(entry.value or b"{}")
        if not record.get("reaped"):
            return False
        calls = record.get("open", {}).get("c", [])
        return any(c[1] == meta.get("cid") for c in calls)

    async def _append(
        self, session: str, approval_id: str, record: dict[str, Any], rev: int
    ) -> ApprovalResolved:
        """Write a decided entry's events (idempotent: message ids) and record where."""
        bus = self.bus
        js = await self._js_of()
        key = session_token(approval_id)
        try:
            rid = await bus._publish_raw(js, session, record["res"], f"ap:{key}:res")
            if record.get("den"):
                await bus._publish_raw(js, session, record["den"], f"ap:{key}:den")
        except RETRYABLE as exc:
            raise BusUnavailable(f"cannot reach NATS at {bus._where}: {exc}") from exc
        record["rid"] = rid
        kv = await self._kv()
        try:
            await kv.update(key, json.dumps(record).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # another process completed it first: same events, same place
        return self._event(record, rid)

    def _event(self, record: dict[str, Any], rid: int) -> ApprovalResolved:
        event = from_dict({**record["res"], "id": make_id(self.bus.epoch, rid)})
        assert isinstance(event, ApprovalResolved)
        return event

    async def _resolution(self, session: str, approval_id: str) -> ApprovalResolved:
        """The winning resolution with its id: waits (briefly) for the winner to append
        it, and appends it itself if the winner went away in between."""
        deadline = time.monotonic() + self.bus.connect_timeout
        while True:
            record, rev = await self._entry(session, approval_id)
            rid = record.get("rid")
            if rid is not None:
                return self._event(record, int(rid))
            if time.monotonic() >= deadline:
                return await self._append(session, approval_id, record, rev)
            await asyncio.sleep(0.02)

    async def decision(self, session: str, approval_id: str) -> Decision | None:
        """The decision on an approval (the real edited args), or None while pending;
        past its expiry it is resolved by timeout first."""
        bus = self.bus
        record, _ = await self._entry(session, approval_id)
        if record.get("st") == "p":
            expires = record["meta"].get("exp")
            if expires is None or bus._clock() < expires:
                return None
            try:
                await self.resolve(session, approval_id, False, TIMEOUT_BY, None, None, True)
            except (ApprovalAlreadyResolved, ApprovalExpired):
                pass
            record, _ = await self._entry(session, approval_id)
        if record.get("rid") is None and not record.get("mine"):
            # Decided, but the decider has not appended the resolution yet: the tool
            # must not go on before it is in the stream (its own events would come
            # first). Wait for it — or append it, if the decider went away.
            await self._resolution(session, approval_id)
        dec = record.get("dec") or {}
        args = dec.get("args")
        return Decision(
            approval_id=approval_id,
            approved=bool(dec.get("approved")),
            by=dec.get("by"),
            reason=dec.get("reason"),
            args=args if isinstance(args, dict) else None,
        )

    async def wait(self, session: str, approval_id: str) -> Decision:
        """Wait for the decision, woken by a watch on the approval's entry."""
        bus = self.bus
        bus._start_here()  # our request is written (``_entry`` waits for it)
        watcher = None
        try:
            while True:
                try:
                    kv = await self._kv()
                    decision = await self.decision(session, approval_id)
                except BusUnavailable as exc:
                    # Nobody can decide while NATS is away: the wait goes on (bounded
                    # by the approval's expiry or the caller's cancel scope).
                    logger.debug("waiting for a decision: %s", exc)
                    watcher = None
                    await asyncio.sleep(0.2)
                    if bus._closed:
                        raise BusClosed(
                            f"the bus closed before approval {approval_id!r} was decided"
                        ) from None
                    continue
                if decision is not None:
                    return decision
                if bus._closed:
                    raise BusClosed(f"the bus closed before approval {approval_id!r} was decided")
                try:
                    if watcher is None:
                        watcher = await kv.watch(session_token(approval_id))
                    await watcher.updates(timeout=1.0)  # type: ignore[no-untyped-call]
                except (nats.errors.TimeoutError, TimeoutError):
                    pass
                except RETRYABLE as exc:
                    logger.debug("waiting for a decision: %s", exc)
                    watcher = None
                    await asyncio.sleep(0.1)
        finally:
            if watcher is not None:
                try:
                    await watcher.stop()  # type: ignore[no-untyped-call]
                except NATS_ERRORS:
                    pass


def event_json(ev: Event) -> dict[str, Any]:
    """An event as stored: its native JSON without its id."""
    data = to_dict(ev)
    del data["id"]
    return data
