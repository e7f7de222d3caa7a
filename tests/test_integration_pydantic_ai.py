"""pydantic-ai through toolstream, against the real framework, offline: its own
``FunctionModel`` streams the tool calls (``DeltaToolCall``), no API key, no network.

pydantic-ai runs on asyncio only (it fails under trio with "no running event loop"), so
these tests run on asyncio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingPart,
    DeltaToolCall,
    FunctionModel,
)

import toolstream as ts
from tests import subagent_checks
from tests.integration_checks import (
    ai_sdk_part_states,
    cancel_once_running,
    events_of,
    import_error_names_the_extra,
    types_of,
    words,
)
from toolstream import dialects
from toolstream.dialects import Encoder
from toolstream.integrations.pydantic_ai import (
    capability,
    deferred_tool_results,
    event_stream_handler,
    report_progress,
)
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio

Turn = Sequence["dict[int, DeltaToolCall] | dict[int, DeltaThinkingPart] | str"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def scripted(*turns: Turn) -> FunctionModel:
    """A model that streams ``turns`` in order, one per model request (then "done")."""
    state = {"n": 0}

    async def stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[Any]:
        n = state["n"]
        state["n"] += 1
        for item in turns[n] if n < len(turns) else ["done"]:
            yield item

    return FunctionModel(stream_function=stream)


def call(index: int, name: str, call_id: str, args: str) -> dict[int, DeltaToolCall]:
    return {index: DeltaToolCall(name=name, json_args=args, tool_call_id=call_id)}


def more(index: int, args: str) -> dict[int, DeltaToolCall]:
    return {index: DeltaToolCall(json_args=args)}


def make_agent(model: FunctionModel, **options: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(model, output_type=[str, DeferredToolRequests], **options)

    @agent.tool
    async def web_search(ctx: RunContext[None], q: str) -> list[str]:
        for i in range(3):
            await report_progress(ctx, (i + 1) / 3, message=f"page {i + 1} of 3")
        return [f"https://example.com/{q}"]

    @agent.tool_plain
    async def shell(cmd: str) -> str:
        raise RuntimeError(f"command failed: {cmd}")

    @agent.tool_plain
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "slept"

    @agent.tool_plain(requires_approval=True)
    async def send_email(to: str) -> str:
        return f"sent to {to}"

    return agent


async def test_calls_stream_run_and_end_with_the_models_ids() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted(
        [
            call(0, "web_search", "call_a", '{"q": '),
            more(0, '"anyio"}'),
            call(1, "web_search", "call_b", '{"q": "trio"}'),  # a parallel pair
        ]
    )
    result = await make_agent(model).run("go", capabilities=[capability(tracker)])
    assert result.output == "done"
    tracker.close()
    events = events_of(bus)
    assert_lifecycle(events, compare=bus.compare)
    assert types_of(bus, "call_a")[:4] == [
        "tool.created",
        "tool.args.delta",
        "tool.args.delta",
        "tool.ready",
    ]
    assert types_of(bus, "call_a")[-1] == "tool.completed"
    progress = [e for e in events if isinstance(e, ts.ToolProgress) and e.call_id == "call_a"]
    assert [(p.fraction, p.message) for p in progress] == [
        (pytest.approx(1 / 3), "page 1 of 3"),
        (pytest.approx(2 / 3), "page 2 of 3"),
        (1.0, "page 3 of 3"),
    ]
    completed = next(e for e in events if isinstance(e, ts.ToolCompleted) and e.call_id == "call_b")
    assert completed.result == ["https://example.com/trio"]
    runs = [e for e in events if isinstance(e, ts.RunFinished)]
    assert [r.outcome for r in runs] == ["completed"]
    assert {e.run_id for e in events if e.call_id} == {runs[0].run_id}, "one run per agent run"


async def test_a_tool_that_raises_ends_failed_and_so_does_the_run() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted([call(0, "shell", "call_x", '{"cmd": "make"}')])
    with pytest.raises(RuntimeError, match="command failed"):
        await make_agent(model).run("go", capabilities=[capability(tracker)])
    tracker.close()
    assert types_of(bus, "call_x")[-1] == "tool.failed"
    failed = next(e for e in events_of(bus) if isinstance(e, ts.ToolFailed))
    assert failed.error.type == "RuntimeError" and "make" in failed.error.message
    finished = next(e for e in events_of(bus) if isinstance(e, ts.RunFinished))
    assert finished.outcome == "failed"
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_run_cancelled_mid_tool_cancels_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted([call(0, "slow", "call_s", '{"seconds": 30}')])
    await cancel_once_running(
        bus, "call_s", lambda: make_agent(model).run("go", capabilities=[capability(tracker)])
    )
    tracker.close()
    assert types_of(bus, "call_s")[-2:] == ["tool.started", "tool.cancelled"]
    finished = next(e for e in events_of(bus) if isinstance(e, ts.RunFinished))
    assert finished.outcome == "cancelled"
    assert_lifecycle(events_of(bus), compare=bus.compare)


@pytest.mark.parametrize("verdict", ["approve", "deny", "expire"])
async def test_a_tool_that_needs_approval(verdict: str) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = make_agent(scripted([call(0, "send_email", "call_m", '{"to": "bob"}')]))
    timeout = 0.2 if verdict == "expire" else 60
    first = await agent.run("go", capabilities=[capability(tracker, approval_timeout=timeout)])
    assert isinstance(first.output, DeferredToolRequests)
    call_snapshot = bus.snapshot("s").calls[0]
    assert call_snapshot.state is ts.CallState.AWAITING_APPROVAL
    assert call_snapshot.approval is not None

    approval_id = call_snapshot.approval.approval_id

    async def person() -> None:
        if verdict == "approve":
            edited = {"to": "carol"}
            await bus.resolve_approval("s", approval_id, approved=True, by="alice", args=edited)
        elif verdict == "deny":
            await bus.resolve_approval("s", approval_id, approved=False, by="alice")
        # "expire": nobody decides; the approval expires after its 0.2 s

    async with anyio.create_task_group() as tg:
        tg.start_soon(person)
        results = await deferred_tool_results(tracker, first.output)
    second = await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=results,
        capabilities=[capability(tracker)],
    )
    assert second.output == "done"
    tracker.close()
    kinds = types_of(bus, "call_m")
    assert kinds.count("tool.approval.requested") == kinds.count("tool.approval.resolved") == 1
    if verdict == "approve":
        assert kinds[-2:] == ["tool.started", "tool.completed"]
        done = next(e for e in events_of(bus) if isinstance(e, ts.ToolCompleted))
        assert done.result == "sent to carol", "the edited args ran"
    else:
        assert kinds[-1] == "tool.denied"
        denied = next(e for e in events_of(bus) if isinstance(e, ts.ToolDenied))
        assert denied.by == ("alice" if verdict == "deny" else "timeout")
    outcomes = [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)]
    assert outcomes == ["interrupted", "completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_the_event_stream_handler_alone_follows_the_calls() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted([call(0, "web_search", "call_h", '{"q": "x"}')])
    await make_agent(model).run("go", event_stream_handler=event_stream_handler(tracker))
    tracker.close()
    assert types_of(bus, "call_h") == [
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.progress",
        "tool.progress",
        "tool.progress",
        "tool.completed",
    ]


async def test_every_dialect_of_a_pydantic_ai_run_passes_the_peers_validators() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted(
        [
            call(0, "web_search", "call_a", '{"q": "anyio"}'),
            call(1, "send_email", "call_m", '{"to": "bob"}'),
        ]
    )
    agent = make_agent(model)
    first = await agent.run("go", capabilities=[capability(tracker)])
    pending = next(c.approval for c in bus.snapshot("s").calls if c.approval)
    bus.resolve_approval_now("s", pending.approval_id, approved=True, by="alice")
    results = await deferred_tool_results(tracker, first.output)
    await agent.run(
        message_history=first.all_messages(),
        deferred_tool_results=results,
        capabilities=[capability(tracker)],
    )
    tracker.close()
    events = events_of(bus)
    parts = ai_sdk_part_states(events)
    assert parts["call_m"] == "output-available"
    hermes = Encoder(dialects.get("hermes"))
    payloads = [f.message.payload for e in events for f in hermes.encode(e)]
    assert any(isinstance(p, dict) and p.get("type") == "hermes.approval" for p in payloads)


def test_without_the_framework_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra(
        "toolstream.integrations.pydantic_ai", "pydantic_ai", "pydantic-ai"
    )


@pytest.mark.parametrize("messages", [True, False])
async def test_the_models_words_are_the_runs_messages(messages: bool) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    model = scripted(
        [
            {0: DeltaThinkingPart(content="The user wants a search. ")},
            "Searching ",
            "now.",
            call(2, "web_search", "call_w", '{"q": "anyio"}'),
        ],
        ["Found ", "it."],
    )
    agent = make_agent(model)
    await agent.run("go", capabilities=[capability(tracker, messages=messages)])
    tracker.close()
    if not messages:
        assert not [e for e in events_of(bus) if isinstance(e, ts.MessageStarted)]
        return
    assert words(bus) == [
        ("reasoning", "The user wants a search. "),
        ("text", "Searching now."),
        ("message.finished", ""),
        ("tool.created", "call_w"),
        ("text", "Found it."),
        ("message.finished", ""),
    ]
    assert_lifecycle(events_of(bus), compare=bus.compare)


# -- sub-agents: an agent run inside a tool of a tracked agent ----------------------------


def researcher(model: FunctionModel, **run: Any) -> Agent[None, Any]:
    """A delegate agent: ``capability()`` without a tracker follows the call it runs in."""
    agent: Agent[None, Any] = Agent(
        model, name="researcher", output_type=[str, DeferredToolRequests], **run
    )

    @agent.tool_plain
    async def web_search(q: str) -> list[str]:
        return [f"https://example.com/{q}"]

    @agent.tool_plain
    async def shell(cmd: str) -> str:
        raise RuntimeError(f"command failed: {cmd}")

    @agent.tool_plain
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "slept"

    @agent.tool_plain(requires_approval=True)
    async def send_email(to: str) -> str:
        return f"sent to {to}"

    return agent


def delegating(inner: Agent[None, Any], *, per_run: ts.Tracker | None = None) -> Agent[None, Any]:
    """An agent whose ``research`` tool delegates to ``inner`` (pydantic-ai's documented
    agent delegation: the usage is passed on). ``per_run``: the capability is given to the
    inner run, bound to that tracker, instead of carried by the inner agent."""
    outer = make_agent(scripted([call(0, "research", "call_r", '{"topic": "anyio"}')]))

    @outer.tool
    async def research(ctx: RunContext[None], topic: str) -> str:
        if per_run is None:
            result = await inner.run(topic, usage=ctx.usage)
        else:
            result = await inner.run(topic, usage=ctx.usage, capabilities=[capability(per_run)])
        return str(result.output)

    return outer


def nesting_of(bus: ts.EventBus) -> tuple[ts.RunStarted, list[ts.Event]]:
    """The sub-agent's ``run.started`` and every event, checking the tree."""
    events = events_of(bus)
    assert_lifecycle(events, compare=bus.compare)
    return subagent_checks.nesting_of(events), events


