"""What the Redis bus and its subscriptions share: the client library, the retryable
errors, and how stream entry ids map to event ids."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from toolstream._core.broker import SessionState
from toolstream._core.codec import from_dict
from toolstream._core.errors import EventDecodeError
from toolstream._core.events import Event
from toolstream._core.jsonenc import loads
from toolstream._core.view import LiveView
from toolstream._core.wake import current_backend
from toolstream._extras import require

require("redis", "redis", "toolstream.redis")

import redis  # noqa: E402 - after the check that names the extra
import redis.asyncio as aredis  # noqa: E402
from redis.commands.core import AsyncScript  # noqa: E402

logger = logging.getLogger("toolstream.redis")

__all__ = [
    "NETWORK_ERRORS",
    "SessionState",
    "global_base",
    "session_base",
    "parse_state",
    "decode_entry",
    "AsyncScript",
    "aredis",
    "redis",
    "RETRYABLE",
    "SCALE",
    "close_quietly",
    "entry_seq",
    "redact_url",
    "require_asyncio",
    "seq_entry",
]

#: An event id's number is the stream entry id ``ms-n`` as ``ms * SCALE + n``: the
#: same order, and the ``"<epoch>-<number>"`` shape every client already parses.
SCALE = 1_000_000
NETWORK_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
#: The connection errors plus a Redis that is up but still loading its data, and a
#: cluster between a master's loss and its replica's promotion (or a client talking to
#: a demoted master).
RETRYABLE = (
    *NETWORK_ERRORS,
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


def require_asyncio(what: str) -> None:
    """``RuntimeError`` unless running on asyncio (redis-py has no trio support)."""
    if current_backend() != "asyncio":
        raise RuntimeError(
            f"RedisBus {what} runs on asyncio only (redis-py has no trio support); "
            "use EventBus under trio, or run the gateway on asyncio"
        )


async def close_quietly(client: aredis.Redis) -> None:
    """Close a connection that may already be dead."""
    try:
        await asyncio.shield(client.aclose())
    except Exception:  # pragma: no cover - closing a dead connection
        pass


def decode_entry(epoch: str, entry: str, fields: Any) -> Event | None:
    """The event stored in stream entry ``entry`` (None, logged, if it is malformed)."""
    try:
        if type(fields) is list and len(fields) == 2 and fields[0] == "e":
            blob = fields[1]  # what the scripts return: [field, value]
        elif isinstance(fields, dict):
            blob = fields["e"]
        else:
            blob = dict(zip(fields[::2], fields[1::2], strict=True))["e"]
        data = loads(blob)
        data["id"] = f"{epoch}-{entry_seq(entry)}"
        return from_dict(data)
    except (KeyError, ValueError, TypeError, EventDecodeError) as exc:
        logger.warning("skipped a malformed stream entry %s: %s", entry, exc)
        return None


def parse_state(raw: Sequence[Any], view: LiveView, epoch: str) -> SessionState:
    """The READ_STATE script's reply; ``view`` (empty) becomes the state at the
    checkpoint; ids carry ``epoch``."""
    incarnation, last, maxdel, ck_id, ck_state, entries = raw
    floor = entry_seq(maxdel)
    if ck_id:
        floor = max(floor, entry_seq(ck_id))
        try:
            view.apply(from_dict(json.loads(ck_state)))
        except (ValueError, EventDecodeError) as exc:
            logger.error("checkpoint of a session unreadable, ignored: %s", exc)
    events = []
    for entry, fields in entries:
        event = decode_entry(epoch, entry, fields)
        if event is not None:
            events.append((entry_seq(entry), event))
    return SessionState(epoch, entry_seq(last), floor, view, events, incarnation or "")
