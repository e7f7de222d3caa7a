"""ChatApp on RedisBus with the agent in a worker process: a gateway process starts turns
by handing them to a worker process (tests/chat_procs.py), and the real clients drive it."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from tests.chat_procs import spawn, wait_until_up
from tests.chat_scenarios import STORY
from tests.redis_server import RedisServer, free_port
from toolstream.redis import RedisBus

from .interop.test_chat_clients import one_turn, outline, run_driver

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py has no trio support


class Deployment:
    """A gateway process (ChatApp on RedisBus) and an agent worker process."""

    def __init__(self, server: RedisServer, dialect: str) -> None:
        self.redis_url = server.url
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs = [
            spawn("worker", server.url, self.prefix, "script"),
            spawn("gateway", server.url, self.prefix, str(self.port), dialect),
        ]

    async def ready(self) -> None:
        await anyio.to_thread.run_sync(wait_until_up, self.url, self.procs)

    def bus(self) -> RedisBus:
        return RedisBus(self.redis_url, prefix=self.prefix)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)


@pytest.fixture
async def ai_sdk(redis_server: RedisServer) -> AsyncIterator[Deployment]:
    made = Deployment(redis_server, "ai_sdk")
    try:
        await made.ready()
        yield made
    finally:
        made.close()


async def driver(script: str, *args: str) -> dict[str, Any]:
    """A Node driver's results (tests/interop), each scenario's checked to have run."""
    document = await anyio.to_thread.run_sync(run_driver, script, *args)
    results: dict[str, Any] = document["results"]
    for result in results.values():
        assert result["ok"], result["error"]
    return results


async def test_use_chat_with_the_agent_in_a_worker(ai_sdk: Deployment) -> None:
    results = await driver("chat_ai.mjs", ai_sdk.url + "/api/chat", "7", "approve", "deny")
    approved, denied = one_turn(results["approve"]), one_turn(results["deny"])
    assert outline(approved) == [
        ("text", "I will email the team."),
        ("tool-send_email", "output-available"),
        ("text", "Sent."),
    ]
    assert outline(denied)[1:] == [("tool-send_email", "output-denied"), ("text", "Not sent.")]
    async with ai_sdk.bus() as bus:
        for name, message, state in (
            ("approve", approved, "completed"),
            ("deny", denied, "denied"),
        ):
            snapshot = await bus.fetch_snapshot(results[name]["chat"])
            assert [(r.run_id, r.state) for r in snapshot.runs] == [(message["id"], "completed")]
            assert [c.state.value for c in snapshot.calls] == [state]


async def test_use_chat_resumes_a_cut_turn_run_by_a_worker(ai_sdk: Deployment) -> None:
    results = await driver("chat_ai.mjs", ai_sdk.url + "/api/chat", "7", "reload")
    assert outline(one_turn(results["reload"])) == [
        ("text", "".join(STORY).strip()),
        ("tool-lookup", "output-available"),
        ("text", "The end."),
    ]


async def test_http_agent_with_the_agent_in_a_worker(redis_server: RedisServer) -> None:
    deployment = Deployment(redis_server, "agui")
    try:
        await deployment.ready()
        results = await driver("chat_agui.mjs", deployment.url + "/agent", "approve")
    finally:
        deployment.close()
    first, second = results["approve"]["runs"]
    assert first["outcome"] == "interrupt"
    assert second["outcome"] == "success"
    assert "TOOL_CALL_START" not in second["events"]


async def test_stop_reaches_the_worker(ai_sdk: Deployment) -> None:
    body = {
        "id": "c-stop",
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "a story"}]}],
    }
    streamed: list[Any] = []
    async with httpx.AsyncClient(base_url=ai_sdk.url, timeout=30) as http, ai_sdk.bus() as bus:
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                response = await http.post("/api/chat", json=body)
                streamed.extend(
                    json.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
                    for line in response.text.splitlines()
                    if line.startswith("data: ")
                )

            tg.start_soon(read)
            with anyio.fail_after(20):
                while not (await bus.fetch_snapshot("c-stop")).messages:  # noqa: ASYNC110 - another process writes it
                    await anyio.sleep(0.05)
            stop = await http.post("/api/chat/c-stop/stop")
            assert stop.status_code == 200
        (run,) = (await bus.fetch_snapshot("c-stop")).runs
        assert run.state == "cancelled"
    assert "abort" in [c["type"] for c in streamed if isinstance(c, dict)]


async def test_an_unreachable_broker_is_a_503(own_redis: RedisServer) -> None:
    deployment = Deployment(own_redis, "ai_sdk")
    try:
        await deployment.ready()
        own_redis.stop()
        async with httpx.AsyncClient(base_url=deployment.url, timeout=30) as http:
            body = {"id": "c1", "messages": [{"role": "user", "parts": []}]}
            response = await http.post("/api/chat", json=body)
            assert response.status_code == 503
            assert response.json()["code"] == "unavailable"
            assert (await http.get("/api/chat/c1/stream")).status_code == 503
    finally:
        deployment.close()


async def test_use_stream_threads_live_on_the_bus_across_gateway_processes(
    redis_server: RedisServer,
) -> None:
    """``ChatApp(dialect="langgraph")`` on two gateway processes of one RedisBus, the
    agent in a worker: a thread's second turn on the other gateway shows the first in
    its ``values`` (the user's words and the agent's), and its approval is answered on
    the first gateway."""
    from tests.test_chat_langgraph import resume, said, sse, states, turn

    prefix = f"t{uuid.uuid4().hex[:10]}"
    ports = [free_port(), free_port()]
    procs = [spawn("worker", redis_server.url, prefix, "script")]
    procs += [spawn("gateway", redis_server.url, prefix, str(p), "langgraph") for p in ports]
    one, two = (f"http://127.0.0.1:{p}" for p in ports)
    try:
        for url in (one, two):
            await anyio.to_thread.run_sync(wait_until_up, url, procs)
        async with httpx.AsyncClient(timeout=30) as http:
            first = sse((await http.post(one, json=turn("weather?", "lg-1"))).text)
            asked = sse((await http.post(two, json=turn("Email the team", "lg-1"))).text)
            opening = states(asked)[0]
            assert said(opening)[:1] == [("human", "weather?")]
            assert ("ai", "It is 21 degrees in Paris.") in said(opening)
            assert said(opening)[-1] == ("human", "Email the team")
            (interrupt,) = states(asked)[-1]["__interrupt__"]
            decided = {interrupt["id"]: {"approved": True}}
            rest = sse((await http.post(one, json=resume(decided, "lg-1"))).text)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
    assert states(first)[-1]["messages"][-1]["content"] == "It is 21 degrees in Paris."
    final = said(states(rest)[-1])
    assert final[-1] == ("ai", "Sent.")
    assert [kind for kind, _ in final].count("human") == 2
