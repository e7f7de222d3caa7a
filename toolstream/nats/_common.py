"""What the parts of the NATS driver share: the client library, the retryable errors,
how a session becomes one subject token, the publish pipeline, the names of one
prefix's stream and buckets, and ephemeral consumers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
from typing import Any, NamedTuple

import attrs

from toolstream._core.errors import BusUnavailable
from toolstream._core.jsonenc import loads
from toolstream._extras import require

require("nats", "nats", "toolstream.nats")

import nats  # noqa: E402 - after the check that names the extra
import nats.errors  # noqa: E402
import nats.js.errors  # noqa: E402
from nats.aio.client import Client as NatsClient  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402
from nats.js import JetStreamContext  # noqa: E402
from nats.js import api as js_api  # noqa: E402
from nats.js.kv import KeyValue  # noqa: E402

logger = logging.getLogger("toolstream.nats")

__all__ = [
    "Ack",
    "Pipeline",
    "NATS_ERRORS",
    "RETRYABLE",
    "JetStreamContext",
    "KeyValue",
    "Msg",
    "NatsClient",
    "js_api",
    "add_consumer",
    "drop_consumer",
    "ephemeral_consumer",
    "kv_handle",
    "nats",
    "redact",
    "session_token",
    "token_session",
]

#: Errors that mean "NATS is away (or electing a leader) now": retried, never fatal.
RETRYABLE: tuple[type[BaseException], ...] = (
    nats.errors.ConnectionClosedError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    TimeoutError,
    OSError,
)

#: Anything the client library raises (a retryable error, or one from the server).
NATS_ERRORS: tuple[type[BaseException], ...] = (*RETRYABLE, nats.errors.Error)

#: JetStream's error codes for a failed ``Nats-Expected-Last-Sequence`` and a failed
#: ``Nats-Expected-Last-Msg-Id``: another writer came first (or our predecessor did not
#: land): ask the stream where it stands and go on.
WRONG_LAST_SEQUENCE = 10071
WRONG_LAST_MSG_ID = 10070
EXPECTATION_FAILED = (WRONG_LAST_SEQUENCE, WRONG_LAST_MSG_ID)

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: The longest token written out; a longer one is hashed. Every identifier toolstream
#: accepts (``MAX_ID_BYTES``, 1,024 bytes: at most 1,367 characters encoded) fits, so
#: only a name that bypassed that bound (a client's approval id to look up) is hashed,
#: and no name can make a subject or key that overruns NATS's control line (the server
#: closes the connection then).
_MAX_TOKEN = 1400


def session_token(session: str) -> str:
    """``session`` as one subject token and KV key: itself when made of letters,
    digits, ``_`` and ``-`` (up to 128), else ``=`` and its UTF-8 in unpadded base64url,
    or, past 1,400 characters, ``==`` and the base64url of its SHA-256. Different names
    never share a token, and no token holds ``.``, ``*`` or ``>``."""
    if _SAFE.fullmatch(session):
        return session
    data = session.encode("utf-8", "surrogatepass")
    raw = base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")
    if len(raw) < _MAX_TOKEN:
        return "=" + raw
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode("ascii")
    return "==" + digest.rstrip("=")


def token_session(token: str) -> str:
    """The session a :func:`session_token` names (a hashed one: the token itself)."""
    if not token.startswith("=") or token.startswith("=="):
        return token
    body = token[1:]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8", "surrogatepass")


def redact(url: str) -> str:
    """``url`` with its password or token hidden, for messages."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        return f"{scheme}://***@{rest.rpartition('@')[2]}"
    return url


def api_code(exc: BaseException) -> int | None:
    """The JetStream error code of an API error (None for anything else)."""
    code: Any = getattr(exc, "err_code", None)
    return int(code) if isinstance(code, int) else None


class Ack(NamedTuple):
    """A message's acknowledgement: where it was stored, and whether the server had it
    already (its ``Nats-Msg-Id`` within the deduplication window)."""

    seq: int
    duplicate: bool


