"""NatsReader: one subscription's reads of a session's subject, through an ephemeral pull
consumer (read by :class:`~toolstream.nats._pull.Pull`) made again from the cursor
whenever it is lost (a server restart, a failover), or through direct gets while no
consumer can be made."""

from __future__ import annotations

import asyncio
import logging

from toolstream._core.driver import Chunk

from ._common import (
    NATS_ERRORS,
    RETRYABLE,
    JetStreamContext,
    add_consumer,
    drop_consumer,
    nats,
)
from ._connection import NatsConnection
from ._pull import Pull
from ._reading import Message, NatsStore

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsReader"]

#: How long a read waits for messages when none are buffered and no consumer can be
#: made (direct gets); a consumer's messages are pushed, so a read never waits for them.
_READ_WAIT = 0.05
#: How long a pull request stays open (the subscription's long poll).
_POLL = 5.0


class NatsReader:
    """A :class:`~toolstream._core.driver.BrokerReader` of one session: a pull consumer
    (``ack_policy: none``, memory storage, gone after an idle spell) from the cursor,
    its messages buffered between :meth:`wait` and :meth:`read`.

    It notices a purge that overtook it without reading the checkpoint on every batch:
    a purge at checkpoint *k* leaves at least ``replay`` of the session's messages after
    *k*, so only a batch with about that many messages pending can have skipped
    something; then the checkpoint is read, and a chunk reports it when it stands
    between the cursor and the first message delivered (the bus cuts the subscription).
    Otherwise a chunk reports the checkpoint as known, capped at the cursor: a
    checkpoint at or below the cursor hides nothing from it."""

    def __init__(
        self, conn: NatsConnection, store: NatsStore, session: str, *, replay: int, lease: float
    ) -> None:
        self._conn = conn
        self._store = store
        self._session = session
        self._subject = conn.names.subject(session)
        self._replay = replay
        self._lease = lease
        self._sub: Pull | None = None
        self._name = ""
        self._generation = 0
        self._epoch = ""
        self._next = 0  # the sequence the consumer delivers from (what is before: delivered)
        self._returned = -1  # the newest sequence a chunk returned (-1: none yet)
        self._buffer: list[Message] = []
        self._ck = 0  # the session's checkpoint, as last read
        self._gap = 0  # a checkpoint found past the cursor, before what was delivered
        self._count = 512
        self._idle = 0
        self._delay = 0.05
        #: Consumers this reader made again (a restart, a failover, a stalled consumer).
        self.reconnects = 0

    async def read(self, after: int, count: int) -> Chunk:
        """Up to ``count`` messages after ``after``: those buffered, else what the
        consumer has now."""
        self._count = count
        js = await self._conn.ready()
        epoch = self._conn.epoch
        if epoch != self._epoch and self._epoch:
            # The stream was lost and made again: the incarnation says so; nothing read
            # from the old numbering goes on.
            await self._drop()
            self._epoch = epoch
            return Chunk(epoch, 0, [])
        self._epoch = epoch
        try:
            await self._line_up(js, after)
            if not self._buffer:
                await self._fill(js, after, count, 0.0 if self._sub else _READ_WAIT)
        except RETRYABLE:
            raise
        except NATS_ERRORS as exc:
            await self._failed(exc)
            return Chunk(epoch, min(self._ck, after), [])
        events = self._buffer[:count]
        del self._buffer[:count]
        gap, self._gap = self._gap, 0
        if events:
            self._returned = events[-1][0]
        return Chunk(epoch, gap or min(self._ck, after), events)

    async def wait(self, after: int, timeout: float) -> None:
        """Return once messages after ``after`` are buffered, or after ``timeout`` (a long
        poll, cut short when the connection is made again: the consumer is then gone)."""
        js = await self._conn.ready()
        if self._epoch and self._conn.epoch != self._epoch:
            return
        try:
            await self._line_up(js, after)
            if self._buffer:
                return
            if await self._fill(js, after, self._count, timeout):
                self._idle = 0
                return
            self._idle += 1
            if self._sub is not None and self._idle % 2 == 0 and await self._behind(after):
                # Quiet, yet the session has news: the consumer is gone or stuck (a leader
                # moved in a cluster). Make it again.
                logger.info("reader of %s: consumer stalled", self._subject)
                await self._drop()
                self.reconnects += 1
        except RETRYABLE:
            raise
        except NATS_ERRORS as exc:
            await self._failed(exc)

    async def aclose(self) -> None:
        """Delete the consumer."""
        await self._drop()

    # -- the consumer ------------------------------------------------------------------

    async def _line_up(self, js: JetStreamContext, after: int) -> None:
        """Make the buffer and the consumer start right after ``after``: drop what is at
        or before it; make the consumer again from there when the cursor moved back, or
        far ahead (a reset), or the connection was made again."""
        buffer = self._buffer
        if buffer and buffer[0][0] <= after:
            self._buffer = buffer = [m for m in buffer if m[0] > after]
        moved = self._returned >= 0 and after != self._returned
        if self._sub is not None and (
            self._generation != self._conn.generation
            or (moved and (after < self._returned or after >= self._next))
        ):
            await self._drop()
            self.reconnects += 1
        if moved:
            self._returned = after
        if self._sub is None and not self._buffer:  # (what direct gets buffered goes first)
            self._returned = after
            self._next = after + 1
            self._generation = self._conn.generation
            nc = self._conn.nc
            try:
                if nc is None:
                    raise nats.errors.ConnectionClosedError
                self._name = await add_consumer(
                    js,
                    self._conn.names.stream,
                    self._subject,
                    after + 1,
                    inactive=max(30.0, self._lease * 3),
                    timeout=self._conn.request_timeout,
                )
            except RETRYABLE:
                # No consumer now (a cluster electing its meta leader): what there is
                # is read message by message meanwhile, and the consumer tried again.
                return
            pull = Pull(nc, self._conn.names.stream, self._name)
            try:
                await pull.start()
            except BaseException:
                await drop_consumer(js, self._conn.names.stream, None, self._name)
                raise
            self._sub = pull

    async def _fill(self, js: JetStreamContext, after: int, count: int, timeout: float) -> bool:
        """Buffer what the consumer delivers in ``timeout`` (direct gets when there is no
        consumer); True if anything came."""
        if self._sub is None:
            got = await self._store.read_direct(js, self._subject, after + 1, None, count)
            if not got:
                await asyncio.sleep(min(timeout, 0.2))
                return False
            ck = await self._store.checkpoint_of(self._session)
            self._overtaken(after, ck, got[0][0])
            self._buffer = got
            self._next = got[-1][0] + 1
            return True
        pull = self._sub
        if not pull.messages:
            await pull.ask(count, _POLL)
            if timeout > 0:
                # Bounded on our side too: a pull request lost in a failover may never
                # be answered. A reconnection ends the wait (the consumer is then gone).
                await pull.arrived(timeout, self._conn.wakeups)
        if pull.gone:
            raise nats.errors.Error(f"consumer {self._name}: {pull.gone}")
        pending = pull.pending
        msgs = pull.take()
        if not msgs:
            return False
        self._delay = 0.05
        first = True
        buffer = self._buffer
        for seq, data in msgs:
            if seq <= after:
                continue
            if first:
                first = False
                if pending + len(msgs) >= self._replay // 2:
                    ck = await self._store.checkpoint_of(self._session)
                    self._overtaken(after, ck, seq)
            buffer.append((seq, data))
        self._next = msgs[-1][0] + 1
        return bool(buffer)

    def _overtaken(self, after: int, ck: int, first: int) -> None:
        """Whether a checkpoint purged messages between the cursor and ``first``: the
        checkpoint stands at one of the session's messages, so if it is past the cursor
        and before ``first``, that message was never delivered here."""
        self._ck = ck
        if after < ck < first:
            self._gap = ck

    async def _behind(self, after: int) -> bool:
        """Whether the session has a message past ``after``."""
        return await self._store.newest(self._session) > after

    async def _failed(self, exc: BaseException) -> None:
        """A consumer error retrying the request cannot cure (the consumer was deleted,
        say): drop it; the next read makes it again, after a pause that grows."""
        logger.info("reader of %s lost its consumer (%r)", self._subject, exc)
        await self._drop()
        self.reconnects += 1
        delay, self._delay = self._delay, min(self._delay * 2, 2.0)
        await asyncio.sleep(delay)

    async def _drop(self) -> None:
        pull, self._sub = self._sub, None
        self._buffer = []
        if pull is not None:
            conn = self._conn
            await drop_consumer(conn.current_js, conn.names.stream, pull.subscription, self._name)
