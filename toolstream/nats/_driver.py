"""NatsBroker: the broker driver of ``NatsBus`` — NATS JetStream (2.9+).

One stream per prefix holds every session (subject ``<prefix>.<session token>``): an
event's seq is its stream sequence, one numbering shared by every session, and the
epoch is the stream's creation time. Three KV buckets hold what must be decided once:
``<prefix>_ck`` the sessions' checkpoints, ``<prefix>_ap`` the approvals (compare-and-
swap: one decision wins), ``<prefix>_w`` the writers' leases and open calls (compare-
and-swap: one reaper per lost writer, and a fenced writer finds out before it writes).

NATS has no server-side scripts: where the protocol asks for one atomic step, the
driver takes the steps that give the same outcome (docs/decisions.md, "NatsBus as a
BrokerBus", says where and why). The parts: :mod:`._connection` (connections, the
stream and buckets), :mod:`._writing` (numbering and appending), :mod:`._reading` and
:mod:`._reader` (reads, checkpoints, a subscription's consumer), :mod:`._leases`
(leases, fencing, reaping, expiry), :mod:`._approvals` (approvals).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from toolstream._core.driver import (
    Appended,
    ApprovalState,
    BrokerReader,
    Decide,
    Record,
    Resolution,
    StoredState,
)

from ._approvals import NatsApprovals
from ._common import RETRYABLE, JetStreamContext, Names
from ._connection import Link, NatsConnection
from ._leases import NatsLeases
from ._reader import NatsReader
from ._reading import NatsStore
from ._writing import NatsWriter

logger = logging.getLogger("toolstream.nats")

__all__ = ["NatsBroker"]


class NatsBroker:
    """The :class:`~toolstream._core.driver.Broker` of ``NatsBus`` (its options are
    ``NatsBus``'s, checked there)."""

    name = "NatsBus"
    retryable: tuple[type[BaseException], ...] = RETRYABLE

    def __init__(
        self,
        servers: Sequence[str],
        *,
        prefix: str,
        replicas: int,
        replay: int,
        session_ttl: float,
        lease: float,
        connect_timeout: float,
        request_timeout: float,
    ) -> None:
        #: The stream, subjects and buckets of ``prefix``.
        self.names = Names(prefix)
        self.replay = replay
        self.lease = lease
        self.conn = NatsConnection(
            servers,
            self.names,
            replicas=replicas,
            session_ttl=session_ttl,
            lease=lease,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
        )
        self.where = f"NATS at {self.conn.where}"
        self.store = self._store(self.conn)
        self.approvals = self._approvals(self.conn)
        self.leases = NatsLeases(
            self.conn,
            self.store,
            self.approvals,
            self._publish,
            lease=lease,
            session_ttl=session_ttl,
        )
        self.writer = NatsWriter(self.conn, self.leases, self.approvals)
        #: Called with the new epoch when the stream is found made anew (its data lost).
        self.on_new_epoch: Callable[[str], None] = lambda epoch: None
        self.conn.on_new_epoch = self._new_epoch

    def _new_epoch(self, last: int) -> None:
        self.writer.new_epoch(last)  # predict in the new numbering
        self.on_new_epoch(self.conn.epoch)

    def _store(self, link: Link) -> NatsStore:
        conn = self.conn
        return NatsStore(
            link,
            self.names,
            lambda: conn.epoch,
            request_timeout=conn.request_timeout,
            connect_timeout=conn.connect_timeout,
        )

    def _approvals(self, link: Link) -> NatsApprovals:
        return NatsApprovals(
            link, self.names, self._publish, connect_timeout=self.conn.connect_timeout
        )

    async def _publish(
        self, js: JetStreamContext, session: str, data: bytes, msg_id: str | None
    ) -> int:
        return await self.writer.publish(js, session, data, msg_id)

    def open(self, connect_timeout: float) -> str:
        """Create the stream and buckets if missing (an existing stream is used as it
        is); the stream's epoch."""
        self.writer.begin(self.conn.open())
        return self.conn.epoch

    async def epoch(self) -> str:
        """The stream's epoch (asked again after a reconnection). The bus asks between
        two lease renewals: a stream-info request that gets no answer (a restarting
        server) is left to the next read rather than waited for, and the epoch as last
        seen is the answer meanwhile."""
        try:
            await asyncio.wait_for(self.conn.ready(), self.conn.lease_bound)
        except TimeoutError:
            pass
        return self.conn.epoch

    def next_seq(self, last: int, now: float) -> int:
        """The stream's next sequence as this process predicts it."""
        return self.writer.next_seq(last, now)

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        """Append one session's records (with the other sessions' appends started at the
        same time: one pipeline, in numbering order)."""
        return await self.writer.append(session, token, records)

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        """The session as stored (checkpoint, then the messages after it)."""
        return await self.store.read_state(session, upto)

    def read_state_sync(self, session: str) -> StoredState:
        """:meth:`read_state` on a connection of its own, in a thread of its own."""
        return self.conn.in_thread(lambda link: self._store(link).read_state(session))

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        """Store the checkpoint (KV) and purge the session's subject up to it."""
        await self.store.checkpoint(session, seq, state)

    def reader(self, session: str) -> BrokerReader:
        """An ephemeral pull consumer of the session's subject, for one subscription."""
        return NatsReader(self.conn, self.store, session, replay=self.replay, lease=self.lease)

    # -- leases ------------------------------------------------------------------------

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        """Renew the writer's lease entry (the sessions are filed by its open calls)."""
        await self.leases.hold(token, lease)

    async def lost(self, token: str) -> list[str]:
        """The writers whose entry has not changed for their lease here, and the claims
        whose closing did not finish."""
        return await self.leases.lost(token)

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        """Claim the writer's entry (compare-and-swap)."""
        return await self.leases.claim(token, force=force)

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        """Close what the claimed writer left open in ``session``."""
        return await self.leases.reap(session, token, reason, now)

    async def release(self, token: str) -> None:
        """Mark the claim closed (this process's own entry: delete it)."""
        await self.leases.release(token)

    async def drop_lease(self, token: str) -> None:
        """Stop renewing the writer's entry (a claim of it still finds its open calls)."""
        self.leases.drop(token)

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        """Nothing: history is kept by count (checkpoints every ``replay / 4`` events)."""
        return []

    async def expire(self, now: float) -> int:
        """Purge the sessions idle for ``session_ttl`` (looked at every
        ``min(session_ttl / 4, 60)`` seconds)."""
        return await self.leases.expire(force=False)

    async def expire_now(self) -> int:
        """Purge the sessions idle for ``session_ttl`` now."""
        return await self.leases.expire(force=True)

    # -- approvals ---------------------------------------------------------------------

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        """The approval's KV entry."""
        return await self.approvals.approval(session, approval_id)

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        """:meth:`approval` on a connection of its own, in a thread of its own."""
        return self.conn.in_thread(
            lambda link: self._approvals(link).approval(session, approval_id)
        )

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        """Decide by compare-and-swap on the approval's entry, then append."""
        return await self.approvals.resolve(session, decide)

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        """:meth:`resolve` on a connection of its own, in a thread of its own."""
        return self.conn.in_thread(lambda link: self._approvals(link).resolve(session, decide))

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        """Woken by a watch on the approval's entry."""
        await self.approvals.wait(session, approval_id, timeout)

    # -- connection --------------------------------------------------------------------

    async def start(self) -> None:
        """Connect in the running loop (kept up from then on, made again when lost)."""
        await self.conn.start()

    async def aclose(self) -> None:
        """Stop the watchers; close the main connection."""
        await self.approvals.aclose()
        await self.conn.aclose()
