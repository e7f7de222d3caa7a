"""What the in-process benchmarks share: the tracked producer, draining consumers, a
countdown and the interleaved A-B runner."""

from __future__ import annotations

import gc
import statistics
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.lowlevel import checkpoint

import toolstream as ts

BURST = 64  # events a producer publishes between two checkpoints (both sides alike)


def running_call(**bus_options: Any) -> tuple[ts.EventBus, ts.CallHandle]:
    """A bus (a replay window of four bursts unless told otherwise) and a running call
    of session ``"s"`` whose progress the benchmarks publish."""
    bus = ts.EventBus(**{"replay": BURST * 4, **bus_options})
    call = ts.Tracker(bus, "s").create("t")
    call.start()
    return bus, call


async def publish_progress(call: ts.CallHandle, events: int) -> None:
    """``events`` tracked progress events, yielding to the loop after each burst."""
    for i in range(events):
        call.progress(0.5, message="step")
        if i % BURST == BURST - 1:
            await checkpoint()


class Countdown:
    """Set ``done`` once ``n`` consumers called ``one()``."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.done = anyio.Event()

    def one(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


async def drain_batches(sub: ts.Subscription[Any], events: int) -> int:
    """Take ``sub.batches()`` until ``events`` arrived; returns how many did."""
    n = 0
    async for batch in sub.batches():
        n += len(batch)
        if n >= events:
            break
    return n


async def drain_raw(receive: Any, events: int) -> int:
    """The raw peer's best: ``receive()``, then ``receive_nowait()`` until empty, until
    ``events`` arrived; returns how many did."""
    n = 0
    while n < events:
        await receive.receive()
        n += 1
        while True:
            try:
                receive.receive_nowait()
            except anyio.WouldBlock:
                break
            n += 1
    return n


def interleaved(
    a: Callable[[], Awaitable[float] | float],
    b: Callable[[], Awaitable[float] | float],
    rounds: int,
    backend: str,
) -> tuple[float, float]:
    """Median results of ``a`` and ``b`` (a number, or an awaitable of one, run on
    ``backend``), measured A B A B so a noisy neighbour hurts both alike."""
    ta: list[float] = []
    tb: list[float] = []

    def run(fn: Callable[[], Awaitable[float] | float]) -> float:
        gc.collect()
        result = fn()
        if isinstance(result, float):
            return result

        async def wrap() -> float:
            return await result

        return anyio.run(wrap, backend=backend)

    for _ in range(rounds):
        ta.append(run(a))
        tb.append(run(b))
    return statistics.median(ta), statistics.median(tb)
