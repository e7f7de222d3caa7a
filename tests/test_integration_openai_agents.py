"""The OpenAI Agents SDK through toolstream, against the real SDK, offline: its own
``agents.testing.ScriptedModel`` makes the calls (no API key, no network).

The SDK runs on asyncio, so these tests do.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

import toolstream as ts
from tests import subagent_checks
from tests.integration_checks import (
    SPOKEN,
    ai_sdk_part_states,
    cancel_once_running,
    events_of,
    import_error_names_the_extra,
    types_of,
    words,
)
from toolstream.integrations.openai_agents import (
    ToolstreamHooks,
    apply_decisions,
    run_config,
    track_run,
)
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


@function_tool
async def web_search(q: str) -> list[str]:
    """Search the web."""
    return [f"https://example.com/{q}"]


@function_tool
def shell(cmd: str) -> str:
    """Run a command."""
    raise RuntimeError(f"command failed: {cmd}")


@function_tool
async def slow(seconds: float) -> str:
    """Sleep."""
    await anyio.sleep(seconds)
    return "slept"


@function_tool(needs_approval=True)
def send_email(to: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def agent_with(*turns: list[Any]) -> Agent[Any]:
    model = ScriptedModel([*turns, [assistant_message("done")]])
    return Agent(name="assistant", model=model, tools=[web_search, shell, slow, send_email])


async def run(tracker: ts.Tracker, agent: Agent[Any], given: Any, **track: Any) -> Any:
    result = Runner.run_streamed(
        agent, given, hooks=ToolstreamHooks(tracker), run_config=run_config(tracker)
    )
    async for _ in track_run(tracker, result, **track):
        pass
    return result


async def test_calls_run_and_end_with_the_models_ids() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = agent_with(
        [
            function_call("web_search", {"q": "anyio"}, call_id="call_a"),
            function_call("web_search", {"q": "trio"}, call_id="call_b"),  # a parallel pair
        ]
    )
    result = await run(tracker, agent, "go")
    assert result.final_output == "done"
    tracker.close()
    assert types_of(bus, "call_a") == [
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.completed",
    ]
    done = next(
        e for e in events_of(bus) if isinstance(e, ts.ToolCompleted) and e.call_id == "call_b"
    )
    assert done.result == ["https://example.com/trio"]
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_tool_that_raises_ends_failed_not_completed() -> None:
    """The SDK turns the exception into an output string; the call is still failed."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    result = await run(
        tracker, agent_with([function_call("shell", {"cmd": "make"}, call_id="call_x")]), "go"
    )
    assert result.final_output == "done", "the run goes on, as the SDK decides"
    tracker.close()
    assert types_of(bus, "call_x")[-1] == "tool.failed"
    failed = next(e for e in events_of(bus) if isinstance(e, ts.ToolFailed))
    assert failed.error.type == "RuntimeError" and "make" in failed.error.message


