"""The demo's scenario through a real agent framework, with the framework's own fake
model (``toolstream demo --agent pydantic-ai|openai-agents|langgraph``): no API key.

Each turn the model asks, in one response, for a web search (with progress), two page
fetches that run in parallel and a shell command that fails; then, in a second response,
for an email that needs a person's approval. The framework runs them through its
toolstream integration, waits for the decision (the page's Approve / Deny, or the
approval expires), and the model answers.
"""

import os
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from toolstream import Tracker

__all__ = ["AGENTS", "agent_runner", "missing_framework", "run_framework_agent"]

#: The frameworks the demo can drive, by the name ``--agent`` takes.
AGENTS = ("pydantic-ai", "openai-agents", "langgraph")

_PAGES = ["https://anyio.readthedocs.io/", "https://trio.readthedocs.io/"]


def _calls(turn: int, step: int) -> list[tuple[str, dict[str, Any], str]]:
    """The calls the model makes in response ``step`` (0, 1) of a turn: (tool, arguments,
    call id); none after that (the model answers)."""
    if step == 0:
        return [
            ("web_search", {"query": "structured concurrency"}, f"call_{turn}_search"),
            ("fetch_page", {"url": _PAGES[0]}, f"call_{turn}_fetch1"),
            ("fetch_page", {"url": _PAGES[1]}, f"call_{turn}_fetch2"),
            ("run_shell", {"cmd": "pytest -x"}, f"call_{turn}_shell"),
        ]
    if step == 1:
        return [("send_email", {"to": "team@example.com"}, f"call_{turn}_email")]
    return []


Turn = Callable[[Tracker, int], Awaitable[None]]


def _pydantic_ai(speed: float, approval_timeout: float) -> Turn:
    import json

    from pydantic_ai import Agent, DeferredToolRequests, RunContext, ToolFailed
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from toolstream.integrations.pydantic_ai import (
        capability,
        deferred_tool_results,
        report_progress,
    )

    state = {"turn": 0}

    async def model(messages: list[Any], info: AgentInfo) -> Any:
        step = len(messages) // 2  # a request, then a response and a request per step
        calls = _calls(state["turn"], step)
        for i, (tool, args, call_id) in enumerate(calls):
            yield {i: DeltaToolCall(name=tool, json_args=json.dumps(args), tool_call_id=call_id)}
        if not calls:
            yield "Here is what I found."

    agent: Agent[None, Any] = Agent(
        FunctionModel(stream_function=model), output_type=[str, DeferredToolRequests]
    )

    @agent.tool
    async def web_search(ctx: RunContext[None], query: str) -> list[str]:
        for i in range(4):
            await anyio.sleep(0.2 / speed)
            await report_progress(ctx, (i + 1) / 4, message=f"fetched {i + 1} of 4 result pages")
        return _PAGES

    @agent.tool_plain
    async def fetch_page(url: str) -> dict[str, Any]:
        await anyio.sleep(0.5 / speed)
        return {"url": url, "status": 200}

    @agent.tool_plain
    async def run_shell(cmd: str) -> str:
        await anyio.sleep(0.3 / speed)
        raise ToolFailed("command failed: exit code 2")

    @agent.tool_plain(requires_approval=True)
    async def send_email(to: str) -> str:
        return f"sent to {to}"

    async def turn(tracker: Tracker, number: int) -> None:
        state["turn"] = number
        hooks = [capability(tracker, approval_timeout=approval_timeout)]
        result = await agent.run("Research structured concurrency", capabilities=hooks)
        if isinstance(result.output, DeferredToolRequests):
            decided = await deferred_tool_results(tracker, result.output)
            await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=decided,
                capabilities=hooks,
            )

    return turn


def _openai_agents(speed: float, approval_timeout: float) -> Turn:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolstream.integrations.openai_agents import (
        ToolstreamHooks,
        apply_decisions,
        run_config,
        track_run,
    )

    set_tracing_disabled(True)

    @function_tool
    async def web_search(query: str) -> list[str]:
        """Search the web."""
        await anyio.sleep(0.8 / speed)
        return _PAGES

    @function_tool
    async def fetch_page(url: str) -> dict[str, Any]:
        """Fetch a page."""
        await anyio.sleep(0.5 / speed)
        return {"url": url, "status": 200}

    @function_tool
    async def run_shell(cmd: str) -> str:
        """Run a shell command."""
        await anyio.sleep(0.3 / speed)
        raise RuntimeError("command failed: exit code 2")

    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    tools: list[Any] = [web_search, fetch_page, run_shell, send_email]

    async def turn(tracker: Tracker, number: int) -> None:
        model = ScriptedModel(
            [
                [function_call(t, a, call_id=c) for t, a, c in _calls(number, 0)],
                [function_call(t, a, call_id=c) for t, a, c in _calls(number, 1)],
                [assistant_message("Here is what I found.")],
            ]
        )
        agent: Agent[Any] = Agent(name="researcher", model=model, tools=tools)
        hooks, config = ToolstreamHooks(tracker), run_config(tracker)
        result = Runner.run_streamed(
            agent, "Research structured concurrency", hooks=hooks, run_config=config
        )
        async for _ in track_run(tracker, result, approval_timeout=approval_timeout):
            pass
        if result.interruptions:
            state = await apply_decisions(tracker, result)
            resumed = Runner.run_streamed(agent, state, hooks=hooks, run_config=config)
            async for _ in track_run(tracker, resumed):
                pass

    return turn


