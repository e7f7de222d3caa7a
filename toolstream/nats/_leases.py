"""NatsLeases: the writers of a NatsBroker — each writer's lease entry, the calls and runs
it left open, fencing — and the reaping of the writers that were lost and of expired
sessions.

The ``<prefix>_w`` KV bucket holds one entry per writer: its lease length and what it
left open (``{"lease": s, "open": {"c": [[session, call, tool, run]...], "r": [[session,
run]...]}}``), renewed by compare-and-swap. A writer whose entry has not changed for its
lease (as the reaper's own clock measures) is claimed by exactly one reaper (compare-
and-swap again: ``reaped``, ``by``, ``at``), which closes what it left open, then marks
the claim ``closed``; the writer, if it was only stalled, finds its entry claimed at its
next write and drops its later events of those calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any

from toolstream._core.brokerstate import blob, lost_writer_events, parse_state
from toolstream._core.driver import Record
from toolstream._core.ids import compare_ids

from ._approvals import NatsApprovals, Publish
from ._common import KeyValue, nats, token_session
from ._connection import NatsConnection
from ._reading import NatsStore

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsLeases"]


class _Writer:
    """One writer of this process: what it left open (closed by a reaper if it is lost),
    as registered in its lease entry, and what was closed for it elsewhere."""

    def __init__(self, token: str, lease: float) -> None:
        self.token = token
        self.lease = lease
        self.calls: dict[tuple[str, str], tuple[str, str]] = {}  # (session, call) -> tool, run
        self.runs: set[tuple[str, str]] = set()
        self.rev = 0  # the lease entry's revision (0: none yet)
        self.renewed = 0.0  # time.monotonic() of the last successful lease write
        self.dirty = False  # the open set changed since the entry was last written
        self.dropped = False  # gave up its lease: never renewed again
        self.fenced: set[tuple[str, str, str]] = set()  # ("c"/"r", session, id)
        self.gated: dict[tuple[str, str], str] = {}  # (session, call) -> approval id
        self.writing = asyncio.Lock()  # one lease entry write at a time

    def entry(self) -> bytes:
        opened = {
            "c": [[s, c, t, r] for (s, c), (t, r) in self.calls.items()],
            "r": [[s, r] for s, r in self.runs],
        }
        return json.dumps({"lease": self.lease, "open": opened}).encode()

    def is_fenced(self, session: str, rec: Record) -> bool:
        fenced = self.fenced
        if not fenced:
            return False
        if rec.call_id and ("c", session, rec.call_id) in fenced:
            return True
        return rec.kind == "f" and ("r", session, rec.run_id) in fenced


def _sessions(record: dict[str, Any]) -> list[str]:
    opened = record.get("open", {})
    return sorted({c[0] for c in opened.get("c", [])} | {r[0] for r in opened.get("r", [])})


class NatsLeases:
    """Leases, fencing and reaping of one driver (see the module's docstring)."""

    def __init__(
        self,
        conn: NatsConnection,
        store: NatsStore,
        approvals: NatsApprovals,
        publish: Publish,
        *,
        lease: float,
        session_ttl: float,
    ) -> None:
        self._conn = conn
        self._store = store
        self._approvals = approvals
        self._publish = publish
        self.lease = lease
        self.session_ttl = session_ttl
        self._writers: dict[str, _Writer] = {}
        #: The token of the process's bus (claims are signed with it).
        self.me = secrets.token_hex(8)
        self._seen: dict[str, tuple[int, float]] = {}  # writer -> (revision, since)
        self._judged: dict[str, tuple[dict[str, Any], int]] = {}  # lost: (entry, revision)
        self._claims: dict[str, tuple[dict[str, Any], int]] = {}  # claimed: (claim, revision)
        self._reaped_at = 0.0  # time.monotonic() of the last reaper pass
        self._janitor_at = 0.0

    def writer(self, token: str) -> _Writer:
        """This process's writer ``token``."""
        writer = self._writers.get(token)
        if writer is None:
            writer = self._writers[token] = _Writer(token, self.lease)
            self.me = token
        return writer

    async def _kv(self) -> KeyValue:
        return await self._conn.kv(self._conn.names.writers)

    # -- the writer's side ---------------------------------------------------------------

    async def guard(self, token: str, session: str, records: Sequence[Record]) -> None:
        """Before writing ``records``: register the calls and runs they open (so a reaper
        can close them if this process dies), and renew the lease if it is half-way out
        — a writer that finds its lease taken learns which calls were closed for it.

        What a batch opens joins the open set at once (not when it is written): a
        renewal racing the batch then writes it too, never an entry without it."""
        writer = self.writer(token)
        for rec in records:
            if rec.kind == "o" and rec.call_id and not writer.is_fenced(session, rec):
                key = (session, rec.call_id)
                if key not in writer.calls:
                    writer.calls[key] = (rec.tool, rec.run_id)
                    writer.dirty = True
            elif rec.kind == "r" and rec.run_id:
                run = (session, rec.run_id)
                if run not in writer.runs:
                    writer.runs.add(run)
                    writer.dirty = True

    async def settle(self, token: str) -> None:
        """Write the lease entry if what it holds changed, or it is half-way out (after
        :meth:`guard` for every session of a batch). Dirty until a write lands: a batch
        retried after a failed write registers again."""
        writer = self.writer(token)
        stale = time.monotonic() - writer.renewed > writer.lease / 2
        if writer.dirty or stale or not writer.rev:
            await self.register(writer)

    def is_fenced(self, token: str, session: str, rec: Record) -> bool:
        """Whether ``rec`` belongs to a call or run closed for this writer elsewhere."""
        return self.writer(token).is_fenced(session, rec)

    def track(self, token: str, session: str, rec: Record) -> None:
        """Keep the open calls and runs up to date with a record written."""
        writer = self.writer(token)
        cid = rec.call_id
        kind = rec.kind
        if kind == "o" and cid:
            writer.calls.setdefault((session, cid), (rec.tool, rec.run_id))
        elif kind == "t" and cid:
            writer.calls.pop((session, cid), None)
            writer.gated.pop((session, cid), None)
        elif kind == "r" and rec.run_id:
            writer.runs.add((session, rec.run_id))
        elif kind == "f" and rec.run_id:
            writer.runs.discard((session, rec.run_id))
        elif kind == "A" and cid:
            writer.gated[(session, cid)] = rec.approval_id

    async def denied(self, token: str, session: str, records: Sequence[Record]) -> bool:
        """Fence the calls of ``records`` whose approval was denied elsewhere (their later
        events are dropped); True if any was."""
        writer = self.writer(token)
        any_fenced = False
        checked: set[str] = set()
        for rec in records:
            key = (session, rec.call_id)
            aid = writer.gated.get(key)
            if aid is None or rec.call_id in checked or rec.kind == "A":
                continue
            checked.add(rec.call_id)
            if await self._approvals.ended(aid):
                writer.fenced.add(("c", session, rec.call_id))
                writer.calls.pop(key, None)
                writer.gated.pop(key, None)
                any_fenced = True
        return any_fenced

    async def hold(self, token: str, lease: float) -> None:
        """Renew writer ``token``'s lease (unless it was given up, or renewed moments ago
        with nothing changed)."""
        writer = self.writer(token)
        writer.lease = lease
        if writer.dropped:
            return
        if writer.dirty or time.monotonic() - writer.renewed > lease / 6 or not writer.rev:
            await self.register(writer)

    def drop(self, token: str) -> None:
        """Writer ``token`` stops writing: its entry is not renewed again (a claim of it
        still finds what it left open)."""
        self.writer(token).dropped = True

    async def register(self, writer: _Writer) -> None:
        """Write the writer's lease entry (compare-and-swap on its revision), one write at
        a time: the batch writer and the renewal never race each other's entry."""
        async with writer.writing:
            kv = await self._kv()
            dirty, writer.dirty = writer.dirty, False  # what changes from here is written next
            try:
                # Bounded: a write lost across a restart is given up and made again
                # (compare-and-swap tells a write that landed from a claim).
                rev = await asyncio.wait_for(self.write_entry(kv, writer), self._conn.lease_bound)
            except BaseException:
                writer.dirty = writer.dirty or dirty
                raise
            writer.rev = rev
            writer.renewed = time.monotonic()

    async def write_entry(self, kv: KeyValue, writer: _Writer) -> int:
        """Create or update the entry; its new revision."""
        try:
            if writer.rev:
                return await kv.update(writer.token, writer.entry(), last=writer.rev)
            return await kv.create(writer.token, writer.entry())
        except nats.js.errors.KeyWrongLastSequenceError:
            return await self._fenced_out(kv, writer)

    async def _fenced_out(self, kv: KeyValue, writer: _Writer) -> int:
        """The entry changed under us: a reaper closed our calls. Learn which (their later
        events are dropped) and register again."""
        try:
            entry = await kv.get(writer.token)
            record = json.loads(entry.value or b"{}")
            rev = entry.revision or 0
        except nats.js.errors.KeyNotFoundError:
            record, rev = {}, 0
        if record.get("reaped") and record.get("by") != writer.token:
            for s, c, *_ in record.get("open", {}).get("c", []):
                writer.fenced.add(("c", s, c))
                writer.calls.pop((s, c), None)
            for s, r in record.get("open", {}).get("r", []):
                writer.fenced.add(("r", s, r))
                writer.runs.discard((s, r))
            logger.error(
                "this process's lease ran out and %s closed its open calls: their later "
                "events are dropped",
                record.get("by"),
            )
        # else: our own earlier write landed though its reply was lost (a reconnection)
        if rev:
            return await kv.update(writer.token, writer.entry(), last=rev)
        return await kv.create(writer.token, writer.entry())

    # -- reaping -------------------------------------------------------------------------

    async def lost(self, token: str) -> list[str]:
        """The writers other than ``token`` whose entry has not changed for their lease as
        this process's monotonic clock measures (no clocks are compared across hosts),
        and the claims whose closing did not finish (their reaper's own, or any a lease
        old). A reaper holds a lease entry too, and judges others only right after
        writing its own: while the bucket cannot be written (a leader election), nobody's
        silence means anything."""
        writer = self.writer(token)
        if not writer.dropped:
            try:
                if time.monotonic() - writer.renewed > writer.lease / 6 or writer.dirty:
                    await self.register(writer)
            except BaseException:
                self._seen.clear()
                raise
        kv = await self._kv()
        keys = await self._writer_keys()
        now = time.monotonic()
        if now - self._reaped_at > self.lease:
            # This process could not watch for a while (NATS away, a failover, a stall):
            # what it saw before proves nothing; observe every writer afresh.
            self._seen.clear()
        self._reaped_at = now
        out = []
        for key in keys:
            if key == token:
                continue
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                continue
            record = json.loads(entry.value or b"{}")
            rev = entry.revision or 0
            if record.get("reaped"):
                if not record.get("closed") and (
                    record.get("by") == token
                    or time.time() - float(record.get("at", 0)) > self.lease
                ):
                    # A claim whose closing did not finish (NATS failed under it, or its
                    # reaper died): closed again, by its reaper or, after a lease, any.
                    self._judged[key] = (record, rev)
                    out.append(key)
                elif time.time() - float(record.get("at", 0)) > self.session_ttl:
                    await kv.delete(key, last=rev)
                continue
            seen = self._seen.get(key)
            if seen is None or seen[0] != rev:
                self._seen[key] = (rev, now)
                continue
            if now - seen[1] < float(record.get("lease", self.lease)):
                continue
            self._seen.pop(key, None)
            self._judged[key] = (record, rev)
            out.append(key)
        return out

    async def _writer_keys(self) -> list[str]:
        """The writers' entries, listed with one stream-info request (no consumer per
        pass, as ``KeyValue.keys()`` would create)."""
        js = await self._conn.ready()
        bucket = self._conn.names.writers
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.>")
        prefix = f"$KV.{bucket}."
        return [subject[len(prefix) :] for subject in (info.state.subjects or {})]

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """Claim writer ``token``'s entry (compare-and-swap on the revision it was judged
        lost at: exactly one reaper wins): the sessions it left calls or runs open in, or
        None when it was renewed meanwhile, another reaper has it, or it was reaped."""
        kv = await self._kv()
        judged = self._judged.pop(token, None)
        if judged is not None:
            record, rev = judged
        else:
            try:
                entry = await kv.get(token)
            except nats.js.errors.KeyNotFoundError:
                return None
            record, rev = json.loads(entry.value or b"{}"), entry.revision or 0
            if record.get("reaped"):
                if record.get("closed"):
                    return None
                mine = record.get("by") == self.me
                if not (force or mine or time.time() - float(record.get("at", 0)) > self.lease):
                    return None  # another reaper is closing it
            elif not force:
                return None  # not judged lost here: as far as we know its lease is held
        claim = {**record, "reaped": True, "by": self.me, "at": time.time()}
        claim.pop("closed", None)
        try:
            rev = await kv.update(token, json.dumps(claim).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None  # renewed meanwhile, or another process reaps it
        self._claims[token] = (claim, rev)
        return _sessions(record)

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """Close the calls and runs claimed writer ``token`` left open in ``session`` that
        are still open there (read from the stream's leader)."""
        claimed = self._claims.get(token)
        if claimed is None:
            return 0
        opened = claimed[0].get("open", {})
        calls = [c for c in opened.get("c", []) if c[0] == session]
        runs = [r for r in opened.get("r", []) if r[0] == session]
        if not calls and not runs:
            return 0
        stored = await self._store.read_state(session, leader=True)
        view = parse_state(stored, self._conn.epoch, max_finished=500, compare=compare_ids)
        state = view.folded()
        js = await self._conn.ready()
        events = lost_writer_events(
            session,
            now,
            reason,
            [
                (call_id, tool, run_id)
                for _, call_id, tool, run_id in calls
                if (info := state.calls.get(call_id)) is not None and not info.state.terminal
            ],
            [
                run_id
                for _, run_id in runs
                if (run := state.runs.get(run_id)) is not None and run.state == "running"
            ],
        )
        for ev in events:
            await self._publish(js, session, blob(ev).encode(), None)
        return len(events)

    async def release(self, token: str) -> None:
        """Writer ``token`` is reaped in every session: mark its claim closed (a claim
        whose closing failed before this is closed again at the next pass); this
        process's own writer's entry is deleted."""
        claimed = self._claims.pop(token, None)
        kv = await self._kv()
        if token in self._writers:
            del self._writers[token]
            try:
                await kv.delete(token)
            except nats.js.errors.KeyNotFoundError:
                pass
            return
        if claimed is None:
            return
        claim, rev = claimed
        try:
            await kv.update(token, json.dumps({**claim, "closed": True}).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # taken over meanwhile: that reaper closes (again)

    # -- expiry --------------------------------------------------------------------------

    async def expire(self, *, force: bool) -> int:
        """Purge every session whose newest message is ``session_ttl`` old (up to that
        message: one published meanwhile survives) and its checkpoint; how many. Unless
        ``force``, at most once every ``min(session_ttl / 4, 60)`` seconds (it reads
        every session's newest message)."""
        if not force and time.monotonic() < self._janitor_at:
            return 0
        self._janitor_at = time.monotonic() + min(self.session_ttl / 4, 60.0)
        js = await self._conn.ready()
        names = self._conn.names
        try:
            info = await js.stream_info(names.stream, subjects_filter=names.subjects)
        except nats.js.errors.NotFoundError:
            return 0
        n = 0
        for subject in info.state.subjects or {}:
            try:
                last = await js.get_msg(names.stream, subject=subject, direct=True)
            except nats.js.errors.NotFoundError:
                continue
            when = last.time.timestamp() if last.time is not None else time.time()
            if time.time() - when < self.session_ttl or last.seq is None:
                continue
            await js.purge_stream(names.stream, subject=subject, seq=last.seq + 1)
            token = subject.partition(".")[2]
            await self._store.delete_checkpoint(token)
            logger.info("session %r expired: purged", token_session(token))
            n += 1
        return n
