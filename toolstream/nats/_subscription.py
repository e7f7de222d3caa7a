"""NatsSubscription: a session's subject read through an ephemeral pull consumer."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, TypeVar

from toolstream._core.broker import BrokerStart, FedSubscription, SessionState, retry_until
from toolstream._core.events import Event, StreamReset
from toolstream._core.ids import make_id
from toolstream._core.snapshots import bound_snapshot
from toolstream._core.start import StartRequest

from ._common import (
    NATS_ERRORS,
    RETRYABLE,
    decode_message,
    drop_consumer,
    ephemeral_consumer,
    nats,
)

if TYPE_CHECKING:
    from ._bus import NatsBus

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsSubscription"]

E_co = TypeVar("E_co", bound=Event, covariant=True)


class NatsSubscription(FedSubscription[E_co]):
    """A :class:`~toolstream.Subscription` fed by an ephemeral JetStream pull consumer
    on the session's subject, created again from its cursor whenever it is lost (a
    server restart, a failover). It notices a purge that overtook it and cuts rather
    than skip events, and a stream that lost its data and delivers a reset."""

    def __init__(
        self,
        bus: NatsBus,
        session: str,
        *,
        request: StartRequest,
        since: float,
        barrier: int,
    ) -> None:
        super().__init__(
            session,
            request=request,
            stats=bus._sub_stats,
            reset_bytes=bus.reset_bytes,
            clock=bus._clock,
        )
        self._nbus = bus
        self._since = since
        self._barrier = barrier
        self._seq = 0
        self._epoch = bus.epoch
        #: Consumers this subscription created again (a restart, a failover, a link).
        self.reconnects = 0

    async def _read_start(self) -> BrokerStart:
        bus = self._nbus
        deadline = time.monotonic() + bus.connect_timeout
        try:
            await bus._outbox.settle(self._barrier, deadline)
        except TimeoutError:
            pass  # NATS is away: the read below says so

        async def read() -> SessionState:
            return await retry_until(
                lambda: bus._reader.read_state(self.session or ""),
                RETRYABLE,
                deadline,
                f"NATS at {bus._where}",
            )

        state, expired = await self._read_touched(
            read, lambda state: bus._expire_due(self.session or "", state)
        )
        self._epoch = state.epoch
        self._seq = state.last
        # Live starts after the events published before subscribe() was called.
        live = state.floor
        for seq, ev in state.events:
            if ev.ts <= self._since:
                live = seq
        if expired or not state.events or state.events[-1][1].ts <= self._since:
            live = state.last
        return BrokerStart(
            epoch=state.epoch, retained=state.retained(), live_seq=live, last_seq=state.last
        )

    async def _read_loop(self) -> None:
        """Fetch the subject after the cursor in batches (a long poll waits for news);
        create the consumer again from the cursor after any error."""
        bus = self._nbus
        subject = bus.names.subject(self.session or "")
        count = max(1, min(512, bus.replay // 2))
        sub: Any = None
        name = ""
        generation = bus._generation
        idle = 0
        delay = 0.05
        try:
            while not self.closed:
                try:
                    js = await bus._ready()
                    if bus.epoch != self._epoch:
                        await self._epoch_lost()
                        continue
                    if sub is not None and generation != bus._generation:
                        # The connection was re-established: an ephemeral consumer does
                        # not survive a server restart, so make it again.
                        await self._drop(sub, name)
                        sub = None
                        self.reconnects += 1
                    if sub is None:
                        generation = bus._generation
                        try:
                            name, sub = await self._consumer(js, subject)
                        except RETRYABLE:
                            # No consumer now (a cluster electing its meta leader):
                            # read what there is message by message, then try again.
                            direct = await bus._reader.read_direct(js, subject, self._seq + 1, None)
                            if direct:
                                self._seq = direct[-1][0]
                                if not self._append([ev for _, ev in direct]):
                                    return
                            else:
                                await asyncio.sleep(0.2)
                            continue
                    msgs = await self._fetch(sub, count)
                    if msgs is None:
                        idle += 1
                        if idle % 2 == 0 and await self._behind(js, subject):
                            # Quiet, yet the session has news: the consumer is gone or
                            # stuck (a leader moved in a cluster). Make it again.
                            logger.info("subscription to %s: consumer stalled", subject)
                            await self._drop(sub, name)
                            sub = None
                            self.reconnects += 1
                        continue
                    idle = 0
                    delay = 0.05
                except NATS_ERRORS as exc:
                    if sub is not None:
                        await self._drop(sub, name)
                        sub = None
                        self.reconnects += 1
                        logger.info("subscription to %s lost its consumer (%r)", subject, exc)
                    else:
                        logger.info("subscription to %s cannot read yet (%r)", subject, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                events = []
                first = True
                for msg in msgs:
                    md = msg.metadata
                    seq = md.sequence.stream
                    if seq <= self._seq:
                        continue
                    if first:
                        first = False
                        if md.num_pending + len(msgs) >= bus.replay // 2 and await self._overtaken(
                            seq
                        ):
                            # A checkpoint purged what this reader had not read yet:
                            # cut (the consumer resumes, or gets a reset).
                            self._cut_now("events it had not read were purged from the stream")
                            return
                    ev = decode_message(self._epoch, seq, msg.data)
                    self._seq = seq
                    if ev is not None:
                        events.append(ev)
                if events and not self._append(events):
                    return
        finally:
            if sub is not None:
                await self._drop(sub, name)

    async def _fetch(self, sub: Any, count: int) -> list[Any] | None:
        """Up to ``count`` messages (a long poll of 5 s; None when none came), cut short
        when the bus's connection is re-established (the consumer is then gone)."""
        fetch = asyncio.ensure_future(sub.fetch(count, timeout=5.0))
        again = asyncio.ensure_future(self._nbus._reconnected.wait())
        try:
            # Bounded on our side too: a pull request lost in a failover may never be
            # answered, and the library's own timeout has been seen not to fire then.
            await asyncio.wait((fetch, again), timeout=7.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            again.cancel()
            if not fetch.done():
                fetch.cancel()
        if not fetch.done() or fetch.cancelled():
            return None
        try:
            return list(fetch.result())
        except (nats.errors.TimeoutError, TimeoutError):
            return None

    async def _behind(self, js: Any, subject: str) -> bool:
        """Whether the session has a message past this reader's cursor."""
        try:
            last = await js.get_msg(self._nbus.names.stream, subject=subject, direct=True)
        except nats.js.errors.NotFoundError:
            return False
        return int(last.seq or 0) > self._seq

    async def _consumer(self, js: Any, subject: str) -> tuple[str, Any]:
        bus = self._nbus
        return await ephemeral_consumer(
            js,
            bus.names.stream,
            subject,
            self._seq + 1,
            inactive=max(30.0, bus.lease * 3),
            timeout=bus.request_timeout,
        )

    async def _drop(self, sub: Any, name: str) -> None:
        bus = self._nbus
        await drop_consumer(None if bus._closed else bus._js, bus.names.stream, sub, name)

    async def _overtaken(self, seq: int) -> bool:
        """Whether a checkpoint purged events between the cursor and ``seq``: the
        checkpoint stands at one of the session's events, so if it is past the cursor
        and before ``seq``, that event was never delivered here."""
        ck, _ = await self._nbus._reader.checkpoint_of(self.session or "")
        return self._seq < ck < seq

    async def _epoch_lost(self) -> None:
        """The stream came back without its data: deliver a reset of what it has now."""
        bus = self._nbus
        state = await bus._reader.read_state(self.session or "")
        reset = StreamReset(
            id=make_id(state.epoch, state.last),
            session=self.session or "",
            ts=bus._clock(),
            run_id=self.run,
            snapshot=bound_snapshot(state.folded().snapshot(run_id=self.run), bus.reset_bytes),
        )
        bus._stats.resets += 1
        self._epoch = state.epoch
        self._seq = state.last
        self._push_reset(reset)

    def close(self) -> None:
        """Release the subscription: its reader stops and its consumer goes."""
        super().close()
        self._nbus._subs.discard(self)
