"""PostgreSQL as the shared broker of several processes: :class:`PostgresBroker`, the
driver a broker-backed bus runs on (events in a table, NOTIFY wake-ups, approvals and
leases decided in transactions). Needs ``pip install "toolstream[postgres]"``; asyncio
only. See docs/scaling.md.
"""

from __future__ import annotations

from toolstream._extras import require

require("psycopg", "postgres", "toolstream.postgres")

from ._broker import PostgresBroker, PostgresReader  # noqa: E402 - after the check

__all__ = ["PostgresBroker", "PostgresReader"]
