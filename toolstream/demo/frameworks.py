"""The demo's scenario through a real agent framework, with the framework's own fake
model (``toolstream demo --agent pydantic-ai|openai-agents|langgraph``): no API key.

Each turn the model says what it will do and asks, in one response, for a web search
(with progress), two page fetches that run in parallel and a shell command that fails;
then, in a second response, says why and asks for an email that needs a person's
approval; once the email is decided, it answers. The framework runs the calls through
its toolstream integration and waits for the decision (Approve / Deny on a page, or the
approval expires).

The same agent (an instance for each) serves both demo pages: the tool-card page's loop
drives it turn after turn on session ``demo`` (:func:`run_framework_agent`), and the chat
page's turns run it through the integration's ``chat_agent`` (:func:`chat_turns`). Its
fake model reads the conversation it is given, so it plays the turn again after any
number of earlier ones: it counts its own responses after the user's last message.
"""

import itertools
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import anyio

from toolstream import Tracker
from toolstream.chat import StartTurn

__all__ = ["AGENTS", "agent_runner", "chat_turns", "missing_framework", "run_framework_agent"]

#: The frameworks the demo can drive, by the name ``--agent`` takes.
AGENTS = ("pydantic-ai", "openai-agents", "langgraph")

_PAGES = ["https://anyio.readthedocs.io/", "https://trio.readthedocs.io/"]

#: What the model says before its calls, and before it asks to send the email.
FIRST_WORDS = "Let me research that: a web search, two pages at once, and the tests."
EMAIL_WORDS = "The tests fail on this machine. I would like to email these notes to the team."


def answer(email_output: str) -> str:
    """The model's last words, once the email was decided (``email_output``: what the
    tool returned, or why it did not run)."""
    if "sent to" in email_output:
        return "Done: anyio runs on asyncio and trio, and the team has the notes."
    return "Done: anyio runs on asyncio and trio. I did not email the team."


Call = tuple[str, dict[str, Any], str]


class Script:
    """What the fake model says and calls at each step of a turn. Each turn's calls
    get ids of their own (``call_<n>_search``, ...): n counts the turns this model
    played."""

    def __init__(self) -> None:
        self._numbers: Iterator[int] = itertools.count(1)

    def step(self, step: int, called: Sequence[str], email_output: str) -> tuple[str, list[Call]]:
        """The words and calls of response ``step`` (0, 1, 2) of a turn, given the ids of
        the calls made in the turn so far and what the email call returned."""
        if step == 0:
            prefix = f"call_{next(self._numbers)}"
            return FIRST_WORDS, [
                ("web_search", {"query": "structured concurrency"}, f"{prefix}_search"),
                ("fetch_page", {"url": _PAGES[0]}, f"{prefix}_fetch1"),
                ("fetch_page", {"url": _PAGES[1]}, f"{prefix}_fetch2"),
                ("run_shell", {"cmd": "pytest -x"}, f"{prefix}_shell"),
            ]
        if step == 1:
            prefix = called[0].rsplit("_", 1)[0] if called else f"call_{next(self._numbers)}"
            return EMAIL_WORDS, [("send_email", {"to": "team@example.com"}, f"{prefix}_email")]
        return answer(email_output), []


Turn = Callable[[Tracker, int], Awaitable[None]]


class Scenario:
    """One framework's demo agent: ``agent`` (what its ``chat_agent`` takes) and
    ``turn(tracker, number)``, the tool-card page's turn."""

    def __init__(self, agent: Any, turn: Turn) -> None:
        self.agent = agent
        self.turn = turn


def _pydantic_ai(speed: float, approval_timeout: float) -> Scenario:
    import json

    from pydantic_ai import Agent, DeferredToolRequests, RunContext, ToolFailed
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from toolstream.integrations.pydantic_ai import (
        capability,
        deferred_tool_results,
        report_progress,
    )

    script = Script()

    async def model(messages: list[Any], info: AgentInfo) -> Any:
        asked = max(
            (
                i
                for i, m in enumerate(messages)
                if isinstance(m, ModelRequest)
                and any(isinstance(p, UserPromptPart) for p in m.parts)
            ),
            default=0,
        )
        this_turn = messages[asked:]
        parts = [p for m in this_turn for p in m.parts]
        words, calls = script.step(
            sum(isinstance(m, ModelResponse) for m in this_turn),
            [p.tool_call_id for p in parts if isinstance(p, ToolCallPart)],
            " ".join(
                str(p.content)
                for p in parts
                if isinstance(p, ToolReturnPart) and p.tool_name == "send_email"
            ),
        )
        yield words
        for i, (tool, args, call_id) in enumerate(calls):
            yield {i: DeltaToolCall(name=tool, json_args=json.dumps(args), tool_call_id=call_id)}

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
        await anyio.sleep(0.3 / speed)
        return f"sent to {to}"

    async def turn(tracker: Tracker, number: int) -> None:
        hooks = [capability(tracker, approval_timeout=approval_timeout)]
        result = await agent.run("Research structured concurrency", capabilities=hooks)
        if isinstance(result.output, DeferredToolRequests):
            decided = await deferred_tool_results(tracker, result.output)
            await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=decided,
                capabilities=hooks,
            )

    return Scenario(agent, turn)


