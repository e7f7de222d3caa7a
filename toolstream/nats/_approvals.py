"""How the NATS driver arbitrates approvals: each approval is one entry of the KV bucket
``<prefix>_ap``; a decision is a compare-and-swap on the entry's revision, so exactly
one wins whichever process makes it; the winner then appends the resolution (and the
denial) to the session and records where. A waiting tracker watches the entry.

An entry holds ``st`` (``p`` pending, ``r`` resolved), ``meta`` (see
:attr:`toolstream._core.driver.Record.meta`) and, once resolved, ``res`` (the
resolution's event JSON), ``dec`` (the decision), ``den`` (the denial's event JSON, or
null), ``rid`` (the resolution's sequence once appended) and, when a tracker resolved
its own approval, ``mine`` (the id of its event).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolstream._core.driver import ApprovalState, Decide, Record, Resolution
from toolstream._core.jsonenc import dumps, loads

from ._common import NATS_ERRORS, RETRYABLE, JetStreamContext, KeyValue, Names, nats, session_token
from ._connection import Link

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsApprovals", "Publish"]

#: Publishes an event's stored JSON to a session directly (not through the writer's
#: pipeline), with a message id when given; its sequence.
Publish = Callable[[JetStreamContext, str, bytes, "str | None"], Awaitable[int]]

_Entry = tuple[dict[str, Any], int]


class NatsApprovals:
    """The approvals of one driver through ``link`` (the main connection, or a thread's
    for the synchronous parts)."""

    def __init__(
        self,
        link: Link,
        names: Names,
        publish: Publish,
        *,
        connect_timeout: float,
    ) -> None:
        self._link = link
        self._names = names
        self._publish = publish
        self._connect_timeout = connect_timeout
        # approval key -> (its watcher, when last used: time.monotonic()), in one loop
        self._watchers: dict[str, tuple[Any, float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._locks: dict[str, asyncio.Lock] = {}  # approval key -> its decisions' turn
        self._locks_loop: asyncio.AbstractEventLoop | None = None

    async def _kv(self) -> KeyValue:
        return await self._link.kv(self._names.approvals)

    async def _get(self, key: str) -> _Entry | None:
        kv = await self._kv()
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        return json.loads(entry.value or b"{}"), entry.revision or 0

    # -- what the writer does, before and after writing a batch --------------------------

    async def record(self, rec: Record) -> None:
        """An approval is requested (``"A"``): its entry is created pending before the
        event is written, so a decider that sees the event finds the entry."""
        kv = await self._kv()
        blob = json.dumps({"st": "p", "meta": rec.meta}).encode()
        try:
            await kv.create(session_token(rec.approval_id), blob)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # a retried batch: recorded already

    async def own(self, rec: Record) -> bool:
        """A tracker resolves its own approval (``"R"``, its call was cancelled): it wins
        only while the approval is pending; False if it was decided first (drop it)."""
        key = session_token(rec.approval_id)
        async with self._deciding(key):
            return await self._own(rec, key)

    async def _own(self, rec: Record, key: str) -> bool:
        kv = await self._kv()
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return True
        record = json.loads(entry.value or b"{}")
        if record.get("st") != "p":
            return bool(record.get("mine") == rec.event.id)  # our own earlier attempt
        record.update(
            st="r",
            res=loads(rec.blob),
            dec={"approved": False, "by": "cancelled"},
            den=None,
            rid=None,
            mine=rec.event.id,
        )
        try:
            await kv.update(key, json.dumps(record).encode(), last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def written(self, rec: Record, seq: int) -> None:
        """Where a tracker's own resolution landed (for a later loser's error)."""
        kv = await self._kv()
        key = session_token(rec.approval_id)
        try:
            entry = await kv.get(key)
            record = json.loads(entry.value or b"{}")
            if record.get("rid") is None:
                record["rid"] = seq
                await kv.update(key, json.dumps(record).encode(), last=entry.revision)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyWrongLastSequenceError):
            pass

    async def ended(self, approval_id: str) -> bool:
        """Whether the approval ended its call (a denial written elsewhere)."""
        got = await self._get(session_token(approval_id))
        return got is not None and got[0].get("st") == "r" and bool(got[0].get("den"))

    async def _reaped(self, token: str, call_id: str) -> bool:
        """Whether a reaper claimed writer ``token`` with call ``call_id`` open (it closed
        the call: a decision on its approval cannot win)."""
        kv = await self._link.kv(self._names.writers)
        try:
            entry = await kv.get(token)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.InvalidKeyError):
            return False
        record = json.loads(entry.value or b"{}")
        if not record.get("reaped"):
            return False
        return any(c[1] == call_id for c in record.get("open", {}).get("c", []))

    # -- the protocol ------------------------------------------------------------------------

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval, or None when unknown or another session's. A decided approval
        whose resolution is not in the stream yet reads as decided only once it is (its
        decider appends it, or this process does if the decider went away): the tool
        must not go on before the resolution is written, or its own events would come
        first."""
        got = await self._of(session, approval_id)
        if got is None:
            return None
        record, _ = got
        if record.get("st") == "p":
            return ApprovalState("p", record["meta"], None)
        if record.get("rid") is None and not record.get("mine"):
            await self._resolution(session, approval_id)
        return ApprovalState("r", record["meta"], record.get("dec") or {})

    async def _of(self, session: str, approval_id: str) -> _Entry | None:
        got = await self._get(session_token(approval_id))
        if got is None or got[0].get("meta", {}).get("s") != session:
            return None
        return got

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """Decide an approval: pick among the decision and what wins instead (expired
        meanwhile, the call closed by a reaper), swap it into the entry if it is still
        pending (compare-and-swap: one winner), then append its events."""
        kv = await self._kv()
        key = session_token(decide.approval_id)
        async with self._deciding(key):
            return await self._resolve(kv, key, session, decide)

    def _deciding(self, key: str) -> asyncio.Lock:
        """One decision on ``key`` at a time in this process: compare-and-swap decides
        between processes, but a cluster's nats-server before 2.9.21 lets racing swaps on
        one key all succeed (nats-io/nats-server#4320); within a process this lock makes
        them take turns, so the second finds the first's decision."""
        loop = asyncio.get_running_loop()
        if self._locks_loop is not loop:
            self._locks, self._locks_loop = {}, loop
        lock = self._locks.get(key)
        if lock is None:
            if len(self._locks) > 1_000:  # bounded: forget the idle ones
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _resolve(self, kv: KeyValue, key: str, session: str, decide: Decide) -> Resolution:
        approval_id, now, by_timeout = decide.approval_id, decide.now, decide.by_timeout
        variants = list(decide.variants)
        while True:
            got = await self._of(session, approval_id)
            if got is None:
                return Resolution("notfound", "", 0)
            record, rev = got
            if record.get("st") != "p":
                blob, seq = await self._resolution(session, approval_id)
                return Resolution("resolved", blob, seq)
            meta = record["meta"]
            outcome: Any = "ok"
            pick = 0
            if await self._reaped(meta.get("w", ""), meta.get("cid", "")):
                outcome, pick = "resolved", 2
            elif not by_timeout and meta.get("exp") is not None and now >= meta["exp"]:
                outcome, pick = "expired", 1
            res, dec, den = variants[pick]
            record.update(
                st="r", res=loads(res), dec=loads(dec), den=loads(den) if den else None, rid=None
            )
            try:
                rev = await kv.update(key, json.dumps(record).encode(), last=rev)
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # decided meanwhile: the loop answers with the winner
            break
        seq = await self._append(session, approval_id, record, rev)
        return Resolution(outcome, res, seq)

    async def _append(
        self, session: str, approval_id: str, record: dict[str, Any], rev: int
    ) -> int:
        """Write a decided entry's events (once: message ids) and record where."""
        js = await self._link.js()
        key = session_token(approval_id)
        rid = await self._publish(js, session, dumps(record["res"]).encode(), f"ap:{key}:res")
        if record.get("den"):
            await self._publish(js, session, dumps(record["den"]).encode(), f"ap:{key}:den")
        record["rid"] = rid
        kv = await self._kv()
        try:
            await kv.update(key, json.dumps(record).encode(), last=rev)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # another process completed it first: same events, same place
        return rid

    async def _resolution(self, session: str, approval_id: str) -> tuple[str, int]:
        """The winning resolution's JSON and sequence: waits (briefly) for the winner to
        append it, and appends it itself if the winner went away in between."""
        deadline = time.monotonic() + self._connect_timeout
        while True:
            got = await self._of(session, approval_id)
            if got is None:  # pragma: no cover - an entry is never deleted while decided
                return "", 0
            record, rev = got
            rid = record.get("rid")
            if rid is not None:
                return dumps(record["res"]), int(rid)
            if time.monotonic() >= deadline:
                return dumps(record["res"]), await self._append(session, approval_id, record, rev)
            await asyncio.sleep(0.02)

    async def wait(self, session: str, approval_id: str, timeout: float) -> None:
        """Return when the approval's entry changed (a watch on it, kept from one call to
        the next while it is pending), or after ``timeout``."""
        key = session_token(approval_id)
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # watchers of another loop are that loop's
            self._watchers, self._loop = {}, loop
        for other, (_, used) in list(self._watchers.items()):
            if other != key and now - used > 30.0:
                await self._unwatch(other)
        held = self._watchers.get(key)
        try:
            if held is None:
                kv = await self._kv()
                watcher = await kv.watch(key)
            else:
                watcher = held[0]
            self._watchers[key] = (watcher, now)
            deadline = now + timeout
            while True:  # (None marks the end of the watch's first values: not news)
                left = max(0.0, deadline - time.monotonic())
                entry = await watcher.updates(timeout=left)  # type: ignore[no-untyped-call]
                if entry is not None:
                    break
        except (nats.errors.TimeoutError, TimeoutError):
            return
        except RETRYABLE:
            await self._unwatch(key)
            raise
        if entry.value and json.loads(entry.value).get("st") == "r":
            await self._unwatch(key)  # decided: nothing more to wait for

    async def _unwatch(self, key: str) -> None:
        held = self._watchers.pop(key, None)
        if held is not None:
            try:
                await held[0].stop()
            except NATS_ERRORS:
                pass

    async def aclose(self) -> None:
        """Stop the watchers (those of the running loop)."""
        if self._loop is asyncio.get_running_loop():
            for key in list(self._watchers):
                await self._unwatch(key)
        self._watchers = {}
