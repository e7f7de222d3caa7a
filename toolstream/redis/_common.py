"""What the Redis driver needs beside its scripts: the client library, the retryable
errors, the key names, and how stream entry ids map to event seqs."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

from toolstream._extras import require

require("redis", "redis", "toolstream.redis")

import redis  # noqa: E402 - after the check that names the extra
import redis.asyncio as aredis  # noqa: E402
from redis.commands.core import AsyncScript  # noqa: E402

__all__ = [
    "global_base",
    "session_base",
    "AsyncScript",
    "aredis",
    "redis",
    "RETRYABLE",
    "SCALE",
    "close_quietly",
    "entry_seq",
    "redact_url",
    "seq_entry",
]

#: An event id's number is the stream entry id ``ms-n`` as ``ms * SCALE + n``: the
#: same order, and the ``"<epoch>-<number>"`` shape every client already parses.
SCALE = 1_000_000
#: The connection errors plus a Redis that is up but still loading its data, and a
#: cluster between a master's loss and its replica's promotion (or a client talking to
#: a demoted master).
RETRYABLE = (
    redis.ConnectionError,
    redis.TimeoutError,
    OSError,
    redis.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,  # slots not covered yet, topology refresh
)


def session_base(prefix: str, session: str) -> str:
    """The base of a session's keys, ``{prefix:session}``: its braces put every key of
    the session in one hash slot (a Redis Cluster runs each script on one slot)."""
    return "{" + prefix + ":" + session + "}"


def global_base(prefix: str) -> str:
    """The base of the keys shared by all sessions (epoch, leases): ``{prefix}``."""
    return "{" + prefix + "}"


def entry_seq(entry: str) -> int:
    """The event id number of stream entry id ``entry``."""
    ms, _, n = entry.partition("-")
    k = int(n)
    if k >= SCALE:
        raise ValueError(f"stream entry id {entry!r} is beyond what event ids encode")
    return int(ms) * SCALE + k


def seq_entry(seq: int) -> str:
    """The stream entry id of event id number ``seq``."""
    return f"{seq // SCALE}-{seq % SCALE}"


def redact_url(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    parts = urlsplit(url)
    if parts.password:
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def close_quietly(client: aredis.Redis) -> None:
    """Close a connection that may already be dead."""
    try:
        await asyncio.shield(client.aclose())
    except Exception:  # pragma: no cover - closing a dead connection
        pass
