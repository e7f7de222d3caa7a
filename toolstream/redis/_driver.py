"""RedisBroker: the broker driver of ``RedisBus`` — Redis Streams, one Lua script per
atomic step (:mod:`toolstream.redis._scripts` holds them and the key layout).

An event's seq is its stream entry id ``ms-n`` as ``ms * SCALE + n``; each session is a
stream of its own, read by a subscription with blocking XREAD on a connection of its
own (on a cluster, the cluster client's per-node pools)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any, cast

from toolstream._core.driver import (
    Appended,
    ApprovalState,
    Chunk,
    Decide,
    Record,
    Resolution,
    StoredState,
)
from toolstream._core.errors import BusUnavailable
from toolstream._core.jsonenc import dumps
from toolstream._core.outbox import Refused
from toolstream.redis import _scripts

from ._common import (
    RETRYABLE,
    SCALE,
    AsyncScript,
    aredis,
    close_quietly,
    entry_seq,
    global_base,
    redact_url,
    redis,
    seq_entry,
    session_base,
)

logger = logging.getLogger("toolstream.redis")

__all__ = ["RedisBroker"]


def _client_name() -> dict[str, Any]:
    """What redis-py tells the server by default (its name and version), named once:
    left to itself, redis-py looks its version up in the installed packages' metadata
    for every new connection (~0.6 ms, and every subscription opens one)."""
    version = getattr(redis, "__version__", None)
    if not isinstance(version, str):  # pragma: no cover - every release has it
        return {}
    try:
        from redis.driver_info import DriverInfo  # recent redis-py
    except ImportError:  # pragma: no cover - older redis-py: the arguments it had then
        return {"lib_name": "redis-py", "lib_version": version}
    return {"driver_info": DriverInfo(name="redis-py", lib_version=version)}


#: See :func:`_client_name`.
CLIENT_NAME = _client_name()


def _pairs(entries: Any) -> list[tuple[int, str | bytes]]:
    """Stream entries ``[[id, [field, value]], ...]`` as ``(seq, blob)``."""
    out: list[tuple[int, str | bytes]] = []
    for entry, fields in entries:
        if type(fields) is list and len(fields) == 2 and fields[0] == "e":
            blob = fields[1]
        elif isinstance(fields, dict):
            blob = fields.get("e", "")
        else:
            blob = dict(zip(fields[::2], fields[1::2], strict=False)).get("e", "")
        out.append((entry_seq(entry), blob))
    return out


def _stored(raw: Sequence[Any]) -> StoredState:
    """The READ_STATE script's reply."""
    incarnation, last, maxdel, ck_id, ck_state, entries = raw
    floor = entry_seq(maxdel)
    checkpoint = None
    if ck_id:
        floor = max(floor, entry_seq(ck_id))
        checkpoint = (entry_seq(ck_id), str(ck_state))
    return StoredState(incarnation or "", entry_seq(last), floor, checkpoint, _pairs(entries))


def _approval(reply: Sequence[Any]) -> ApprovalState | None:
    st, meta, dec = reply
    if not st:
        return None
    return ApprovalState(st, json.loads(meta), json.loads(dec) if dec else None)


def _resolve_args(session: str, decide: Decide, ttl: int) -> list[Any]:
    """The RESOLVE script's arguments after the session's base."""
    kind = "t" if decide.by_timeout else "d"
    args: list[Any] = [session, decide.approval_id, decide.now, ttl, kind]
    for res, dec, den in decide.variants:
        args += [res, dec, den or ""]
    return args


def _resolution(reply: Sequence[Any]) -> Resolution:
    outcome, res, rid = reply
    return Resolution(outcome, str(res), entry_seq(rid) if rid else 0)