class Pipeline:
    """Publishes to JetStream without waiting for each acknowledgement: ``send`` puts
    the message on the connection in call order and returns a future of its ack (or of
    the server's error). nats-py's own ``publish_async`` loses a server error (its
    reply handler raises instead of failing the future), which would hang a flusher."""

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._prefix: str | None = None
        self._futures: dict[str, asyncio.Future[Ack]] = {}
        self._bound = 1024  # prune futures nobody will answer past this many
        self._n = 0

    async def send(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> asyncio.Future[Ack]:
        """Publish one message; the future of its acknowledgement."""
        if self._prefix is None:
            prefix = self._nc.new_inbox()
            await self._nc.subscribe(prefix + ".*", cb=self._on_reply)
            self._prefix = prefix
        self._n += 1
        token = str(self._n)
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        futures = self._futures
        futures[token] = future
        if len(futures) > self._bound:
            # An answered future leaves at once; a cancelled one (its batch failed) stays
            # until here: bounded without a done-callback per message.
            for key in [key for key, f in futures.items() if f.done()]:
                del futures[key]
            self._bound = max(1024, 2 * len(futures))
        await self._nc.publish(subject, payload, reply=f"{self._prefix}.{token}", headers=headers)
        return future

    def fail(self, exc: BaseException) -> None:
        """Fail every acknowledgement still awaited (the connection is gone: they never
        come), so a flusher retries at once instead of at its timeout."""
        for future in list(self._futures.values()):
            if not future.done():
                future.set_exception(exc)

    async def _on_reply(self, msg: Msg) -> None:
        future = self._futures.pop(msg.subject.rpartition(".")[2], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_exception(nats.js.errors.NoStreamResponseError())
            return
        try:
            resp = loads(msg.data)
        except ValueError as exc:
            future.set_exception(nats.js.errors.Error(f"unreadable acknowledgement: {exc}"))
            return
        err = resp.get("error")
        if err is None:
            future.set_result(Ack(int(resp.get("seq", 0)), bool(resp.get("duplicate"))))
            return
        code = err.get("code")
        kind: type[nats.js.errors.APIError] = nats.js.errors.APIError
        if code == 503:
            kind = nats.js.errors.ServiceUnavailableError
        elif isinstance(code, int) and code >= 500:
            kind = nats.js.errors.ServerError
        elif code == 400:
            kind = nats.js.errors.BadRequestError
        future.set_exception(
            kind(code=code, err_code=err.get("err_code"), description=err.get("description"))
        )


@attrs.frozen
class Names:
    """The stream, subjects and buckets of one ``prefix``."""

    prefix: str

    @property
    def stream(self) -> str:
        return self.prefix

    def subject(self, session: str) -> str:
        return f"{self.prefix}.{session_token(session)}"

    @property
    def subjects(self) -> str:
        return f"{self.prefix}.*"

    @property
    def checkpoints(self) -> str:
        return f"{self.prefix}_ck"

    @property
    def approvals(self) -> str:
        return f"{self.prefix}_ap"

    @property
    def writers(self) -> str:
        return f"{self.prefix}_w"


def epoch_of(info: Any) -> str:
    """The epoch of a stream: its creation time in microseconds, base 36 (a stream
    deleted and created again, or a server that lost its store, has another)."""
    created = info.created
    if created is None:  # pragma: no cover - every 2.9+ server sends it
        raise BusUnavailable("the NATS server did not say when the stream was created")
    n = int(created.timestamp() * 1_000_000)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return "n" + (out or "0")


def kv_handle(js: JetStreamContext, bucket: str) -> KeyValue:
    """A handle on an existing KV bucket, made without the stream-info request of
    ``js.key_value()`` (it needs the cluster's meta leader, which a cluster that lost a
    server may be electing for many seconds)."""
    return KeyValue(name=bucket, stream=f"KV_{bucket}", pre=f"$KV.{bucket}.", js=js, direct=False)


async def add_consumer(
    js: JetStreamContext, stream: str, subject: str, start: int, *, inactive: float, timeout: float
) -> str:
    """Create an ack-free pull consumer of ``subject`` from sequence ``start`` (memory
    storage, the stream's replicas so that it survives a lost server, gone after
    ``inactive`` idle seconds); its name."""
    config = js_api.ConsumerConfig(
        filter_subject=subject,
        deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start,
        ack_policy=js_api.AckPolicy.NONE,
        inactive_threshold=inactive,
        mem_storage=True,
        num_replicas=0,  # the stream's
    )
    info = await js.add_consumer(stream, config, timeout=timeout)
    return str(info.name)


async def ephemeral_consumer(
    js: JetStreamContext, stream: str, subject: str, start: int, *, inactive: float, timeout: float
) -> tuple[str, Any]:
    """The consumer :func:`add_consumer` makes, and nats-py's pull subscription bound
    to it: ``(name, subscription)``."""
    name = await add_consumer(js, stream, subject, start, inactive=inactive, timeout=timeout)
    try:
        sub = await js.pull_subscribe_bind(name, stream=stream)
    except BaseException:
        await drop_consumer(js, stream, None, name)
        raise
    return name, sub


async def drop_consumer(js: JetStreamContext | None, stream: str, sub: Any, name: str) -> None:
    """Unsubscribe ``sub`` and delete the consumer ``name``, a second at most each;
    errors are ignored (an ephemeral consumer goes on its own once inactive)."""
    if sub is not None:
        try:
            await asyncio.wait_for(sub.unsubscribe(), 1.0)
        except (*NATS_ERRORS, TimeoutError):  # type: ignore[misc]
            pass
    if js is not None:
        try:
            await asyncio.wait_for(js.delete_consumer(stream, name), 1.0)
        except (*NATS_ERRORS, TimeoutError):  # type: ignore[misc]
            pass
