"""A framework agent whose tool is itself an agent, behind ``ChatApp`` through
``chat_agent``: the delegate's calls and words reach the chat nested under the call that
ran it — in the AI SDK dialect as the parent tool's preliminary outputs (the sub-agent's
message), in AG-UI as ``SUBAGENT_*`` events — with each framework's own fake model,
under a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic_ai import RunContext  # a tool's annotation pydantic-ai resolves

import toolstream as ts
from tests.chat_scenarios import user
from tests.interop.test_dialects import strict_agui
from toolstream.chat import ChatApp, StartTurn
from toolstream.testing import serve
from toolstream.testing import sse_data as chunks

pytestmark = pytest.mark.timeout(60)

API = "/api/chat"


def pydantic_ai_delegating() -> StartTurn:
    """An assistant whose ``research`` tool runs a researcher agent (pydantic-ai's agent
    delegation), the researcher carrying ``capability()``: the one documented line."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelRequest, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from toolstream.integrations.pydantic_ai import capability, chat_agent

    def answered(messages: list[Any]) -> str | None:
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        return str(part.content)
        return None

    async def researcher_model(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        found = answered(messages)
        if found is None:
            yield "Searching."
            yield {0: DeltaToolCall(name="web_search", json_args='{"q": "anyio"}')}
        else:
            yield f"Found {found}."

    async def assistant_model(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        found = answered(messages)
        if found is None:
            yield "Let me ask the researcher."
            yield {0: DeltaToolCall(name="research", json_args='{"topic": "anyio"}')}
        else:
            yield f"The researcher says: {found}"

    researcher: Agent[None, str] = Agent(
        FunctionModel(stream_function=researcher_model),
        name="researcher",
        capabilities=[capability()],
    )

    @researcher.tool_plain
    def web_search(q: str) -> str:
        """Search the web."""
        return f"https://example.com/{q}"

    assistant: Agent[None, str] = Agent(FunctionModel(stream_function=assistant_model))

    @assistant.tool
    async def research(ctx: RunContext[None], topic: str) -> str:
        """Research a topic with the researcher."""
        result = await researcher.run(topic, usage=ctx.usage)
        return str(result.output)

    return chat_agent(assistant)


def openai_agents_delegating() -> StartTurn:
    """An assistant whose ``research`` tool is ``researcher.as_tool(...,
    on_stream=follow_subagent)``."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolstream.integrations.openai_agents import chat_agent, follow_subagent

    @function_tool
    def web_search(q: str) -> str:
        """Search the web."""
        return f"https://example.com/{q}"

    def scripted() -> tuple[Agent[Any], Agent[Any]]:
        researcher: Agent[Any] = Agent(
            name="researcher",
            tools=[web_search],
            model=ScriptedModel(
                [
                    [function_call("web_search", {"q": "anyio"}, call_id="call_w")],
                    [assistant_message("Found https://example.com/anyio.")],
                ]
            ),
        )
        assistant: Agent[Any] = Agent(
            name="assistant",
            model=ScriptedModel(
                [
                    [function_call("research", {"input": "anyio"}, call_id="call_r")],
                    [assistant_message("The researcher found it.")],
                ]
            ),
            tools=[researcher.as_tool("research", "Research a topic.", on_stream=follow_subagent)],
        )
        return assistant, researcher

    assistant, _ = scripted()
    return chat_agent(assistant)


def langgraph_delegating() -> StartTurn:
    """A manager graph whose ``research`` tool invokes a ``scout`` agent graph (the
    agent-as-a-tool pattern), from the LangGraph integration's tests."""
    from tests.test_integration_langgraph import first, make_manager
    from toolstream.integrations.langgraph import chat_agent

    return chat_agent(make_manager([first("research", "out_a", '{"topic": "anyio"}')]))


#: framework -> (its delegating chat agent, the sub-agent's name)
DELEGATING: dict[str, tuple[Callable[[], StartTurn], str]] = {
    "pydantic-ai": (pydantic_ai_delegating, "researcher"),
    "openai-agents": (openai_agents_delegating, "researcher"),
    "langgraph": (langgraph_delegating, "scout"),
}


@pytest.fixture(params=sorted(DELEGATING))
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def nested_tool_parts(output: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool parts of a sub-agent's message (a preliminary or final tool output)."""
    return [p for p in output.get("parts", []) if str(p.get("type", "")).startswith("tool-")]


def test_a_delegates_calls_show_inside_the_parent_tool_in_the_ai_sdk(framework: str) -> None:
    bus = ts.EventBus()
    with serve(ChatApp(bus, DELEGATING[framework][0]())) as url:
        chat = f"{framework}-{uuid.uuid4().hex[:8]}"
        response = httpx.post(url + API, json=user("Research anyio", chat), timeout=30)
    assert response.status_code == 200, response.text
    streamed = chunks(response.text)
    types = [c["type"] for c in streamed if isinstance(c, dict)]
    assert types[0] == "start" and types[-1] == "finish", types
    assert types.count("start") == 1, "one assistant message for the whole turn"
    starts = [c for c in streamed if isinstance(c, dict) and c["type"] == "tool-input-start"]
    assert [c["toolName"] for c in starts] == ["research"], "the delegate's calls are nested"
    outputs = [
        c
        for c in streamed
        if isinstance(c, dict)
        and c["type"] == "tool-output-available"
        and c["toolCallId"] == starts[0]["toolCallId"]
    ]
    preliminary = [c for c in outputs if c.get("preliminary")]
    final = [c for c in outputs if not c.get("preliminary")]
    assert preliminary and len(final) == 1
    nested = [p for c in preliminary for p in nested_tool_parts(c["output"])]
    assert {p["type"] for p in nested} == {"tool-web_search"}
    assert "output-available" in {p["state"] for p in nested}
    last = final[0]["output"]
    [search] = nested_tool_parts(last)
    assert search["state"] == "output-available"
    said = "".join(p.get("text", "") for p in last["parts"] if p["type"] == "text")
    assert said, "the sub-agent's words are in its message"
    assert last["metadata"]["subagents"][0]["agent"] == DELEGATING[framework][1]
    # The store has the tree: the delegate's run under the research call.
    snapshot = bus.snapshot(chat)
    research = next(c for c in snapshot.calls if c.tool == "research")
    inner = next(c for c in snapshot.calls if c.tool == "web_search")
    assert inner.parent_call_id == research.call_id
    assert [r.parent_call_id for r in snapshot.runs if r.parent_call_id] == [research.call_id]
    bus.close()


def test_a_delegates_calls_are_tagged_with_its_subagent_in_ag_ui(framework: str) -> None:
    bus = ts.EventBus()
    with serve(ChatApp(bus, DELEGATING[framework][0](), dialect="agui")) as url:
        thread = f"{framework}-{uuid.uuid4().hex[:8]}"
        body = {
            "threadId": thread,
            "runId": "r1",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "Research anyio"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        response = httpx.post(url + API, json=body, timeout=30)
    assert response.status_code == 200, response.text
    events = chunks(response.text)
    for event in events:
        strict_agui(event)
    started = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert len(started) == 1
    research = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert research["toolCallName"] == "research"
    assert started[0]["parentToolCallId"] == research["toolCallId"]
    sub = started[0]["subagentRunId"]
    inner = [e for e in events if e["type"] == "TOOL_CALL_START" and e.get("subagentRunId") == sub]
    assert [e["toolCallName"] for e in inner] == ["web_search"]
    assert [e["type"] for e in events if e.get("subagentRunId") == sub][-1] == ("SUBAGENT_FINISHED")
    ends = [e["type"] for e in events]
    assert ends.index("SUBAGENT_FINISHED") < max(
        i for i, e in enumerate(events) if e.get("toolCallId") == research["toolCallId"]
    ), "the sub-agent ends before its parent's result"
    assert json.dumps(events).count('"RUN_STARTED"') == 1
    bus.close()
