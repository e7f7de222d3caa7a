"""BrokerSubscription: a session read through a driver's reader (one per subscription)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, TypeVar

from .broker import BrokerStart, FedSubscription, SessionState, retry_until
from .brokerstate import decode
from .driver import BrokerReader, Chunk
from .events import Event, StreamReset
from .ids import make_id
from .snapshots import bound_snapshot
from .start import StartRequest

if TYPE_CHECKING:
    from .brokerbus import BrokerBus

logger = logging.getLogger("toolstream.broker")

__all__ = ["BrokerSubscription"]

E_co = TypeVar("E_co", bound=Event, covariant=True)


class BrokerSubscription(FedSubscription[E_co]):
    """A :class:`~toolstream.Subscription` fed by its driver's reader. It survives broker
    restarts (reconnecting, continuing from its cursor), notices a trim that overtook it
    (and cuts rather than skip events) and a broker that lost its data (and delivers a
    reset), and releases its reader when closed or cut."""

    def __init__(
        self,
        bus: BrokerBus,
        session: str,
        *,
        request: StartRequest,
        since: int,
        barrier: int,
    ) -> None:
        super().__init__(
            session,
            request=request,
            stats=bus.feeder_stats,
            reset_bytes=bus.reset_bytes,
            clock=bus.clock,
        )
        self._bus = bus
        self._since = since
        self._barrier = barrier
        self._seq = 0
        self._epoch = bus.epoch
        self._incarnation = ""
        #: Reconnections to the broker this subscription made (a restart, a lost link).
        self.reconnects = 0

    async def _read_start(self) -> BrokerStart:
        bus = self._bus
        deadline = time.monotonic() + bus.connect_timeout
        try:
            await bus.outbox.settle(self._barrier, deadline)
        except TimeoutError:
            pass  # the broker is away: the read below says so

        async def read() -> SessionState:
            return await retry_until(
                lambda: bus.read_state(self.session or ""),
                bus.broker.retryable,
                deadline,
                bus.broker.where,
            )

        state, expired = await self._read_touched(
            read, lambda state: bus.expire_due(self.session or "", state)
        )
        self._epoch = state.epoch
        self._incarnation = state.incarnation
        self._seq = state.last
        return BrokerStart(
            epoch=state.epoch,
            retained=state.retained(),
            live_seq=state.last if expired else min(state.last, self._since),
            last_seq=state.last,
        )

    async def _read_loop(self) -> None:
        """Read the session after the cursor in batches (each with the session's
        incarnation and checkpoint, so a gap left by trimming is always noticed); wait
        on the reader only for news."""
        bus = self._bus
        broker = bus.broker
        count = max(1, min(512, (bus.replay or 1024) // 2))
        reader: BrokerReader | None = None
        delay = 0.05
        wait = False
        try:
            while not self.closed:
                try:
                    if reader is None:
                        reader = broker.reader(self.session or "")
                    if wait:
                        await reader.wait(self._seq, 5.0)
                    chunk: Chunk = await reader.read(self._seq, count)
                    incarnation = chunk.incarnation
                    if incarnation and incarnation != self._incarnation:
                        if self._incarnation:
                            # The session's data is gone (the broker lost it, or it
                            # expired) and it was written again.
                            await self._data_lost()
                            wait = False
                            continue
                        self._incarnation = incarnation  # its first write
                    if bus.epoch != self._epoch:
                        await self._data_lost()
                        wait = False
                        continue
                    delay = 0.05
                except broker.retryable as exc:
                    if reader is not None:
                        await _close_quietly(reader)
                        reader = None
                        self.reconnects += 1
                        logger.info(
                            "subscription to %s lost %s (%s), reconnecting",
                            self.session,
                            broker.where,
                            exc,
                        )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    wait = False
                    continue
                if chunk.checkpoint > self._seq:
                    # Everything up to the checkpoint was deleted, and this reader had
                    # not read it all: cut (the consumer resumes, or gets a reset).
                    self._cut_now(f"events it had not read were deleted from {broker.where}")
                    return
                entries = chunk.events
                wait = len(entries) < count
                if not entries:
                    continue
                events = []
                for seq, blob in entries:
                    ev = decode(self._epoch, seq, blob)
                    if ev is not None:
                        events.append(ev)
                self._seq = entries[-1][0]
                if not self._append(events):
                    return
        finally:
            if reader is not None:
                await _close_quietly(reader)

    async def _data_lost(self) -> None:
        """The broker lost the session's data: deliver a reset of what it has now."""
        bus = self._bus
        await bus.refresh_epoch()
        state = await bus.read_state(self.session or "")
        self._incarnation = state.incarnation
        top = state.last
        reset = StreamReset(
            id=make_id(state.epoch, top),
            session=self.session or "",
            ts=bus.clock(),
            run_id=self.run,
            snapshot=bound_snapshot(state.folded().snapshot(run_id=self.run), bus.reset_bytes),
        )
        bus.count_reset()
        self._epoch = state.epoch
        self._seq = top
        self._push_reset(reset)

    def close(self) -> None:
        """Release the subscription: its reader stops and its connection closes."""
        super().close()
        self._bus.forget(self)


async def _close_quietly(reader: BrokerReader) -> None:
    """Release a reader whose connection may already be dead."""
    try:
        await asyncio.shield(reader.aclose())
    except Exception:  # pragma: no cover - closing a dead connection
        pass
