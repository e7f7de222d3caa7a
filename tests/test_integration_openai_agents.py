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
