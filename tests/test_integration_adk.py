"""Google ADK through toolstream, against the real package, offline: a ``BaseLlm``
subclass yields scripted ``FunctionCall``s, run by ADK's ``InMemoryRunner``. ADK runs on
asyncio."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import toolstream as ts
from tests.integration_checks import (
    ai_sdk_part_states,
    cancel_once_running,
    events_of,
    import_error_names_the_extra,
    types_of,
    words,
)
from toolstream.integrations.adk import (
    CONFIRMATION,
    ToolstreamPlugin,
    confirmation_message,
    report_progress,
    track_events,
)
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Scripted(BaseLlm):
    """Each model turn's function calls, then a text answer."""

    turns: list[list[tuple[str, dict[str, Any], str]]] = []  # noqa: RUF012 - a pydantic field
    n: int = 0

    async def generate_content_async(
        self, llm_request: Any, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn = self.turns[self.n] if self.n < len(self.turns) else None
        self.n += 1
        if turn is None:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
            return
        parts = [
            types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=args))
            for name, args, call_id in turn
        ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def web_search(q: str) -> dict[str, Any]:
    """Search the web."""
    return {"results": [f"https://example.com/{q}"]}


def shell(cmd: str) -> dict[str, Any]:
    """Run a command."""
    raise RuntimeError(f"command failed: {cmd}")


async def crawl(pages: int, tool_context: ToolContext) -> dict[str, Any]:
    """Crawl some pages."""
    for page in range(1, pages + 1):
        report_progress(tool_context, page / pages, message=f"page {page} of {pages}")
    return {"pages": pages}


async def slow(seconds: float) -> dict[str, Any]:
    """Sleep."""
    await anyio.sleep(seconds)
    return {"slept": seconds}


async def run(tracker: ts.Tracker, *turns: list[tuple[str, dict[str, Any], str]]) -> None:
    agent = LlmAgent(
        name="assistant",
        model=Scripted(model="scripted", turns=list(turns)),
        tools=[web_search, shell, slow, crawl],
    )
    app = App(name="app", root_agent=agent, plugins=[ToolstreamPlugin(tracker)])
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    events = runner.run_async(user_id="u", session_id=session.id, new_message=message)
    async for _ in track_events(tracker, events):
        pass


async def test_calls_run_and_end_with_the_models_ids() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await run(
        tracker, [("web_search", {"q": "anyio"}, "call_a"), ("web_search", {"q": "trio"}, "call_b")]
    )
    tracker.close()
    assert types_of(bus, "call_a") == ["tool.started", "tool.completed"]
    done = next(
        e for e in events_of(bus) if isinstance(e, ts.ToolCompleted) and e.call_id == "call_b"
    )
    assert done.result == {"results": ["https://example.com/trio"]}
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)
    assert ai_sdk_part_states(events_of(bus)) == {
        "call_a": "output-available",
        "call_b": "output-available",
    }


async def test_a_tool_reports_its_progress() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await run(tracker, [("crawl", {"pages": 2}, "call_c")])
    tracker.close()
    assert types_of(bus, "call_c") == [
        "tool.started",
        "tool.progress",
        "tool.progress",
        "tool.completed",
    ]
    progress = [e for e in events_of(bus) if isinstance(e, ts.ToolProgress)]
    assert [(p.fraction, p.message) for p in progress] == [
        (0.5, "page 1 of 2"),
        (1.0, "page 2 of 2"),
    ]


async def test_a_tool_that_raises_ends_failed_and_so_does_the_run() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(RuntimeError, match="command failed"):
        await run(tracker, [("shell", {"cmd": "make"}, "call_x")])
    tracker.close()
    assert types_of(bus, "call_x") == ["tool.started", "tool.failed"]
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["failed"]


