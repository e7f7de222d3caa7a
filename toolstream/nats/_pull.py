"""Pull: an ack-free pull consumer read without nats-py's ``fetch``.

``PullSubscription.fetch`` costs, per message, a task, a ``wait_for`` and a uuid (each
message is awaited with ``next_msg``), and per call a ``no_wait`` probe whose status
message ends it: reading a live stream, where a few messages are pending at any moment,
it made about two fetches per message. Here one pull request of ``batch`` messages stays
open for a long poll and the server pushes each message as it is stored; a callback
files it with its stream sequence (read off the reply subject, without building nats-py's
metadata object), and a waiter is woken once per burst, with no task of its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ._common import NatsClient

__all__ = ["Pull"]

#: JetStream's API prefix (``nc.jetstream()`` without a domain).
_API = "$JS.API"


class Pull:
    """Reads consumer ``name`` of ``stream`` through a subscription of its own: pull
    requests are published by hand (:meth:`ask`), the messages they bring are filed in
    :attr:`messages` as ``(stream sequence, data)``, and :meth:`arrived` waits for them.

    One request is kept open at a time: it is over when its ``batch`` messages came,
    when the server says so (408 expired, 409, 404), or at its ``expires``, whichever
    is first; the next :meth:`ask` then opens another."""

    def __init__(self, nc: NatsClient, stream: str, name: str) -> None:
        self._nc = nc
        self._next = f"{_API}.CONSUMER.MSG.NEXT.{stream}.{name}"
        self._inbox = nc.new_inbox()
        self._sub: Any = None
        #: Messages delivered and not yet taken: ``(stream sequence, data)``.
        self.messages: list[tuple[int, bytes]] = []
        #: How many messages the consumer had pending after the first of
        #: :attr:`messages` (what the server reported with it).
        self.pending = 0
        #: Why the consumer can no longer be read (deleted, no responders), if so.
        self.gone = ""
        self._owed = 0  # messages the open request may still bring (0: none open)
        self._until = 0.0  # when the open request expires (monotonic)
        self._waiter: asyncio.Future[None] | None = None

    @property
    def subscription(self) -> Any:
        """The inbox's subscription (to unsubscribe)."""
        return self._sub

    async def start(self) -> None:
        """Subscribe to the inbox the requests' messages are delivered to."""
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_msg)

    async def ask(self, batch: int, expires: float) -> None:
        """Open a request for up to ``batch`` messages, for ``expires`` seconds, unless
        one is open."""
        now = time.monotonic()
        if self._owed > 0 and now < self._until:
            return
        body = b'{"batch":%d,"expires":%d}' % (batch, int(expires * 1e9))
        self._owed, self._until = batch, now + expires
        await self._nc.publish(self._next, body, reply=self._inbox)

    def take(self) -> list[tuple[int, bytes]]:
        """The messages delivered so far (they are forgotten here)."""
        messages, self.messages = self.messages, []
        return messages

    async def arrived(self, timeout: float, wake: set[asyncio.Future[None]]) -> None:
        """Return once a message (or the consumer's end) is here, after ``timeout``, or
        when something completes the future this wait files in ``wake``."""
        if self.messages or self.gone:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _settle, waiter)
        wake.add(waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            wake.discard(waiter)
            self._waiter = None

    async def _on_msg(self, msg: Any) -> None:
        reply: str = msg.reply
        if reply:
            tokens = reply.split(".")
            # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>, or the
            # 11/12-token form with a domain and an account hash after "$JS.ACK".
            at = 5 if len(tokens) == 9 else 7
            if not self.messages:
                self.pending = int(tokens[at + 3])
            self.messages.append((int(tokens[at]), msg.data))
            self._owed -= 1
        else:
            headers = msg.headers or {}
            status = headers.get("Status", "")
            if status == "100":
                return  # an idle heartbeat: the request is still open
            if status == "503" or (
                status == "409" and "deleted" in headers.get("Description", "").lower()
            ):
                self.gone = f"{status} {headers.get('Description', 'no responders')}"
            self._owed = 0  # 404, 408, 409: this request is over
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
