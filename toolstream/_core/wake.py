"""Waking a subscriber inside its own event loop, from whatever thread publishes."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable
from typing import Any, Protocol

__all__ = ["Waiter", "checkpoint", "current_backend", "make_waiter"]

_get_ident = threading.get_ident


class Waiter(Protocol):
    """One registration of a consumer waiting for events.

    A waiter is all a waiting consumer keeps alive besides what its event loop needs
    (no callback, no coroutine of its own): with thousands of sessions, every object a
    wait holds is one more for the garbage collector to trace while it waits.
    """

    #: Whose consumer this is (a subscription), to find its registration again.
    owner: object

    def wake(self, thread_id: int) -> None:
        """Wake the consumer (called from any thread, at most once per registration).
        Never raises: a consumer that is gone cannot break its publisher."""

    def waiting(self) -> Awaitable[None]:
        """What to await until woken. If that await is cancelled, a later ``wake`` does
        nothing; the owner unregisters the waiter."""


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
    __slots__ = ("fut", "loop", "owner", "thread")

    def __init__(self, owner: object) -> None:
        self.owner = owner
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

    def waiting(self) -> Awaitable[None]:
        return self.fut  # cancelling the await cancels the future: a wake is then a no-op


class _TrioWaiter:
    __slots__ = ("active", "owner", "task", "thread", "token")

    def __init__(self, owner: object) -> None:
        import trio

        self.owner = owner
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

    def _abort(self, _: Any) -> Any:
        import trio

        self.active = False
        return trio.lowlevel.Abort.SUCCEEDED

    def waiting(self) -> Awaitable[None]:
        import trio

        # Awaited by the caller (the waiter holds no coroutine of its own).
        return trio.lowlevel.wait_task_rescheduled(self._abort)  # noqa: ASYNC105


def make_waiter(backend: str, owner: object) -> Waiter:
    """A fresh registration for the consumer running in this task, on behalf of
    ``owner``."""
    if backend == "asyncio":
        return _AsyncioWaiter(owner)
    return _TrioWaiter(owner)


async def checkpoint(backend: str) -> None:
    """Let other tasks run and deliver a pending cancellation."""
    if backend == "asyncio":
        await asyncio.sleep(0)
    else:
        import trio

        await trio.lowlevel.checkpoint()
