"""NatsConnection: the NATS connections of one NatsBroker — the main one, kept up in the
bus's loop (connected again after any loss, even one nats-py gives up on), and the
short-lived ones of the synchronous parts (construction, ``snapshot()``), each on a
thread of its own — and what construction creates: the stream and the KV buckets.

Both kinds are a :class:`Link`: what the rest of the driver reads and writes through.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from toolstream._core.broker import stop_task
from toolstream._core.errors import BusUnavailable

from ._common import (
    RETRYABLE,
    JetStreamContext,
    KeyValue,
    Names,
    NatsClient,
    Pipeline,
    epoch_of,
    js_api,
    kv_handle,
    nats,
    redact,
)

logger = logging.getLogger("toolstream.nats")

__all__ = ["Link", "NatsConnection", "ThreadLink"]

T = TypeVar("T")


class Link(Protocol):
    """A connection the driver's parts talk to NATS through."""

    async def js(self, deadline: float | None = None) -> JetStreamContext:
        """The JetStream context, once connected (``BusUnavailable`` at ``deadline``, a
        ``time.monotonic()``)."""
        ...

    async def kv(self, bucket: str) -> KeyValue:
        """One of the driver's KV buckets."""
        ...


class ThreadLink:
    """A :class:`Link` on a connection of a thread of its own (the synchronous parts)."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def js(self, deadline: float | None = None) -> JetStreamContext:
        return self._js

    async def kv(self, bucket: str) -> KeyValue:
        return kv_handle(self._js, bucket)


class NatsConnection:
    """The main connection of one driver (a :class:`Link`), its epoch, and the thread
    connections of the synchronous parts."""

    def __init__(
        self,
        servers: Sequence[str],
        names: Names,
        *,
        replicas: int,
        session_ttl: float,
        lease: float,
        connect_timeout: float,
        request_timeout: float,
    ) -> None:
        self.servers = list(servers)
        self.names = names
        self.replicas = replicas
        self.session_ttl = session_ttl
        self.lease = lease
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        #: The stream's epoch as last seen (every event id carries it).
        self.epoch = ""
        #: Called with the stream's last sequence when a new epoch is found (the data
        #: was lost: the writer predicts in the new numbering).
        self.on_new_epoch: Callable[[int], None] = lambda last: None
        #: Connections (re-)established so far: a reader's consumer made on an older
        #: one is gone.
        self.generation = 0
        #: Futures completed at the next reconnection: what waits on the old connection
        #: (a reader's long poll) moves on.
        self.wakeups: set[asyncio.Future[None]] = set()
        self.nc: NatsClient | None = None
        self.pipeline: Pipeline | None = None
        self._js: JetStreamContext | None = None
        self._kv: dict[str, KeyValue] = {}
        self._up: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._epoch_stale = False

    @property
    def lease_bound(self) -> float:
        """How long a step the lease depends on may wait for NATS: a request lost across
        a server's restart is otherwise waited for ``request_timeout``, which a short
        lease does not outlast (the writer would be reaped while alive)."""
        return max(0.1, min(self.request_timeout, self.lease / 4))

    @property
    def where(self) -> str:
        """The servers, credentials hidden."""
        return ", ".join(redact(s) for s in self.servers)

    # -- connecting ------------------------------------------------------------------------

    async def _connect(self, *, main: bool, closed: asyncio.Event | None = None) -> NatsClient:
        async def quiet(exc: Exception) -> None:
            logger.debug("NATS: %s", exc)

        async def gone() -> None:
            if closed is not None:
                closed.set()

        async def reconnected() -> None:
            self._moved_on()
            logger.info("NATS connection re-established")

        return await nats.connect(
            self.servers,
            connect_timeout=self.connect_timeout,
            allow_reconnect=main,
            max_reconnect_attempts=-1 if main else 1,
            reconnect_time_wait=0.25,
            ping_interval=max(1, int(self.lease)),
            max_outstanding_pings=2,
            pending_size=0,  # never buffer while reconnecting: the caller retries
            error_cb=quiet,
            reconnected_cb=reconnected if main else None,
            closed_cb=gone if closed is not None else None,
        )

    def _moved_on(self) -> None:
        """A connection made again: the epoch is asked again, the readers' consumers are
        made again, what waits on the old connection moves on."""
        self._epoch_stale = True
        self.generation += 1
        wakeups, self.wakeups = self.wakeups, set()
        for future in wakeups:
            if not future.done():
                future.set_result(None)

    def in_thread(self, work: Callable[[ThreadLink], Awaitable[T]]) -> T:
        """Run ``work(link)`` on a connection of its own in a thread of its own (for the
        synchronous parts: construction, ``snapshot()``)."""
        result: list[Any] = []

        async def main() -> None:
            try:
                nc = await self._connect(main=False)
            except Exception as exc:
                result.append(exc)
                return
            try:
                link = ThreadLink(nc.jetstream(timeout=self.request_timeout))
                result.append(await asyncio.wait_for(work(link), self.connect_timeout))
            except BaseException as exc:
                result.append(exc)
            finally:
                await nc.close()

        thread = threading.Thread(target=lambda: asyncio.run(main()), name="toolstream-nats")
        thread.start()
        thread.join()
        out = result[0]
        if isinstance(out, BaseException):
            if isinstance(out, nats.errors.NoServersError | TimeoutError | OSError):
                raise BusUnavailable(f"cannot reach NATS at {self.where}: {out}") from out
            raise out
        return out  # type: ignore[no-any-return]

    def open(self) -> int:
        """Create what is missing (on a thread's connection); learn the epoch. Returns the
        stream's last sequence."""

        async def setup(link: ThreadLink) -> tuple[str, int]:
            js = await link.js()
            delay = 0.05
            while True:  # retried while JetStream is not ready (a cluster electing)
                try:
                    return await self._create(js)
                except RETRYABLE as exc:
                    logger.debug("JetStream not ready (%r); retrying", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.5)

        try:
            self.epoch, last = self.in_thread(setup)
        except BusUnavailable:
            raise
        except RETRYABLE as exc:
            raise BusUnavailable(f"cannot reach NATS at {self.where}: {exc}") from exc
        return last

    async def _create(self, js: JetStreamContext) -> tuple[str, int]:
        """Create the stream and buckets if missing; the epoch and the last sequence."""
        names = self.names
        try:
            info = await js.stream_info(names.stream)
        except nats.js.errors.NotFoundError:
            try:
                info = await js.add_stream(
                    name=names.stream,
                    subjects=[names.subjects],
                    storage=js_api.StorageType.FILE,
                    num_replicas=self.replicas,
                    allow_direct=True,
                    duplicate_window=120.0,
                )
                logger.info("created JetStream stream %s", names.stream)
            except nats.js.errors.BadRequestError as exc:
                raise BusUnavailable(
                    f"cannot create stream {names.stream!r} for subjects {names.subjects!r} "
                    f"(another stream has them?): {exc.description}"
                ) from exc
        for bucket in (names.checkpoints, names.approvals, names.writers):
            await self._bucket(js, bucket)
        return epoch_of(info), info.state.last_seq

    async def _bucket(self, js: JetStreamContext, bucket: str) -> KeyValue:
        try:
            return await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            ttl = self.session_ttl if bucket == self.names.approvals else None
            return await js.create_key_value(
                bucket=bucket,
                history=1,
                replicas=self.replicas,
                ttl=ttl,
                storage=js_api.StorageType.FILE,
            )

    # -- the main connection ---------------------------------------------------------------

    def start_here(self) -> None:
        """Keep the main connection up from the running loop (unless it is kept already)."""
        loop = asyncio.get_running_loop()
        task = self._task
        if self._loop is loop and task is not None and not task.done():
            return
        running = self._loop is not None and self._loop.is_running()
        if self._loop is not loop and running and task is not None and not task.done():
            return  # the connection lives in the loop that started first
        self._loop = loop
        self._up = asyncio.Event()
        self.wakeups = set()
        self.nc = None
        self._js = None
        self._kv.clear()
        self._task = loop.create_task(self._keep(), name="toolstream-nats")

    async def start(self) -> None:
        """Connect in the running loop: return once the main connection is up."""
        self.start_here()
        up = self._up
        assert up is not None
        await up.wait()

    async def _keep(self) -> None:
        """Connect (retrying), and connect again whenever the connection is closed for
        good: nats-py reconnects after a network failure, but closes the connection when
        the server answers ``-ERR`` (a control line over its limit, a permission...), and
        a bus must never stay dead — its outbox waits and is written once the new
        connection is up."""
        up = self._up
        assert up is not None
        nc: NatsClient | None = None
        first = True
        try:
            while True:
                closed = asyncio.Event()
                delay = 0.1
                while True:
                    try:
                        nc = await self._connect(main=True, closed=closed)
                        warn_unserialized_cas(nc)
                        break
                    except Exception as exc:
                        logger.warning("cannot reach NATS at %s (%s); retrying", self.where, exc)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 2.0)
                self.nc = nc
                self._js = nc.jetstream(timeout=self.request_timeout)
                self.pipeline = Pipeline(nc)
                self._kv.clear()
                self._epoch_stale = True
                if not first:
                    self._moved_on()
                    logger.warning("NATS connection made again after it was closed")
                first = False
                up.set()
                await closed.wait()
                up.clear()
                self.pipeline.fail(nats.errors.ConnectionClosedError())
                logger.warning(
                    "NATS connection closed (%s); connecting again", nc.last_error or "no reason"
                )
        finally:
            # The connection belongs to this task: a driver started again (another loop,
            # or after it was closed) makes a new one.
            if nc is not None:
                await asyncio.shield(nc.close())

    async def ready(self, deadline: float | None = None) -> JetStreamContext:
        """The main connection's JetStream context, once connected (``BusUnavailable`` at
        ``deadline``, a ``time.monotonic()``); the epoch asked again after a reconnection."""
        self.start_here()
        up = self._up
        assert up is not None
        if not up.is_set():
            if deadline is None:
                await up.wait()
            else:
                try:
                    await asyncio.wait_for(up.wait(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    raise BusUnavailable(f"cannot reach NATS at {self.where}") from None
        js = self._js
        assert js is not None
        if self._epoch_stale:
            await self._refresh_epoch(js)
        return js

    async def js(self, deadline: float | None = None) -> JetStreamContext:
        return await self.ready(deadline)

    @property
    def current_js(self) -> JetStreamContext | None:
        """The main connection's JetStream context now, if any (for cleanups that must
        not wait for a connection)."""
        return self._js

    async def kv(self, bucket: str) -> KeyValue:
        """One of the driver's KV buckets on the main connection. Construction made sure
        they exist: no stream-info request here (it needs the cluster's meta leader,
        which a cluster that lost a server may be electing for many seconds)."""
        kv = self._kv.get(bucket)
        if kv is None:
            js = await self.ready()
            kv = self._kv[bucket] = kv_handle(js, bucket)
        return kv

    async def _refresh_epoch(self, js: JetStreamContext) -> None:
        """Ask the stream's epoch again (a server that lost its store, or a stream
        created anew, has another); recreate what is missing."""
        try:
            info = await js.stream_info(self.names.stream)
        except nats.js.errors.NotFoundError:
            epoch, last = await self._create(js)
            self._kv.clear()
        else:
            epoch, last = epoch_of(info), info.state.last_seq
        self._epoch_stale = False
        if epoch != self.epoch:
            self.epoch = epoch  # (the bus says so in its log)
            self.on_new_epoch(last)

    async def aclose(self) -> None:
        """Close the main connection (from the loop it lives in)."""
        task = self._task
        if task is None:
            return
        if self._loop is asyncio.get_running_loop():
            await stop_task(task)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(task.cancel)
        self._task = None


#: nats-server releases before this one check a write's expected last sequence before
#: proposing it to a cluster, not as part of the proposal: writes racing on one key of a
#: replicated bucket may all succeed (nats-io/nats-server#4320, fixed in 2.9.21).
CAS_SERIALIZED_SINCE = (2, 9, 21)
_warned_cas = False


def warn_unserialized_cas(nc: NatsClient) -> None:
    """Warn once when ``nc`` talks to a cluster whose server does not serialize
    compare-and-swap (two processes deciding one approval at once could both win)."""
    global _warned_cas
    info = getattr(nc, "_server_info", None) or {}
    if _warned_cas or not info.get("cluster"):
        return
    try:
        version = tuple(int(part) for part in str(info.get("version", "")).split(".")[:3])
    except ValueError:
        return
    if version < CAS_SERIALIZED_SINCE:
        _warned_cas = True
        logger.warning(
            "nats-server %s in a cluster does not serialize compare-and-swap "
            "(nats-io/nats-server#4320): two processes deciding one approval at the same "
            "instant may both win. Upgrade to %s or later.",
            info.get("version"),
            ".".join(map(str, CAS_SERIALIZED_SINCE)),
        )
