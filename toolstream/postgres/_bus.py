"""PostgresBus: the Bus protocol on PostgreSQL, for several processes sharing one stream.

A :class:`~toolstream._core.brokerbus.BrokerBus` over :class:`PostgresBroker`:
publishing appends to a local outbox and returns at once; a flusher writes the outbox
in batches, one transaction per session (idempotent: a retried batch is not written
twice). Subscriptions read their session with a ``SELECT`` on a small shared pool of
connections and are woken by ``LISTEN``/``NOTIFY``; history is kept by time
(``retention``), not by count.
"""

from __future__ import annotations

from typing_extensions import Unpack

from toolstream._core.brokerbus import BrokerBus, BrokerBusStats, BrokerSubscription, BusOptions

from ._broker import PostgresBroker

__all__ = ["PostgresBus", "PostgresBusStats", "PostgresSubscription"]

#: A subscription of a :class:`PostgresBus` (reads on the bus's shared pool, woken by
#: NOTIFY; it survives PostgreSQL restarts and is cut, never gapped, when the history
#: it had not read yet was deleted).
PostgresSubscription = BrokerSubscription


class PostgresBusStats(BrokerBusStats):
    """Counters of a :class:`PostgresBus` in this process (read with ``bus.stats``)."""


class PostgresBus(BrokerBus):
    """A :class:`~toolstream.Bus` on PostgreSQL: every process using the same database
    and ``prefix`` shares one live, resumable stream per session.

    - ``dsn``: any libpq connection string (``"postgresql://user:pw@host/db"``,
      ``"host=... dbname=..."``), given to psycopg unchanged.
    - ``prefix``: names the tables (``<prefix>_events``...) and the NOTIFY channel:
      letters, digits and ``_``, starting with a letter, at most 32 characters. The
      tables are created if missing.
    - ``retention``: seconds of history kept for resuming (there is no count bound).
      Older events are deleted (a checkpoint of the session's state is stored first)
      at least every ``min(retention, 30 s)``; a client resuming from before that gets
      a ``stream.reset``, one resuming from after it gets exactly what it missed. A
      session with no new event for ``retention`` is deleted entirely.
    - ``outbox``: events kept locally while PostgreSQL is unreachable; past it
      ``outbox_overflow`` applies.
    - ``lease``: seconds a process may go without renewing its lease (by the database's
      clock) before another process closes its open calls as ``cancelled`` with reason
      ``"worker lost"``.
    - ``reap``: whether this process closes the calls of lost writers and deletes the
      expired sessions (any process can).
    - ``connect_timeout``: how long construction and a subscription's first read may
      wait for PostgreSQL before :class:`~toolstream.BusUnavailable`.
    - ``batch``, ``clock``, ``max_finished``, ``reset_bytes``, ``payload``: as on
      :class:`~toolstream.broker.BrokerBus`.
    - ``pool``: the most connections this bus's reads and writes share (a gateway's
      thousands of subscriptions included); one more listens for NOTIFY, and one
      serves :meth:`snapshot` and the other synchronous calls.

    Approvals are decided in one transaction each: whichever process decides first
    wins, every other gets ``ApprovalAlreadyResolved``. A PostgreSQL restart keeps the
    epoch (it is stored in a table): cursors from before it resume exactly.

    Construction talks to PostgreSQL once (synchronously) to create the tables and
    learn the epoch. Runs on asyncio only. Use as ``async with PostgresBus(dsn) as
    bus:`` (or ``await bus.start()`` in your main loop and ``await bus.aclose()`` at
    the end).
    """

    _stats_type = PostgresBusStats

    def __init__(
        self,
        dsn: str,
        *,
        prefix: str = "toolstream",
        retention: float = 604800.0,
        pool: int = 8,
        **options: Unpack[BusOptions],
    ) -> None:
        connect_timeout = options.get("connect_timeout", 5.0)
        if not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        broker = PostgresBroker(
            dsn, prefix=prefix, retention=retention, connect_timeout=connect_timeout, pool=pool
        )
        #: The driver (its connections, pool and listener).
        self.driver = broker
        self.dsn = dsn
        self.prefix = prefix
        self.retention = broker.retention
        super().__init__(broker, replay=None, **options)

    def __repr__(self) -> str:
        return (
            f"<PostgresBus {self.driver.where[len('PostgreSQL at ') :]} prefix={self.prefix!r} "
            f"epoch={self.epoch} outbox={len(self.outbox)}>"
        )
