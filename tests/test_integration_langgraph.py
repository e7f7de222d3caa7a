"""LangChain and LangGraph through toolstream, against the real frameworks, offline: a
``BaseChatModel`` subclass streams ``AIMessageChunk(tool_call_chunks=...)`` (the stock
fake chat models drop tool calls when streaming), with LangGraph's ``ToolNode`` and
``InMemorySaver``. LangGraph's async API runs on asyncio, so these tests do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.tools import InjectedToolCallId, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

import toolstream as ts
from tests.integration_checks import (
    SPOKEN,
    ai_sdk_part_states,
    cancel_once_running,
    events_of,
    import_error_names_the_extra,
    types_of,
    words,
)
from toolstream.integrations.langchain import ToolstreamCallbackHandler
from toolstream.integrations.langgraph import report_progress, resume_command, track_graph
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ScriptedChat(BaseChatModel):
    """Streams scripted tool-call chunks, one turn per call of the model, then "done"."""

    turns: list[list[dict[str, Any]]] = []  # noqa: RUF012 - a pydantic field, copied per model
    n: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        raise NotImplementedError("this model only streams")

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        turn = self.turns[self.n] if self.n < len(self.turns) else None
        self.n += 1
        if turn is None:
            yield ChatGenerationChunk(message=AIMessageChunk(content="done"))
            return
        for item in turn:
            part: Any = {**item, "type": "tool_call_chunk"}
            chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[part]))
            if run_manager is not None:
                await run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk


def first(name: str, call_id: str, args: str, index: int = 0) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "index": index}


def more(args: str, index: int = 0) -> dict[str, Any]:
    return {"name": None, "args": args, "id": None, "index": index}


@tool
async def web_search(q: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> list[str]:
    """Search the web."""
    for i in range(2):
        report_progress(tool_call_id, (i + 1) / 2, message=f"page {i + 1} of 2")
    return [f"https://example.com/{q}"]


@tool
async def shell(cmd: str) -> str:
    """Run a command."""
    raise RuntimeError(f"command failed: {cmd}")


@tool
async def checked(cmd: str) -> str:
    """A tool whose errors the ToolNode hands back to the model."""
    raise ToolException(f"bad command: {cmd}")


@tool
async def slow(seconds: float) -> str:
    """Sleep."""
    await anyio.sleep(seconds)
    return "slept"


@tool
async def send_email(to: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Send an email once a person approves."""
    decision = interrupt({"tool_call_id": tool_call_id, "reason": "Sends an email"})
    if not decision["approved"]:
        return f"not sent: {decision['reason'] or 'denied'}"
    return f"sent to {(decision['args'] or {}).get('to', to)}"


def make_graph(*turns: list[dict[str, Any]]) -> Any:
    model = ScriptedChat(turns=list(turns))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    tools = [web_search, shell, slow, send_email]
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


CONFIG = {"configurable": {"thread_id": "t1"}}


async def drain(tracker: ts.Tracker, graph: Any, given: Any, **options: Any) -> list[Any]:
    return [chunk async for chunk in track_graph(tracker, graph, given, CONFIG, **options)]


