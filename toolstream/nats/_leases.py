"""NatsLeases: this process as a writer of a NatsBus — its lease, the calls and runs it
left open, fencing — and the reaper of the writers that were lost and of expired sessions.

The ``<prefix>_w`` KV bucket holds one entry per writer: its lease length and what it
left open, renewed by compare-and-swap. A writer whose entry has not changed for its
lease (as the reaper's own clock measures) is claimed by exactly one reaper (compare-
and-swap again), which closes what it left open; the writer, if it was only stalled,
finds its entry claimed at its next write and drops its later events of those calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolstream._core.broker import ENDS_CALL, OPENS_CALL
from toolstream._core.events import (
    ApprovalRequested,
    ErrorInfo,
    Event,
    RunFinished,
    RunStarted,
    ToolCancelled,
)

from ._approvals import event_json
from ._common import RETRYABLE, JetStreamContext, KeyValue, nats, token_session

if TYPE_CHECKING:
    from ._bus import NatsBus

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsLeases"]


class _Opened:
    """What this writer left open (closed by a reaper if it is lost), as registered."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], tuple[str, str]] = {}  # (session, call) -> tool, run
        self.runs: set[tuple[str, str]] = set()

    def as_json(self) -> dict[str, Any]:
        return {
            "c": [[s, c, t, r] for (s, c), (t, r) in self.calls.items()],
            "r": [[s, r] for s, r in self.runs],
        }


