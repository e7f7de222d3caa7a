"""What the in-process benchmarks share: draining consumers and a countdown."""

from __future__ import annotations

from typing import Any

import anyio

import toolstream as ts


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
