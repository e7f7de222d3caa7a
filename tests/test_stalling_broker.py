"""StallingBroker: any driver, every operation done through it, with MemoryBroker's
``stall`` and ``after`` hooks (here over a MemoryBroker; tests/test_redis_bus.py runs the
broker checks over a RedisBroker wrapped in one)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import toolstream as ts
from toolstream._core.driver import Decide, Record
from toolstream.broker import Broker, BrokerBus, BrokerReader
from toolstream.testing import BrokerDown, MemoryBroker, StallingBroker

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def anyio_backend() -> str:
    # BrokerBus runs on asyncio only.
    return "asyncio"


def rec(seq: int) -> Record:
    event = ts.ToolProgress(id=f"e-{seq}", session="s", ts=1.0, call_id="c", tool="t")
    return Record(kind="-", seq=seq, event=event, blob=f'{{"n":{seq}}}')


class Counting(MemoryBroker):
    """A MemoryBroker that counts its starts and closes."""

    def __init__(self) -> None:
        super().__init__()
        self.started = self.closed = 0

    async def start(self) -> None:
        self.started += 1

    async def aclose(self) -> None:
        self.closed += 1


def test_it_is_a_broker_named_as_the_one_it_wraps() -> None:
    inner = MemoryBroker()
    broker: Broker = StallingBroker(inner)
    assert isinstance(broker, Broker)
    assert isinstance(broker.reader("s"), BrokerReader)
    assert (broker.where, broker.name, broker.retryable) == (
        inner.where,
        inner.name,
        inner.retryable,
    )
    assert broker.open(1.0) == inner.open(1.0)
    assert broker.next_seq(5, 0.0) == inner.next_seq(5, 0.0)
    assert "StallingBroker" in repr(broker)
    with pytest.raises(TypeError, match="Broker driver"):
        StallingBroker(object())  # type: ignore[arg-type]


async def test_every_operation_reaches_the_inner_driver() -> None:
    inner = Counting()
    broker = StallingBroker(inner)
    await broker.start()
    assert (await broker.append("s", "w", [rec(1)])).codes == [0]
    assert [seq for seq, _ in (await broker.read_state("s")).events] == [1]
    assert broker.read_state_sync("s").last == 1
    await broker.checkpoint("s", 1, "{}")
    assert (await broker.read_state("s")).floor == 1
    await broker.hold("w", ["s"], 60.0)
    assert await broker.lost("x") == []
    assert await broker.claim("w", force=True) == ["s"]
    assert await broker.reap("s", "w", "worker lost", 0.0) == 0
    await broker.release("w")
    await broker.drop_lease("w")
    assert await broker.trim_due(0.0) == []
    assert await broker.expire(0.0) == 0
    assert await broker.approval("s", "a") is None
    assert broker.approval_sync("s", "a") is None
    assert (await broker.resolve("s", Decide("a", 0.0, False, []))).outcome == "notfound"
    assert broker.resolve_sync("s", Decide("a", 0.0, False, [])).outcome == "notfound"
    await broker.wait_approval("s", "a", 0.01)
    assert await broker.epoch() == await inner.epoch()
    reader = broker.reader("s")
    assert (await reader.read(0, 10)).checkpoint == 1
    await reader.wait(0, 0.01)
    await reader.aclose()
    await broker.aclose()
    assert (inner.started, inner.closed) == (1, 1), "one driver per bus: reached"
    inner.down()  # the inner driver's errors come through
    with pytest.raises(BrokerDown):
        await broker.epoch()


async def test_a_stalled_writer_and_a_stalled_reader() -> None:
    broker = StallingBroker(MemoryBroker(wall=lambda: 0.0))
    loop = asyncio.get_running_loop()
    with broker.stall("append", "w1"):
        stalled = loop.create_task(broker.append("s", "w1", [rec(1)]))
        assert (await broker.append("s", "w2", [rec(5)])).codes == [0], "only w1 waits"
        await asyncio.sleep(0.05)
        assert not stalled.done()
    assert (await asyncio.wait_for(stalled, 5)).renumbered == [6]
    reader = broker.reader("s")
    with broker.stall("read"):
        reading = loop.create_task(reader.read(0, 10))
        await asyncio.sleep(0.05)
        assert not reading.done()
        assert (await broker.read_state("s")).last == 6, "other operations go on"
    assert [seq for seq, _ in (await asyncio.wait_for(reading, 5)).events] == [5, 6]
    with pytest.raises(ValueError, match="no operation"):
        broker.stall("apend").__enter__()


async def test_a_stall_ended_in_another_thread_and_a_sync_stall() -> None:
    broker = StallingBroker(MemoryBroker())
    stall = broker.stall("epoch")
    stall.__enter__()
    waiting = asyncio.get_running_loop().create_task(broker.epoch())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    ender = threading.Thread(target=stall.__exit__, args=(None, None, None))
    ender.start()
    ender.join()
    assert await asyncio.wait_for(waiting, 5)
    got: list[object] = []
    with broker.stall("approval_sync"):
        thread = threading.Thread(target=lambda: got.append(broker.approval_sync("s", "a")))
        thread.start()
        thread.join(0.1)
        assert thread.is_alive() and got == []
    thread.join(5)
    assert got == [None]


async def test_after_runs_before_the_caller_gets_the_result() -> None:
    inner = MemoryBroker()
    broker = StallingBroker(inner)
    seen: list[Any] = []

    async def then_write(got: Any) -> None:
        seen.append(got)
        await inner.append("s", "w", [rec(1)])

    with broker.after("read_state", then_write):
        state = await broker.read_state("s")
    assert state.last == 0 and seen == [state], "the read happened before the write"
    assert (await broker.read_state("s")).last == 1
    with broker.after("read_state_sync", seen.append):
        broker.read_state_sync("s")
    assert len(seen) == 2


async def test_a_broker_bus_over_it() -> None:
    inner = Counting()
    async with BrokerBus(StallingBroker(inner)) as bus:
        async with bus.subscribe(session="s") as sub:
            with bus.broker.stall("append", bus.token):  # type: ignore[attr-defined]
                sent = bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
                with pytest.raises(TimeoutError):
                    await bus.flush(timeout=0.1)
            await bus.flush(timeout=5)
            got = await asyncio.wait_for(sub.__anext__(), 5)
        assert got == sent
    assert (inner.started, inner.closed) == (1, 1)
