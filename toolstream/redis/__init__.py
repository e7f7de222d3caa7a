"""The Redis Streams bus: several gateway processes and agent workers share one live,
resumable stream per session (``pip install 'toolstream[redis]'``; asyncio only).

See docs/scaling.md.
"""

from __future__ import annotations

from ._bus import OutboxOverflow, RedisBus, RedisBusStats, RedisSubscription

__all__ = ["OutboxOverflow", "RedisBus", "RedisBusStats", "RedisSubscription"]