async def test_a_run_cancelled_mid_tool_cancels_the_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await cancel_once_running(
        bus, "call_s", lambda: run(tracker, [("slow", {"seconds": 30}, "call_s")])
    )
    tracker.close()
    assert types_of(bus, "call_s")[-1] == "tool.cancelled"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["cancelled"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_call_without_the_models_id_gets_adks() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await run(tracker, [("web_search", {"q": "x"}, "")])
    tracker.close()
    started = next(e for e in events_of(bus) if isinstance(e, ts.ToolStarted))
    assert started.call_id.startswith("adk-")


def test_without_adk_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.integrations.adk", "google.adk", "adk")


# Confirmation: ADK's ``require_confirmation`` and ``request_confirmation`` are approvals.

DELETED: list[str] = []


def delete_file(path: str) -> dict[str, Any]:
    """Delete a file."""
    DELETED.append(path)
    return {"deleted": path}


def transfer(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Transfer money; large amounts need a person's confirmation."""
    if amount > 100 and tool_context.tool_confirmation is None:
        tool_context.request_confirmation(hint=f"transfer {amount}?")
        return {"status": "waiting for confirmation"}
    if tool_context.tool_confirmation is not None and not tool_context.tool_confirmation.confirmed:
        return {"status": "rejected"}
    return {"transferred": amount}


class Chat:
    """One ADK session driven turn by turn, every run tracked."""

    def __init__(self, tracker: ts.Tracker, *turns: list[tuple[str, dict[str, Any], str]]) -> None:
        self.tracker = tracker
        self.model = Scripted(model="scripted", turns=list(turns))
        agent = LlmAgent(
            name="assistant",
            model=self.model,
            tools=[FunctionTool(delete_file, require_confirmation=True), transfer],
        )
        app = App(name="app", root_agent=agent, plugins=[ToolstreamPlugin(tracker)])
        self.runner = InMemoryRunner(app=app)
        self.session_id = ""
        self.responses: list[dict[str, Any]] = []

    async def send(self, message: types.Content) -> list[Any]:
        if not self.session_id:
            session = await self.runner.session_service.create_session(app_name="app", user_id="u")
            self.session_id = session.id
        events = self.runner.run_async(user_id="u", session_id=self.session_id, new_message=message)
        seen = [e async for e in track_events(self.tracker, events)]
        for event in seen:
            self.responses += [
                dict(r.response or {})
                for r in event.get_function_responses()
                if r.name != CONFIRMATION
            ]
        return seen


async def waiting(path: str) -> tuple[ts.EventBus, ts.Tracker, Chat, list[Any]]:
    """A chat whose model asked to delete ``path``: the call waits for a person."""
    DELETED.clear()
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    chat = Chat(tracker, [("delete_file", {"path": path}, "call_d")])
    seen = await chat.send(user("clean up"))
    return bus, tracker, chat, seen


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def outcomes(bus: ts.EventBus) -> list[str]:
    return [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)]


def asked(bus: ts.EventBus) -> ts.ApprovalRequested:
    return next(e for e in events_of(bus) if isinstance(e, ts.ApprovalRequested))


async def test_a_call_that_needs_confirmation_waits_for_a_person_then_runs_once() -> None:
    bus, tracker, chat, _seen = await waiting("/tmp/a")
    assert outcomes(bus) == ["interrupted"]
    assert types_of(bus, "call_d") == ["tool.ready", "tool.approval.requested"]
    assert DELETED == []
    await bus.resolve_approval("s", asked(bus).approval_id, approved=True, by="alice")
    message = await confirmation_message(tracker)
    assert message is not None and message.parts
    response = message.parts[0].function_response
    assert response is not None and response.name == CONFIRMATION
    assert response.response == {"confirmed": True}
    await chat.send(message)
    tracker.close()
    assert DELETED == ["/tmp/a"]
    assert types_of(bus, "call_d") == [
        "tool.ready",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.started",
        "tool.completed",
    ]
    assert outcomes(bus) == ["interrupted", "completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)
    assert await confirmation_message(tracker) is None


async def test_a_denied_call_never_runs_and_ends_denied_once() -> None:
    bus, tracker, chat, _seen = await waiting("/tmp/b")
    await bus.resolve_approval(
        "s", asked(bus).approval_id, approved=False, by="alice", reason="keep it"
    )
    message = await confirmation_message(tracker)
    assert message is not None and message.parts
    assert message.parts[0].function_response is not None
    assert message.parts[0].function_response.response == {"confirmed": False}
    await chat.send(message)
    tracker.close()
    assert DELETED == []
    assert types_of(bus, "call_d")[-1] == "tool.denied"
    assert types_of(bus, "call_d").count("tool.denied") == 1
    assert_lifecycle(events_of(bus), compare=bus.compare)
    assert ai_sdk_part_states(events_of(bus)) == {"call_d": "output-denied"}


async def test_edited_args_reach_the_tool() -> None:
    bus, tracker, chat, _seen = await waiting("/")
    await bus.resolve_approval(
        "s", asked(bus).approval_id, approved=True, by="alice", args={"path": "/tmp/c"}
    )
    message = await confirmation_message(tracker)
    assert message is not None
    await chat.send(message)
    tracker.close()
    assert DELETED == ["/tmp/c"]
    assert {"deleted": "/tmp/c"} in chat.responses


async def test_toolstream_refusal_wins_over_an_adk_confirmation() -> None:
    """The approval expired (denied by timeout) but the client confirms in ADK: the
    tool must not run."""
    bus, tracker, chat, seen = await waiting("/tmp/e")
    approval_id = asked(bus).approval_id
    await bus.resolve_approval("s", approval_id, approved=False, by="timeout")
    confirmation = next(c for e in seen for c in e.get_function_calls() if c.name == CONFIRMATION)
    await chat.send(adk_confirmation(confirmation.id, confirmed=True))
    tracker.close()
    assert DELETED == []
    assert types_of(bus, "call_d").count("tool.denied") == 1
    assert any("not approved in time" in str(r.get("error")) for r in chat.responses)


async def test_a_rejection_in_adk_after_an_approval_cancels_the_call() -> None:
    bus, tracker, chat, seen = await waiting("/tmp/g")
    await bus.resolve_approval("s", asked(bus).approval_id, approved=True, by="alice")
    confirmation = next(c for e in seen for c in e.get_function_calls() if c.name == CONFIRMATION)
    await chat.send(adk_confirmation(confirmation.id, confirmed=False))
    tracker.close()
    assert DELETED == []
    seen_types = types_of(bus, "call_d")
    assert seen_types[-1] == "tool.cancelled" and "tool.started" not in seen_types
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_a_confirmation_made_in_adk_becomes_the_decision() -> None:
    bus, tracker, chat, seen = await waiting("/tmp/f")
    confirmation = next(c for e in seen for c in e.get_function_calls() if c.name == CONFIRMATION)
    await chat.send(adk_confirmation(confirmation.id, confirmed=True))
    tracker.close()
    assert DELETED == ["/tmp/f"]
    resolved = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalResolved))
    assert (resolved.approved, resolved.by) == (True, "adk")
    assert types_of(bus, "call_d")[-1] == "tool.completed"


