"""Waking a subscriber inside its own event loop, from whatever thread publishes."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Waiter", "checkpoint", "current_backend", "make_waiter"]

_get_ident = threading.get_ident


class Waiter(Protocol):
    """One registration of a consumer waiting for events."""

    def wake(self, thread_id: int) -> None:
        """Wake the consumer (called from any thread, at most once per registration).
        Never raises: a consumer that is gone cannot break its publisher."""

    async def wait(self, on_abort: Callable[[], None]) -> None:
        """Wait until woken; ``on_abort`` runs if the wait is cancelled instead."""


def current_backend() -> str:
    """``"asyncio"`` or ``"trio"``: the event loop running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return "asyncio"
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:
            pass
        else:
            return "trio"
    raise RuntimeError("toolstream subscriptions must be consumed inside asyncio or trio")


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class _AsyncioWaiter:
    __slots__ = ("fut", "loop", "thread")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.fut: asyncio.Future[None] = self.loop.create_future()
        self.thread = _get_ident()

    def wake(self, thread_id: int) -> None:
        # Never raises: a consumer whose loop is gone (closed after its last read) must
        # not break the publisher, which may be on the same thread.
        try:
            if thread_id == self.thread:
                _resolve(self.fut)
            else:
                self.loop.call_soon_threadsafe(_resolve, self.fut)
        except RuntimeError:  # the consumer's loop is closed: nobody to wake
            pass

    async def wait(self, on_abort: Callable[[], None]) -> None:
        try:
            await self.fut
        except BaseException:
            on_abort()
            raise


class _TrioWaiter:
    __slots__ = ("active", "task", "thread", "token")

    def __init__(self) -> None:
        import trio

        self.task = trio.lowlevel.current_task()
        self.token = trio.lowlevel.current_trio_token()
        self.thread = _get_ident()
        self.active = True

    def _wake_here(self) -> None:
        if self.active:
            self.active = False
            import trio

            trio.lowlevel.reschedule(self.task)

    def wake(self, thread_id: int) -> None:
        # Never raises (see _AsyncioWaiter.wake).
        try:
            if thread_id == self.thread:
                self._wake_here()
            else:
                self.token.run_sync_soon(self._wake_here)
        except RuntimeError:  # trio.RunFinishedError, or no run in this thread any more
            pass

    async def wait(self, on_abort: Callable[[], None]) -> None:
        import trio

        def abort(_: Any) -> trio.lowlevel.Abort:
            self.active = False
            on_abort()
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


def make_waiter(backend: str) -> Waiter:
    """A fresh registration for the consumer running in this task."""
    if backend == "asyncio":
        return _AsyncioWaiter()
    return _TrioWaiter()


async def checkpoint(backend: str) -> None:
    """Let other tasks run and deliver a pending cancellation."""
    if backend == "asyncio":
        await asyncio.sleep(0)
    else:
        import trio

        await trio.lowlevel.checkpoint()