class NatsLeases:
    """The lease side of one :class:`~toolstream.nats.NatsBus`: what this process opened
    (``track``), what was closed for it elsewhere (``is_fenced``, ``denied``), its lease
    entry (``guard`` before each batch, ``run`` to renew it), and reaping."""

    def __init__(self, bus: NatsBus) -> None:
        self._bus = bus
        self._opened = _Opened()
        self._registered_rev = 0  # our lease entry's revision (0: none yet)
        self._renewed = 0.0  # monotonic time of the last successful lease write
        self._fenced: set[tuple[str, str, str]] = set()  # ("c"/"r", session, id)
        self._gated: dict[tuple[str, str], str] = {}  # (session, call) -> approval id
        self._seen: dict[str, tuple[int, float]] = {}  # writer -> (revision, since)
        self._janitor_at = 0.0
        self._reaped_at = 0.0  # monotonic time of the last reaper pass
        self._writing = asyncio.Lock()  # one lease entry write at a time
        self._dirty = False  # the open set changed since the entry was last written

    @property
    def registered(self) -> bool:
        """Whether this process holds a lease entry."""
        return bool(self._registered_rev)

    def track(self, ev: Event) -> None:
        """Keep the open calls and runs up to date with an event written."""
        session, cid = ev.session, ev.call_id
        if isinstance(ev, OPENS_CALL) and cid:
            self._opened.calls.setdefault((session, cid), (ev.tool or "", ev.run_id or ""))
        elif isinstance(ev, ENDS_CALL) and cid:
            self._opened.calls.pop((session, cid), None)
            self._gated.pop((session, cid), None)
        elif isinstance(ev, RunStarted) and ev.run_id:
            self._opened.runs.add((session, ev.run_id))
        elif isinstance(ev, RunFinished) and ev.run_id:
            self._opened.runs.discard((session, ev.run_id))
        if isinstance(ev, ApprovalRequested) and cid:
            self._gated[(session, cid)] = ev.approval_id

    def is_fenced(self, ev: Event) -> bool:
        """Whether ``ev`` belongs to a call or run closed for this process elsewhere."""
        fenced = self._fenced
        if not fenced:
            return False
        if ev.call_id and ("c", ev.session, ev.call_id) in fenced:
            return True
        return isinstance(ev, RunFinished) and ("r", ev.session, ev.run_id or "") in fenced

    async def guard(self, batch: Sequence[Event]) -> None:
        """Before a batch: register the calls and runs it opens (so a reaper can close
        them if this process dies), and renew the lease if it is half-way out — a
        writer that finds its lease taken learns which calls were closed for it.

        What the batch opens joins the open set at once (not when it is written): a
        renewal racing this batch then writes it too, never an entry without it."""
        for ev in batch:
            if isinstance(ev, OPENS_CALL) and ev.call_id and not self.is_fenced(ev):
                key = (ev.session, ev.call_id)
                if key not in self._opened.calls:
                    self._opened.calls[key] = (ev.tool or "", ev.run_id or "")
                    self._dirty = True
            elif isinstance(ev, RunStarted) and ev.run_id:
                key = (ev.session, ev.run_id)
                if key not in self._opened.runs:
                    self._opened.runs.add(key)
                    self._dirty = True
        stale = time.monotonic() - self._renewed > self._bus.lease / 2
        # Dirty until a write lands: a batch retried after a failed write registers again.
        if self._dirty or stale or not self._registered_rev:
            await self.register()

    async def register(self) -> None:
        """Write this writer's lease entry (compare-and-swap on its revision), one write
        at a time: the batch writer and the renewal never race each other's entry."""
        async with self._writing:
            kv = await self._bus.kv(self._bus.names.writers)
            dirty, self._dirty = self._dirty, False  # what changes from here is written next
            try:
                rev = await self._write_entry(kv)
            except BaseException:
                self._dirty = self._dirty or dirty
                raise
            self._registered_rev = rev
            self._renewed = time.monotonic()

    async def _write_entry(self, kv: KeyValue) -> int:
        """Create or update the entry; its new revision."""
        try:
            if self._registered_rev:
                return await kv.update(self._bus.token, self._entry(), last=self._registered_rev)
            return await kv.create(self._bus.token, self._entry())
        except nats.js.errors.KeyWrongLastSequenceError:
            return await self._fenced_out(kv)

    def _entry(self) -> bytes:
        """This writer's lease entry: its lease length and what it left open."""
        return json.dumps({"lease": self._bus.lease, "open": self._opened.as_json()}).encode()

    async def _fenced_out(self, kv: KeyValue) -> int:
        """Our lease entry changed under us: a reaper closed our calls. Learn which (their
        later events are dropped) and register again."""
        try:
            entry = await kv.get(self._bus.token)
            record = json.loads(entry.value or b"{}")
            rev = entry.revision or 0
        except nats.js.errors.KeyNotFoundError:
            record, rev = {}, 0
        if record.get("reaped") and record.get("by") != self._bus.token:
            for s, c, *_ in record.get("open", {}).get("c", []):
                self._fenced.add(("c", s, c))
                self._opened.calls.pop((s, c), None)
            for s, r in record.get("open", {}).get("r", []):
                self._fenced.add(("r", s, r))
                self._opened.runs.discard((s, r))
            logger.error(
                "this process's lease ran out and %s closed its open calls: their later "
                "events are dropped",
                record.get("by"),
            )
        # else: our own earlier write landed though its reply was lost (a reconnection)
        if rev:
            return await kv.update(self._bus.token, self._entry(), last=rev)
        return await kv.create(self._bus.token, self._entry())

    async def denied(self, events: Sequence[Event]) -> bool:
        """Fence the calls of ``events`` whose approval was denied elsewhere (their
        later events are dropped); True if any was."""
        any_fenced = False
        checked: set[tuple[str, str]] = set()
        for ev in events:
            key = (ev.session, ev.call_id or "")
            aid = self._gated.get(key)
            if aid is None or key in checked or isinstance(ev, ApprovalRequested):
                continue
            checked.add(key)
            if await self._bus._arbiter.ended(ev.session, aid):
                self._fenced.add(("c", ev.session, ev.call_id or ""))
                self._opened.calls.pop(key, None)
                self._gated.pop(key, None)
                any_fenced = True
        return any_fenced

    async def stop_writing(self) -> None:
        """Give up the lease: close what this process left open ("worker stopped")."""
        kv = await self._bus.kv(self._bus.names.writers)
        opened = self._opened.as_json()
        await self._close_open(opened, "worker stopped")
        await kv.delete(self._bus.token)

    async def run(self) -> None:
        """Renew this process's lease; close the calls of writers whose lease ran out;
        purge expired sessions. Never dies: an error is logged and tried again."""
        every = self._bus.lease / 3
        while True:
            await asyncio.sleep(every)
            try:
                if self._registered_rev or self._bus.reap:
                    # A reaper holds a lease entry too, and judges others only right
                    # after writing its own: while the bucket cannot be written (a
                    # leader election), nobody's silence means anything.
                    try:
                        await self.register()
                    except BaseException:
                        self._seen.clear()
                        raise
                if self._bus.reap:
                    await self.reap_lost()
                    if time.monotonic() >= self._janitor_at:
                        self._janitor_at = time.monotonic() + min(self._bus.session_ttl / 4, 60.0)
                        await self.expire_sessions()
            except RETRYABLE as exc:
                logger.debug("lease renewal failed: %s", exc)
            except Exception:
                logger.exception("lease renewal failed")

    async def reap_lost(self) -> int:
        """Close the open calls and runs of every writer whose lease ran out (see
        :meth:`NatsBus.reap_lost <toolstream.nats.NatsBus.reap_lost>`)."""
        kv = await self._bus.kv(self._bus.names.writers)
        keys = await self._writer_keys()
        now = time.monotonic()
        if now - self._reaped_at > self._bus.lease:
            # This process could not watch for a while (NATS away, a failover, a stall):
            # what it saw before proves nothing; observe every writer afresh.
            self._seen.clear()
        self._reaped_at = now
        total = 0
        for key in keys:
            if key == self._bus.token:
                continue
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            record = json.loads(entry.value or b"{}")
            rev = entry.revision or 0
            if record.get("reaped"):
                if not record.get("closed") and (
                    record.get("by") == self._bus.token
                    or time.time() - float(record.get("at", 0)) > self._bus.lease
                ):
                    # A claim whose closing did not finish (NATS failed under it, or its
                    # reaper died): closed again, by its reaper or, after a lease, any.
                    total += await self._close_claimed(kv, key, record, rev)
                elif time.time() - float(record.get("at", 0)) > self._bus.session_ttl:
                    await kv.delete(key, last=rev)
                continue
            seen = self._seen.get(key)
            if seen is None or seen[0] != rev:
                self._seen[key] = (rev, now)
                continue
            if now - seen[1] < float(record.get("lease", self._bus.lease)):
                continue
            self._seen.pop(key, None)
            total += await self._close_claimed(kv, key, record, rev)
        self._bus._stats.reaped += total
        return total

    async def _close_claimed(self, kv: KeyValue, key: str, record: dict[str, Any], rev: int) -> int:
        """Claim writer ``key``'s entry (compare-and-swap on ``rev``: exactly one reaper
        wins), close what it left open, then mark the claim closed. A failure between the
        two leaves the claim open, and the next pass closes again (closing skips what is
        already closed)."""
        claim = {**record, "reaped": True, "by": self._bus.token, "at": time.time()}
        claim.pop("closed", None)
        try:
            rev = await kv.update(key, json.dumps(claim).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            return 0  # renewed meanwhile, or another process reaps it
        n = await self._close_open(record.get("open", {}), "worker lost")
        if n:
            logger.warning("writer %s lost its lease: closed %d open calls/runs", key, n)
        try:
            await kv.update(key, json.dumps({**claim, "closed": True}).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # taken over meanwhile: that reaper closes (again)
        return n

    async def _writer_keys(self) -> list[str]:
        """The writers' entries, listed with one stream-info request (no consumer per
        pass, as ``KeyValue.keys()`` would create)."""
        js = await self._bus._ready()
        bucket = self._bus.names.writers
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.>")
        prefix = f"$KV.{bucket}."
        return [subject[len(prefix) :] for subject in (info.state.subjects or {})]

    async def _close_open(self, opened: dict[str, Any], reason: str) -> int:
        """Close the calls and runs in ``opened`` that are still open in their session."""
        js = await self._bus._ready()
        by_session: dict[str, tuple[list[list[str]], list[list[str]]]] = {}
        for item in opened.get("c", []):
            by_session.setdefault(item[0], ([], []))[0].append(item)
        for item in opened.get("r", []):
            by_session.setdefault(item[0], ([], []))[1].append(item)
        n = 0
        for session, (calls, runs) in by_session.items():
            view = (await self._bus._reader.read_state(session, leader=True)).folded()
            ts = self._bus._clock()
            for _, call_id, tool, run_id in calls:
                info = view.calls.get(call_id)
                if info is None or info.state.terminal:
                    continue
                ev: Event = ToolCancelled(
                    id="-",
                    session=session,
                    ts=ts,
                    call_id=call_id,
                    tool=tool,
                    run_id=run_id or None,
                    reason=reason,
                )
                await self._publish_now(js, ev)
                n += 1
            for _, run_id in runs:
                run = view.runs.get(run_id)
                if run is None or run.state != "running":
                    continue
                ev = RunFinished(
                    id="-",
                    session=session,
                    ts=ts,
                    run_id=run_id,
                    outcome="cancelled",
                    error=ErrorInfo(type="WorkerLost", message=reason),
                )
                await self._publish_now(js, ev)
                n += 1
        return n

    async def _publish_now(self, js: JetStreamContext, ev: Event) -> int:
        """Publish one event directly (not through the outbox); its sequence."""
        return await self._bus._publish_raw(js, ev.session, event_json(ev), None)

    async def expire_sessions(self) -> int:
        """Purge the sessions idle for ``session_ttl`` (see :meth:`NatsBus.expire_sessions
        <toolstream.nats.NatsBus.expire_sessions>`)."""
        js = await self._bus._ready()
        try:
            info = await js.stream_info(
                self._bus.names.stream, subjects_filter=self._bus.names.subjects
            )
        except nats.js.errors.NotFoundError:
            return 0
        subjects = info.state.subjects or {}
        n = 0
        for subject in subjects:
            try:
                last = await js.get_msg(self._bus.names.stream, subject=subject, direct=True)
            except nats.js.errors.NotFoundError:
                continue
            when = last.time.timestamp() if last.time is not None else time.time()
            if time.time() - when < self._bus.session_ttl or last.seq is None:
                continue
            await js.purge_stream(self._bus.names.stream, subject=subject, seq=last.seq + 1)
            token = subject.partition(".")[2]
            kv = await self._bus.kv(self._bus.names.checkpoints)
            try:
                await kv.delete(token)
            except nats.js.errors.KeyNotFoundError:
                pass
            logger.info("session %r expired: purged", token_session(token))
            n += 1
        self._bus._stats.expired += n
        return n
