"""The chat scenarios' script, played by real frameworks with their own fake models and
served through their ``chat_agent``: LangGraph (a ``BaseChatModel`` that streams, a
``ToolNode``, ``interrupt()`` inside the tool that needs approval — or LangChain's
``HumanInTheLoopMiddleware``), pydantic-ai (``FunctionModel``, ``requires_approval``)
and the OpenAI Agents SDK (``ScriptedModel`` steps that answer what they are asked,
``needs_approval``).

The user's words pick the scenario, as for the hand-written script agent:

- "weather": text, ``get_weather`` {"city": "Paris"} (progress 0.5 "halfway there",
  then {"city": "Paris", "temperature": 21}), text "It is 21 degrees in Paris."
- "build": text, ``run_build`` {"target": "all"} fails "exit code 1", text.
- "email": text, ``send_email`` {"to": "team@example.com"} needs approval ("Sends an
  email"), runs 0.5 s once approved ({"sent": true}); text "Sent." or "Not sent."
- "story": 30 words one every 0.05 s, ``lookup`` {"q": "ending"} ({"ok": 1} after
  0.2 s), text "The end."
- "wait": text, ``sleep`` {"seconds": 30}.
- "crash": text "Thinking.", then the model raises ``RuntimeError("the model is
  unavailable")``.

(No ``from __future__ import annotations`` here: the frameworks read the tools'
annotations, and these tools are defined where their types are imported.)
"""

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio

import toolstream as ts
from tests.chat_scenarios import CRASH, STORY
from toolstream.chat import ChatApp, StartTurn

PACE = 0.05

#: (text before, tool, args, call id suffix) of each scenario's first model response.
FIRST: dict[str, tuple[str, str, dict[str, Any]]] = {
    "weather": ("Let me check the weather in Paris.", "get_weather", {"city": "Paris"}),
    "build": ("Running the build.", "run_build", {"target": "all"}),
    "email": ("I will email the team.", "send_email", {"to": "team@example.com"}),
    "story": ("".join(STORY), "lookup", {"q": "ending"}),
    "wait": ("Working on it.", "sleep", {"seconds": 30}),
}


def first_call(text: str) -> tuple[str, str, dict[str, Any]]:
    """The model's first response for the user's words: (text, tool, args). "slowly"
    makes the email take 3 s once approved (a cut and a resume land while it runs)."""
    said, name, args = FIRST[scenario_of(text)]
    if name == "send_email" and "slowly" in text.lower():
        args = {**args, "seconds": 3}
    return said, name, args


def scenario_of(text: str) -> str:
    """The scenario the user's words pick."""
    for name in ("weather", "build", "email", "story", "wait", "crash"):
        if name in text.lower():
            return name
    return "weather"


def last_words(scenario: str, tool_output: str) -> str:
    """What the model says once its call returned (``tool_output`` as it reads it)."""
    if scenario == "weather":
        return "It is 21 degrees in Paris."
    if scenario == "build":
        return "The build failed."
    if scenario == "email":
        return "Sent." if "true" in tool_output.lower() else "Not sent."
    if scenario == "story":
        return "The end."
    return "Done."


def call_id(scenario: str, n: int) -> str:
    return f"call_{scenario}_{n}"


async def send_email(to: str, seconds: float = 0.5) -> dict[str, Any]:
    """Send an email."""
    await anyio.sleep(seconds)
    return {"sent": True}


async def lookup(q: str) -> dict[str, Any]:
    """Look something up."""
    await anyio.sleep(0.2)
    return {"ok": 1}


async def sleep(seconds: float) -> str:
    """Wait."""
    await anyio.sleep(seconds)
    return "slept"


async def get_weather_body(progress: Callable[[float, str], Any]) -> dict[str, Any]:
    await anyio.sleep(0.05)
    done = progress(0.5, "halfway there")
    if done is not None:
        await done
    await anyio.sleep(0.05)
    return {"city": "Paris", "temperature": 21}


# -- LangGraph ---------------------------------------------------------------------------