def _langgraph(speed: float, approval_timeout: float) -> Turn:
    import json
    from typing import Annotated

    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk
    from langchain_core.tools import InjectedToolCallId, ToolException, tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    from toolstream.integrations.langgraph import report_progress, resume_command, track_graph

    script = {"turn": 0}

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("streams only")

        async def _astream(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            step = sum(1 for m in messages if getattr(m, "type", "") == "ai")
            calls = _calls(script["turn"], step)
            if not calls:
                yield ChatGenerationChunk(message=AIMessageChunk(content="Here is what I found."))
                return
            for i, (name, args, call_id) in enumerate(calls):
                part: Any = {
                    "name": name,
                    "args": json.dumps(args),
                    "id": call_id,
                    "index": i,
                    "type": "tool_call_chunk",
                }
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content="", tool_call_chunks=[part])
                )

    @tool
    async def web_search(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list[str]:
        """Search the web."""
        for i in range(4):
            await anyio.sleep(0.2 / speed)
            report_progress(tool_call_id, (i + 1) / 4, message=f"fetched {i + 1} of 4 result pages")
        return _PAGES

    @tool
    async def fetch_page(url: str) -> dict[str, Any]:
        """Fetch a page."""
        await anyio.sleep(0.5 / speed)
        return {"url": url, "status": 200}

    @tool
    async def run_shell(cmd: str) -> str:
        """Run a shell command."""
        await anyio.sleep(0.3 / speed)
        raise ToolException("command failed: exit code 2")

    @tool
    async def send_email(to: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Send an email once a person approves."""
        decision = interrupt({"tool_call_id": tool_call_id, "reason": "Sends an email to the team"})
        return f"sent to {to}" if decision["approved"] else "not sent"

    model = Scripted()

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node(
        "tools",
        ToolNode([web_search, fetch_page, run_shell, send_email], handle_tool_errors=True),
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver())

    async def turn(tracker: Tracker, number: int) -> None:
        script["turn"] = number
        config: Any = {"configurable": {"thread_id": f"demo-{number}"}}
        given: Any = {"messages": [("user", "Research structured concurrency")]}
        async for _ in track_graph(
            tracker, graph, given, config, approval_timeout=approval_timeout
        ):
            pass
        interrupts = (await graph.aget_state(config)).interrupts
        if interrupts:
            command = await resume_command(tracker, interrupts)
            async for _ in track_graph(tracker, graph, command, config):
                pass

    return turn


#: The integration module each framework's demo needs (its ImportError names the extra).
_MODULES = {
    "pydantic-ai": "toolstream.integrations.pydantic_ai",
    "openai-agents": "toolstream.integrations.openai_agents",
    "langgraph": "toolstream.integrations.langgraph",
}


def missing_framework(name: str) -> str | None:
    """Why ``--agent name`` cannot run here (a sentence naming what to install), or None."""
    if name == "simulated":
        return None
    module = _MODULES.get(name)
    if module is None:
        return f"unknown agent {name!r}: simulated, {', '.join(AGENTS)}"
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        return str(exc)
    return None


AgentRunner = Callable[..., Awaitable[None]]


def agent_runner(name: str) -> AgentRunner:
    """What drives the demo's tracker: the simulated agent, or a framework's."""
    if name == "simulated":
        from .agent import run_agent

        return run_agent

    async def run(tracker: Tracker, **options: Any) -> None:
        await run_framework_agent(name, tracker, **options)

    return run


_BUILDERS: dict[str, Callable[[float, float], Turn]] = {
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
    "langgraph": _langgraph,
}


async def run_framework_agent(
    name: str,
    tracker: Tracker,
    *,
    turns: int | None = None,
    speed: float = 1.0,
    approval_timeout: float = 20.0,
) -> None:
    """Run the scenario through framework ``name`` forever (or ``turns`` times).
    ``ImportError`` naming the extra when the framework is not installed."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown agent {name!r}: one of {', '.join(AGENTS)}")
    turn = _BUILDERS[name](speed, approval_timeout / speed)
    number = 1
    while turns is None or number <= turns:
        await turn(tracker, number)
        number += 1
        if turns is None or number <= turns:
            await anyio.sleep(1.5 / speed)
