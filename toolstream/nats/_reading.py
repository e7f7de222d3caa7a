"""NatsStore: a session as stored in JetStream — its checkpoint (KV ``<prefix>_ck``), the
messages after it (an ephemeral consumer, or direct gets when no consumer can be made)
— and the checkpoints that bound replay (store the state, purge the subject up to it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from toolstream._core.driver import StoredState
from toolstream._core.jsonenc import dumps

from ._common import (
    NATS_ERRORS,
    RETRYABLE,
    JetStreamContext,
    KeyValue,
    Names,
    drop_consumer,
    ephemeral_consumer,
    nats,
    session_token,
)
from ._connection import Link

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsStore"]

#: A stored message: its stream sequence and its data (the event's JSON without its id).
Message = tuple[int, "str | bytes"]


class NatsStore:
    """Reads and checkpoints of sessions through ``link``: ``read_state`` (checkpoint +
    the messages after it, consistent against a concurrent purge), ``read_direct``,
    ``checkpoint_of`` and ``checkpoint``. ``epoch()`` is the stream's epoch: NATS loses
    a session's data only with the whole stream's, so it is every session's incarnation.
    """

    def __init__(
        self,
        link: Link,
        names: Names,
        epoch: Callable[[], str],
        *,
        request_timeout: float,
        connect_timeout: float,
    ) -> None:
        self._link = link
        self._names = names
        self._epoch = epoch
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        # (session, upto) -> the newest of the session's messages a read up to ``upto``
        # saw: where the checkpoint of that read's state stands (see ``checkpoint``).
        self._covered: dict[tuple[str, int], int] = {}

    async def _js(self) -> JetStreamContext:
        return await self._link.js(time.monotonic() + self._connect_timeout)

    async def read_state(
        self, session: str, upto: int | None = None, *, leader: bool = False
    ) -> StoredState:
        """The session as it stands: checkpoint, then the messages after it (read between
        two equal reads of the checkpoint, so no purge slipped in between).

        ``leader``: read only from the stream's leader, never a replica that may lag (a
        reaper deciding which calls are still open must see every acknowledged event;
        it fails rather than read a replica, and tries again at its next pass)."""
        js = await self._js()
        names = self._names
        subject = names.subject(session)
        kv = await self._link.kv(names.checkpoints)
        token = session_token(session)

        async def checkpoint() -> tuple[int, Any]:
            try:
                entry = await kv.get(token)
            except nats.js.errors.KeyNotFoundError:
                return 0, None
            data = json.loads(entry.value or b"{}")
            return int(data.get("seq", 0)), data.get("state")

        for _ in range(10):
            ck_seq, ck_state = await checkpoint()
            try:
                newest = await js.get_msg(names.stream, subject=subject, direct=not leader)
                last = int(newest.seq or 0)
            except nats.js.errors.NotFoundError:
                last = 0
            top = last if upto is None else min(last, upto)
            events = (
                await self._range(js, subject, ck_seq + 1, top, leader=leader)
                if top > ck_seq
                else []
            )
            if (await checkpoint())[0] == ck_seq:
                break
        if upto is not None:
            if len(self._covered) > 1_000:
                self._covered.clear()  # bounded: a checkpoint without its read stands as asked
            self._covered[(session, upto)] = events[-1][0] if events else ck_seq
        return StoredState(
            incarnation=self._epoch(),
            last=max(last, ck_seq),
            floor=ck_seq,
            checkpoint=(ck_seq, dumps(ck_state)) if ck_state is not None else None,
            events=list(events),
        )

    async def _range(
        self, js: JetStreamContext, subject: str, first: int, last: int, *, leader: bool = False
    ) -> list[Message]:
        """The session's messages from sequence ``first`` to ``last`` (``leader``: never
        from a replica)."""
        names = self._names
        try:
            name, sub = await ephemeral_consumer(
                js, names.stream, subject, first, inactive=30.0, timeout=self._request_timeout
            )
        except RETRYABLE:
            if leader:
                raise
            # No consumer now (a cluster electing its meta leader after losing a server
            # can take many seconds): read message by message from any replica.
            return await self.read_direct(js, subject, first, last)
        out: list[Message] = []
        try:
            while True:
                msgs = await sub.fetch(512, timeout=self._request_timeout)
                done = False
                for msg in msgs:
                    md = msg.metadata
                    seq = md.sequence.stream
                    if seq > last:
                        done = True
                        break
                    out.append((seq, msg.data))
                    if seq >= last or md.num_pending == 0:
                        done = True
                if done or not msgs:
                    break
        finally:
            await drop_consumer(js, names.stream, sub, name)
        return out

    async def read_direct(
        self, js: JetStreamContext, subject: str, first: int, last: int | None, limit: int = 0
    ) -> list[Message]:
        """The session's messages from ``first`` (to ``last``, or all there are; at most
        ``limit`` when given), one direct get each: no consumer, served by any replica."""
        out: list[Message] = []
        seq = first
        while (last is None or seq <= last) and (not limit or len(out) < limit):
            try:
                msg = await js.get_msg(
                    self._names.stream, seq=seq, subject=subject, next=True, direct=True
                )
            except nats.js.errors.NotFoundError:
                break
            at = int(msg.seq or 0)
            if at < seq or (last is not None and at > last):
                break
            out.append((at, msg.data or b""))
            seq = at + 1
        return out

    async def newest(self, session: str) -> int:
        """The sequence of the session's newest message (0: none), from any replica."""
        js = await self._link.js()
        try:
            msg = await js.get_msg(
                self._names.stream, subject=self._names.subject(session), direct=True
            )
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def checkpoint_of(self, session: str) -> int:
        """The sequence of the session's checkpoint (0: none)."""
        kv = await self._link.kv(self._names.checkpoints)
        try:
            entry = await kv.get(session_token(session))
        except nats.js.errors.KeyNotFoundError:
            return 0
        return int(json.loads(entry.value or b"{}").get("seq", 0))

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """Store ``state`` as the session's checkpoint unless a newer one is stored, and
        purge the session's messages up to it.

        It stands at the newest of the session's messages the read of ``state`` saw
        (``read_state(session, upto=seq)``), not at ``seq`` itself: the writer numbers
        its events by prediction, and a message that lands below its number after the
        read must not fall under a checkpoint that does not hold it."""
        at = self._covered.pop((session, seq), seq)
        if at <= 0:
            return
        kv = await self._link.kv(self._names.checkpoints)
        token = session_token(session)
        blob = b'{"seq":%d,"state":%s}' % (at, state.encode())
        try:
            for _ in range(10):
                try:
                    entry = await kv.get(token)
                except nats.js.errors.KeyNotFoundError:
                    entry = None
                try:
                    if entry is None:
                        await kv.create(token, blob)
                    elif json.loads(entry.value or b"{}").get("seq", 0) >= at:
                        return
                    else:
                        await kv.update(token, blob, last=entry.revision)
                    break
                except nats.js.errors.KeyWrongLastSequenceError:
                    continue  # another process stored one meanwhile: compare again
            js = await self._link.js()
            subject = self._names.subject(session)
            await js.purge_stream(self._names.stream, subject=subject, seq=at + 1)
        except RETRYABLE:
            raise
        except NATS_ERRORS as exc:
            # Not worth stopping the writer for: the next checkpoint comes soon.
            logger.info("checkpoint of %s skipped: %s", session, exc)

    async def delete_checkpoint(self, session_key: str) -> None:
        """Forget the checkpoint filed under ``session_key`` (a session token)."""
        kv: KeyValue = await self._link.kv(self._names.checkpoints)
        try:
            await kv.delete(session_key)
        except nats.js.errors.KeyNotFoundError:
            pass
