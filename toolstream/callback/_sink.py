"""Functions as subscribers: a subscription consumed in a task of its own, per sink."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

import toolstream as ts

logger = logging.getLogger("toolstream.callback")

__all__ = ["Callback", "CallbackSink", "Sink"]

Callback = Callable[[ts.Event], "Awaitable[object] | object"]


class Sink:
    """A subscription consumed in a task of its own, calling user code per event."""

    def __init__(
        self, bus: ts.Bus, *, session: str | None, types: Iterable[type[ts.Event]]
    ) -> None:
        self.bus = bus
        self.session = session
        self.types = tuple(types)
        #: Exceptions raised by callbacks (each logged, none propagated).
        self.errors = 0
        #: Events handled.
        self.delivered = 0
        self._tg: anyio.abc.TaskGroup | None = None

    async def _handle(self, event: ts.Event) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _invoke(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[None] | None:
        """Call ``fn``, isolating its failure: None when it is done, or what to await
        if it returned an awaitable (its failure isolated too)."""
        try:
            result = fn(*args, **kwargs)
        except Exception:
            self._failed(fn)
            return None
        if result is None or not inspect.isawaitable(result):
            return None
        return self._awaited(result, fn)

    async def _awaited(self, pending: Awaitable[object], fn: Callable[..., Any]) -> None:
        try:
            await pending
        except Exception:
            self._failed(fn)

    def _failed(self, fn: Callable[..., Any]) -> None:
        self.errors += 1
        logger.exception("callback %r failed (isolated; the stream goes on)", fn)

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        pending = self._invoke(fn, *args, **kwargs)
        if pending is not None:
            await pending

    def _dispatch(self, event: ts.Event) -> Awaitable[None] | None:
        """Handle ``event``: None when done at once, else what to await."""
        return self._handle(event)

    async def _deliver(self, batch: list[ts.Event]) -> None:
        """Handle a batch, event by event, in order."""
        for event in batch:
            pending = self._dispatch(event)
            if pending is not None:
                await pending
            self.delivered += 1

    async def _consume(self, sub: ts.Subscription[Any]) -> None:
        while True:
            try:
                async with sub:
                    # A whole batch per wake-up; a sync callback is called inline, with
                    # no coroutine per event. ``last_id`` moves a batch at a time, after
                    # the previous batch was handled, so a resume repeats nothing.
                    async for batch in sub.batches():
                        await self._deliver(batch)
                return
            except ts.SlowConsumer as exc:
                # This sink's callbacks are slower than the events: resume where it was.
                after = exc.last_id or sub.last_id or sub.start_after
                logger.warning("callback sink fell behind; resuming after %s", after)
                sub = self.bus.subscribe(*self.types, session=self.session, after=after)

    async def __aenter__(self) -> Sink:
        # Subscribed before the block runs: nothing published inside it is missed.
        sub = self.bus.subscribe(*self.types, session=self.session)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._consume, sub)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        return await self._tg.__aexit__(exc_type, exc, tb)


class CallbackSink(Sink):
    """Calls ``callback(event)`` (sync or async) for every event, in order, while the
    ``async with`` block runs.

    Each sink is isolated: an exception in its callback is logged and counted
    (``sink.errors``), never propagated, and never stops this or any other sink; a slow
    callback slows only its own sink (which resumes where it was if it falls behind).
    """

    def __init__(
        self,
        bus: ts.Bus,
        callback: Callback,
        *,
        session: str | None = None,
        types: Iterable[type[ts.Event]] = (),
    ) -> None:
        super().__init__(bus, session=session, types=types)
        self.callback = callback

    def _dispatch(self, event: ts.Event) -> Awaitable[None] | None:
        return self._invoke(self.callback, event)

    async def _deliver(self, batch: list[ts.Event]) -> None:
        # The hot path: the callback called inline, its failure isolated, its result
        # awaited only if it is awaitable (what ``_invoke`` does, without a call per event).
        callback = self.callback
        done = 0
        try:
            for event in batch:
                try:
                    result = callback(event)
                except Exception:
                    self._failed(callback)
                else:
                    if result is not None and inspect.isawaitable(result):
                        await self._awaited(result, callback)
                done += 1
        finally:
            self.delivered += done

    async def __aenter__(self) -> CallbackSink:
        await super().__aenter__()
        return self