async def test_a_tool_asking_for_confirmation_itself_stays_one_running_call() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    chat = Chat(tracker, [("transfer", {"amount": 500}, "call_t")])
    await chat.send(user("pay"))
    assert outcomes(bus) == ["interrupted"]
    request = asked(bus)
    assert request.running and request.reason == "transfer 500?"
    await bus.resolve_approval("s", request.approval_id, approved=True, by="alice")
    message = await confirmation_message(tracker)
    assert message is not None
    await chat.send(message)
    tracker.close()
    assert types_of(bus, "call_t") == [
        "tool.started",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.completed",
    ]
    assert {"transferred": 500} in chat.responses
    assert_lifecycle(events_of(bus), compare=bus.compare)


def adk_confirmation(request_id: str | None, *, confirmed: bool) -> types.Content:
    response = types.FunctionResponse(
        name=CONFIRMATION, id=request_id, response={"confirmed": confirmed}
    )
    return types.Content(role="user", parts=[types.Part(function_response=response)])


async def test_the_plugin_alone_makes_each_invocation_a_run() -> None:
    """Without ``track_events``: ADK's run callbacks bracket each invocation as one
    toolstream run (its invocation id), ``interrupted`` when it stopped to ask for a
    confirmation; ``confirmation_response(tracker, event)`` answers that event."""
    from toolstream.integrations.adk import confirmation_response

    DELETED.clear()
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    chat = Chat(tracker, [("delete_file", {"path": "/tmp/p"}, "call_d")])
    session = await chat.runner.session_service.create_session(app_name="app", user_id="u")

    async def send(message: types.Content) -> list[Any]:
        events = chat.runner.run_async(user_id="u", session_id=session.id, new_message=message)
        return [e async for e in events]

    seen = await send(user("clean up"))
    (asking,) = [e for e in seen if any(c.name == CONFIRMATION for c in e.get_function_calls())]
    runs = [e for e in events_of(bus) if isinstance(e, (ts.RunStarted, ts.RunFinished))]
    assert [e.type for e in runs] == ["run.started", "run.finished"]
    assert isinstance(runs[1], ts.RunFinished) and runs[1].outcome == "interrupted"
    assert runs[0].run_id == seen[0].invocation_id
    assert {e.run_id for e in events_of(bus) if e.call_id == "call_d"} == {runs[0].run_id}
    await bus.resolve_approval("s", asked(bus).approval_id, approved=True, by="alice")
    message = await confirmation_response(tracker, asking)
    assert message is not None and message.parts
    assert message.parts[0].function_response is not None
    assert message.parts[0].function_response.response == {"confirmed": True}
    await send(message)
    tracker.close()
    assert DELETED == ["/tmp/p"]
    assert outcomes(bus) == ["interrupted", "completed"]
    assert types_of(bus, "call_d")[-2:] == ["tool.started", "tool.completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)


class Talkative(Scripted):
    """Says something (a thought, then text) in the response that makes its calls."""

    async def generate_content_async(
        self, llm_request: Any, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        async for response in super().generate_content_async(llm_request, stream):
            parts = response.content.parts if response.content is not None else None
            if parts and any(p.function_call for p in parts):
                said = [types.Part(text="A search. ", thought=True), types.Part(text="Searching.")]
                parts[:0] = said
            yield response


@pytest.mark.parametrize("messages", [True, False])
async def test_the_models_words_are_the_runs_messages(messages: bool) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent = LlmAgent(
        name="assistant",
        model=Talkative(model="scripted", turns=[[("web_search", {"q": "x"}, "call_w")]]),
        tools=[web_search],
    )
    plugin = ToolstreamPlugin(tracker, messages=messages)
    runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=[plugin]))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=user("go")):
        pass
    tracker.close()
    seen = words(bus, first=ts.ToolStarted)
    if not messages:
        assert seen == [("tool.started", "call_w")]
        return
    assert seen == [
        ("reasoning", "A search. "),
        ("text", "Searching."),
        ("message.finished", ""),
        ("tool.started", "call_w"),
        ("text", "done"),
        ("message.finished", ""),
    ]


