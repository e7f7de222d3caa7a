"""NatsWriter: how the NATS driver appends — one stream for every session, so one
sequence: the appends of a batch's sessions, started together, are written together in
the order their events were numbered, pipelined, each message landing at an exact
sequence: the first of a pipeline asks for it (``Nats-Expected-Last-Sequence``), each
later one asks that the stream's last message be its predecessor
(``Nats-Expected-Last-Msg-Id``), which pins it to the next. The stream's order is then
the publisher's order even across a lost connection, and a retried message is
recognised by its ``Nats-Msg-Id`` at the sequence it asked for.

Sequences are predicted: an event's number is the stream's next sequence as this
process expects it (:meth:`NatsWriter.next_seq`); it is written where the stream
stands, which is the same unless another process wrote in between (code 3).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Sequence
from typing import Any

from toolstream._core.driver import Appended, Record
from toolstream._core.outbox import Refused

from ._approvals import NatsApprovals
from ._common import EXPECTATION_FAILED, RETRYABLE, JetStreamContext, api_code, nats
from ._connection import NatsConnection
from ._leases import NatsLeases

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsWriter"]


class _Append:
    """One session's records for one writer, waiting to be written with the others."""

    def __init__(self, session: str, token: str, records: Sequence[Record]) -> None:
        self.session = session
        self.token = token
        self.records = list(records)
        self.codes = [0] * len(self.records)
        self.seqs = [0] * len(self.records)  # where each written record landed
        self.done = False
        self.error: BaseException | None = None