async def test_calls_stream_run_and_end_with_the_models_ids() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph(
        [
            first("web_search", "call_a", '{"q": '),
            more('"anyio"}'),
            first("web_search", "call_b", '{"q": "trio"}', index=1),
        ]
    )
    chunks = await drain(tracker, graph, {"messages": [("user", "go")]})
    assert any("agent" in c for c in chunks), "the updates chunks are re-yielded"
    tracker.close()
    assert types_of(bus, "call_a") == [
        "tool.created",
        "tool.args.delta",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.progress",
        "tool.progress",
        "tool.completed",
    ]
    progress = [
        e for e in events_of(bus) if isinstance(e, ts.ToolProgress) and e.call_id == "call_a"
    ]
    assert [(p.fraction, p.message) for p in progress] == [
        (0.5, "page 1 of 2"),
        (1.0, "page 2 of 2"),
    ]
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_tool_that_raises_ends_failed() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph([first("shell", "call_x", '{"cmd": "make"}')])
    with pytest.raises(RuntimeError, match="command failed"):
        await drain(tracker, graph, {"messages": [("user", "go")]})
    tracker.close()
    assert types_of(bus, "call_x")[-1] == "tool.failed"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["failed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_run_cancelled_mid_tool_cancels_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph([first("slow", "call_s", '{"seconds": 30}')])
    await cancel_once_running(
        bus, "call_s", lambda: drain(tracker, graph, {"messages": [("user", "go")]})
    )
    tracker.close()
    assert types_of(bus, "call_s")[-1] == "tool.cancelled"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["cancelled"]


@pytest.mark.parametrize("verdict", ["approve", "deny", "expire", "edit"])
async def test_a_tool_that_asks_a_person(verdict: str) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph([first("send_email", "call_m", '{"to": "bob"}')])
    timeout = 0.2 if verdict == "expire" else 60
    await drain(tracker, graph, {"messages": [("user", "go")]}, approval_timeout=timeout)
    pending = bus.snapshot("s").calls[0]
    assert pending.approval is not None and pending.approval.reason == "Sends an email"
    approval_id = pending.approval.approval_id

    async def person() -> None:
        if verdict in ("approve", "edit"):
            edited = {"to": "carol"} if verdict == "edit" else None
            await bus.resolve_approval("s", approval_id, approved=True, by="alice", args=edited)
        elif verdict == "deny":
            await bus.resolve_approval("s", approval_id, approved=False, by="alice", reason="no")

    interrupts = (await graph.aget_state(CONFIG)).interrupts
    async with anyio.create_task_group() as tg:
        tg.start_soon(person)
        command = await resume_command(tracker, interrupts)
    chunks = await drain(tracker, graph, command)
    tracker.close()
    kinds = types_of(bus, "call_m")
    assert kinds.count("tool.approval.requested") == kinds.count("tool.approval.resolved") == 1
    if verdict in ("approve", "edit"):
        assert kinds[-1] == "tool.completed"
        done = next(e for e in events_of(bus) if isinstance(e, ts.ToolCompleted))
        assert done.result == ("sent to bob" if verdict == "approve" else "sent to carol")
    else:
        # A refusal ends the call denied; the tool, entered again as LangGraph does, is
        # told (what it returns goes to the model) and is no second card.
        assert kinds[-1] == "tool.denied" and kinds.count("tool.denied") == 1
        denied = next(e for e in events_of(bus) if isinstance(e, ts.ToolDenied))
        assert denied.by == ("alice" if verdict == "deny" else "timeout")
        assert {e.call_id for e in events_of(bus) if e.call_id} == {"call_m"}
        told = [c for c in chunks if "tools" in c]
        said = told[0]["tools"]["messages"][0].content
        assert said == ("not sent: no" if verdict == "deny" else "not sent: denied")
    outcomes = [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)]
    assert outcomes == ["interrupted", "completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_the_callback_handler_alone_on_any_runnable() -> None:
    """LangChain without LangGraph: the handler in the config of the tool's own calls."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    handler = ToolstreamCallbackHandler(tracker)
    config: Any = {"callbacks": [handler]}
    call = {"name": "shell", "args": {"cmd": "ls"}, "id": "call_h", "type": "tool_call"}
    with pytest.raises(RuntimeError):
        await shell.ainvoke(call, config=config)
    checked_call = {"name": "checked", "args": {"cmd": "rm"}, "id": "call_c", "type": "tool_call"}
    checked.handle_tool_error = True
    await checked.ainvoke(checked_call, config=config)
    model = ScriptedChat(turns=[[first("web_search", "call_w", '{"q": "x"}')]])
    async for _ in model.astream("go", config=config):  # streamed: chunks reach the handler
        pass
    tracker.close()
    assert types_of(bus, "call_h")[-2:] == ["tool.started", "tool.failed"]
    failed = next(
        e for e in events_of(bus) if isinstance(e, ts.ToolFailed) and e.call_id == "call_c"
    )
    assert failed.error.type == "ToolException", "a handled ToolException is a failure"
    assert types_of(bus, "call_w")[:2] == ["tool.created", "tool.args.delta"]


async def test_every_dialect_of_a_graph_run_passes_the_peers_validators() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph(
        [
            first("web_search", "call_a", '{"q": "anyio"}'),
            first("send_email", "call_m", '{"to": "b"}', 1),
        ]
    )
    await drain(tracker, graph, {"messages": [("user", "go")]})
    pending = next(c.approval for c in bus.snapshot("s").calls if c.approval)
    bus.resolve_approval_now("s", pending.approval_id, approved=True, by="alice")
    command = await resume_command(tracker, (await graph.aget_state(CONFIG)).interrupts)
    await drain(tracker, graph, command)
    tracker.close()
    events = events_of(bus)
    parts = ai_sdk_part_states(events)
    # LangGraph re-runs the interrupted node: the search in it really runs again, a new
    # attempt of the same model call (call_a#2)
    assert parts == {
        "call_a": "output-available",
        "call_a#2": "output-available",
        "call_m": "output-available",
    }


# LangChain's HumanInTheLoopMiddleware (create_agent), both of its interrupt modes.

REMOVED: list[str] = []


@tool
def delete_file(path: str) -> str:
    """Delete a file."""
    REMOVED.append(path)
    return f"deleted {path}"


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def hitl_agent(mode: str) -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    REMOVED.clear()
    model = ScriptedChat(
        turns=[
            [
                first("delete_file", "call_d", '{"path": "/tmp/a"}', 0),
                first("lookup", "call_l", '{"q": "x"}', 1),
            ]
        ]
    )
    gate = HumanInTheLoopMiddleware(interrupt_on={"delete_file": True}, interrupt_mode=mode)  # type: ignore[arg-type]
    return create_agent(
        model, tools=[delete_file, lookup], middleware=[gate], checkpointer=InMemorySaver()
    )


@pytest.mark.parametrize("mode", ["per_call", "batched"])
@pytest.mark.parametrize(
    ("decision", "removed", "last"),
    [
        ({"approved": True}, ["/tmp/a"], "tool.completed"),
        ({"approved": True, "args": {"path": "/tmp/b"}}, ["/tmp/b"], "tool.completed"),
        ({"approved": False, "reason": "keep it"}, [], "tool.denied"),
    ],
)
async def test_human_in_the_loop_middleware_is_an_approval(
    mode: str, decision: dict[str, Any], removed: list[str], last: str
) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = hitl_agent(mode)
    await drain(tracker, agent, {"messages": [{"role": "user", "content": "clean up"}]})
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["interrupted"]
    asked = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalRequested))
    assert asked.call_id == "call_d" and not asked.running, "gated: the tool has not started"
    assert "delete_file" in (asked.reason or "")
    assert REMOVED == []
    await bus.resolve_approval("s", asked.approval_id, by="alice", **decision)
    state = await agent.aget_state(CONFIG)
    await drain(tracker, agent, await resume_command(tracker, state.interrupts))
    tracker.close()
    assert removed == REMOVED
    seen = types_of(bus, "call_d")
    assert seen[-1] == last and seen.count(last) == 1
    assert "tool.started" in seen if last == "tool.completed" else "tool.started" not in seen
    assert_lifecycle(events_of(bus), compare=bus.compare)


def test_without_langgraph_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.integrations.langgraph", "langgraph", "langgraph")


class Talkative(ScriptedChat):
    """Says something (reasoning blocks, then text) before each scripted turn's calls."""

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        if self.n < len(self.turns):
            thinking: Any = [{"type": "reasoning", "reasoning": "A search. "}]
            yield ChatGenerationChunk(message=AIMessageChunk(content=thinking))
            for word in ("Searching ", "now."):
                yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        async for chunk in super()._astream(messages, stop, run_manager, **kwargs):
            yield chunk


def talkative_graph(*turns: list[dict[str, Any]]) -> Any:
    model = Talkative(turns=list(turns))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([web_search]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


@pytest.mark.parametrize("messages", [True, False])
async def test_the_models_words_are_the_runs_messages(messages: bool) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = talkative_graph([first("web_search", "call_w", '{"q": "x"}')])
    await drain(tracker, graph, {"messages": [("user", "go")]}, messages=messages)
    tracker.close()
    assert words(bus) == (SPOKEN if messages else [("tool.created", "call_w")])


async def test_inside_an_open_run_a_graph_run_joins_it() -> None:
    """A caller's own ``tracker.run()`` around several graph runs (a turn that resumes
    the graph after a person decided) is one run: the calls and words are its own."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_graph([first("send_email", "call_m", '{"to": "b"}')])
    async with tracker.run("turn-1"):
        await drain(tracker, graph, {"messages": [("user", "go")]})
        pending = bus.snapshot("s").calls[0].approval
        assert pending is not None
        await bus.resolve_approval("s", pending.approval_id, approved=True, by="alice")
        await drain(
            tracker,
            graph,
            await resume_command(tracker, (await graph.aget_state(CONFIG)).interrupts),
        )
    tracker.close()
    runs = [
        (e.type, e.run_id) for e in events_of(bus) if isinstance(e, (ts.RunStarted, ts.RunFinished))
    ]
    assert runs == [("run.started", "turn-1"), ("run.finished", "turn-1")]
    assert {e.run_id for e in events_of(bus)} == {"turn-1"}
    assert types_of(bus, "call_m")[-1] == "tool.completed"


async def test_a_custom_event_from_inside_a_tool_is_that_calls_progress() -> None:
    """``adispatch_custom_event`` with no ``tool_call_id``, from a tool or from a runnable
    the tool runs: the callback handler knows which tool run it came from."""
    from langchain_core.callbacks import adispatch_custom_event
    from langchain_core.runnables import RunnableLambda

    async def deeper(x: str) -> str:
        await adispatch_custom_event("progress", {"progress": 0.9, "message": "almost"})
        return x

    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        await adispatch_custom_event("progress", {"progress": 0.5, "message": "half"})
        return await RunnableLambda(deeper).ainvoke(url)

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    config: Any = {"callbacks": [ToolstreamCallbackHandler(tracker)]}
    call = {"name": "fetch", "args": {"url": "u"}, "id": "call_f", "type": "tool_call"}
    await fetch.ainvoke(call, config=config)
    tracker.close()
    progress = [
        (e.call_id, e.fraction, e.message) for e in events_of(bus) if isinstance(e, ts.ToolProgress)
    ]
    assert progress == [("call_f", 0.5, "half"), ("call_f", 0.9, "almost")]
    assert types_of(bus, "call_f")[-1] == "tool.completed"


# -- sub-agents: a graph run inside a tool (an agent as a tool), a subgraph as a node --

#: What each sub-agent's model does, by the topic its tool was given.
SCOUT_TURNS: dict[str, list[list[dict[str, Any]]]] = {
    "anyio": [[first("web_search", "in_anyio", '{"q": "anyio"}')]],
    "trio": [[first("picky", "in_trio", '{"cmd": "rm"}')]],  # handled: the agent goes on
    "boom": [[first("shell", "in_boom", '{"cmd": "ls"}')]],  # raises through the tool
    "slow": [[first("slow", "in_slow", '{"seconds": 30}')]],
}


@tool
async def picky(cmd: str) -> str:
    """A tool whose error goes back to the model (a handled ``ToolException``)."""
    raise ToolException(f"bad command: {cmd}")


picky.handle_tool_error = True


def make_scout(topic: str) -> Any:
    """A prebuilt-style agent graph (model node, ``ToolNode``), named ``scout``."""
    model = ScriptedChat(turns=SCOUT_TURNS[topic])

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([web_search, shell, picky, slow]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(name="scout")


@tool
async def research(topic: str) -> str:
    """Ask the scout agent."""
    out = await make_scout(topic).ainvoke({"messages": [("user", topic)]})
    return str(out["messages"][-1].content)


def make_manager(*turns: list[dict[str, Any]]) -> Any:
    model = ScriptedChat(turns=list(turns))

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([research, web_search]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


async def test_an_agent_run_by_a_tool_nests_under_its_call() -> None:
    """Two calls of an agent-as-a-tool in one turn run in one task of the tool node:
    each sub-agent still nests under its own call (LangChain's run tree, not the
    namespace, says which), with its calls, its words and a handled failure."""
    from tests.subagent_checks import assert_tree, calls_in, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_manager(
        [
            first("research", "out_a", '{"topic": "anyio"}'),
            first("research", "out_t", '{"topic": "trio"}', index=1),
        ]
    )
    chunks = await drain(tracker, graph, {"messages": [("user", "go")]})
    tracker.close()
    events = assert_tree(bus)
    for parent, inner, state in (
        ("out_a", "in_anyio", "completed"),
        ("out_t", "in_trio", "failed"),
    ):
        (sub,) = sub_runs(events, parent)
        assert (sub.agent, sub.parent_run_id) == ("scout", events[0].run_id)
        assert calls_in(events, sub.run_id) == [inner]
        assert types_of(bus, inner)[-1] == f"tool.{state}"
        assert outcome(events, sub.run_id) == "completed"
        assert types_of(bus, parent)[-1] == "tool.completed"
        said = [e for e in events if isinstance(e, ts.MessageDelta) and e.run_id == sub.run_id]
        assert "".join(e.text for e in said) == "done"  # the sub-agent's own answer
    # the caller's chunks are the top graph's, as without sub-agents
    assert all("agent" in c or "tools" in c for c in chunks)


async def test_subgraph_chunks_are_re_yielded_only_when_asked() -> None:
    graph = make_manager([first("research", "out_a", '{"topic": "anyio"}')])
    tracker = ts.Tracker(ts.EventBus(), "s")
    plain = await drain(tracker, graph, {"messages": [("user", "go")]}, stream_mode=["updates"])
    assert all(mode == "updates" for mode, _ in plain)
    graph = make_manager([first("research", "out_a", '{"topic": "anyio"}')])
    given = {"messages": [("user", "go")]}
    nested = [
        c
        async for c in track_graph(
            tracker, graph, given, CONFIG, stream_mode=["tools"], subgraphs=True
        )
    ]
    # (namespace, mode, chunk), as astream gives them: the sub-agent's too
    assert {ns for ns, _, _ in nested} > {()}
    assert {mode for _, mode, _ in nested} == {"tools"}


async def test_a_sub_agent_that_raises_fails_its_call_and_its_run() -> None:
    from tests.subagent_checks import assert_tree, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_manager([first("research", "out_b", '{"topic": "boom"}')])
    with pytest.raises(RuntimeError, match="command failed"):
        await drain(tracker, graph, {"messages": [("user", "go")]})
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_b")
    assert types_of(bus, "in_boom")[-1] == "tool.failed"
    assert outcome(events, sub.run_id) == "failed"
    assert types_of(bus, "out_b")[-1] == "tool.failed"


async def test_cancelling_the_run_mid_sub_agent_ends_the_tree_innermost_first() -> None:
    from tests.subagent_checks import assert_tree, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_manager([first("research", "out_s", '{"topic": "slow"}')])
    await cancel_once_running(
        bus, "in_slow", lambda: drain(tracker, graph, {"messages": [("user", "go")]})
    )
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_s")
    assert types_of(bus, "in_slow")[-1] == "tool.cancelled"
    assert outcome(events, sub.run_id) == "cancelled"
    assert types_of(bus, "out_s")[-1] == "tool.cancelled"


async def test_a_subgraph_added_as_a_node_is_the_agents_own_work() -> None:
    """A subgraph node is a step of the same agent, not a call: its calls join the run,
    with no sub-run (they were not seen at all before subgraphs were streamed)."""
    from tests.subagent_checks import assert_tree

    SCOUT_TURNS["node"] = [[first("web_search", "in_node", '{"q": "n"}')]]
    graph = StateGraph(MessagesState)
    graph.add_node("scout", make_scout("node"))
    graph.add_edge(START, "scout")
    compiled = graph.compile(checkpointer=InMemorySaver())
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await drain(tracker, compiled, {"messages": [("user", "go")]})
    tracker.close()
    events = assert_tree(bus)
    runs = [e for e in events if isinstance(e, ts.RunStarted)]
    assert len(runs) == 1
    assert types_of(bus, "in_node")[-1] == "tool.completed"
    assert next(e for e in events if e.call_id == "in_node").run_id == runs[0].run_id


async def test_the_callback_handler_nests_an_agent_run_by_a_tool() -> None:
    """Without track_graph: the handler in the config follows ``parent_run_id`` from the
    sub-agent's tool up to the call whose tool runs it."""
    from tests.subagent_checks import assert_tree, calls_in, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    graph = make_manager([first("research", "out_h", '{"topic": "anyio"}')])
    config: Any = {**CONFIG, "callbacks": [ToolstreamCallbackHandler(tracker)]}
    with tracker.run("r1"):
        async for _ in graph.astream(
            {"messages": [("user", "go")]}, config, stream_mode="messages"
        ):
            pass
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_h")
    assert (sub.agent, sub.parent_run_id) == ("scout", "r1")
    assert calls_in(events, sub.run_id) == ["in_anyio"]
