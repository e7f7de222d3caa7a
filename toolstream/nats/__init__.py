"""``toolstream.nats``: the Bus protocol on NATS JetStream (extra ``toolstream[nats]``),
for several processes sharing one live, resumable stream (see docs/scaling.md)."""

from __future__ import annotations

from toolstream._core.outbox import OutboxOverflow

from ._bus import NatsBus, NatsBusStats, NatsSubscription

__all__ = ["NatsBus", "NatsBusStats", "NatsSubscription", "OutboxOverflow"]
