"""BrokerBus over MemoryBroker, with no server: the Bus conformance suite and every broker
check (tests/broker_checks.py), buses of one check sharing one MemoryBroker as processes
share a broker, its hooks making the broker misbehave."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests import broker_checks
from toolstream.broker import BrokerBus
from toolstream.testing import BusFactory, MemoryBroker, bus_conformance_checks

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def anyio_backend() -> str:
    # BrokerBus runs on asyncio only.
    return "asyncio"


@pytest.mark.parametrize("check", bus_conformance_checks(), ids=lambda c: c.__name__)
async def test_memory_broker_bus_conforms(check: Callable[[BusFactory], Awaitable[None]]) -> None:
    await check(lambda: BrokerBus(MemoryBroker()))


class MemoryServer:
    """The test's broker "server": one MemoryBroker per ``prefix`` (buses made with one
    prefix share it, as processes share a broker; a bus made without one gets a broker
    of its own, as a fresh prefix would), stopped and started with ``down()`` and
    ``up()`` (the broker checks' ``Server``)."""

    def __init__(self) -> None:
        self.brokers: dict[str, MemoryBroker] = {}
        self.stopped = False

    def make(self, *, prefix: str | None = None, **options: Any) -> BrokerBus:
        key = prefix if prefix is not None else uuid.uuid4().hex
        broker = self.brokers.get(key)
        if broker is None:
            broker = self.brokers[key] = MemoryBroker()
            if self.stopped:
                broker.down()
        return BrokerBus(broker, **options)

    def stop(self) -> None:
        self.stopped = True
        for broker in self.brokers.values():
            broker.down()

    def start(self) -> None:
        self.stopped = False
        for broker in self.brokers.values():
            broker.up()


@pytest.fixture
def server() -> MemoryServer:
    return MemoryServer()


def test_buses_made_with_one_prefix_share_a_broker(server: MemoryServer) -> None:
    one, two = server.make(prefix="p"), server.make(prefix="p")
    assert one.broker is two.broker
    assert server.make().broker is not one.broker
    assert server.make().broker is not server.make().broker
    assert one.epoch == two.epoch


def test_every_broker_check_runs_here() -> None:
    checks = {
        name
        for name, check in vars(broker_checks).items()
        if not name.startswith("_")
        and inspect.iscoroutinefunction(check)
        and check.__module__ == broker_checks.__name__
    }
    source = Path(__file__).read_text()
    missing = {name for name in checks if f"broker_checks.{name}(" not in source}
    assert not missing, f"broker checks not run over MemoryBroker: {sorted(missing)}"


async def test_lost_worker_calls_closed_exactly_once(server: MemoryServer) -> None:
    await broker_checks.lost_worker_calls_closed_exactly_once(server.make)


async def test_a_reader_left_behind_by_trimming_is_cut_not_gapped(server: MemoryServer) -> None:
    await broker_checks.a_reader_left_behind_by_trimming_is_cut_not_gapped(server.make)


async def test_two_buses_deciding_at_once_have_one_winner(server: MemoryServer) -> None:
    await broker_checks.two_buses_deciding_at_once_have_one_winner(server.make, rounds=50)


async def test_an_approval_touched_before_its_request_is_written(server: MemoryServer) -> None:
    await broker_checks.approval_before_its_request_is_written(server.make)


async def test_an_approval_withdrawn_while_the_broker_is_down(server: MemoryServer) -> None:
    await broker_checks.approval_withdrawn_while_the_broker_is_down(server.make, server)


async def test_a_call_waits_for_its_approval_through_an_outage(server: MemoryServer) -> None:
    await broker_checks.approval_waited_for_through_an_outage(server.make, server)


async def test_an_approval_expiring_during_an_outage(server: MemoryServer) -> None:
    await broker_checks.approval_expiring_during_an_outage(server.make, server)


async def test_an_approval_request_written_during_a_read(server: MemoryServer) -> None:
    await broker_checks.approval_request_written_during_a_read(server.make)


async def test_names_past_the_bound_never_reach_the_broker(server: MemoryServer) -> None:
    await broker_checks.names_past_the_bound_never_reach_the_broker(server.make)


async def test_braces_and_hash_tags_in_names_stay_in_their_session(server: MemoryServer) -> None:
    await broker_checks.braces_and_hash_tags_in_names_stay_in_their_session(server.make)


async def test_outage_keeps_the_agent_running_and_loses_nothing(server: MemoryServer) -> None:
    await broker_checks.outage_keeps_the_agent_running_and_loses_nothing(server.make, server)


async def test_a_batch_whose_reply_was_lost_is_not_written_twice(server: MemoryServer) -> None:
    await broker_checks.a_batch_whose_reply_was_lost_is_not_written_twice(server.make)


async def test_a_writer_behind_another_is_renumbered_not_lost(server: MemoryServer) -> None:
    await broker_checks.a_writer_behind_another_is_renumbered_not_lost(server.make)


async def test_two_writers_on_one_session_lose_nothing(server: MemoryServer) -> None:
    await broker_checks.two_writers_on_one_session_lose_nothing(server.make)