def langgraph_agent(*, hitl: bool = False) -> Any:
    """A compiled graph playing the script (``hitl``: the approval through LangChain's
    ``HumanInTheLoopMiddleware`` in ``create_agent``, not ``interrupt()`` in the tool)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk, BaseMessage
    from langchain_core.outputs import ChatGenerationChunk, ChatResult
    from langchain_core.tools import InjectedToolCallId, ToolException, tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import interrupt

    from toolstream.integrations.langgraph import report_progress

    turns = {"n": 0}

    class ScriptedChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            raise NotImplementedError("this model only streams")

        async def _astream(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> AsyncIterator[ChatGenerationChunk]:
            human = max(i for i, m in enumerate(messages) if m.type == "human")
            scenario = scenario_of(str(messages[human].content))
            answered = [m for m in messages[human:] if m.type == "tool"]
            if scenario == "crash":
                yield ChatGenerationChunk(message=AIMessageChunk(content="Thinking."))
                raise RuntimeError(CRASH)
            if answered:
                said = last_words(scenario, str(answered[-1].content))
                yield ChatGenerationChunk(message=AIMessageChunk(content=said))
                return
            text, name, args = first_call(str(messages[human].content))
            words = STORY if scenario == "story" else [text]
            for word in words:
                yield ChatGenerationChunk(message=AIMessageChunk(content=word))
                if scenario == "story":
                    await anyio.sleep(PACE)
            turns["n"] += 1
            part: Any = {
                "name": name,
                "args": json.dumps(args),
                "id": call_id(scenario, turns["n"]),
                "index": 0,
                "type": "tool_call_chunk",
            }
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[part]))

    @tool
    async def get_weather(
        city: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> dict[str, Any]:
        """The weather in a city."""
        return await get_weather_body(lambda f, m: report_progress(tool_call_id, f, message=m))

    @tool
    async def run_build(target: str) -> str:
        """Run the build."""
        raise ToolException("make: exit code 1")

    run_build.handle_tool_error = True  # the model reads the error and goes on

    @tool
    async def send_email_asking(
        to: str, tool_call_id: Annotated[str, InjectedToolCallId], seconds: float = 0.5
    ) -> dict[str, Any]:
        """Send an email (a person approves it first)."""
        decision = interrupt({"tool_call_id": tool_call_id, "reason": "Sends an email"})
        if not decision["approved"]:
            return {"sent": False}
        await anyio.sleep(seconds)
        return {"sent": True}

    plain = [tool(send_email), tool(lookup), tool(sleep)]

    model = ScriptedChat()
    if hitl:
        from langchain.agents import create_agent
        from langchain.agents.middleware import HumanInTheLoopMiddleware

        # An InterruptOnConfig (its TypedDict marks optional keys as required).
        ask: Any = {"allowed_decisions": ["approve", "reject"], "description": "Sends an email"}
        gate = HumanInTheLoopMiddleware(interrupt_on={"send_email": ask})
        tools: list[Any] = [get_weather, run_build, *plain]
        return create_agent(model, tools=tools, middleware=[gate], checkpointer=InMemorySaver())

    send_email_asking.name = "send_email"

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    node = ToolNode(
        [get_weather, run_build, send_email_asking, *plain[1:]], handle_tool_errors=True
    )
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


# -- pydantic-ai -------------------------------------------------------------------------


def pydantic_ai_agent() -> Any:
    """A pydantic-ai ``Agent`` on a ``FunctionModel`` playing the script."""
    from pydantic_ai import Agent, RunContext, ToolFailed
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from toolstream.integrations.pydantic_ai import report_progress

    turns = {"n": 0}

    async def model(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        prompt, answered = "", ""
        responses = 0
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                        prompt, responses, answered = part.content, 0, ""
                    elif isinstance(part, ToolReturnPart) or part.part_kind == "retry-prompt":
                        answered = json.dumps(getattr(part, "content", ""))
            elif isinstance(message, ModelResponse):
                responses += 1
        scenario = scenario_of(prompt)
        if scenario == "crash":
            yield "Thinking."
            raise RuntimeError(CRASH)
        if responses:
            yield last_words(scenario, answered.replace('\\"', '"'))
            return
        text, name, args = first_call(prompt)
        for word in STORY if scenario == "story" else [text]:
            yield word
            if scenario == "story":
                await anyio.sleep(PACE)
        turns["n"] += 1
        yield {
            0: DeltaToolCall(
                name=name, json_args=json.dumps(args), tool_call_id=call_id(scenario, turns["n"])
            )
        }

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=model))

    @agent.tool
    async def get_weather(ctx: RunContext[None], city: str) -> dict[str, Any]:
        """The weather in a city."""
        return await get_weather_body(lambda f, m: report_progress(ctx, f, message=m))

    @agent.tool_plain
    async def run_build(target: str) -> str:
        """Run the build."""
        raise ToolFailed("make: exit code 1")

    agent.tool_plain(requires_approval=True)(send_email)
    agent.tool_plain(lookup)
    agent.tool_plain(sleep)

    return agent


# -- OpenAI Agents SDK -----------------------------------------------------------------


def openai_agents_agent() -> Any:
    """An Agents SDK ``Agent`` on a ``ScriptedModel`` whose steps answer what they are
    asked (``ModelStep.respond``)."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.testing.model import ModelCall, ModelStep, _stream_events_for_step
    from agents.tool_context import ToolContext

    from toolstream.integrations.openai_agents import report_progress

    set_tracing_disabled(True)
    turns = {"n": 0}
    model = ScriptedModel()

    def respond(call: ModelCall) -> ModelStep:
        model.enqueue(ModelStep.respond(respond))  # the next call is answered the same way
        items = call.input if isinstance(call.input, list) else [call.input]
        prompt, answered, seen = "", "", 0
        for item in items:
            role = item.get("role") if isinstance(item, dict) else None
            kind = item.get("type") if isinstance(item, dict) else None
            if role == "user":
                content = item.get("content")
                prompt = content if isinstance(content, str) else json.dumps(content)
                answered, seen = "", 0
            elif kind == "function_call_output":
                answered, seen = str(item.get("output")), seen + 1
        scenario = scenario_of(prompt)
        if scenario == "crash":
            return ModelStep.stream(_crashing(assistant_message("Thinking.")))
        if seen:
            return ModelStep(output=[assistant_message(last_words(scenario, answered))])
        text, name, args = first_call(prompt)
        turns["n"] += 1
        output = [
            assistant_message(text),
            function_call(name, args, call_id=call_id(scenario, turns["n"])),
        ]
        if scenario != "story":
            return ModelStep(output=output)
        return ModelStep.stream(_paced(ModelStep(output=output)), output=output)

    def _paced(step: ModelStep) -> Any:
        async def events(call: ModelCall) -> AsyncIterator[Any]:
            for event in _stream_events_for_step(step, preserve_raw_usage=False):
                if event.type != "response.output_text.delta":
                    yield event
                    continue
                for word in STORY:  # the answer word by word, paced
                    yield event.model_copy(update={"delta": word})
                    await anyio.sleep(PACE)

        return events

    def _crashing(item: Any) -> Any:
        async def events(call: ModelCall) -> AsyncIterator[Any]:
            for event in _stream_events_for_step(
                ModelStep(output=[item]), preserve_raw_usage=False
            ):
                yield event
                if event.type == "response.output_text.delta":
                    raise RuntimeError(CRASH)

        return events

    model.enqueue(ModelStep.respond(respond))

    @function_tool
    async def get_weather(ctx: ToolContext[Any], city: str) -> dict[str, Any]:
        """The weather in a city."""
        return await get_weather_body(lambda f, m: report_progress(ctx, f, message=m))

    @function_tool
    async def run_build(target: str) -> str:
        """Run the build."""
        raise RuntimeError("make: exit code 1")

    plain = [function_tool(send_email, needs_approval=True), function_tool(lookup)]
    tools: list[Any] = [get_weather, run_build, *plain, function_tool(sleep)]
    return Agent(name="assistant", model=model, tools=tools)


