"""``toolstream.broker``: the broker-backed bus and the driver seam under it.

:class:`BrokerBus` is a :class:`~toolstream.Bus` over a broker driver — everything a
broker-backed bus does (the outbox, subscriptions and resuming, snapshots, approvals,
leases and reaping of lost writers, stats), written once. A driver implements the
:class:`Broker` protocol: one atomic step per method, on whatever the broker is.
``toolstream.redis.RedisBus``, ``toolstream.nats.NatsBus`` and
``toolstream.postgres.PostgresBus`` are ``BrokerBus`` over their drivers;
``BrokerBus(toolstream.testing.MemoryBroker())`` runs with no server. docs/scaling.md
("Writing a driver") explains the seam.
"""

from __future__ import annotations

from toolstream._core.brokerbus import BrokerBus, BrokerBusStats, BrokerSubscription, BusOptions
from toolstream._core.driver import (
    Appended,
    ApprovalState,
    Broker,
    BrokerReader,
    Chunk,
    Decide,
    Record,
    RecordKind,
    Resolution,
    StoredState,
    Variant,
)
from toolstream._core.outbox import OutboxOverflow, Refused

__all__ = [
    "Appended",
    "ApprovalState",
    "Broker",
    "BrokerBus",
    "BrokerBusStats",
    "BrokerReader",
    "BrokerSubscription",
    "BusOptions",
    "Chunk",
    "Decide",
    "OutboxOverflow",
    "Record",
    "RecordKind",
    "Refused",
    "Resolution",
    "StoredState",
    "Variant",
]
