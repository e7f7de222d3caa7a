"""``chat_agent`` for LangGraph (``interrupt()`` in a tool, and LangChain's
``HumanInTheLoopMiddleware``), pydantic-ai and the OpenAI Agents SDK, each with its own
fake model, served by ``ChatApp`` under a real uvicorn on 127.0.0.1 and driven over HTTP
as the clients drive it (the peers' own clients drive the same agents in
tests/interop/test_chat_clients.py): one assistant message per turn — the model's words
included — across approvals, retries, reloads, stops and failures; in one process and
with the continuation taken by another gateway process on RedisBus.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import toolstream as ts
from tests.chat_frameworks import FRAMEWORKS, framework_chat_app, start_turn_of
from tests.chat_scenarios import STORY, approval_reply, kinds, user
from tests.interop.test_dialects import strict_agui
from tests.servers import Served, serve
from toolstream.chat import ChatApp
from toolstream.testing import sse_data as chunks

pytestmark = pytest.mark.timeout(120)

API = "/api/chat"


def of(items: list[Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in items if isinstance(c, dict) and c["type"] == kind]


def texts(items: list[Any]) -> list[str]:
    """The text of each text part, in order (a part's deltas joined)."""
    parts: dict[str, str] = {}
    for chunk in items:
        if isinstance(chunk, dict) and chunk["type"] == "text-delta":
            parts[chunk["id"]] = parts.get(chunk["id"], "") + chunk["delta"]
    return list(parts.values())


def runs_of(bus: ts.EventBus, chat: str) -> list[ts.RunSnapshot]:
    return list(bus.snapshot(chat).runs)


@pytest.fixture(scope="module")
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture(scope="module", params=FRAMEWORKS)
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def gateway(framework: str, bus: ts.EventBus) -> Iterator[Served]:
    with serve(framework_chat_app(framework, bus)) as served:
        yield served


@pytest.fixture
def http(gateway: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url + API, timeout=30) as client:
        yield client


def chat_id(framework: str) -> str:
    return f"{framework}-{uuid.uuid4().hex[:8]}"


def test_a_turn_is_the_models_words_around_its_calls(
    http: httpx.Client, framework: str, bus: ts.EventBus
) -> None:
    chat = chat_id(framework)
    streamed = chunks(http.post("/", json=user("What is the weather in Paris?", chat)).text)
    assert kinds(streamed)[:3] == ["start", "start-step", "text-start"]
    assert kinds(streamed)[-3:] == ["finish-step", "finish", "[DONE]"]
    assert texts(streamed) == ["Let me check the weather in Paris.", "It is 21 degrees in Paris."]
    # text, then the card, then text: the words before the call end before its card
    order = [k for k in kinds(streamed) if k in ("text-end", "tool-input-start", "text-start")]
    assert order == ["text-start", "text-end", "tool-input-start", "text-start", "text-end"]
    (progress,) = of(streamed, "data-tool-progress")
    assert progress["data"]["fraction"] == 0.5 and progress["data"]["message"] == "halfway there"
    (output,) = of(streamed, "tool-output-available")
    assert "21" in json.dumps(output["output"])
    assert [r.state for r in runs_of(bus, chat)] == ["completed"]


def test_a_failing_tool_is_a_failure_and_the_turn_goes_on(
    http: httpx.Client, framework: str
) -> None:
    streamed = chunks(http.post("/", json=user("Run the build", chat_id(framework))).text)
    (failed,) = of(streamed, "tool-output-error")
    assert "exit code 1" in failed["errorText"]
    assert not of(streamed, "tool-output-available")
    assert texts(streamed)[-1] == "The build failed."


@pytest.mark.parametrize("approved", [True, False])
def test_an_approval_continues_the_same_message_and_a_retry_runs_nothing_again(
    http: httpx.Client, framework: str, bus: ts.EventBus, approved: bool
) -> None:
    chat = chat_id(framework)
    first = user("Email the team", chat)
    streamed = chunks(http.post("/", json=first).text)
    assert kinds(streamed)[-4:] == ["tool-approval-request", "finish-step", "finish", "[DONE]"]
    assert of(streamed, "finish")[0]["finishReason"] == "tool-calls"
    assert texts(streamed) == ["I will email the team."]
    reply = approval_reply(first, streamed, approved)
    more = chunks(http.post("/", json=reply).text)
    assert more[0] == {"type": "start", "messageId": streamed[0]["messageId"]}
    assert "tool-input-start" not in kinds(more), "the call the client holds is not sent again"
    ended = "tool-output-available" if approved else "tool-output-denied"
    assert ended in kinds(more)
    assert texts(more) == ["Sent." if approved else "Not sent."]
    assert kinds(more)[-3:] == ["finish-step", "finish", "[DONE]"]
    again = chunks(http.post("/", json=reply).text)
    assert again == more, "a retried continuation gets the same again"
    (call,) = bus.snapshot(chat).calls
    assert call.state is (ts.CallState.COMPLETED if approved else ts.CallState.DENIED)
    assert [r.state for r in runs_of(bus, chat)] == ["completed"], "one run: the agent ran once"


def test_a_reload_mid_turn_gets_the_whole_message(http: httpx.Client, framework: str) -> None:
    chat = chat_id(framework)
    with http.stream("POST", "/", json=user("Tell me a story", chat)) as response:
        for line in response.iter_lines():
            if "word3 " in line:
                break  # the tab closes mid-answer
    replay = chunks(http.get(f"/{chat}/stream").text)
    assert replay[0]["type"] == "start"
    assert texts(replay) == ["".join(STORY), "The end."]
    assert len(of(replay, "tool-output-available")) == 1


def test_stop_cancels_the_turn(http: httpx.Client, framework: str, bus: ts.EventBus) -> None:
    chat = chat_id(framework)
    seen: list[Any] = []

    def post() -> None:
        seen.extend(chunks(http.post("/", json=user("wait for it", chat)).text))

    reader = threading.Thread(target=post)
    reader.start()
    try:
        for _ in range(300):
            calls = bus.snapshot(chat).calls
            if calls and calls[0].state is ts.CallState.RUNNING:
                break
            threading.Event().wait(0.02)
        stopped = http.post(f"/{chat}/stop")
        assert stopped.status_code == 200
    finally:
        reader.join(30)
    assert kinds(seen)[-4:] == ["abort", "finish-step", "finish", "[DONE]"]
    (call,) = bus.snapshot(chat).calls
    assert call.state is ts.CallState.CANCELLED
    assert [r.state for r in runs_of(bus, chat)] == ["cancelled"]
    assert http.get(f"/{chat}/stream").status_code == 204


def test_a_model_that_raises_ends_the_turn_with_the_error(
    http: httpx.Client, framework: str, bus: ts.EventBus
) -> None:
    chat = chat_id(framework)
    response = http.post("/", json=user("crash now", chat))
    streamed = chunks(response.text)
    (error,) = of(streamed, "error")
    assert "the model is unavailable" in error["errorText"]
    assert kinds(streamed)[-3:] == ["finish-step", "finish", "[DONE]"]
    assert [r.state for r in runs_of(bus, chat)] == ["failed"]


def test_messages_false_keeps_a_turn_to_its_calls(framework: str) -> None:
    bus = ts.EventBus()
    with serve(ChatApp(bus, start_turn_of(framework, messages=False))) as served:
        streamed = chunks(httpx.post(served.url, json=user("weather", "c1"), timeout=30).text)
    assert not texts(streamed)
    assert of(streamed, "tool-output-available")


def test_bad_options_are_refused_when_the_agent_is_made() -> None:
    from tests.chat_frameworks import pydantic_ai_agent
    from toolstream.integrations.pydantic_ai import chat_agent

    with pytest.raises(ValueError, match="approval_timeout"):
        chat_agent(pydantic_ai_agent(), approval_timeout=0)
    with pytest.raises(TypeError, match="unknown option"):
        chat_agent(pydantic_ai_agent(), colour="blue")
    with pytest.raises(TypeError, match="pydantic-ai Agent"):
        chat_agent(object())
    with pytest.raises(TypeError, match="approval_reason"):
        chat_agent(pydantic_ai_agent(), approval_reason=3)  # type: ignore[arg-type]


# -- AG-UI ----------------------------------------------------------------------------------


def run_input(text: str, thread: str, run: str, **more: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
        **more,
    }


@pytest.fixture(scope="module")
def agui_gateway(framework: str, bus: ts.EventBus) -> Iterator[Served]:
    with serve(framework_chat_app(framework, bus, dialect="agui")) as served:
        yield served


def test_agui_approval_stop_and_failure(
    agui_gateway: Served, framework: str, bus: ts.EventBus
) -> None:
    thread = chat_id(framework)
    with httpx.Client(base_url=agui_gateway.url, timeout=30) as http:
        first = chunks(http.post("/agent", json=run_input("email them", thread, "r1")).text)
        for event in first:
            strict_agui(event)
        finished = first[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt"
        (interrupt,) = finished["outcome"]["interrupts"]
        answer = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"approved": True},
        }
        more = chunks(
            http.post("/agent", json=run_input("email them", thread, "r2", resume=[answer])).text
        )
        for event in more:
            strict_agui(event)
        assert more[0]["type"] == "RUN_STARTED" and more[0]["runId"] == "r2"
        assert "TOOL_CALL_START" not in [e["type"] for e in more]
        assert more[-1]["type"] == "RUN_FINISHED" and "outcome" not in more[-1]
        again = chunks(
            http.post("/agent", json=run_input("email them", thread, "r2", resume=[answer])).text
        )
        assert again == more, "a retried resume runs nothing again"
        crashed = chunks(http.post("/agent", json=run_input("crash", thread + "x", "r3")).text)
        assert crashed[-1]["type"] == "RUN_ERROR"
        assert "the model is unavailable" in crashed[-1]["message"]
    assert [c.state for c in bus.snapshot(thread).calls] == [ts.CallState.COMPLETED]