@pytest.mark.parametrize("formatter", [True, False])
@pytest.mark.parametrize("mode", ["hooks", "stream"])
async def test_hooks_and_the_stream_each_work_alone(mode: str, formatter: bool) -> None:
    """Either alone, with or without ``run_config``'s error formatter: a tool that
    raises is a failure (without the formatter, read from the SDK's own failure text),
    never a success."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = agent_with(
        [
            function_call("web_search", {"q": "x"}, call_id="call_1"),
            function_call("shell", {"cmd": "y"}, call_id="call_2"),
        ]
    )
    config = run_config(tracker) if formatter else None
    if mode == "hooks":
        await Runner.run(agent, "go", hooks=ToolstreamHooks(tracker), run_config=config)
    else:
        result = Runner.run_streamed(agent, "go", run_config=config)
        async for _ in track_run(tracker, result):
            pass
    tracker.close()
    assert types_of(bus, "call_1")[-2:] == ["tool.started", "tool.completed"]
    assert types_of(bus, "call_2")[-1] == "tool.failed"
    failed = next(e for e in events_of(bus) if isinstance(e, ts.ToolFailed))
    if formatter:
        assert failed.error.type == "RuntimeError" and "y" in failed.error.message
    else:
        assert failed.error.type == "ToolError"
        assert failed.error.message.startswith("An error occurred while running the tool")
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_run_cancelled_mid_tool_cancels_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = agent_with([function_call("slow", {"seconds": 30}, call_id="call_s")])
    await cancel_once_running(bus, "call_s", lambda: run(tracker, agent, "go"))
    tracker.close()
    assert types_of(bus, "call_s")[-1] == "tool.cancelled"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["cancelled"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


@pytest.mark.parametrize("verdict", ["approve", "deny", "expire", "edit"])
async def test_a_tool_that_needs_approval(verdict: str) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = agent_with([function_call("send_email", {"to": "bob"}, call_id="call_m")])
    timeout = 0.2 if verdict == "expire" else 60
    first = await run(tracker, agent, "go", approval_timeout=timeout)
    assert first.interruptions
    pending = bus.snapshot("s").calls[0]
    assert pending.state is ts.CallState.AWAITING_APPROVAL and pending.approval is not None
    approval_id = pending.approval.approval_id

    async def person() -> None:
        if verdict == "approve":
            await bus.resolve_approval("s", approval_id, approved=True, by="alice")
        elif verdict == "edit":
            await bus.resolve_approval(
                "s", approval_id, approved=True, by="alice", args={"to": "carol"}
            )
        elif verdict == "deny":
            await bus.resolve_approval("s", approval_id, approved=False, by="alice")

    async with anyio.create_task_group() as tg:
        tg.start_soon(person)
        state = await apply_decisions(tracker, first)
    second = await run(tracker, agent, state)
    assert second.final_output == "done"
    tracker.close()
    kinds = types_of(bus, "call_m")
    assert kinds.count("tool.approval.requested") == kinds.count("tool.approval.resolved") == 1
    if verdict == "approve":
        assert kinds[-2:] == ["tool.started", "tool.completed"]
    elif verdict == "edit":
        # the SDK cannot run a call with other arguments: a rejection tells the model them
        assert kinds[-1] == "tool.cancelled"
    else:
        assert kinds[-1] == "tool.denied"
        denied = next(e for e in events_of(bus) if isinstance(e, ts.ToolDenied))
        assert denied.by == ("alice" if verdict == "deny" else "timeout")
    outcomes = [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)]
    assert outcomes == ["interrupted", "completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_every_dialect_of_an_agents_run_passes_the_peers_validators() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = agent_with(
        [
            function_call("web_search", {"q": "anyio"}, call_id="call_a"),
            function_call("send_email", {"to": "bob"}, call_id="call_m"),
        ]
    )
    first = await run(tracker, agent, "go")
    pending = next(c.approval for c in bus.snapshot("s").calls if c.approval)
    bus.resolve_approval_now("s", pending.approval_id, approved=True, by="alice")
    await run(tracker, agent, await apply_decisions(tracker, first))
    tracker.close()
    events = events_of(bus)
    parts = ai_sdk_part_states(events)
    assert parts == {"call_a": "output-available", "call_m": "output-available"}


def test_without_the_sdk_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.integrations.openai_agents", "agents", "openai-agents")


@pytest.mark.parametrize("messages", [True, False])
async def test_the_models_words_are_the_runs_messages(messages: bool) -> None:
    from openai.types.responses.response_reasoning_item import ResponseReasoningItem, Summary

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    thought = ResponseReasoningItem(
        id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="A search. ")]
    )
    agent = agent_with(
        [
            thought,
            assistant_message("Searching now."),
            function_call("web_search", {"q": "x"}, call_id="call_w"),
        ]
    )
    await run(tracker, agent, "go", messages=messages)
    tracker.close()
    assert words(bus) == (SPOKEN if messages else [("tool.created", "call_w")])
    assert_lifecycle(events_of(bus), compare=bus.compare)


def test_the_sdks_own_failure_texts_are_failures() -> None:
    from agents import default_tool_error_function
    from agents.tool import default_tool_timeout_error_message

    from toolstream.integrations.openai_agents import sdk_failure

    raised = default_tool_error_function(None, RuntimeError("x"))  # type: ignore[arg-type]
    timed_out = default_tool_timeout_error_message(tool_name="slow", timeout_seconds=2.5)
    assert sdk_failure(raised) == {"type": "ToolError", "message": raised}
    assert sdk_failure(timed_out) == {"type": "TimeoutError", "message": timed_out}
    assert sdk_failure("sent to bob") is None and sdk_failure({"ok": 1}) is None


# -- sub-agents: Agent.as_tool() ------------------------------------------------------------


def delegating(*inner_turns: list[Any]) -> Agent[Any]:
    """An agent whose ``research`` tool is another agent (``as_tool``), followed with
    ``on_stream=follow_subagent``."""
    from toolstream.integrations.openai_agents import follow_subagent

    inner = Agent(
        name="researcher",
        model=ScriptedModel([*inner_turns, [assistant_message("found it")]]),
        tools=[web_search, shell, slow, send_email],
    )
    research = inner.as_tool("research", "Research a topic.", on_stream=follow_subagent)
    outer_model = ScriptedModel(
        [
            [function_call("research", {"input": "anyio"}, call_id="call_r")],
            [assistant_message("done")],
        ]
    )
    return Agent(name="assistant", model=outer_model, tools=[research])


def nesting_of(bus: ts.EventBus) -> tuple[ts.RunStarted, list[ts.Event]]:
    """The sub-agent's ``run.started`` and every event, checking the tree."""
    events = events_of(bus)
    assert_lifecycle(events, compare=bus.compare)
    return subagent_checks.nesting_of(events, agent="researcher"), events


