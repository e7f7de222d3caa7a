"""LangGraph's ``useStream`` core — ``CustomStreamOrchestrator`` with
``FetchStreamTransport`` from ``@langchain/langgraph-sdk/ui``, in Node
(chat_langgraph.mjs) — drives ``ChatApp(dialect="langgraph")`` through the canonical
script (tests/chat_scenarios.py), against every chat server that follows it, each under
a real uvicorn on 127.0.0.1. What is checked is what the client ends with: its messages,
its tool calls' states, its interrupts, its error, and the tool events it was handed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import toolstream as ts
from tests.chat_scenarios import CRASH, FLAVOURS, STORY
from tests.conftest import require
from tests.servers import serve

from .sessions import node_checks_available
from .test_chat_clients import Result, mentions, ran_once, run_driver, stopped, value

pytestmark = pytest.mark.timeout(300)

SCENARIOS = ["weather", "build", "approve", "deny", "stop", "crash", "retry", "reload"]
SDK_VERSION = "1.15.0"


class Batch:
    """One flavour's server and the driver's document for all the scenarios."""

    def __init__(self, bus: ts.EventBus, document: Result) -> None:
        self.bus = bus
        self.version: str = document["version"]
        self.results: dict[str, Result] = document["results"]

    def result(self, scenario: str) -> Result:
        result = self.results[scenario]
        assert result["ok"], result["error"]
        return result


@pytest.fixture(scope="module")
def batches() -> Iterator[Callable[[str], Batch]]:
    """Each flavour's batch runs once, when its first test asks; its server serves
    until the module ends. A batch that failed or skipped does so for each test."""
    done: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:

        def batch(flavour: str) -> Batch:
            if flavour not in done:
                try:
                    require(*node_checks_available())
                    bus = ts.EventBus()
                    stack.callback(bus.close)
                    served = stack.enter_context(serve(FLAVOURS[flavour](bus, "langgraph")))
                    document = run_driver("chat_langgraph.mjs", served.url, *SCENARIOS)
                    done[flavour] = Batch(bus, document)
                except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
                    done[flavour] = exc
            found = done[flavour]
            if isinstance(found, BaseException):
                raise found
            assert isinstance(found, Batch)
            return found

        yield batch


# -- what the client ends with ------------------------------------------------------------


def outline(result: Result) -> list[tuple[str, str]]:
    """The thread as the client holds it: (type, text) per message; a tool message's
    text is its status."""
    out: list[tuple[str, str]] = []
    for m in result["messages"]:
        if m["type"] == "tool":
            out.append(("tool", m.get("status") or "success"))
        else:
            assert isinstance(m["content"], str), m
            out.append((m["type"], m["content"].strip()))
    return out


def tool_call(result: Result, name: str) -> Result:
    calls: list[Result] = [c for c in result["toolCalls"] if c["name"] == name]
    assert len(calls) == 1, calls
    return calls[0]


def events(response: Result) -> list[str]:
    return [e[0] for e in response["events"]]


def whole_responses(result: Result) -> None:
    """Every response began with ``metadata`` then the thread's state, and no
    ``__interrupt__`` was ever ``[]`` (a breakpoint to the client)."""
    for response in result["responses"]:
        assert response["status"] == 200, response
        assert events(response)[:2] == ["metadata", "values"], events(response)
        metadata = response["events"][0][1]
        assert metadata["thread_id"] == result["thread"] and metadata["run_id"], metadata
        for name, data in response["events"]:
            if name == "values" and "__interrupt__" in data:
                assert data["__interrupt__"], "an empty __interrupt__ is a breakpoint"


def settled(result: Result) -> None:
    assert (result["streamError"], result["isLoading"], result["interrupts"]) == (None, False, [])
    whole_responses(result)


def tools_of(result: Result, name: str) -> list[str]:
    return [t["event"] for t in result["tools"] if t["name"] == name]


def check_weather(result: Result, batch: Batch) -> None:
    assert outline(result) == [
        ("human", "What is the weather in Paris?"),
        ("ai", "Let me check the weather in Paris."),
        ("tool", "success"),
        ("ai", "It is 21 degrees in Paris."),
    ]
    call = tool_call(result, "get_weather")
    assert (call["state"], call["args"]) == ("completed", {"city": "Paris"})
    assert mentions(call["result"]["content"], "21")
    assert tools_of(result, "get_weather") == ["on_tool_start", "on_tool_event", "on_tool_end"]
    (progress,) = [t for t in result["tools"] if t["event"] == "on_tool_event"]
    assert progress["data"] == {"progress": {"progress": 0.5, "message": "halfway there"}}
    (start,) = [t for t in result["tools"] if t["event"] == "on_tool_start"]
    assert start["input"] == {"city": "Paris"} and start["toolCallId"] == call["id"]
    (end,) = [t for t in result["tools"] if t["event"] == "on_tool_end"]
    assert value(end["output"])["temperature"] == 21
    (response,) = result["responses"]
    assert "messages" in events(response), "the words stream as messages-tuple chunks"
    settled(result)


def check_build(result: Result, batch: Batch) -> None:
    assert outline(result) == [
        ("human", "Run the build."),
        ("ai", "Running the build."),
        ("tool", "error"),
        ("ai", "The build failed."),
    ]
    call = tool_call(result, "run_build")
    assert call["state"] == "error" and "exit code 1" in call["result"]["content"]
    assert tools_of(result, "run_build") == ["on_tool_start", "on_tool_error"]
    (error,) = [t["error"] for t in result["tools"] if t["event"] == "on_tool_error"]
    kind, _, message = error.partition(": ")  # "<Type>: <message>"
    assert kind.isidentifier() and "exit code 1" in message, error
    settled(result)


def check_decided(result: Result, batch: Batch, approved: bool) -> None:
    (asked,) = [s for s in result["steps"] if s["step"] == "asked"]
    interrupt = asked["interrupt"]
    assert interrupt["value"]["tool"] == "send_email"
    assert interrupt["value"]["reason"] == "Sends an email"
    assert interrupt["value"]["args"] == {"to": "team@example.com"}
    assert interrupt["id"] == interrupt["value"]["approval_id"]
    first, second = result["responses"]
    assert first["body"]["config"]["configurable"]["thread_id"] == result["thread"]
    assert second["body"]["command"] == {"resume": {interrupt["id"]: {"approved": approved}}}
    assert second["body"].get("input") is None
    # The first response ends at the interrupt; the second starts from the whole state
    # without it, and never asks again.
    assert events(first)[-1] == "values" and first["events"][-1][1]["__interrupt__"]
    assert "__interrupt__" not in second["events"][1][1]
    assert all("__interrupt__" not in d for n, d in second["events"] if n == "values")
    assert outline(result) == [
        ("human", "Email the team, please."),
        ("ai", "I will email the team."),
        ("tool", "success" if approved else "error"),
        ("ai", "Sent." if approved else "Not sent."),
    ]
    call = tool_call(result, "send_email")
    if approved:
        assert call["state"] == "completed" and value(call["result"]["content"]) == {"sent": True}
        assert tools_of(result, "send_email")[-1] == "on_tool_end"
    else:
        assert call["state"] == "error"
        assert call["result"]["content"].startswith("Denied: "), call
        # Never ran: no start, no end (a tool that asked from inside started, and ends
        # as an error).
        assert tools_of(result, "send_email") in ([], ["on_tool_start", "on_tool_error"])
    settled(result)


def check_stop(result: Result, batch: Batch) -> None:
    (stop,) = [s for s in result["steps"] if s["step"] == "stop"]
    (again,) = [s for s in result["steps"] if s["step"] == "stop-again"]
    assert (stop["status"], again["status"]) == (200, 404), result["steps"]
    (response,) = result["responses"]
    assert response["end"] == "aborted", response["end"]
    assert result["streamError"] is None  # an abort is no error to the client
    stopped(batch.bus, result["thread"])


def check_crash(result: Result, batch: Batch) -> None:
    assert result["streamError"]["name"] == "RuntimeError", result["streamError"]
    assert CRASH in result["streamError"]["message"]
    (response,) = result["responses"]
    name, data = response["events"][-1]
    assert (name, data["error"]) == ("error", "RuntimeError") and CRASH in data["message"]


def check_retry(result: Result, batch: Batch) -> None:
    check_decided(
        {**result, "steps": [s for s in result["steps"] if s["step"] != "retry"]},
        batch,
        approved=True,
    )
    (again,) = [s for s in result["steps"] if s["step"] == "retry"]
    assert again["status"] == 200, again
    names = [e[0] for e in again["events"]]
    assert names[:2] == ["metadata", "values"] and "error" not in names, names
    ran_once(batch.bus, result["thread"], "send_email")


def check_reload(result: Result, batch: Batch) -> None:
    (before,) = [s for s in result["steps"] if s["step"] == "before"]
    first_turn = [(m["type"], m["id"]) for m in before["messages"]]
    assert len(first_turn) == 4
    # A new useStream on the thread: its first values holds the earlier turn.
    second = result["responses"][1]
    state = second["events"][1][1]
    assert [(m["type"], m["id"]) for m in state["messages"]][:4] == first_turn
    assert outline(result)[:4] == [(t, o) for t, o in outline({"messages": before["messages"]})]
    assert outline(result)[4:] == [
        ("human", "Tell me a story."),
        ("ai", "".join(STORY).strip()),
        ("tool", "success"),
        ("ai", "The end."),
    ]
    settled(result)


CHECKS: dict[str, Callable[[Result, Batch], None]] = {
    "weather": check_weather,
    "build": check_build,
    "approve": lambda result, batch: check_decided(result, batch, approved=True),
    "deny": lambda result, batch: check_decided(result, batch, approved=False),
    "stop": check_stop,
    "crash": check_crash,
    "retry": check_retry,
    "reload": check_reload,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_use_stream(batches: Callable[[str], Batch], flavour: str, scenario: str) -> None:
    batch = batches(flavour)
    CHECKS[scenario](batch.result(scenario), batch)


def test_the_driver_runs_the_pinned_sdk(batches: Callable[[str], Batch]) -> None:
    assert batches(next(iter(FLAVOURS))).version == SDK_VERSION
