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