# -- RedisBus: the continuation taken by another gateway process ----------------------------


@pytest.mark.parametrize("name", ["langgraph", "pydantic-ai", "openai-agents"])
def test_another_gateway_process_continues_the_turn(
    redis_server: Any, name: str, tmp_path: Any
) -> None:
    """Two gateway processes on one RedisBus: the turn runs in the one that took its POST
    and waits there; the other takes the continuation (applies the decision through the
    bus, streams the rest from Redis) and answers a reload; the agent runs once."""
    from tests.chat_procs import spawn, wait_until_up
    from tests.redis_server import free_port

    prefix = f"t{uuid.uuid4().hex[:10]}"
    ports = [free_port(), free_port()]
    procs = [
        spawn("framework", redis_server.url, prefix, str(port), name, "ai_sdk") for port in ports
    ]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url in urls:
            wait_until_up(url, procs)
        chat = chat_id(name)
        first = user("Email the team", chat)
        with httpx.Client(timeout=30) as http:
            streamed = chunks(http.post(urls[0] + API, json=first).text)
            assert kinds(streamed)[-4:] == [
                "tool-approval-request",
                "finish-step",
                "finish",
                "[DONE]",
            ]
            reply = approval_reply(first, streamed, True)
            more = chunks(http.post(urls[1] + API, json=reply).text)
            assert more[0] == {"type": "start", "messageId": streamed[0]["messageId"]}
            assert texts(more) == ["Sent."]
            assert of(more, "tool-output-available")
            assert chunks(http.post(urls[1] + API, json=reply).text) == more
            assert http.get(f"{urls[1]}{API}/{chat}/stream").status_code == 204
            # A reload mid-turn, on the other process.
            story = chat_id(name)
            with http.stream("POST", urls[0] + API, json=user("Tell me a story", story)) as r:
                for line in r.iter_lines():
                    if "word3 " in line:
                        break
            replay = chunks(http.get(f"{urls[1]}{API}/{story}/stream").text)
            assert texts(replay) == ["".join(STORY), "The end."]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