# -- sub-agents: an AgentTool's agent nests under its call; a transfer does not --


async def run_manager(
    tracker: ts.Tracker,
    inner: list[list[tuple[str, dict[str, Any], str]]],
    outer: list[list[tuple[str, dict[str, Any], str]]],
) -> None:
    """A manager agent whose ``scout`` tool is an agent (``AgentTool``)."""
    from google.adk.tools.agent_tool import AgentTool

    scout = LlmAgent(
        name="scout",
        description="Searches.",
        model=Scripted(model="scripted", turns=inner),
        tools=[web_search, shell, slow],
    )
    manager = LlmAgent(
        name="manager",
        model=Scripted(model="scripted", turns=outer),
        tools=[AgentTool(agent=scout)],
    )
    app = App(name="app", root_agent=manager, plugins=[ToolstreamPlugin(tracker)])
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in track_events(
        tracker, runner.run_async(user_id="u", session_id=session.id, new_message=message)
    ):
        pass


ASK_SCOUT = [[("scout", {"request": "anyio"}, "out_1")]]

#: ADK's own AgentTool hands the parent's plugins to the Runner it makes through the
#: argument that Runner deprecates (ADK warns about its own code, not about toolstream's).
adk_passes_plugins = pytest.mark.filterwarnings(
    "ignore:The `plugins` argument is deprecated:DeprecationWarning"
)


