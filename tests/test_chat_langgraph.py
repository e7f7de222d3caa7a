"""ChatApp(dialect="langgraph") over HTTP, under a real uvicorn on 127.0.0.1: the
request bodies LangGraph's ``FetchStreamTransport`` sends, the thread's whole state in
every ``values``, the user's messages kept on the bus, interrupts, stop, and bad input.
(LangGraph's own client drives it in tests/interop/test_chat_langgraph.py.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest

import toolstream as ts
from tests.chat_scenarios import Turns, run_script
from tests.servers import Served, eventually, serve
from toolstream.chat import ChatApp, TurnRequest

Event = tuple[str, Any]


def sse(body: str) -> list[Event]:
    """``(event, data)`` of every frame; every frame must have both."""
    out: list[Event] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = block.split("\n")
        if not block or all(line.startswith(":") for line in lines):
            continue
        (name,) = [line[7:] for line in lines if line.startswith("event: ")]
        (data,) = [line[6:] for line in lines if line.startswith("data: ")]
        out.append((name, json.loads(data)))
    return out


def turn(text: str, thread: str = "t1") -> dict[str, Any]:
    """A new turn as ``FetchStreamTransport`` posts ``submit({messages: [...]})``."""
    return {
        "input": {"messages": [{"type": "human", "content": text}]},
        "config": {"configurable": {"thread_id": thread}},
    }


def resume(decisions: dict[str, Any], thread: str = "t1") -> dict[str, Any]:
    """What ``submit(null, {command: {resume}})`` posts."""
    return {
        "input": None,
        "command": {"resume": decisions},
        "config": {"configurable": {"thread_id": thread}},
    }


def states(events: list[Event]) -> list[dict[str, Any]]:
    return [data for name, data in events if name == "values"]


def said(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in state["messages"]]


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def turns(bus: ts.EventBus) -> Turns:
    return Turns(bus)


@pytest.fixture
def server(bus: ts.EventBus, turns: Turns) -> Iterator[Served]:
    with serve(ChatApp(bus, turns, dialect="langgraph")) as served:
        yield served


@pytest.fixture
async def client(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        yield http


async def test_a_turn_is_metadata_then_the_whole_state_then_its_stream(
    client: httpx.AsyncClient, turns: Turns
) -> None:
    response = await client.post("/", json=turn("What is the weather?"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    (request,) = turns.started
    assert events[0] == ("metadata", {"run_id": request.run_id, "thread_id": "t1"})
    assert events[1] == (
        "values",
        {
            "messages": [
                {
                    "type": "human",
                    "id": events[1][1]["messages"][0]["id"],
                    "content": "What is the weather?",
                }
            ]
        },
    )
    chunks = [data for name, data in events if name == "messages"]
    assert chunks and all(c[0]["type"] == "AIMessageChunk" for c in chunks)
    assert all(c[1]["run_id"] == request.run_id for c in chunks)
    final = states(events)[-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    ai, tool = final["messages"][1], final["messages"][2]
    (call,) = ai["tool_calls"]
    assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
    assert (tool["tool_call_id"], tool["status"]) == (call["id"], "success")
    assert json.loads(tool["content"]) == {"city": "Paris", "temperature": 21}
    tools = [data for name, data in events if name == "tools"]
    assert [t["event"] for t in tools] == ["on_tool_start", "on_tool_event", "on_tool_end"]
    assert tools[1]["data"] == {"progress": {"progress": 0.5, "message": "halfway there"}}
    assert request.user_text == "What is the weather?"
    assert all("__interrupt__" not in s for s in states(events))


async def test_every_values_holds_the_earlier_turns_and_the_agent_gets_them(
    client: httpx.AsyncClient, turns: Turns
) -> None:
    first = states(sse((await client.post("/", json=turn("hello"))).text))[-1]
    second = sse((await client.post("/", json=turn("What is the weather?"))).text)
    for state in states(second):
        assert state["messages"][: len(first["messages"])] == first["messages"]
    assert said(states(second)[0])[-1] == ("human", "What is the weather?")
    # The client sends only its new message; the agent gets the thread's words from the bus.
    words = [(m["role"], m["content"]) for m in turns.started[1].messages]
    assert words == [
        ("user", "hello"),
        ("assistant", "I can check the weather, run the build, email the team or tell a story."),
        ("user", "What is the weather?"),
    ]
    assert turns.started[1].user_text == "What is the weather?"


async def test_the_users_messages_are_on_the_bus_for_every_gateway(
    bus: ts.EventBus, client: httpx.AsyncClient, turns: Turns
) -> None:
    await client.post("/", json=turn("hello"))
    users = [m for m in bus.snapshot("t1").messages if m.role == "user"]
    assert [(m.text, m.finished) for m in users] == [("hello", True)]
    # Another gateway process of the bus: its first values holds the thread so far.
    with serve(ChatApp(bus, turns, dialect="langgraph")) as other:
        async with httpx.AsyncClient(base_url=other.url, timeout=20) as http:
            events = sse((await http.post("/", json=turn("again"))).text)
    assert [t for t, _ in said(states(events)[0])] == ["human", "ai", "human"]
    assert said(states(events)[0])[0] == ("human", "hello")


async def test_a_client_message_id_is_kept_unless_the_thread_has_it(
    bus: ts.EventBus, client: httpx.AsyncClient
) -> None:
    body = turn("hello")
    body["input"]["messages"][0]["id"] = "m-1"
    first = states(sse((await client.post("/", json=body)).text))[0]
    assert first["messages"][0]["id"] == "m-1"
    again = states(sse((await client.post("/", json=body)).text))[0]
    ids = [m["id"] for m in again["messages"] if m["type"] == "human"]
    assert ids[0] == "m-1" and ids[1] != "m-1" and len(set(ids)) == 2


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_is_an_interrupt_and_command_resume_continues_the_run(
    client: httpx.AsyncClient, turns: Turns, bus: ts.EventBus, approved: bool
) -> None:
    first = sse((await client.post("/", json=turn("Email the team"))).text)
    _, state = first[-1]
    (interrupt,) = state["__interrupt__"]
    value = interrupt["value"]
    assert interrupt["id"] == value["approval_id"]
    assert (value["tool"], value["args"], value["reason"]) == (
        "send_email",
        {"to": "team@example.com"},
        "Sends an email",
    )
    assert value["call_id"] == state["messages"][-1]["tool_calls"][0]["id"]
    # Nothing waits before the request, so no values before it has an __interrupt__.
    assert all("__interrupt__" not in s for s in states(first)[:-1])
    response = await client.post("/", json=resume({interrupt["id"]: {"approved": approved}}))
    assert response.status_code == 200
    more = sse(response.text)
    assert len(turns.started) == 1, "a resume is not a new turn"
    assert more[0] == ("metadata", {"run_id": turns.started[0].run_id, "thread_id": "t1"})
    assert more[1][0] == "values" and "__interrupt__" not in more[1][1]
    assert said(more[1][1])[: len(state["messages"])] == said(state)
    tools = [data["event"] for name, data in more if name == "tools"]
    final = states(more)[-1]["messages"]
    tool = next(m for m in final if m["type"] == "tool")
    if approved:
        assert tools == ["on_tool_start", "on_tool_end"]
        assert (tool["status"], json.loads(tool["content"])) == ("success", {"sent": True})
        assert final[-1]["content"] == "Sent."
    else:
        assert tools == [], "a denied call never starts"
        assert tool["status"] == "error" and tool["content"].startswith("Denied: ")
        assert final[-1]["content"] == "Not sent."
    # The same resume again (a retry) runs nothing again; the other decision conflicts.
    again = await client.post("/", json=resume({interrupt["id"]: {"approved": approved}}))
    assert again.status_code == 200 and sse(again.text)[0][0] == "metadata"
    assert len(turns.started) == 1 and len(bus.snapshot("t1").calls) == 1
    other = await client.post("/", json=resume({interrupt["id"]: {"approved": not approved}}))
    assert other.status_code == 409


async def test_an_approval_asked_from_inside_a_running_call(client: httpx.AsyncClient) -> None:
    first = sse((await client.post("/", json=turn("deploy it"))).text)
    tools = [data["event"] for name, data in first if name == "tools"]
    assert tools == ["on_tool_start", "on_tool_event"]  # running, then asks
    (interrupt,) = first[-1][1]["__interrupt__"]
    more = sse((await client.post("/", json=resume({interrupt["id"]: {"approved": True}}))).text)
    ends = [data for name, data in more if name == "tools"]
    assert [t["event"] for t in ends] == ["on_tool_end"]
    assert ends[0]["output"] == {"pushed": True}


async def test_stop_cancels_the_turn_and_a_thread_with_none_gets_404(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    assert (await client.post("/t2/stop")).status_code == 404
    async with anyio.create_task_group() as tg:
        streamed: list[Event] = []

        async def read() -> None:
            response = await client.post("/", json=turn("a long story", thread="t2"))
            streamed.extend(sse(response.text))

        tg.start_soon(read)
        await eventually(lambda: any(m.role != "user" for m in bus.snapshot("t2").messages))
        stop = await client.post("/t2/stop")
        assert stop.status_code == 200
    (run,) = bus.snapshot("t2").runs
    assert run.state == "cancelled"
    assert streamed[:2][0][0] == "metadata" and streamed[-1][0] == "values"
    assert (await client.post("/t2/stop")).status_code == 404


async def test_an_agent_that_raises_ends_with_the_error_event(bus: ts.EventBus) -> None:
    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(run_script, bus, request.session, request.run_id, "crash")

    with serve(ChatApp(bus, start_turn, dialect="langgraph")) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            events = sse((await http.post("/", json=turn("go"))).text)
    assert events[-1] == ("error", {"error": "RuntimeError", "message": "the model is unavailable"})


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"input": {"messages": []}}, "thread_id"),
        ({"input": {}, "config": {"configurable": {}}}, "thread_id"),
        ({"input": {}, "config": {"configurable": {"thread_id": ""}}}, "thread_id"),
        ({"config": {"configurable": {"thread_id": "t"}}}, "input"),
        ({"input": None, "command": {}, "config": {"configurable": {"thread_id": "t"}}}, "input"),
        ({**turn("x"), "command": {"resume": {"a": {"approved": True}}}}, "not both"),
        ({**turn("x"), "input": "hi"}, "input must be an object"),
        ({**turn("x"), "input": {"messages": [{"type": "ai", "content": "x"}]}}, "user's"),
        ({**turn("x"), "input": {"messages": [{"type": "human", "content": 3}]}}, "content"),
        ({**turn("x"), "input": {"messages": 7}}, "list"),
        (resume({"a": True}), "approved"),
        (resume({}), "maps each interrupt"),
        (resume({"approved": True}), "approved"),  # LangGraph's bare value: name the id
        (resume({"a": {"approved": True, "args": [1]}}), "args"),
        (resume({"a": {"approved": False, "reason": 3}}), "reason"),
        ({**resume({"a": {"approved": True}}), "command": {"goto": "x"}}, "goto"),
        ({**resume({"a": {"approved": True}}), "command": "x"}, "command"),
    ],
)
async def test_bad_bodies_get_400_with_the_reason(
    client: httpx.AsyncClient, turns: Turns, body: Any, reason: str
) -> None:
    response = await client.post("/", json=body)
    assert response.status_code == 400, response.text
    assert reason in response.json()["error"]
    assert turns.started == []


async def test_a_resume_of_an_interrupt_the_thread_never_had_is_404(
    client: httpx.AsyncClient, turns: Turns
) -> None:
    response = await client.post("/", json=resume({"apr_nope": {"approved": True}}))
    assert response.status_code == 404
    assert turns.started == []


async def test_awkward_values_never_break_the_stream(bus: ts.EventBus) -> None:
    """Text with line breaks, a tool whose input is no object, output that is text,
    a reasoning part: every frame is still one event with JSON data, and the client's
    tool calls always get an object for ``args``."""

    async def agent(request: TurnRequest) -> None:
        async with ts.Tracker(bus, request.session) as tracker, tracker.run(request.run_id):
            with tracker.message() as m:
                m.reasoning("hmm\r\n")
                m.delta("line one\nline two\r\nevent: fake\n\ndata: x")
            async with tracker.call("odd", [1, "two"]) as call:
                call.progress(None, message="no fraction\n")
                call.output_delta("partial\n")
                call.complete("plain text\r\n")

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(agent, request)

    with serve(ChatApp(bus, start_turn, dialect="langgraph")) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            body = turn("\u2028emoji \U0001f600 and \x00 nul\n", thread="weird/\u00e9")
            response = await http.post("/", json=body)
    assert response.status_code == 200
    events = sse(response.text)
    final = states(events)[-1]["messages"]
    assert final[0]["content"] == "\u2028emoji \U0001f600 and \x00 nul\n"
    assert final[1]["content"] == "line one\nline two\r\nevent: fake\n\ndata: x"
    assert final[1]["additional_kwargs"] == {"reasoning_content": "hmm\r\n"}
    assert final[1]["tool_calls"][0]["args"] == {}
    assert final[2]["content"] == "plain text\r\n"
    tools = [data for name, data in events if name == "tools"]
    assert [t.get("data") for t in tools if t["event"] == "on_tool_event"] == [
        {"progress": {"message": "no fraction\n"}},
        {"output_delta": "partial\n"},
    ]


def test_the_dialect_is_checked() -> None:
    async def start_turn(request: TurnRequest) -> None:  # pragma: no cover - never called
        pass

    with pytest.raises(ValueError, match="'ai_sdk', 'agui' or 'langgraph'"):
        ChatApp(ts.EventBus(), start_turn, dialect="langchain")  # type: ignore[arg-type]