async def test_an_agent_as_tool_is_a_sub_agent_of_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = delegating(
        [
            assistant_message("Searching."),
            function_call("web_search", {"q": "anyio"}, call_id="call_w"),
        ]
    )
    result = await run(tracker, agent, "go")
    assert result.final_output == "done"
    tracker.close()
    sub, events = nesting_of(bus)
    kinds = types_of(bus, "call_w")
    assert kinds[0] == "tool.created" and kinds[-2:] == ["tool.started", "tool.completed"]
    assert next(e for e in events if e.call_id == "call_w").run_id == sub.run_id
    said = "".join(
        e.text for e in events if isinstance(e, ts.MessageDelta) and e.run_id == sub.run_id
    )
    assert said == "Searching.found it"
    assert [e.outcome for e in events if isinstance(e, ts.RunFinished)] == ["completed"] * 2
    assert types_of(bus, "call_r")[-1] == "tool.completed"
    parent = next(c for c in bus.snapshot("s").calls if c.call_id == "call_r")
    assert parent.subruns == (sub.run_id,)


async def test_a_failing_tool_of_the_sub_agent_is_a_failure_inside_it() -> None:
    """The SDK turns the inner exception into an output string and the sub-agent goes
    on: the inner call fails, the sub-run and the outer call complete."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = delegating([function_call("shell", {"cmd": "make"}, call_id="call_x")])
    await run(tracker, agent, "go")
    tracker.close()
    _sub, events = nesting_of(bus)
    failed = next(e for e in events if isinstance(e, ts.ToolFailed))
    assert failed.call_id == "call_x" and failed.error.type == "RuntimeError"
    assert failed.parent_call_id == "call_r"
    assert types_of(bus, "call_r")[-1] == "tool.completed"


async def test_cancelling_the_outer_run_mid_sub_agent_closes_the_tree() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = delegating([function_call("slow", {"seconds": 30}, call_id="call_s")])
    await cancel_once_running(bus, "call_s", lambda: run(tracker, agent, "go"))
    tracker.close()
    sub, events = nesting_of(bus)
    subagent_checks.cancelled_innermost_first(events, sub)


async def test_without_on_stream_the_agent_tool_is_one_call() -> None:
    """The SDK's inner run reaches nothing of the outer one but ``on_stream``."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner = Agent(
        name="researcher",
        model=ScriptedModel(
            [[function_call("web_search", {"q": "x"}, call_id="call_w")], [assistant_message("ok")]]
        ),
        tools=[web_search],
    )
    outer = Agent(
        name="assistant",
        model=ScriptedModel(
            [
                [function_call("research", {"input": "x"}, call_id="call_r")],
                [assistant_message("done")],
            ]
        ),
        tools=[inner.as_tool("research", "Research.")],
    )
    await run(tracker, outer, "go")
    tracker.close()
    assert [c.call_id for c in bus.snapshot("s").calls] == ["call_r"]


async def test_a_sub_agents_call_that_needs_approval_interrupts_the_outer_run() -> None:
    """The SDK surfaces the inner approval as the outer run's interruption: the call
    waits inside the sub-agent, and the resumed run goes on in the same sub-run."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = delegating([function_call("send_email", {"to": "bob"}, call_id="call_m")])
    first = await run(tracker, agent, "go")
    assert first.interruptions
    pending = next(c for c in bus.snapshot("s").calls if c.call_id == "call_m")
    assert pending.state is ts.CallState.AWAITING_APPROVAL and pending.approval is not None
    bus.resolve_approval_now("s", pending.approval.approval_id, approved=True, by="alice")
    second = await run(tracker, agent, await apply_decisions(tracker, first))
    assert second.final_output == "done"
    tracker.close()
    sub, events = nesting_of(bus)
    assert types_of(bus, "call_m")[-2:] == ["tool.started", "tool.completed"]
    assert next(e for e in events if e.call_id == "call_m").run_id == sub.run_id
    subs = [e.run_id for e in events if isinstance(e, ts.RunStarted) and e.parent_call_id]
    finished = {e.run_id: e.outcome for e in events if isinstance(e, ts.RunFinished)}
    assert [finished[r] for r in subs] == ["interrupted", "completed"], "suspended, resumed"
    assert types_of(bus, "call_r")[-1] == "tool.completed"
