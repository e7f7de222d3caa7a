"""The writer of one chat response: it reads the run's batches, encodes them, and ends
the response at the run's end or where the run waits for a person."""

from __future__ import annotations

import logging
import time
from contextlib import aclosing
from typing import Any

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    BusClosed,
    BusUnavailable,
    DialectError,
    Event,
    SlowConsumer,
    StreamReset,
    Subscription,
)
from toolstream import _serving as serving
from toolstream.dialects import Encoder, WireMessage
from toolstream.dialects._framing import RunFramedDialect
from toolstream.dialects._pump import beats
from toolstream.dialects.ai_sdk import AISDK
from toolstream.sse._app import encode_frame

logger = logging.getLogger("toolstream.chat")

__all__ = ["Pump", "frames"]

_PING = b": ping\n\n"
_DECISIONS = (ApprovalRequested, ApprovalResolved)
_TRACKED = (ApprovalRequested, ApprovalResolved, StreamReset)  # what _track looks at


class Pump:
    """One response's writer: reads the run's batches, encodes them, and ends the
    response at the end of the run or right after the last approval request of the
    batch that made the run wait for a person (what follows it comes in the response
    that continues, which starts there)."""

    def __init__(
        self,
        sub: Subscription[Any],
        encoder: Encoder,
        started: bool,
        prime: set[str] | None,
        decided: frozenset[str],
        heartbeat: float,
        start_timeout: float,
    ) -> None:
        self.sub = sub
        self.heartbeat = heartbeat
        self.start_timeout = start_timeout
        self.encoder = encoder
        self.started = started
        self.prime = None if prime is None else set(prime)
        self.decided = decided
        self.waiting: set[str] = set()
        # The AI SDK client answers only its message's own approvals: one asked inside
        # a sub-agent (decided through a decision endpoint) does not end the response.
        self.own_only = isinstance(encoder.dialect, AISDK)

    def _asks(self, event: ApprovalRequested) -> bool:
        """Whether ``event`` asks the client (the response ends there)."""
        if event.approval_id in self.decided:
            return False
        return not self.own_only or event.run_id == self.sub.run

    def _track(self, event: Event) -> None:
        """Keep the set of approvals waiting for a decision up to date."""
        if isinstance(event, ApprovalRequested):
            if self._asks(event):
                self.waiting.add(event.approval_id)
        elif isinstance(event, ApprovalResolved):
            self.waiting.discard(event.approval_id)
        elif isinstance(event, StreamReset):
            run = self.sub.run
            self.waiting = {
                c.approval.approval_id
                for c in event.snapshot.calls
                if c.approval
                and c.approval.approval_id not in self.decided
                and not (self.own_only and c.run_id != run)
            }

    def _primed(self, event: Event) -> bool:
        """Bring the dialect up to date with an event the client has (True), or say
        that sending starts here (False)."""
        prime = self.prime
        if prime is None:
            return False
        self.encoder.encode(event)  # the client has it: nothing is sent
        self._track(event)
        if isinstance(event, ApprovalRequested):
            prime.discard(event.approval_id)
        if not prime or isinstance(event, StreamReset):
            # The client's response paused here: what follows continues it.
            self.prime = None
            dialect = self.encoder.dialect
            assert isinstance(dialect, RunFramedDialect)
            dialect.pause()
        return True

    async def run(self, send: serving.Send) -> None:
        """Write the response through ``send`` (timed by the write deadline)."""
        encoder = self.encoder
        dialect = encoder.dialect
        assert isinstance(dialect, RunFramedDialect)
        deadline = None if self.started else time.monotonic() + self.start_timeout

        def wait() -> float:
            if deadline is None:
                return self.heartbeat
            return min(self.heartbeat, max(0.0, deadline - time.monotonic()))

        # One timer per response, not a cancel scope per wait (see beats()).
        paced = beats(self.sub, self.sub.batches(), wait)
        try:
            async with aclosing(paced):
                async for batch in paced:
                    if batch is None:
                        if deadline is not None and time.monotonic() >= deadline:
                            text = "the agent did not start its run in time"
                            await _write(send, frames(encoder, dialect.fail(text, "NoStart")))
                            return
                        if self.prime is None:
                            await _write(send, [_PING])
                        continue
                    out: list[bytes] = []
                    ends = -1  # where a wait for a person ends the response
                    if self.prime is None:
                        sent = batch
                    else:
                        sent = [event for event in batch if not self._primed(event)]
                    # Approvals are rare: the batch is looked at for them once.
                    decisions = [e for e in sent if isinstance(e, _DECISIONS)]
                    if decisions:
                        settled = {
                            e.approval_id for e in decisions if isinstance(e, ApprovalResolved)
                        }
                        for k, event in enumerate(sent):
                            if (
                                isinstance(event, ApprovalRequested)
                                and self._asks(event)
                                and event.approval_id not in settled
                            ):
                                ends = k
                    for k, event in enumerate(sent):
                        if ends >= 0 and k > ends:
                            break  # after the wait: the continuation sends it
                        out.extend(map(encode_frame, encoder.encode(event)))
                        if isinstance(event, _TRACKED):
                            self._track(event)
                    if out:
                        deadline = None
                    if self.waiting and self.prime is None:
                        out += frames(encoder, dialect.pause())
                        await _write(send, out)
                        return
                    if out:
                        await _write(send, out)
        except SlowConsumer as exc:
            logger.info("cutting a slow chat client: %s", exc)
            return
        except (BusUnavailable, BusClosed) as exc:
            text = f"the event bus is unavailable: {exc}"
            await _write(send, frames(encoder, dialect.fail(text, "Unavailable")))
            return
        except DialectError:
            logger.exception("a dialect could not encode an event; ending the response")
            return
        await _write(send, frames(encoder, dialect.close()))


def frames(encoder: Encoder, messages: list[WireMessage]) -> list[bytes]:
    """Messages that end the response, as SSE bytes."""
    return [encode_frame(f) for f in encoder.trailing(messages)]


async def _write(send: serving.Send, chunks: list[bytes]) -> None:
    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