class _Reader:
    """A subscription's reads: READ_AFTER, and XREAD BLOCK to wait."""

    def __init__(self, broker: RedisBroker, session: str) -> None:
        self._broker = broker
        self._base = session_base(broker.prefix, session)
        self._key = f"{self._base}:s"
        self._client: Any = broker.blocking_client()

    async def read(self, after: int, count: int) -> Chunk:
        reply: Any = await self._broker.after_script(
            keys=[self._key], args=[self._base, seq_entry(after), count], client=self._client
        )
        incarnation, checkpoint, entries = reply
        return Chunk(incarnation or "", entry_seq(checkpoint) if checkpoint else 0, _pairs(entries))

    async def wait(self, after: int, timeout: float) -> None:
        await self._client.xread(
            {self._key: seq_entry(after)}, count=1, block=max(1, int(timeout * 1000))
        )

    async def aclose(self) -> None:
        if self._client is not self._broker.client:
            await close_quietly(self._client)


class RedisBroker:
    """The Redis driver of a broker bus (see :class:`toolstream.redis.RedisBus` for the
    options)."""

    name = "RedisBus"
    retryable: tuple[type[BaseException], ...] = RETRYABLE

    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        session_ttl: float,
        connect_timeout: float,
        cluster: bool | None,
    ) -> None:
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must be a non-empty string without braces, got {prefix!r}")
        if not session_ttl >= 1:
            raise ValueError(f"session_ttl must be at least 1 second, got {session_ttl}")
        self.url = url
        self.prefix = prefix
        self.session_ttl = session_ttl
        self.where = f"Redis at {redact_url(url)}"
        self._ttl = int(session_ttl)
        self._connect_timeout = connect_timeout
        self.cluster = cluster
        self._global = global_base(prefix)
        self._options: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": connect_timeout,
            "socket_keepalive": True,
            **CLIENT_NAME,
        }
        self._discovery: asyncio.Task[Any] | None = None  # a cluster client's first discovery
        self._sync_nodes: dict[str, redis.Redis] = {}

    # -- connecting ----------------------------------------------------------------------

    def open(self, connect_timeout: float) -> str:
        url, options = self.url, self._options
        try:
            if self.cluster is None:
                probe = redis.Redis.from_url(url, socket_timeout=connect_timeout, **options)
                try:
                    info = probe.info("cluster")
                finally:
                    probe.close()
                self.cluster = bool(info.get("cluster_enabled"))
            # The synchronous parts (construction, snapshot()) use a plain client and, on
            # a cluster, follow MOVED replies to the node that owns the slot.
            self._sync = redis.Redis.from_url(url, socket_timeout=connect_timeout, **options)
            self._sync_scripts = {
                name: self._sync.register_script(getattr(_scripts, name))
                for name in ("READ_STATE", "RESOLVE", "APPROVAL")
            }
            token = secrets.token_hex(6)
            old = self._sync_run(
                lambda client: client.set(f"{self._global}:epoch", token, nx=True, get=True)
            )
        except RETRYABLE:
            if hasattr(self, "_sync"):
                self._close_sync()
            raise
        self.client: Any = (
            aredis.cluster.RedisCluster.from_url(url, socket_timeout=30.0, **options)
            if self.cluster
            else aredis.Redis.from_url(url, socket_timeout=30.0, **options)
        )
        register = self.client.register_script
        self._scripts: dict[str, AsyncScript] = {
            name: register(getattr(_scripts, name))
            for name in ("CLAIM", "FLUSH", "READ_STATE", "CHECKPOINT", "REAP", "RESOLVE")
        }
        self._scripts["APPROVAL"] = register(_scripts.APPROVAL)
        self.after_script: AsyncScript = register(_scripts.READ_AFTER)
        return str(old) if old is not None else token

    def _sync_run(self, call: Callable[[redis.Redis], Any]) -> Any:
        """``call(client)`` on the synchronous client, following a cluster's ``MOVED``
        (and ``ASK``) replies to the node that owns the slot."""
        client = self._sync
        for _ in range(5):
            try:
                return call(client)
            except redis.exceptions.AskError as exc:  # MOVED is a kind of ASK here
                address = f"{exc.host}:{exc.port}"
                client = self._sync_nodes.get(address) or self._sync_node(address)
        raise BusUnavailable(f"{self.where} kept redirecting")

    def _sync_node(self, address: str) -> redis.Redis:
        host, _, port = address.rpartition(":")
        client = redis.Redis(
            host=host or "127.0.0.1",
            port=int(port),
            socket_timeout=self._connect_timeout,
            **self._options,
        )
        self._sync_nodes[address] = client
        return client

    def _close_sync(self) -> None:
        self._sync.close()
        for client in self._sync_nodes.values():
            client.close()
        self._sync_nodes.clear()

    def _sync_script(self, name: str, session: str, args: list[Any]) -> Any:
        base = session_base(self.prefix, session)
        script = self._sync_scripts[name]
        return self._sync_run(
            lambda client: script(keys=[f"{base}:s"], args=[base, *args], client=client)
        )

    async def start(self) -> None:
        await self._connected()

    async def _connected(self) -> None:
        """On a cluster, learn the topology once before any command that may be cancelled
        (a cancel in the middle of redis-py's first discovery would leak its nodes)."""
        if not self.cluster:
            return
        task = self._discovery
        if task is None or (task.done() and (task.cancelled() or task.exception())):
            task = self._discovery = asyncio.get_running_loop().create_task(
                self.client.initialize()
            )
        await asyncio.shield(task)

    async def aclose(self) -> None:
        if self._discovery is not None and not self._discovery.done():
            await asyncio.wait([self._discovery], timeout=self._connect_timeout)
        if self.cluster and getattr(self.client, "_initialize", False):
            # redis-py's aclose() skips a cluster client flagged for rediscovery (after a
            # cancelled or failed command) and leaks its connections: close its nodes.
            await self.client.nodes_manager.aclose()
            await self.client.nodes_manager.aclose("startup_nodes")
        else:
            await self.client.aclose()
        self._close_sync()

    def blocking_client(self) -> Any:
        """A client for one subscription's blocking reads: one connection of its own on a
        standalone Redis; on a cluster the shared client (its per-node pools give each
        blocking read a connection, and it follows failovers for everyone)."""
        if self.cluster:
            return self.client
        return aredis.Redis.from_url(self.url, single_connection_client=True, **self._options)

    async def _script(self, name: str, session: str, args: list[Any]) -> Any:
        await self._connected()
        base = session_base(self.prefix, session)
        return await self._scripts[name](keys=[f"{base}:s"], args=[base, *args])

    async def _batch(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Run commands on the shared slot: pipelined on a standalone Redis, one by one on
        a cluster (where each command finds a promoted master after a failover)."""
        await self._connected()
        if self.cluster:
            return [await self.client.execute_command(*command) for command in commands]
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute())

    # -- ids, events, state --------------------------------------------------------------

    async def epoch(self) -> str:
        token = secrets.token_hex(6)
        old = await self.client.set(f"{self._global}:epoch", token, nx=True, get=True)
        return str(old) if old is not None else token

    def next_seq(self, last: int, now: float) -> int:
        seq = int(now * 1000) * SCALE
        return seq if seq > last else last + 1

    async def append(self, session: str, token: str, records: Sequence[Record]) -> Appended:
        args: list[Any] = [token, secrets.token_hex(6), self._ttl]
        for r in records:
            entry = seq_entry(r.seq)
            if r.kind == "A":
                args += ("A", entry, r.call_id, r.blob, r.approval_id, dumps(r.meta))
            elif r.kind == "R":
                args += ("R", entry, r.call_id, r.blob, r.approval_id)
            elif r.kind == "-":
                args += ("-", entry, r.call_id, r.blob)
            else:
                args += (r.kind, entry, r.call_id, r.run_id, r.tool, r.blob)
        try:
            incarnation, codes, moved = await self._script("FLUSH", session, args)
        except RETRYABLE:
            raise
        except redis.ResponseError as exc:
            # Not a connection problem: retrying the same batch would fail the same way
            # forever. The outbox drops it, counted, and flush() says so.
            raise Refused(str(exc)) from exc
        return Appended(
            str(incarnation), [int(c) for c in str(codes)], [entry_seq(str(m)) for m in moved]
        )

    async def read_state(self, session: str, upto: int | None = None) -> StoredState:
        raw = await self._script("READ_STATE", session, ["+" if upto is None else seq_entry(upto)])
        return _stored(raw)

    def read_state_sync(self, session: str) -> StoredState:
        return _stored(cast(Sequence[Any], self._sync_script("READ_STATE", session, ["+"])))

    async def checkpoint(self, session: str, seq: int, state: str) -> None:
        trim = seq_entry(seq + 1)  # the checkpoint covers ``seq`` itself
        await self._script("CHECKPOINT", session, [seq_entry(seq), state, self._ttl, trim])

    def reader(self, session: str) -> _Reader:
        return _Reader(self, session)

    # -- leases --------------------------------------------------------------------------

    async def hold(self, token: str, sessions: Sequence[str], lease: float) -> None:
        g = self._global
        try:
            await self._batch(
                [
                    ("SET", f"{g}:w:{token}", "1", "PX", int(lease * 1000)),
                    ("SADD", f"{g}:workers", token),
                    *([("SADD", f"{g}:wsess:{token}", *sessions)] if sessions else []),
                    ("EXPIRE", f"{g}:wsess:{token}", self._ttl),
                ]
            )
        except RETRYABLE:
            raise
        except redis.ResponseError as exc:
            raise Refused(str(exc)) from exc

    async def lost(self, token: str) -> list[str]:
        g = self._global
        workers = cast("set[str]", await self.client.smembers(f"{g}:workers"))
        lost = cast("set[str]", await self.client.smembers(f"{g}:lost"))
        others = sorted((workers | lost) - {token})
        if not others:
            return []
        alive = await self._batch([("EXISTS", f"{g}:w:{w}") for w in others])
        return [w for w, held in zip(others, alive, strict=True) if not held or w in lost]

    async def claim(self, token: str, *, force: bool) -> list[str] | None:
        g = self._global
        await self._connected()
        status, sessions = await self._scripts["CLAIM"](
            keys=[f"{g}:workers"], args=[g, token, "1" if force else "0"]
        )
        return list(sessions) if status == "reap" else None

    async def reap(self, session: str, token: str, reason: str, now: float) -> int:
        return int(await self._script("REAP", session, [session, token, reason, self._ttl]))

    async def release(self, token: str) -> None:
        g = self._global
        await self._batch([("SREM", f"{g}:lost", token), ("DEL", f"{g}:wsess:{token}")])

    async def drop_lease(self, token: str) -> None:
        await self.client.delete(f"{self._global}:w:{token}")

    async def trim_due(self, now: float) -> list[tuple[str, int]]:
        return []  # history is kept by count (the bus's ``replay``)

    async def expire(self, now: float) -> int:
        return 0  # every key of a session expires on its own (``session_ttl``)

    # -- approvals -----------------------------------------------------------------------

    async def approval(self, session: str, approval_id: str) -> ApprovalState | None:
        return _approval(await self._script("APPROVAL", session, [session, approval_id]))

    def approval_sync(self, session: str, approval_id: str) -> ApprovalState | None:
        return _approval(self._sync_script("APPROVAL", session, [session, approval_id]))

    async def resolve(self, session: str, decide: Decide) -> Resolution:
        args = _resolve_args(session, decide, self._ttl)
        return _resolution(await self._script("RESOLVE", session, args))

    def resolve_sync(self, session: str, decide: Decide) -> Resolution:
        args = _resolve_args(session, decide, self._ttl)
        return _resolution(self._sync_script("RESOLVE", session, args))

    async def wait_approval(self, session: str, approval_id: str, timeout: float) -> None:
        key = f"{session_base(self.prefix, session)}:dn:{approval_id}"
        await self.client.blpop([key], timeout=max(1, int(timeout)))
