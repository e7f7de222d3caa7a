"""The PostgreSQL bus: several gateway processes and agent workers share one live,
resumable stream per session through a PostgreSQL database (``pip install
'toolstream[postgres]'``; asyncio only).

:class:`PostgresBus` is a :class:`~toolstream.broker.BrokerBus` over
:class:`PostgresBroker`, the driver (events in a table, ``LISTEN``/``NOTIFY`` wake-ups,
approvals and leases decided in transactions); use the driver on its own to build a
``BrokerBus`` with other options. See docs/scaling.md.
"""

from __future__ import annotations

from toolstream._extras import require

require("psycopg", "postgres", "toolstream.postgres")

# After the check that names the extra:
from toolstream._core.outbox import OutboxOverflow  # noqa: E402

from ._broker import PostgresBroker  # noqa: E402
from ._bus import PostgresBus, PostgresBusStats, PostgresSubscription  # noqa: E402

__all__ = [
    "OutboxOverflow",
    "PostgresBroker",
    "PostgresBus",
    "PostgresBusStats",
    "PostgresSubscription",
]