class NatsWriter:
    """The append side of one driver (see the module's docstring)."""

    def __init__(self, conn: NatsConnection, leases: NatsLeases, approvals: NatsApprovals) -> None:
        self._conn = conn
        self._leases = leases
        self._approvals = approvals
        self._queue: list[_Append] = []
        self._lock = asyncio.Lock()
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._next = 0  # the sequence the pipeline asks for next (0: ask the stream)
        self._asked: dict[str, int] = {}  # message id -> sequence it asked for, unsettled
        self._written: dict[tuple[str, str], int] = {}  # (writer, session) -> its high-water mark
        # The prediction: once this process's records up to ``_own`` (its own numbering)
        # were written, the stream stood at ``_stream``, and the bus had numbered up to
        # ``_seen``: what it numbered after ``_own`` lands after ``_stream``, so new
        # events come after ``_floor``.
        self._stream = self._floor = 0
        self._own = self._seen = 0

    def begin(self, last: int) -> None:
        """The stream's last sequence when the driver opened."""
        self._stream = self._floor = last

    # -- numbering ---------------------------------------------------------------------------

    def next_seq(self, last: int, now: float) -> int:
        """The stream's next sequence as predicted here: after ``last`` (the newest the
        bus gave) and after what the stream held at the last write plus what was numbered
        then and not written. Answers the same until something is written or ``last``
        changes (the bus asks it for a subscription's start too)."""
        if last > self._seen:
            self._seen = last
        return (last if last > self._floor else self._floor) + 1

    def new_epoch(self, last: int) -> None:
        """The stream was lost and made again: predict in its new numbering (after what
        waits to be written; the bus numbers from 0 again)."""
        pending = max(0, self._seen - self._own)
        self._stream = self._floor = last + pending
        self._own = self._seen = 0
        self._next = 0
        self._asked.clear()
        self._written.clear()

    # -- appending ---------------------------------------------------------------------------

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """Append one session's records; the appends started with it (the bus starts a
        batch's sessions together) are written in the same pipeline, in numbering order."""
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:  # a bus started again in another loop
            self._lock, self._lock_loop, self._queue = asyncio.Lock(), loop, []
        request = _Append(session, token, records)
        self._queue.append(request)
        await asyncio.sleep(0)  # the batch's other sessions join
        async with self._lock:
            if not request.done:
                requests, self._queue = self._queue, []
                try:
                    await self._commit(requests)
                except BaseException as exc:
                    for r in requests:
                        if not r.done:
                            r.done, r.error = True, exc
                    if not isinstance(exc, Exception):
                        raise  # cancelled: the bus is stopping
        if request.error is not None:
            raise request.error
        renumbered = [s for s, c in zip(request.seqs, request.codes, strict=True) if c == 3]
        return Appended(self._conn.epoch, request.codes, renumbered)

    async def _commit(self, requests: list[_Append]) -> None:
        """Write ``requests``: skip what each writer wrote already; register what opens
        calls in the writer's lease entry (compare-and-swap); drop what is fenced; record
        approvals; then publish the rest in one pipeline."""
        js = await self._conn.ready()
        leases = self._leases
        todo: list[tuple[_Append, list[int]]] = []
        for r in requests:
            mark = self._written.get((r.token, r.session), 0)
            fresh = []
            for i, rec in enumerate(r.records):
                if mark and rec.seq <= mark:
                    r.codes[i] = 1  # a retried batch: written already
                else:
                    fresh.append(i)
            if fresh:
                await leases.guard(r.token, r.session, [r.records[i] for i in fresh])
            todo.append((r, fresh))
        for token in {r.token for r in requests}:
            await leases.settle(token)
        wanted: list[tuple[_Append, int]] = []
        for r, fresh in todo:
            keep = []
            for i in fresh:
                rec = r.records[i]
                if leases.is_fenced(r.token, r.session, rec):
                    r.codes[i] = 2
                    continue
                if rec.kind == "A":
                    await self._approvals.record(rec)
                elif rec.kind == "R" and not await self._approvals.own(rec):
                    r.codes[i] = 2  # decided first: the first resolution wins
                    continue
                keep.append(i)
            if keep and await leases.denied(r.token, r.session, [r.records[i] for i in keep]):
                for i in keep:
                    if leases.is_fenced(r.token, r.session, r.records[i]):
                        r.codes[i] = 2
                keep = [i for i in keep if r.codes[i] != 2]
            wanted.extend((r, i) for i in keep)
        # In numbering order across sessions, each session's own order kept.
        by_request: dict[int, list[tuple[_Append, int]]] = {}
        for item in wanted:
            by_request.setdefault(id(item[0]), []).append(item)
        ordered = list(
            heapq.merge(*by_request.values(), key=lambda item: item[0].records[item[1]].seq)
        )
        failure: BaseException | None = None
        try:
            await self._publish_all(js, ordered)
        except BaseException as exc:
            failure = exc
        # What landed (all, or the part before a failure) is accounted for.
        landed = 0
        for r, i in ordered:
            seq = r.seqs[i]
            if not seq:
                break
            landed += 1
            rec = r.records[i]
            leases.track(r.token, r.session, rec)
            key = (r.token, r.session)
            self._written[key] = max(self._written.get(key, 0), rec.seq)
            if rec.kind == "R":
                await self._approvals.written(rec, seq)
        if landed:
            last_r, last_i = ordered[landed - 1]
            self._stream = max(self._stream, last_r.seqs[last_i])
            self._own = max(self._own, last_r.records[last_i].seq)
            self._floor = self._stream + max(0, self._seen - self._own)
        if len(self._written) > 100_000:
            self._written.clear()  # bounded: a retry then relies on the message ids
        for r in requests:
            if failure is None or all(r.seqs[i] or r.codes[i] for i in range(len(r.records))):
                r.done = True
        if failure is not None:
            raise failure

    async def _publish_all(self, js: JetStreamContext, items: list[tuple[_Append, int]]) -> None:
        """Publish ``items`` in order, pipelined, filling in where each landed and its
        code. Each message asks for one sequence, so it can only land there: a retry
        checks that sequence for its message id rather than writing it twice."""
        names = self._conn.names
        i = 0
        while i < len(items):
            if not self._next:
                info = await js.stream_info(names.stream)
                self._next = info.state.last_seq + 1
            # A message asked for a sequence before and it is unclear whether it landed.
            r, k = items[i]
            rec = r.records[k]
            msg_id = f"{r.token}:{rec.event.id}"
            asked = self._asked.get(msg_id)
            if asked is not None and await self._landed(js, asked, msg_id):
                self._asked.pop(msg_id, None)
                r.seqs[k], r.codes[k] = asked, 1
                self._next = max(self._next, asked + 1)
                i += 1
                continue
            futures = []
            start = self._next
            pipeline = self._conn.pipeline
            assert pipeline is not None
            subjects: dict[str, str] = {}
            try:
                previous = ""
                for n, (r, k) in enumerate(items[i:]):
                    rec = r.records[k]
                    msg_id = f"{r.token}:{rec.event.id}"
                    self._asked[msg_id] = start + n
                    if previous:
                        # The stream's last message must be the one before it: had that
                        # one failed while another writer's message took its sequence,
                        # this one fails too (not stored before its predecessor's retry).
                        # The server sets the last message id at every store, so this
                        # also pins the sequence: start + n, as asking for it would.
                        headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Msg-Id": previous}
                    else:
                        headers = {
                            "Nats-Msg-Id": msg_id,
                            "Nats-Expected-Last-Sequence": str(start - 1),
                        }
                    previous = msg_id
                    subject = subjects.get(r.session)
                    if subject is None:
                        subject = subjects[r.session] = names.subject(r.session)
                    futures.append(await pipeline.send(subject, rec.blob.encode(), headers))
                results = await asyncio.wait_for(
                    asyncio.gather(*futures, return_exceptions=True), self._conn.connect_timeout
                )
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
            failure: BaseException | None = None
            for (r, k), res in zip(items[i:], results, strict=False):
                if isinstance(res, BaseException):
                    failure = res
                    break
                rec = r.records[k]
                self._asked.pop(f"{r.token}:{rec.event.id}", None)
                seq = res.seq
                r.seqs[k] = seq
                r.codes[k] = 1 if res.duplicate else (0 if seq == rec.seq else 3)
                self._next = seq + 1
                i += 1
            if failure is None:
                continue
            if api_code(failure) in EXPECTATION_FAILED:
                # Another writer's message took the sequence (or one of ours did not
                # land before this one): ask the stream where it stands and go on.
                self._next = 0
                continue
            if isinstance(failure, nats.js.errors.APIError) and not isinstance(failure, RETRYABLE):
                raise Refused(f"{failure.description or failure!r}")
            self._next = 0
            raise failure
        if len(self._asked) > 100_000:
            self._asked.clear()  # bounded: a retry then relies on the deduplication window

    async def _landed(self, js: JetStreamContext, seq: int, msg_id: str) -> bool:
        """Whether the message ``msg_id`` is stored at sequence ``seq``."""
        try:
            msg = await js.get_msg(self._conn.names.stream, seq=seq, direct=True)
        except nats.js.errors.NotFoundError:
            return False
        return bool(msg.headers and msg.headers.get("Nats-Msg-Id") == msg_id)

    async def publish(
        self, js: JetStreamContext, session: str, data: bytes, msg_id: str | None
    ) -> int:
        """Publish an event's stored JSON to ``session`` directly (not through the
        pipeline: a reaper's and a decider's events); its sequence."""
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        ack: Any = await js.publish(self._conn.names.subject(session), data, headers=headers)
        return int(ack.seq)