def _openai_agents(speed: float, approval_timeout: float) -> Scenario:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import (
        ModelCall,
        ModelStep,
        ScriptedModel,
        assistant_message,
        function_call,
    )
    from agents.tool_context import ToolContext

    from toolstream.integrations.openai_agents import (
        ToolstreamHooks,
        apply_decisions,
        report_progress,
        run_config,
        track_run,
    )

    set_tracing_disabled(True)
    script = Script()
    model = ScriptedModel()

    def respond(call: ModelCall) -> ModelStep:
        model.enqueue(ModelStep.respond(respond))  # the next call is answered the same way
        given = call.input
        items: list[Any] = given if isinstance(given, list) else [{"role": "user"}]
        asked = max((i for i, item in enumerate(items) if _get(item, "role") == "user"), default=0)
        this_turn = items[asked + 1 :]
        called = [
            str(_get(item, "call_id"))
            for item in this_turn
            if _get(item, "type") == "function_call"
        ]
        email = " ".join(
            str(_get(item, "output"))
            for item in this_turn
            if _get(item, "type") == "function_call_output"
            and str(_get(item, "call_id")).endswith("_email")
        )
        step = sum(1 for item in this_turn if _get(item, "role") == "assistant")
        words, calls = script.step(step, called, email)
        output: list[Any] = [assistant_message(words)]
        output += [function_call(t, a, call_id=c) for t, a, c in calls]
        return ModelStep(output=output)

    model.enqueue(ModelStep.respond(respond))

    @function_tool
    async def web_search(ctx: ToolContext[Any], query: str) -> list[str]:
        """Search the web."""
        for i in range(4):
            await anyio.sleep(0.2 / speed)
            report_progress(ctx, (i + 1) / 4, message=f"fetched {i + 1} of 4 result pages")
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
    async def send_email(to: str) -> str:
        """Send an email."""
        await anyio.sleep(0.3 / speed)
        return f"sent to {to}"

    tools: list[Any] = [web_search, fetch_page, run_shell, send_email]
    agent: Agent[Any] = Agent(name="researcher", model=model, tools=tools)

    async def turn(tracker: Tracker, number: int) -> None:
        hooks, config = ToolstreamHooks(tracker), run_config(tracker)
        prompt: list[Any] = [{"role": "user", "content": "Research structured concurrency"}]
        result = Runner.run_streamed(agent, prompt, hooks=hooks, run_config=config)
        async for _ in track_run(tracker, result, approval_timeout=approval_timeout):
            pass
        if result.interruptions:
            state = await apply_decisions(tracker, result)
            resumed = Runner.run_streamed(agent, state, hooks=hooks, run_config=config)
            async for _ in track_run(tracker, resumed):
                pass

    return Scenario(agent, turn)


def _get(item: Any, name: str) -> Any:
    """A field of an Agents SDK input item (a dict, or a model object)."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _langgraph(speed: float, approval_timeout: float) -> Scenario:
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

    script = Script()

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
            # The thread holds every turn (the checkpointer): this turn began at the
            # user's last message.
            asked = max((i for i, m in enumerate(messages) if m.type == "human"), default=0)
            this_turn = messages[asked:]
            words, calls = script.step(
                sum(1 for m in this_turn if m.type == "ai"),
                [c["id"] for m in this_turn if m.type == "ai" for c in m.tool_calls],
                " ".join(
                    str(m.content)
                    for m in this_turn
                    if m.type == "tool" and getattr(m, "name", None) == "send_email"
                ),
            )
            yield ChatGenerationChunk(message=AIMessageChunk(content=words))
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
        if not decision["approved"]:
            return "not sent"
        await anyio.sleep(0.3 / speed)
        return f"sent to {to}"

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

    return Scenario(graph, turn)


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


_BUILDERS: dict[str, Callable[[float, float], Scenario]] = {
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
    "langgraph": _langgraph,
}


def _scenario(name: str, speed: float, approval_timeout: float) -> Scenario:
    if name not in _BUILDERS:
        raise ValueError(f"unknown agent {name!r}: one of {', '.join(AGENTS)}")
    import importlib

    importlib.import_module(_MODULES[name])  # first: its ImportError names the extra
    return _BUILDERS[name](speed, approval_timeout)


async def run_framework_agent(
    name: str,
    tracker: Tracker,
    *,
    turns: int | None = None,
    speed: float = 1.0,
    approval_timeout: float = 20.0,
) -> None:
    """Run the scenario through framework ``name`` forever (or ``turns`` times), each
    turn one run however often the framework is invoked in it (as a chat turn is).
    ``ImportError`` naming the extra when the framework is not installed."""
    turn = _scenario(name, speed, approval_timeout / speed).turn
    number = 1
    while turns is None or number <= turns:
        async with tracker.run(title=f"Turn {number}: research structured concurrency"):
            await turn(tracker, number)
        number += 1
        if turns is None or number <= turns:
            await anyio.sleep(1.5 / speed)


def chat_turns(name: str, *, speed: float = 1.0, approval_timeout: float = 300.0) -> StartTurn:
    """The chat page's ``start_turn`` for framework ``name``: its integration's
    ``chat_agent`` over the scenario's agent (an agent of its own, not the tool-card
    page's). ``approval_timeout``: seconds at speed 1. ``ImportError`` naming the extra
    when the framework is not installed."""
    scenario = _scenario(name, speed, approval_timeout / speed)
    timeout = approval_timeout / speed
    if name == "langgraph":
        from toolstream.integrations.langgraph import chat_agent as langgraph_chat

        return langgraph_chat(scenario.agent, approval_timeout=timeout)
    if name == "pydantic-ai":
        from toolstream.integrations.pydantic_ai import chat_agent as pydantic_ai_chat

        return pydantic_ai_chat(scenario.agent, approval_timeout=timeout)
    from toolstream.integrations.openai_agents import chat_agent as openai_agents_chat

    return openai_agents_chat(scenario.agent, approval_timeout=timeout)
