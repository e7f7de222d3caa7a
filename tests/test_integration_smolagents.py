"""smolagents through toolstream, against the real package, offline: a ``Model`` subclass
that returns scripted tool calls, run by ``ToolCallingAgent`` (which runs a step's calls
in parallel)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from smolagents import ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageStreamDelta,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    ChatMessageToolCallStreamDelta,
    MessageRole,
    Model,
)

import toolstream as ts
from tests.integration_checks import (
    ai_sdk_part_states,
    events_of,
    import_error_names_the_extra,
    types_of,
)
from toolstream.integrations.smolagents import follow_managed, step_callback, track_stream
from toolstream.testing import assert_lifecycle

Step = list[tuple[str, dict[str, Any], str]]


class Scripted(Model):  # type: ignore[misc]
    """Returns each step's tool calls, then the final answer."""

    def __init__(self, steps: list[Step]) -> None:
        super().__init__(model_id="scripted")
        self.steps = steps
        self.n = 0

    def generate(self, messages: Any, **kwargs: Any) -> Any:
        step = self.steps[self.n] if self.n < len(self.steps) else None
        self.n += 1
        if step is None:
            step = [("final_answer", {"answer": "done"}, f"final_{self.n}")]
        calls = [
            ChatMessageToolCall(
                id=call_id,
                type="function",
                function=ChatMessageToolCallFunction(name=name, arguments=args),
            )
            for name, args, call_id in step
        ]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls)

    def generate_stream(self, messages: Any, **kwargs: Any) -> Iterator[Any]:
        """The same calls, as a provider streams them: the id and name first, then the
        arguments in fragments."""
        message = self.generate(messages, **kwargs)
        for index, call in enumerate(message.tool_calls):
            text = json.dumps(call.function.arguments)
            first = ChatMessageToolCallFunction(name=call.function.name, arguments="")
            yield ChatMessageStreamDelta(
                tool_calls=[
                    ChatMessageToolCallStreamDelta(
                        index=index, id=call.id, type="function", function=first
                    )
                ]
            )
            for i in range(0, len(text), 4):
                piece = ChatMessageToolCallFunction(name="", arguments=text[i : i + 4])
                yield ChatMessageStreamDelta(
                    tool_calls=[ChatMessageToolCallStreamDelta(index=index, function=piece)]
                )


@tool  # type: ignore[untyped-decorator]
def web_search(q: str) -> list[str]:
    """Search the web.

    Args:
        q: the query
    """
    time.sleep(0.05)
    return [f"https://example.com/{q}"]


@tool  # type: ignore[untyped-decorator]
def shell(cmd: str) -> str:
    """Run a command.

    Args:
        cmd: the command
    """
    raise RuntimeError(f"command failed: {cmd}")


def agent(*steps: Step, **options: Any) -> Any:
    return ToolCallingAgent(
        tools=[web_search, shell], model=Scripted(list(steps)), max_steps=5, **options
    )


def test_a_streamed_run_with_a_parallel_pair_and_a_failure() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = agent(
        [("web_search", {"q": "anyio"}, "call_a"), ("web_search", {"q": "trio"}, "call_b")],
        [("shell", {"cmd": "make"}, "call_x")],
    ).run("go", stream=True)
    outputs = list(track_stream(tracker, run))
    assert outputs, "smolagents' own events are re-yielded"
    tracker.close()
    assert types_of(bus, "call_a") == ["tool.started", "tool.completed"]
    assert types_of(bus, "call_x") == ["tool.started", "tool.failed"]
    failed = next(e for e in events_of(bus) if isinstance(e, ts.ToolFailed))
    assert "command failed: make" in failed.error.message
    assert not [e for e in events_of(bus) if e.tool == "final_answer"], "not one of the calls"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["completed"]
    assert_lifecycle(events_of(bus), compare=bus.compare)
    parts = ai_sdk_part_states(events_of(bus))
    assert parts == {
        "call_a": "output-available",
        "call_b": "output-available",
        "call_x": "output-error",
    }


