"""Waking a subscriber inside its own event loop, from whatever thread publishes.

A registration is all a waiting consumer keeps alive besides what its event loop needs:
on asyncio the future it awaits *is* the registration (no object around it, no
callback, no coroutine of its own); on trio a small record of its task. With thousands
of sessions every object a wait holds is one more for the garbage collector to trace
while it waits, and that tracing, not the wake-ups, is what grew with the sessions.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Awaitable, Iterable
from typing import Any, TypeAlias

__all__ = ["Waiter", "checkpoint", "current_backend", "make_waiter", "wake_all", "waiting"]

_get_ident = threading.get_ident
_running_loop = asyncio._get_running_loop  # the C accessor asyncio's own code uses


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


#: One registration of a consumer waiting for events: an asyncio future, or a trio
#: task's record. Woken by :func:`wake_all`, awaited through :func:`waiting`.
Waiter: TypeAlias = "asyncio.Future[None] | _TrioWaiter"


def make_waiter(backend: str) -> Waiter:
    """A fresh registration for the consumer running in this task."""
    if backend == "asyncio":
        return _running_loop().create_future()  # type: ignore[union-attr]
    return _TrioWaiter()


def waiting(waiter: Waiter) -> Awaitable[None]:
    """What the consumer awaits until woken. If that await is cancelled, a later wake
    does nothing (the cancelled future is done; the trio record inactive); the consumer
    then unregisters the waiter."""
    if type(waiter) is _TrioWaiter:
        import trio

        # Awaited by the caller (the record holds no coroutine of its own).
        return trio.lowlevel.wait_task_rescheduled(waiter._abort)  # noqa: ASYNC105
    return waiter  # type: ignore[return-value]


def wake_all(wakes: Iterable[Waiter]) -> None:
    """Wake each consumer of ``wakes``, from any thread (call it outside the lock that
    collected them). Never raises: a consumer whose loop is gone (closed after its last
    read) must not break its publisher, which may be on the same thread."""
    running = _running_loop()
    tid = 0
    for waiter in wakes:
        if type(waiter) is _TrioWaiter:
            if not tid:
                tid = _get_ident()
            waiter.wake(tid)
            continue
        fut: Any = waiter
        try:
            loop = fut.get_loop()
            if loop is running:  # the consumer's own loop, in this thread
                if not fut.done():  # _resolve inline: once per wake-up
                    fut.set_result(None)
            else:
                loop.call_soon_threadsafe(_resolve, fut)
        except RuntimeError:  # the consumer's loop is closed: nobody to wake
            pass


async def checkpoint(backend: str) -> None:
    """Let other tasks run and deliver a pending cancellation."""
    if backend == "asyncio":
        await asyncio.sleep(0)
    else:
        import trio

        await trio.lowlevel.checkpoint()