@pytest.mark.parametrize("how", ["agent", "run"])
async def test_a_delegate_agent_is_a_sub_agent_of_the_call(how: str) -> None:
    """``capability()`` on the delegate (or ``capability(tracker)`` given to its run):
    its run nests under the tool's call, its calls and words carry that call."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner_model = scripted(["Searching. ", call(0, "web_search", "call_w", '{"q": "anyio"}')])
    if how == "agent":
        inner = researcher(inner_model, capabilities=[capability()])
        outer = delegating(inner)
    else:
        inner = researcher(inner_model)
        outer = delegating(inner, per_run=tracker)
    result = await outer.run("go", capabilities=[capability(tracker)])
    assert result.output == "done"
    tracker.close()
    sub, events = nesting_of(bus)
    assert sub.agent == "researcher"
    assert types_of(bus, "call_w") == [
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.completed",
    ]
    inner_call = next(e for e in events if e.call_id == "call_w")
    assert inner_call.run_id == sub.run_id and inner_call.parent_call_id == "call_r"
    said = "".join(
        e.text for e in events if isinstance(e, ts.MessageDelta) and e.run_id == sub.run_id
    )
    assert said == "Searching. done"
    assert [e.outcome for e in events if isinstance(e, ts.RunFinished)] == ["completed"] * 2
    assert types_of(bus, "call_r")[-1] == "tool.completed"
    snapshot = bus.snapshot("s")
    parent = next(c for c in snapshot.calls if c.call_id == "call_r")
    assert parent.subruns == (sub.run_id,)


async def test_a_failing_tool_of_the_sub_agent_fails_its_run_and_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner = researcher(
        scripted([call(0, "shell", "call_x", '{"cmd": "make"}')]), capabilities=[capability()]
    )
    with pytest.raises(RuntimeError, match="command failed"):
        await delegating(inner).run("go", capabilities=[capability(tracker)])
    tracker.close()
    sub, events = nesting_of(bus)
    assert types_of(bus, "call_x")[-1] == "tool.failed"
    finished = {e.run_id: e.outcome for e in events if isinstance(e, ts.RunFinished)}
    assert finished[sub.run_id] == "failed" and set(finished.values()) == {"failed"}
    assert types_of(bus, "call_r")[-1] == "tool.failed"


async def test_cancelling_the_outer_run_mid_sub_agent_closes_the_tree() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner = researcher(
        scripted([call(0, "slow", "call_s", '{"seconds": 30}')]), capabilities=[capability()]
    )
    outer = delegating(inner)
    await cancel_once_running(
        bus, "call_s", lambda: outer.run("go", capabilities=[capability(tracker)])
    )
    tracker.close()
    sub, events = nesting_of(bus)
    subagent_checks.cancelled_innermost_first(events, sub)


async def test_a_sub_agents_approval_is_waited_for_inside_the_call() -> None:
    """pydantic-ai has no approvals across agents: the delegate's run ends with its
    ``DeferredToolRequests`` (the sub-run ``interrupted``, the call awaiting a person),
    and the tool waits for the decision and runs the delegate again, in the same call."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner = researcher(
        scripted([call(0, "send_email", "call_m", '{"to": "bob"}')]), capabilities=[capability()]
    )
    outer = make_agent(scripted([call(0, "research", "call_r", '{"topic": "mail"}')]))

    @outer.tool
    async def research(ctx: RunContext[None], topic: str) -> str:
        result = await inner.run(topic, usage=ctx.usage)
        while isinstance(result.output, DeferredToolRequests):
            decided = await deferred_tool_results(tracker, result.output)
            result = await inner.run(
                message_history=result.all_messages(),
                deferred_tool_results=decided,
                usage=ctx.usage,
            )
        return str(result.output)

    async def person(asked: ts.Subscription[Any]) -> None:
        async for event in asked:
            assert isinstance(event, ts.ApprovalRequested)
            await bus.resolve_approval("s", event.approval_id, approved=True, by="alice")
            return

    async with (
        bus.subscribe(ts.ApprovalRequested, session="s") as asked,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(person, asked)
        result = await outer.run("go", capabilities=[capability(tracker)])
    assert result.output == "done"
    tracker.close()
    events = events_of(bus)
    assert_lifecycle(events, compare=bus.compare)
    subs = [e for e in events if isinstance(e, ts.RunStarted) and e.parent_call_id == "call_r"]
    assert len(subs) == 2, "the delegate ran twice, both nested under the call"
    finished = {e.run_id: e.outcome for e in events if isinstance(e, ts.RunFinished)}
    assert [finished[s.run_id] for s in subs] == ["interrupted", "completed"]
    kinds = types_of(bus, "call_m")
    assert "tool.approval.requested" in kinds and kinds[-1] == "tool.completed"
    assert types_of(bus, "call_r")[-1] == "tool.completed"


async def test_capability_without_a_tracker_outside_any_call_reports_nothing() -> None:
    bus = ts.EventBus()
    inner = researcher(
        scripted([call(0, "web_search", "call_w", '{"q": "x"}')]), capabilities=[capability()]
    )
    assert (await inner.run("go")).output == "done"
    assert events_of(bus) == []