# -- the gateways -------------------------------------------------------------------------


def start_turn_of(framework: str, **options: Any) -> StartTurn:
    """``chat_agent(...)`` of ``framework`` over its scripted agent."""
    if framework in ("langgraph", "langgraph-hitl"):
        from toolstream.integrations.langgraph import chat_agent as langgraph_chat

        return langgraph_chat(langgraph_agent(hitl=framework == "langgraph-hitl"), **options)
    # Neither says why a call needs a person: chat_agent is told.
    options = {"approval_reason": {"send_email": "Sends an email"}, **options}
    if framework == "pydantic-ai":
        from toolstream.integrations.pydantic_ai import chat_agent as pydantic_chat

        return pydantic_chat(pydantic_ai_agent(), **options)
    if framework == "openai-agents":
        from toolstream.integrations.openai_agents import chat_agent as agents_chat

        return agents_chat(openai_agents_agent(), **options)
    raise ValueError(f"unknown framework {framework!r}")


def framework_chat_app(framework: str, bus: ts.Bus, **options: Any) -> ChatApp:
    """``ChatApp(bus, chat_agent(<the framework's scripted agent>))``."""
    return ChatApp(bus, start_turn_of(framework), **options)


FRAMEWORKS = ("langgraph", "langgraph-hitl", "pydantic-ai", "openai-agents")
