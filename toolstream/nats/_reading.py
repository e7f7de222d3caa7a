"""NatsReader: a NatsBus session's state read back from JetStream — its checkpoint (KV),
the messages after it (an ephemeral consumer, or direct gets when no consumer can be
made) — and the checkpoints that bound replay (store the folded state, purge before it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from toolstream._core.broker import SessionState
from toolstream._core.codec import from_dict, to_dict
from toolstream._core.errors import EventDecodeError
from toolstream._core.events import Event, StreamReset
from toolstream._core.ids import make_id
from toolstream._core.view import LiveView

from ._common import (
    RETRYABLE,
    JetStreamContext,
    KeyValue,
    decode_message,
    drop_consumer,
    ephemeral_consumer,
    nats,
    session_token,
)

if TYPE_CHECKING:
    from ._bus import NatsBus

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsReader"]


class NatsReader:
    """Reads of one :class:`~toolstream.nats.NatsBus`: ``read_state`` (checkpoint + the
    messages after it, consistent against a concurrent purge), ``read_direct``,
    ``checkpoint_of`` and ``checkpoint``."""

    def __init__(self, bus: NatsBus) -> None:
        self._bus = bus

    async def checkpoint(self, session: str, seq: int) -> None:
        """Store the session's state as of ``seq`` and purge its messages up to there."""
        state = await self.read_state(session, upto=seq)
        if state.floor >= seq:
            return
        reset = StreamReset(
            id=make_id(state.epoch, seq),
            session=session,
            ts=self._bus._clock(),
            snapshot=state.folded().snapshot(),
        )
        blob = json.dumps({"seq": seq, "state": to_dict(reset)}).encode()
        kv = await self._bus.kv(self._bus.names.checkpoints)
        token = session_token(session)
        try:
            entry = await kv.get(token)
        except nats.js.errors.KeyNotFoundError:
            await kv.create(token, blob)
        else:
            if json.loads(entry.value or b"{}").get("seq", 0) >= seq:
                return
            await kv.update(token, blob, last=entry.revision)
        js = await self._bus._ready()
        await js.purge_stream(
            self._bus.names.stream, subject=self._bus.names.subject(session), seq=seq + 1
        )

    async def checkpoint_of(self, session: str) -> tuple[int, dict[str, Any] | None]:
        """The session's checkpoint: (its sequence, the reset JSON) or (0, None)."""
        kv = await self._bus.kv(self._bus.names.checkpoints)
        try:
            entry = await kv.get(session_token(session))
        except nats.js.errors.KeyNotFoundError:
            return 0, None
        data = json.loads(entry.value or b"{}")
        return int(data.get("seq", 0)), data.get("state")

    async def read_state(
        self, session: str, upto: int | None = None, *, leader: bool = False
    ) -> SessionState:
        """The session as it stands: checkpoint, then the messages after it (read between
        two equal reads of the checkpoint, so no purge slipped in between).

        ``leader``: read only from the stream's leader, never a replica that may lag (a
        reaper deciding which calls are still open must see every acknowledged event;
        it fails rather than read a replica, and tries again at its next pass)."""
        js = await self._bus._ready(time.monotonic() + self._bus.connect_timeout)
        return await self.state_with(js, session, upto, self._bus.kv, leader=leader)

    async def state_with(
        self,
        js: JetStreamContext,
        session: str,
        upto: int | None,
        kv_of: Callable[[str], Awaitable[KeyValue]],
        *,
        leader: bool = False,
    ) -> SessionState:
        subject = self._bus.names.subject(session)
        kv = await kv_of(self._bus.names.checkpoints)
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
                last_msg = await js.get_msg(
                    self._bus.names.stream, subject=subject, direct=not leader
                )
                last = int(last_msg.seq or 0)
            except nats.js.errors.NotFoundError:
                last = 0
            if upto is not None:
                last = min(last, upto)
            events = (
                await self._range(js, subject, ck_seq + 1, last, leader=leader)
                if last > ck_seq
                else []
            )
            if (await checkpoint())[0] == ck_seq:
                break
        view = LiveView(max_finished=self._bus._max_finished, compare=self._bus.compare)
        if ck_state is not None:
            try:
                view.apply(from_dict(ck_state))
            except (ValueError, TypeError, EventDecodeError) as exc:
                logger.error("checkpoint of a session unreadable, ignored: %s", exc)
        return SessionState(self._bus.epoch, max(last, ck_seq), ck_seq, view, events)

    async def _range(
        self, js: JetStreamContext, subject: str, first: int, last: int, *, leader: bool = False
    ) -> list[tuple[int, Event]]:
        """The session's messages from sequence ``first`` to ``last`` (``leader``: never
        from a replica)."""
        bus = self._bus
        try:
            name, sub = await ephemeral_consumer(
                js,
                bus.names.stream,
                subject,
                first,
                inactive=30.0,
                timeout=bus.request_timeout,
            )
        except RETRYABLE:
            if leader:
                raise
            # No consumer now (a cluster electing its meta leader after losing a server
            # can take many seconds): read message by message from any replica.
            return await self.read_direct(js, subject, first, last)
        out: list[tuple[int, Event]] = []
        try:
            while True:
                msgs = await sub.fetch(512, timeout=bus.request_timeout)
                done = False
                for msg in msgs:
                    md = msg.metadata
                    seq = md.sequence.stream
                    if seq > last:
                        done = True
                        break
                    ev = decode_message(bus.epoch, seq, msg.data)
                    if ev is not None:
                        out.append((seq, ev))
                    if seq >= last or md.num_pending == 0:
                        done = True
                if done or not msgs:
                    break
        finally:
            await drop_consumer(js, bus.names.stream, sub, name)
        return out

    async def read_direct(
        self, js: JetStreamContext, subject: str, first: int, last: int | None
    ) -> list[tuple[int, Event]]:
        """The session's messages from ``first`` (to ``last``, or all there are), one
        direct get each: no consumer, served by any replica."""
        out: list[tuple[int, Event]] = []
        seq = first
        while last is None or seq <= last:
            try:
                msg = await js.get_msg(
                    self._bus.names.stream, seq=seq, subject=subject, next=True, direct=True
                )
            except nats.js.errors.NotFoundError:
                break
            at = int(msg.seq or 0)
            if at < seq or (last is not None and at > last):
                break
            ev = decode_message(self._bus.epoch, at, msg.data or b"")
            if ev is not None:
                out.append((at, ev))
            seq = at + 1
        return out
