"""A2AApp on a broker bus across two gateway processes (tests/a2a_procs.py), driven by
the A2A project's Python client: a task started on one gateway is resumed after a cut,
decided, read and replayed on the other — on RedisBus, NatsBus and PostgresBus.
(``@a2a-js/sdk`` drives the RedisBus pair in tests/interop/test_a2a_clients.py.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest
from a2a.client import Client
from a2a.types.a2a_pb2 import GetTaskRequest
from google.protobuf import json_format

from tests.a2a_procs import spawn
from tests.chat_procs import wait_until_up
from tests.chat_scenarios import STORY
from tests.servers import free_port
from tests.test_a2a import (
    HEADERS,
    calls,
    connect,
    decision,
    event_ids,
    final,
    said,
    stream,
    subscribe,
    task_of,
    texts,
    updates,
)

pytestmark = pytest.mark.timeout(120)

BROKERS = ("redis", "nats", "postgres")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py has no trio support


@pytest.fixture(params=BROKERS)
def broker_url(request: pytest.FixtureRequest) -> str:
    server = request.getfixturevalue(f"{request.param}_server")
    return str(server.url)


@pytest.fixture
def gateways(broker_url: str) -> Iterator[tuple[str, str]]:
    """Two gateway processes on the same broker (one key prefix)."""
    prefix = f"a{uuid.uuid4().hex[:10]}"
    ports = [free_port(), free_port()]
    procs = [spawn("gateway", broker_url, prefix, str(port)) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url in urls:
            wait_until_up(url, procs)
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


@pytest.fixture
async def clients(gateways: tuple[str, str]) -> AsyncIterator[tuple[Client, Client]]:
    async with httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
        yield await connect(gateways[0], http), await connect(gateways[1], http)


async def test_a_task_cut_on_one_gateway_is_resumed_on_the_other_with_nothing_lost(
    clients: tuple[Client, Client],
) -> None:
    one, two = clients
    cut = await stream(one, said("Tell me a story"), upto=8)
    task = task_of(cut)
    rest = await subscribe(two, task["id"], after=event_ids(cut)[-1])
    assert rest[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"  # as at the cut
    assert final(rest) == "TASK_STATE_COMPLETED"
    whole = await subscribe(one, task["id"], after=event_ids(cut)[0])
    assert event_ids(cut) + event_ids(rest) == event_ids(cut)[:1] + event_ids(whole)
    # what the opening Task holds, then the chunks after it: the story once
    opening = [a["parts"][0]["text"] for a in rest[0]["task"].get("artifacts", [])]
    story = (opening[0] if opening else "") + texts(updates(rest))[0]
    assert story == "".join(STORY)
    # after the end, from the other gateway again
    again = await subscribe(two, task["id"], after=event_ids(cut)[-1])
    assert updates(again) == updates(rest)


async def test_a_decision_on_the_other_gateway_continues_the_task_where_it_runs(
    clients: tuple[Client, Client],
) -> None:
    one, two = clients
    asked = await stream(one, said("Email the team"))
    task = task_of(asked)
    assert final(asked) == "TASK_STATE_INPUT_REQUIRED"
    waiting = json_format.MessageToDict(await two.get_task(GetTaskRequest(id=task["id"])))
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    approval = calls(asked)[-1]["approval_id"]
    rest = await stream(two, decision(task, approval, True))
    assert [d["state"] for d in calls(rest, "send_email")] == ["approved", "running", "completed"]
    assert texts(rest) == ["Sent."]
    assert not set(event_ids(asked)) & set(event_ids(rest))
    with anyio.fail_after(10):
        done = json_format.MessageToDict(await one.get_task(GetTaskRequest(id=task["id"])))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
