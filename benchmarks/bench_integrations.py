"""What an integration costs a framework: one agent run with 10 tool calls made by the
framework's own fake model, with and without toolstream, in the same process.

Each framework runs the same script both ways (the model asks for 10 tool calls in one
turn, then answers); rounds alternate A B A B and each side's figure is the median of
its rounds. With toolstream: a ``Tracker`` on an ``EventBus`` with one subscriber that
drains what it gets, and the integration's entry point (pydantic-ai's capability, the
OpenAI Agents SDK's hooks + run config + ``track_run``, LangGraph's ``track_graph``).
Target: at most 1.10 times the run without it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import toolstream as ts

CALLS = 10


def _pydantic_ai() -> tuple[Callable[[], Awaitable[None]], Callable[[ts.Tracker], Awaitable[None]]]:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

    from toolstream.integrations.pydantic_ai import capability

    async def stream(messages: list[Any], info: AgentInfo) -> Any:
        if len(messages) == 1:
            for i in range(CALLS):
                yield {
                    i: DeltaToolCall(name="lookup", json_args=f'{{"n": {i}}}', tool_call_id=f"c{i}")
                }
        else:
            yield "done"

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    async def lookup(n: int) -> int:
        return n * 2

    async def drain(ctx: Any, events: Any) -> None:
        async for _ in events:
            pass

    async def plain() -> None:
        # streamed, as the capability makes the run: the same model path both ways
        await agent.run("go", event_stream_handler=drain)

    async def tracked(tracker: ts.Tracker) -> None:
        await agent.run("go", capabilities=[capability(tracker)])

    return plain, tracked


def _pydantic_ai_hooks() -> Callable[[], Awaitable[None]]:
    """The same run with a capability that has the integration's hooks and does nothing
    in them: what pydantic-ai itself charges for the hooks."""
    import dataclasses

    from pydantic_ai.capabilities import AbstractCapability

    @dataclasses.dataclass(init=False)
    class Noop(AbstractCapability[Any]):
        def __init__(self) -> None:
            pass

        async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
            return await handler()

        async def wrap_run_event_stream(self, ctx: Any, *, stream: Any) -> Any:
            async for event in stream:
                yield event

        async def wrap_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
            return await handler(args)

    _, tracked = _pydantic_ai()
    agent = next(
        c.cell_contents for c in tracked.__closure__ or () if hasattr(c.cell_contents, "run")
    )

    async def hooks_only() -> None:
        await agent.run("go", capabilities=[Noop()])

    return hooks_only


def _openai_agents() -> tuple[
    Callable[[], Awaitable[None]], Callable[[ts.Tracker], Awaitable[None]]
]:
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from toolstream.integrations.openai_agents import ToolstreamHooks, run_config, track_run

    set_tracing_disabled(True)

    @function_tool
    def lookup(n: int) -> int:
        """Look up."""
        return n * 2

    def agent() -> Agent[Any]:
        model = ScriptedModel(
            [
                [function_call("lookup", {"n": i}, call_id=f"c{i}") for i in range(CALLS)],
                [assistant_message("done")],
            ]
        )
        return Agent(name="bench", model=model, tools=[lookup])

    async def plain() -> None:
        result = Runner.run_streamed(agent(), "go")
        async for _ in result.stream_events():
            pass

    async def tracked(tracker: ts.Tracker) -> None:
        result = Runner.run_streamed(
            agent(), "go", hooks=ToolstreamHooks(tracker), run_config=run_config(tracker)
        )
        async for _ in track_run(tracker, result):
            pass

    return plain, tracked


def _langgraph() -> tuple[Callable[[], Awaitable[None]], Callable[[ts.Tracker], Awaitable[None]]]:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk, ChatResult
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from toolstream.integrations.langgraph import track_graph

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            # Unstreamed, as a run without token streaming calls the model: the same
            # message, whole.
            whole: Any = None
            async for chunk in self._astream(messages):
                whole = chunk if whole is None else whole + chunk
            return ChatResult(generations=[whole])

        async def _astream(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            if len(messages) > 1:
                yield ChatGenerationChunk(message=AIMessageChunk(content="done"))
                return
            for i in range(CALLS):
                part: Any = {
                    "name": "lookup",
                    "args": f'{{"n": {i}}}',
                    "id": f"c{i}",
                    "index": i,
                    "type": "tool_call_chunk",
                }
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content="", tool_call_chunks=[part])
                )

    @tool
    async def lookup(n: int) -> int:
        """Look up."""
        return n * 2

    model = Scripted()

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile()
    given: Any = {"messages": [("user", "go")]}

    async def plain() -> None:
        # what the caller ran before: the chunks track_graph re-yields (its default mode)
        async for _ in graph.astream(given, stream_mode="updates"):
            pass

    async def tracked(tracker: ts.Tracker) -> None:
        async for _ in track_graph(tracker, graph, given):
            pass

    return plain, tracked


def _langgraph_modes() -> Callable[[], Awaitable[None]]:
    """The same graph streamed with the modes the integration reads, subgraphs included,
    and nothing done with them: what LangGraph itself charges for those streams."""
    from toolstream.integrations.langgraph import NEEDED

    plain, _ = _langgraph()
    graph = next(
        c.cell_contents for c in plain.__closure__ or () if hasattr(c.cell_contents, "astream")
    )
    given: Any = {"messages": [("user", "go")]}

    async def modes_only() -> None:
        async for _ in graph.astream(given, stream_mode=list(NEEDED), subgraphs=True):
            pass

    return modes_only


FRAMEWORKS: dict[str, Callable[[], Any]] = {
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
    "langgraph": _langgraph,
}
#: A third run per framework, between the two: what the framework itself charges for
#: what the integration hooks into (its label in the report, and the run).
EXTRA: dict[str, tuple[str, Callable[[], Callable[[], Awaitable[None]]]]] = {
    "pydantic-ai": ("hooks that do nothing", _pydantic_ai_hooks),
    "langgraph": ("the modes it reads, unread", _langgraph_modes),
}


async def _measure(name: str, runs: int, rounds: int) -> dict[str, float | None]:
    plain, tracked = FRAMEWORKS[name]()
    extra = EXTRA.get(name)
    hooks = extra[1]() if extra is not None else None
    bus = ts.EventBus()  # the defaults a gateway runs with
    sub = bus.subscribe(session="bench", buffer=1_000_000)
    tracker = ts.Tracker(bus, "bench")
    for _ in range(3):  # warm up both paths
        await plain()
        await tracked(tracker)
        sub.take_nowait()
    samples: dict[str, list[float]] = {"without": [], "with": [], "hooks": []}
    ratios: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(runs):
            await plain()
        without = (time.perf_counter() - start) / runs
        if hooks is not None:
            start = time.perf_counter()
            for _ in range(runs):
                await hooks()
            samples["hooks"].append((time.perf_counter() - start) / runs)
        start = time.perf_counter()
        for _ in range(runs):
            await tracked(tracker)
            sub.take_nowait()
        with_ = (time.perf_counter() - start) / runs
        samples["without"].append(without)
        samples["with"].append(with_)
        ratios.append(with_ / without)
    tracker.close()
    bus.close()
    without_ms = statistics.median(samples["without"]) * 1000
    with_ms = statistics.median(samples["with"]) * 1000
    hooks_ms = statistics.median(samples["hooks"]) * 1000 if samples["hooks"] else None
    return {
        "hooks_ms": hooks_ms,
        "without_ms": without_ms,
        "with_ms": with_ms,
        "ratio": with_ms / without_ms,
        "median_round_ratio": statistics.median(ratios),
        "spread": max(ratios) - min(ratios),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Measure every framework (ratio: with / without)."""
    runs, rounds = (3, 1) if quick else (40, 5)
    return {name: asyncio.run(_measure(name, runs, rounds)) for name in FRAMEWORKS}