@adk_passes_plugins
async def test_an_agent_tools_agent_nests_under_its_call() -> None:
    """ADK runs the AgentTool's agent in a runner of its own, with the parent's plugins:
    the plugin sees that invocation start in the context of the call's tool."""
    from tests.subagent_checks import assert_tree, calls_in, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    inner = [[("web_search", {"q": "anyio"}, "in_1"), ("web_search", {"q": "trio"}, "in_2")]]
    await run_manager(tracker, inner, ASK_SCOUT)
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_1")
    top = next(e for e in events if isinstance(e, ts.RunStarted) and not e.parent_call_id)
    assert (sub.agent, sub.parent_run_id) == ("scout", top.run_id)
    assert calls_in(events, sub.run_id) == ["in_1", "in_2"]
    assert outcome(events, sub.run_id) == "completed"
    assert types_of(bus, "out_1") == ["tool.started", "tool.completed"]
    said = [e.text for e in events if isinstance(e, ts.MessageDelta) and e.run_id == sub.run_id]
    assert said == ["done"]  # the sub-agent's answer is its run's message


@adk_passes_plugins
async def test_a_sub_agent_whose_tool_raises_fails_its_call() -> None:
    from tests.subagent_checks import assert_tree, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    with pytest.raises(RuntimeError, match="command failed"):
        await run_manager(tracker, [[("shell", {"cmd": "make"}, "in_x")]], ASK_SCOUT)
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_1")
    assert types_of(bus, "in_x") == ["tool.started", "tool.failed"]
    assert outcome(events, sub.run_id) == "failed"
    assert types_of(bus, "out_1")[-1] == "tool.failed"


@adk_passes_plugins
async def test_cancelling_mid_sub_agent_ends_the_tree_innermost_first() -> None:
    from tests.subagent_checks import assert_tree, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    await cancel_once_running(
        bus,
        "in_s",
        lambda: run_manager(tracker, [[("slow", {"seconds": 30}, "in_s")]], ASK_SCOUT),
    )
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "out_1")
    assert types_of(bus, "in_s")[-1] == "tool.cancelled"
    assert outcome(events, sub.run_id) == "cancelled"
    assert types_of(bus, "out_1")[-1] == "tool.cancelled"


async def test_a_transfer_to_a_sub_agent_stays_in_the_run() -> None:
    """``sub_agents`` hand the conversation over in the same invocation: no call runs
    the sub-agent, so its calls are the run's own (the transfer is a call of its own)."""
    helper = LlmAgent(
        name="helper",
        description="Helps.",
        model=Scripted(model="scripted", turns=[[("web_search", {"q": "x"}, "in_h")]]),
        tools=[web_search],
    )
    root = LlmAgent(
        name="root",
        model=Scripted(
            model="scripted", turns=[[("transfer_to_agent", {"agent_name": "helper"}, "t_1")]]
        ),
        sub_agents=[helper],
    )
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    app = App(name="app", root_agent=root, plugins=[ToolstreamPlugin(tracker)])
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    async for _ in track_events(
        tracker, runner.run_async(user_id="u", session_id=session.id, new_message=message)
    ):
        pass
    tracker.close()
    events = events_of(bus)
    assert_lifecycle(events, compare=bus.compare)
    assert len([e for e in events if isinstance(e, ts.RunStarted)]) == 1
    assert types_of(bus, "t_1") == ["tool.started", "tool.completed"]
    assert types_of(bus, "in_h") == ["tool.started", "tool.completed"]
    assert next(e for e in events if e.call_id == "in_h").parent_call_id is None