def test_streamed_outputs_stream_the_arguments_before_the_call_runs() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = agent(
        [("web_search", {"q": "anyio"}, "call_a"), ("web_search", {"q": "trio"}, "call_b")],
        stream_outputs=True,
    ).run("go", stream=True)
    list(track_stream(tracker, run))
    tracker.close()
    seen = types_of(bus, "call_a")
    assert seen[0] == "tool.created" and seen[-2:] == ["tool.started", "tool.completed"]
    assert "tool.args.delta" in seen
    text = "".join(
        e.delta for e in events_of(bus) if isinstance(e, ts.ToolArgsDelta) and e.call_id == "call_b"
    )
    assert json.loads(text) == {"q": "trio"}
    assert types_of(bus, "call_b")[-3:] == ["tool.ready", "tool.started", "tool.completed"]
    ready = next(e for e in events_of(bus) if isinstance(e, ts.ToolReady) and e.call_id == "call_b")
    assert ready.args == {"q": "trio"}
    assert_lifecycle(events_of(bus), compare=bus.compare)
    assert ai_sdk_part_states(events_of(bus)) == {
        "call_a": "output-available",
        "call_b": "output-available",
    }


# smolagents' own generator ignores the GeneratorExit of being closed mid-step (its
# RuntimeError surfaces when it is collected): not toolstream's to fix.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_run_abandoned_midway_is_cancelled() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    stream: Any = track_stream(
        tracker, agent([("web_search", {"q": "x"}, "call_a")]).run("go", stream=True)
    )
    for event in stream:
        if type(event).__name__ == "ToolCall":
            break  # the consumer stops reading
    stream.close()
    tracker.close()
    assert types_of(bus, "call_a")[-1] == "tool.cancelled"
    assert [e.outcome for e in events_of(bus) if isinstance(e, ts.RunFinished)] == ["cancelled"]


def test_step_callbacks_alone() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    agent(
        [("web_search", {"q": "anyio"}, "call_a")],
        [("shell", {"cmd": "make"}, "call_x")],
        step_callbacks=[step_callback(tracker)],
    ).run("go")
    tracker.close()
    assert types_of(bus, "call_a") == ["tool.started", "tool.completed"]
    assert types_of(bus, "call_x") == ["tool.started", "tool.failed"]


def test_stream_and_step_callbacks_together_publish_once() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = agent(
        [("web_search", {"q": "anyio"}, "call_a")], step_callbacks=[step_callback(tracker)]
    ).run("go", stream=True)
    list(track_stream(tracker, run))
    tracker.close()
    assert types_of(bus, "call_a") == ["tool.started", "tool.completed"]


def test_from_a_thread_of_its_own() -> None:
    """smolagents is synchronous: a gateway runs it in a worker thread."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    worker = threading.Thread(
        target=lambda: list(
            track_stream(
                tracker, agent([("web_search", {"q": "x"}, "call_t")]).run("go", stream=True)
            )
        )
    )
    worker.start()
    worker.join(30)
    tracker.close()
    assert types_of(bus, "call_t") == ["tool.started", "tool.completed"]


def test_without_smolagents_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.integrations.smolagents", "smolagents", "smolagents")


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:smolagents")


class Talkative(Scripted):
    """Says something before each step's calls."""

    def generate_stream(self, messages: Any, **kwargs: Any) -> Iterator[Any]:
        yield ChatMessageStreamDelta(content="Searching ")
        yield ChatMessageStreamDelta(content="now.")
        yield from super().generate_stream(messages, **kwargs)