def report(results: dict[str, Any]) -> str:
    """Markdown."""
    rows = []
    for name, r in results.items():
        hooks = r.get("hooks_ms")
        own = (
            "—"
            if hooks is None
            else f"{EXTRA[name][0]}: {hooks:.2f} ms ({r['with_ms'] / hooks:.2f}×)"
        )
        rows.append(
            f"| {name} | {r['without_ms']:.2f} ms | {r['with_ms']:.2f} ms "
            f"| **{r['ratio']:.2f}×** | {r['median_round_ratio']:.2f}× "
            f"(spread {r['spread']:.2f}) | {own} |"
        )
    return "\n".join(
        [
            f"### Framework integrations: a run of {CALLS} tool calls",
            "",
            "The framework's own fake model asks for 10 tool calls in one turn; the same run "
            "without and with the integration (a Tracker on an EventBus, one subscriber), "
            "alternating rounds. Target: ≤ 1.10×. *Without* is what the caller ran before "
            "(LangGraph: `astream` of the chunks `track_graph` re-yields, its default "
            "`updates`). Last column: the same run with only what the framework charges "
            "for what the integration hooks into (pydantic-ai: a capability whose hooks do "
            "nothing; LangGraph: the stream modes it reads, unread), and toolstream's "
            "share over it.",
            "",
            "| framework | without | with | **ratio of medians** | median of round ratios "
            "| the framework's own share |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
