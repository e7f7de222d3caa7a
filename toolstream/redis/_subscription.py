"""RedisSubscription: a session's stream read with XREAD on a connection of its own."""

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
    RETRYABLE,
    aredis,
    close_quietly,
    decode_entry,
    entry_seq,
    redact_url,
    seq_entry,
    session_base,
)

if TYPE_CHECKING:
    from ._bus import RedisBus

logger = logging.getLogger("toolstream.redis")

__all__ = ["RedisSubscription"]

E_co = TypeVar("E_co", bound=Event, covariant=True)


class RedisSubscription(FedSubscription[E_co]):
    """A :class:`~toolstream.Subscription` fed by blocking XREADs on a connection of its
    own. It survives Redis restarts (reconnecting, continuing from its cursor) and
    releases its connection when closed or cut."""

    def __init__(
        self,
        bus: RedisBus,
        session: str,
        *,
        request: StartRequest,
        since: int,
        barrier: int,
    ) -> None:
        super().__init__(
            session,
            request=request,
            stats=bus._sub_stats,
            reset_bytes=bus.reset_bytes,
            clock=bus._clock,
        )
        self._rbus = bus
        self._since = since
        self._barrier = barrier
        self._entry = "0-0"
        self._epoch = bus.epoch
        self._incarnation = ""
        #: Reconnections to Redis this subscription made (a restart, a dropped link).
        self.reconnects = 0

    async def _read_start(self) -> BrokerStart:
        bus = self._rbus
        deadline = time.monotonic() + bus.connect_timeout
        try:
            await bus._settle(self._barrier, deadline)
        except TimeoutError:
            pass  # Redis is away: the read below says so

        async def read() -> SessionState:
            return await retry_until(
                lambda: bus._read_state(self.session or ""),
                RETRYABLE,
                deadline,
                f"Redis at {redact_url(bus.url)}",
            )

        state, expired = await self._read_touched(
            read, lambda state: bus._expire_due(self.session or "", state)
        )
        self._epoch = state.epoch
        self._incarnation = state.incarnation
        self._entry = seq_entry(state.last)
        return BrokerStart(
            epoch=state.epoch,
            retained=state.retained(),
            live_seq=state.last if expired else min(state.last, self._since),
            last_seq=state.last,
        )

    async def _read_loop(self) -> None:
        """Read the stream after the cursor, in batches, with one atomic script call
        each (entries, the keyspace's epoch and the checkpoint together, so a gap left
        by trimming is always noticed); block in XREAD only to wait for news."""
        bus = self._rbus
        base = session_base(bus.prefix, self.session or "")
        key = f"{base}:s"
        count = max(1, min(512, bus.replay // 2))
        args: list[Any] = [base, "", count]
        client: aredis.Redis | None = None
        delay = 0.05
        wait = False
        try:
            while not self.closed:
                try:
                    if client is None:
                        client = bus._reader()
                    if wait:
                        await client.xread({key: self._entry}, count=1, block=5000)
                    args[1] = self._entry
                    reply: Any = await bus._after_script(keys=[key], args=args, client=client)
                    incarnation = reply[0]
                    if incarnation and incarnation != self._incarnation:
                        if self._incarnation:
                            # The session's data is gone (a master lost it, Redis came
                            # back empty, or it expired) and it was written again.
                            await self._epoch_lost()
                            wait = False
                            continue
                        self._incarnation = incarnation  # its first write
                    if bus.epoch != self._epoch:
                        await self._epoch_lost()
                        wait = False
                        continue
                    delay = 0.05
                except RETRYABLE as exc:
                    if client is not None:
                        if client is not bus._redis:
                            await close_quietly(client)
                        client = None
                        self.reconnects += 1
                        logger.info("subscription to %s lost Redis (%s), reconnecting", key, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    wait = False
                    continue
                checkpoint, entries = reply[1], reply[2]
                if checkpoint and entry_seq(checkpoint) > entry_seq(self._entry):
                    # Everything up to the checkpoint was trimmed, and this reader had
                    # not read it all: cut (the consumer resumes, or gets a reset).
                    self._cut_now("events it had not read were trimmed from Redis")
                    return
                wait = len(entries) < count
                if not entries:
                    continue
                events = []
                for entry, fields in entries:
                    ev = decode_entry(self._epoch, entry, fields)
                    if ev is not None:
                        events.append(ev)
                self._entry = entries[-1][0]
                if not self._append(events):
                    return
        finally:
            if client is not None and client is not bus._redis:
                await close_quietly(client)

    async def _epoch_lost(self) -> None:
        """Redis came back without its data: deliver a reset of what it has now."""
        bus = self._rbus
        await bus._ensure_epoch()
        state = await bus._read_state(self.session or "")
        self._incarnation = state.incarnation
        top = state.last
        reset = StreamReset(
            id=make_id(state.epoch, top),
            session=self.session or "",
            ts=bus._clock(),
            run_id=self.run,
            snapshot=bound_snapshot(state.folded().snapshot(run_id=self.run), bus.reset_bytes),
        )
        bus._stats.resets += 1
        self._epoch = state.epoch
        self._entry = seq_entry(top)
        self._push_reset(reset)

    def close(self) -> None:
        """Release the subscription: its reader stops and its connection closes."""
        super().close()
        self._rbus._subs.discard(self)