@pytest.mark.parametrize("messages", [True, False])
def test_the_models_streamed_words_are_the_runs_messages(messages: bool) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = ToolCallingAgent(
        tools=[web_search],
        model=Talkative([[("web_search", {"q": "x"}, "call_w")]]),
        max_steps=5,
        stream_outputs=True,
    ).run("go", stream=True)
    list(track_stream(tracker, run, messages=messages))
    tracker.close()
    seen = [
        e.type if not isinstance(e, ts.MessageDelta) else e.text
        for e in events_of(bus)
        if isinstance(e, (ts.MessageDelta, ts.MessageFinished, ts.ToolCreated))
    ]
    if not messages:
        assert seen == ["tool.created"]
        return
    assert "".join(seen[: seen.index("message.finished")]) == "Searching now."
    assert seen.index("message.finished") < seen.index("tool.created")
    assert_lifecycle(events_of(bus), compare=bus.compare)


# -- managed agents: sub-agents ---------------------------------------------------------


def managed(name: str, *steps: Step) -> Any:
    """A managed agent carrying ``follow_managed``: the one line that nests it."""
    return ToolCallingAgent(
        tools=[web_search, shell],
        model=Scripted(list(steps)),
        max_steps=5,
        name=name,
        description=f"The {name}: give it a task.",
        step_callbacks=[follow_managed],
    )


def test_a_managed_agents_calls_nest_under_the_managers_call_of_it() -> None:
    """Two managed agents called in one step (smolagents runs them in worker threads):
    each one's calls — one failing — run in a sub-agent under its own call, which ends
    after them; the manager's run is unchanged around them."""
    from tests.subagent_checks import assert_tree, calls_in, outcome, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    researcher = managed(
        "researcher",
        [("web_search", {"q": "anyio"}, "r_search")],
        [("shell", {"cmd": "make"}, "r_shell")],
    )
    scout = managed("scout", [("web_search", {"q": "trio"}, "s_search")])
    manager = ToolCallingAgent(
        tools=[],
        model=Scripted(
            [
                [
                    ("researcher", {"task": "read about anyio"}, "m_research"),
                    ("scout", {"task": "look for trio"}, "m_scout"),
                ]
            ]
        ),
        managed_agents=[researcher, scout],
        max_steps=3,
    )
    list(track_stream(tracker, manager.run("go", stream=True)))
    tracker.close()
    events = assert_tree(bus)
    for parent, agent_name, inner in (
        ("m_research", "researcher", ["r_search", "r_shell"]),
        ("m_scout", "scout", ["s_search"]),
    ):
        (sub,) = sub_runs(events, parent)
        assert sub.agent == agent_name
        assert calls_in(events, sub.run_id) == inner
        assert outcome(events, sub.run_id) == "completed"
        assert types_of(bus, parent)[-1] == "tool.completed"
    assert types_of(bus, "r_shell")[-1] == "tool.failed"
    assert types_of(bus, "r_search")[-1] == "tool.completed"
    top = [e.run_id for e in events if isinstance(e, ts.RunStarted) and not e.parent_call_id]
    assert calls_in(events, top[0]) == ["m_research", "m_scout"]


def test_a_managed_agent_outside_a_followed_run_reports_nothing() -> None:
    bus = ts.EventBus()
    researcher = managed("researcher", [("web_search", {"q": "anyio"}, "r_search")])
    assert researcher.run("alone") == "done"
    assert bus.snapshot("s").calls == ()
    bus.close()


def test_a_managed_agent_run_alone_by_the_manager_nests_too() -> None:
    """One call in the step: smolagents runs it in the manager's own thread."""
    from tests.subagent_checks import assert_tree, calls_in, sub_runs

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    researcher = managed("researcher", [("web_search", {"q": "anyio"}, "r_search")])
    manager = ToolCallingAgent(
        tools=[],
        model=Scripted([[("researcher", {"task": "read about anyio"}, "m_research")]]),
        managed_agents=[researcher],
        max_steps=3,
    )
    list(track_stream(tracker, manager.run("go", stream=True)))
    tracker.close()
    events = assert_tree(bus)
    (sub,) = sub_runs(events, "m_research")
    assert calls_in(events, sub.run_id) == ["r_search"]
