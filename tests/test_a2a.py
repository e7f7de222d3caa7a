"""A2AApp under a real uvicorn on 127.0.0.1, driven by the A2A project's own Python
client (``a2a-sdk`` 1.3: ``create_client``, ``send_message``, ``subscribe``,
``get_task``, ``cancel_task``), and every frame checked against the A2A v1.0 proto
schema. (``@a2a-js/sdk`` drives it in tests/interop/test_a2a_clients.py.)"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any, cast

import anyio
import httpx
import pytest
from a2a.client import Client, ClientCallContext, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

import toolstream as ts
from tests.chat_frameworks import FRAMEWORKS, start_turn_of
from tests.chat_scenarios import STORY, Turns, run_script
from tests.servers import Served, eventually, serve
from tests.strategies import json_values
from toolstream.a2a import EXTENSION_URI, A2AApp, TaskRequest
from toolstream.testing import sse_data

CARD = {"name": "Scripted", "description": "plays the canonical chat script"}
HEADERS = {"A2A-Extensions": EXTENSION_URI}

Result = dict[str, Any]


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def tasks(bus: ts.EventBus) -> Turns:
    return Turns(bus)


@pytest.fixture
def server(bus: ts.EventBus, tasks: Turns) -> Iterator[Served]:
    with serve(A2AApp(bus, tasks, card=CARD)) as served:
        yield served


@pytest.fixture
async def http(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20, headers=HEADERS) as client:
        yield client


async def connect(url: str, http: httpx.AsyncClient, *, streaming: bool = True) -> Client:
    """The A2A SDK's client for the agent at ``url`` (its card resolved)."""
    config = ClientConfig(streaming=streaming, httpx_client=http, polling=False)
    return await create_client(url, client_config=config)


@pytest.fixture
async def client(server: Served, http: httpx.AsyncClient) -> Client:
    return await connect(server.url, http)


def message(
    *parts: dict[str, Any], task: str | None = None, context: str | None = None
) -> SendMessageRequest:
    """A user message of ``parts`` (``{"text": …}`` or ``{"data": …}``)."""
    body: dict[str, Any] = {"messageId": "m-1", "role": "ROLE_USER", "parts": list(parts)}
    if task is not None:
        body["taskId"] = task
    if context is not None:
        body["contextId"] = context
    return SendMessageRequest(message=json_format.ParseDict(body, Message()))


def said(text: str) -> SendMessageRequest:
    return message({"text": text})


def decision(task: Result, approval_id: str, approved: bool) -> SendMessageRequest:
    data = {"approval_id": approval_id, "approved": approved}
    return message({"data": data}, task=task["id"], context=task["contextId"])


async def stream(
    client: Client,
    request: SendMessageRequest,
    *,
    upto: int | None = None,
    into: list[Result] | None = None,
) -> list[Result]:
    """The StreamResponses of a streamed send, as proto-JSON (the first ``upto``;
    appended to ``into`` as they come)."""
    out: list[Result] = [] if into is None else into
    async with aclosing(
        cast(AsyncGenerator[StreamResponse, None], client.send_message(request))
    ) as responses:
        async for response in responses:
            out.append(json_format.MessageToDict(response))
            if upto is not None and len(out) >= upto:
                break
    return out


async def subscribe(client: Client, task: str, after: str | None = None) -> list[Result]:
    headers = {} if after is None else {"Last-Event-ID": after}
    context = ClientCallContext(service_parameters=headers)
    return [
        json_format.MessageToDict(r)
        async for r in client.subscribe(SubscribeToTaskRequest(id=task), context=context)
    ]


def task_of(responses: list[Result]) -> Result:
    return next(r["task"] for r in responses if "task" in r)


def updates(responses: list[Result]) -> list[Result]:
    return [r for r in responses if "task" not in r]


def event_ids(responses: list[Result]) -> list[str]:
    return [next(iter(r.values()))["metadata"]["event_id"] for r in updates(responses)]


def states(responses: list[Result]) -> list[str]:
    """The task state of each status update."""
    return [r["statusUpdate"]["status"]["state"] for r in responses if "statusUpdate" in r]


def calls(responses: list[Result], tool: str | None = None) -> list[Result]:
    """The tool-lifecycle data parts, in order (of ``tool``)."""
    out = []
    for r in responses:
        parts = r.get("statusUpdate", {}).get("status", {}).get("message", {}).get("parts", [])
        out += [
            p["data"] for p in parts if isinstance(p.get("data"), dict) and "call_id" in p["data"]
        ]
    return [d for d in out if tool is None or d["tool"] == tool]


def texts(responses: list[Result]) -> list[str]:
    """The agent's text artifacts, joined per artifact, in order."""
    out: dict[str, str] = {}
    for r in responses:
        update = r.get("artifactUpdate")
        if update is not None:
            artifact = update["artifact"]
            text = "".join(p.get("text", "") for p in artifact["parts"])
            name = artifact["artifactId"]
            out[name] = out.get(name, "") + text if update.get("append") else text
    return list(out.values())


def final(responses: list[Result]) -> str:
    return states(responses)[-1]


# -- the card --------------------------------------------------------------------------------------


async def test_the_card_says_streaming_and_names_the_tool_lifecycle_extension(
    server: Served, http: httpx.AsyncClient
) -> None:
    response = await http.get("/.well-known/agent-card.json")
    assert response.status_code == 200
    card = response.json()
    json_format.ParseDict(card, AgentCard())  # strict: every field is the schema's
    assert card["name"] == "Scripted"
    assert card["capabilities"]["streaming"] is True
    assert {"uri": EXTENSION_URI} in [{"uri": e["uri"]} for e in card["capabilities"]["extensions"]]
    assert card["supportedInterfaces"] == [
        {"url": f"{server.url}/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]


# -- streaming a task ------------------------------------------------------------------------------


async def test_a_task_streams_each_call_state_its_progress_the_text_and_its_end(
    client: Client, tasks: Turns
) -> None:
    got = await stream(client, said("What is the weather in Paris?"))
    assert list(got[0]) == ["task"]
    task = got[0]["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert task["id"] == tasks.started[0].run_id
    assert task["contextId"] == tasks.started[0].session
    assert states(got)[0] == "TASK_STATE_WORKING"
    weather = calls(got, "get_weather")
    assert [d["state"] for d in weather] == ["running", "running", "completed"]
    assert weather[0]["call_id"] == weather[-1]["call_id"]
    assert weather[1]["progress"] == 0.5 and weather[1]["message"] == "halfway there"
    assert weather[-1]["result"] == {"city": "Paris", "temperature": 21}
    assert texts(got) == ["Let me check the weather in Paris.", "It is 21 degrees in Paris."]
    assert final(got) == "TASK_STATE_COMPLETED"
    for r in updates(got):
        update = next(iter(r.values()))
        assert update["taskId"] == task["id"] and update["contextId"] == task["contextId"]
    ids = event_ids(got)
    assert len(set(ids)) == len(ids)
    assert tasks.started[0].user_text == "What is the weather in Paris?"


async def test_every_frame_is_a_json_rpc_result_with_the_request_id_and_valid_proto_json(
    http: httpx.AsyncClient,
) -> None:
    for request_id in ("req-7", 7):
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "SendStreamingMessage",
            "params": {
                "message": {
                    "messageId": "m1",
                    "role": "ROLE_USER",
                    "parts": [{"text": "weather"}],
                }
            },
        }
        response = await http.post("/", json=body)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = sse_data(response.text)
        assert len(frames) > 5
        for frame in frames:
            assert isinstance(frame, dict)
            assert set(frame) == {"jsonrpc", "id", "result"}
            assert frame["jsonrpc"] == "2.0" and frame["id"] == request_id
            json_format.ParseDict(frame["result"], StreamResponse())  # strict


async def test_a_failing_call_is_failed_with_its_error_and_the_task_goes_on(
    client: Client,
) -> None:
    got = await stream(client, said("Run the build"))
    build = calls(got, "run_build")
    assert build[-1]["state"] == "failed"
    assert build[-1]["error"]["type"] == "RuntimeError"
    assert "exit code 1" in build[-1]["error"]["message"]
    assert texts(got)[-1] == "The build failed."
    assert final(got) == "TASK_STATE_COMPLETED"


async def test_an_agent_that_raises_fails_the_task_and_says_why(client: Client) -> None:
    got = await stream(client, said("crash please"))
    assert final(got) == "TASK_STATE_FAILED"
    last = got[-1]["statusUpdate"]["status"]
    assert last["message"]["parts"][0]["text"] == "RuntimeError: the model is unavailable"
    assert last["message"]["role"] == "ROLE_AGENT"


async def test_a_start_task_that_raises_fails_the_task(bus: ts.EventBus) -> None:
    async def broken(request: TaskRequest) -> None:
        raise ValueError("no model configured")

    with serve(A2AApp(bus, broken, card=CARD)) as served:
        async with httpx.AsyncClient(timeout=20) as http:
            client = await connect(served.url, http)
            got = await stream(client, said("hello"))
    assert final(got) == "TASK_STATE_FAILED"
    assert "ValueError: no model configured" in json.dumps(got[-1])


# -- approvals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_ends_the_response_and_the_decision_continues_the_same_task(
    client: Client, tasks: Turns, approved: bool
) -> None:
    first = await stream(client, said("Email the team"))
    task = task_of(first)
    assert final(first) == "TASK_STATE_INPUT_REQUIRED"
    asked = calls(first)[-1]
    assert asked["state"] == "awaiting_approval"
    assert asked["tool"] == "send_email" and asked["reason"] == "Sends an email"
    assert asked["args"] == {"to": "team@example.com"}

    second = await stream(client, decision(task, asked["approval_id"], approved))
    assert not set(event_ids(first)) & set(event_ids(second))  # nothing twice
    email = [d["state"] for d in calls(second, "send_email")]
    if approved:
        assert email == ["approved", "running", "completed"]
        assert texts(second) == ["Sent."]
    else:
        assert email == ["denied"]
        assert texts(second) == ["Not sent."]
    assert final(second) == "TASK_STATE_COMPLETED"
    for r in updates(second):
        assert next(iter(r.values()))["taskId"] == task["id"]
    assert len(tasks.started) == 1  # the decision started no new task


async def test_a_retried_decision_gets_the_same_continuation_and_a_contrary_one_is_refused(
    client: Client,
) -> None:
    first = await stream(client, said("Email the team"))
    task = task_of(first)
    approval = calls(first)[-1]["approval_id"]
    one = await stream(client, decision(task, approval, True))
    again = await stream(client, decision(task, approval, True))
    assert event_ids(again) == event_ids(one)
    with pytest.raises(InvalidParamsError, match="already"):
        await stream(client, decision(task, approval, False))
    with pytest.raises(UnsupportedOperationError, match="has ended"):
        await stream(client, message({"text": "more"}, task=task["id"]))


async def test_decisions_that_cannot_apply_get_specific_errors(client: Client) -> None:
    first = await stream(client, said("Email the team"))
    task = task_of(first)
    with pytest.raises(TaskNotFoundError):
        await stream(client, decision(task, "appr_nope", True))
    with pytest.raises(UnsupportedOperationError):  # a running task takes only decisions
        await stream(client, message({"text": "and more"}, task=task["id"]))
    with pytest.raises(InvalidParamsError):  # the task is not in that context
        await stream(client, message({"text": "x"}, task=task["id"], context="elsewhere"))
    with pytest.raises(InvalidParamsError):  # a decision names its task
        await stream(client, message({"data": {"approval_id": "a", "approved": True}}))
    with pytest.raises(InvalidParamsError):
        await stream(client, decision(task, calls(first)[-1]["approval_id"], "yes"))  # type: ignore[arg-type]
    with pytest.raises(TaskNotFoundError):
        await stream(client, message({"text": "x"}, task="a2a-0-bm9wZQ"))


# -- GetTask, CancelTask ---------------------------------------------------------------------------


async def test_get_task_answers_its_state_text_calls_and_the_approval_it_waits_for(
    client: Client,
) -> None:
    first = await stream(client, said("Email the team"))
    task = task_of(first)
    waiting = json_format.MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    data = waiting["status"]["message"]["parts"][0]["data"]
    assert data["state"] == "awaiting_approval" and data["tool"] == "send_email"
    await stream(client, decision(task, data["approval_id"], True))
    done = json_format.MessageToDict(await client.get_task(GetTaskRequest(id=task["id"])))
    assert done["id"] == task["id"] and done["contextId"] == task["contextId"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [a["parts"][0]["text"] for a in done["artifacts"]] == [
        "I will email the team.",
        "Sent.",
    ]
    [call] = done["metadata"]["tool_calls"]
    assert call["state"] == "completed" and call["tool"] == "send_email"
    assert "result" not in call and "args" not in call  # the updates carry them
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id="a2a-0-bm9wZQ"))
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id="not-ours"))


async def test_cancel_task_cancels_the_agent_and_a_finished_task_is_not_cancelable(
    client: Client, server: Served, http: httpx.AsyncClient
) -> None:
    got: list[Result] = []

    async def watch() -> None:
        await stream(client, said("wait for it"), into=got)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await eventually(lambda: bool(calls(got, "sleep")), within=10)
        task = task_of(got)
        other = await connect(server.url, http)
        running = json_format.MessageToDict(await other.get_task(GetTaskRequest(id=task["id"])))
        assert running["status"] == {
            "state": "TASK_STATE_WORKING",
            "timestamp": running["status"]["timestamp"],
        }  # no call's update as the Task's message
        cancelled = await other.cancel_task(CancelTaskRequest(id=task["id"]))
        assert (
            cancelled.status.state
            == json_format.Parse(
                '{"status": {"state": "TASK_STATE_CANCELED"}}', Task()
            ).status.state
        )
    assert final(got) == "TASK_STATE_CANCELED"
    assert calls(got, "sleep")[-1]["state"] == "cancelled"
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task["id"]))


# -- SubscribeToTask -------------------------------------------------------------------------------


async def test_resubscribing_after_a_cut_replays_exactly_what_was_missed(
    client: Client, server: Served, http: httpx.AsyncClient
) -> None:
    cut = await stream(client, said("Tell me a story"), upto=8)
    task = task_of(cut)
    assert final(cut) == "TASK_STATE_WORKING"  # cut mid-story
    again = await subscribe(client, task["id"], after=event_ids(cut)[-1])
    assert again[0]["task"]["id"] == task["id"]
    assert final(again) == "TASK_STATE_COMPLETED"
    # all of it, from the task's first update: what the cut response had, then the rest
    whole = await subscribe(client, task["id"], after=event_ids(cut)[0])
    assert event_ids(cut) + event_ids(again) == event_ids(cut)[:1] + event_ids(whole)
    assert "".join(texts(cut + again)).startswith("".join(STORY))
    assert texts(cut + again) == texts(updates(cut)[:1] + whole)


async def test_resubscribing_after_the_task_ended_replays_and_ends(client: Client) -> None:
    done = await stream(client, said("weather"))
    task = task_of(done)
    ids = event_ids(done)
    later = await subscribe(client, task["id"], after=ids[3])
    assert later[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"  # as at the cursor
    assert later[0]["task"]["metadata"]["event_id"] == ids[3]
    assert event_ids(later) == ids[4:]
    assert updates(later) == updates(done)[4:]
    # at the end: the task only
    last = await subscribe(client, task["id"], after=ids[-1])
    assert [list(r) for r in last] == [["task"]]
    # without Last-Event-ID a finished task is only its Task
    plain = await subscribe(client, task["id"])
    assert [list(r) for r in plain] == [["task"]]


async def test_subscribing_to_a_running_task_gives_the_task_then_live_updates(
    client: Client, server: Served, http: httpx.AsyncClient
) -> None:
    got: list[Result] = []

    async def watch() -> None:
        await stream(client, said("Tell me a story"), into=got)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        await eventually(lambda: len(got) >= 4, within=10)
        other = await connect(server.url, http)
        live = await subscribe(other, task_of(got)["id"])
    assert live[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert final(live) == "TASK_STATE_COMPLETED"
    assert event_ids(live) == event_ids(got)[-len(event_ids(live)) :]


async def test_a_cursor_the_bus_no_longer_holds_gets_the_task_state_whole(
    client: Client,
) -> None:
    done = await stream(client, said("weather"))
    task = task_of(done)
    [got] = await subscribe(client, task["id"], after="0123456789ab-99")
    opening = got["task"]
    assert opening["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [c["state"] for c in opening["metadata"]["tool_calls"]] == ["completed"]
    assert [a["parts"][0]["text"] for a in opening["artifacts"]] == texts(done)
    assert opening["metadata"]["event_id"]  # where to resume if cut again


# -- SendMessage -----------------------------------------------------------------------------------


async def test_send_message_without_streaming_answers_the_task_where_it_stands(
    server: Served, http: httpx.AsyncClient
) -> None:
    client = await connect(server.url, http, streaming=False)
    [answer] = await stream(client, said("weather"))
    task = answer["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [a["parts"][0]["text"] for a in task["artifacts"]][-1] == "It is 21 degrees in Paris."
    [asked] = await stream(client, said("Email the team"))
    assert asked["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    approval = asked["task"]["status"]["message"]["parts"][0]["data"]["approval_id"]
    [decided] = await stream(client, decision(asked["task"], approval, False))
    assert decided["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert decided["task"]["artifacts"][-1]["parts"][0]["text"] == "Not sent."


async def test_return_immediately_answers_the_submitted_task(http: httpx.AsyncClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "weather"}]},
            "configuration": {"returnImmediately": True},
        },
    }
    response = (await http.post("/", json=body)).json()
    assert response["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    json_format.ParseDict(response["result"], SendMessageResponse())


# -- bad requests ----------------------------------------------------------------------------------

_MESSAGE = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
BAD: list[tuple[object, int]] = [
    ([], -32600),
    ("text", -32600),
    ({"id": 1, "method": "GetTask"}, -32600),  # no jsonrpc
    ({"jsonrpc": "1.0", "id": 1, "method": "GetTask"}, -32600),
    ({"jsonrpc": "2.0", "id": [1], "method": "GetTask"}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": 5}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": "Nope"}, -32601),
    ({"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}, -32004),
    ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": []}, -32602),
    ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}, -32602),
    ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}, -32001),
    ({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "a2a-1-@@"}}, -32001),
    ({"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": "a2a-1-eA"}}, -32001),
    ({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": 3}}, -32602),
    ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}, -32602),
    ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 1}}, -32602),
    *[
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendStreamingMessage",
                "params": {"message": {**_MESSAGE, **change}},
            },
            -32602,
        )
        for change in cast(
            "list[dict[str, Any]]",
            [
                {"parts": []},
                {"parts": "hi"},
                {"parts": [1]},
                {"parts": [{"nothing": 1}]},
                {"parts": [{"text": 5}]},
                {"messageId": ""},
                {"role": "ROLE_AGENT"},
                {"contextId": 7},
                {"contextId": "x" * 600},
                {"taskId": 7},
            ],
        )
    ],
]


@pytest.mark.parametrize(("body", "code"), BAD)
async def test_a_malformed_request_gets_its_json_rpc_error_with_http_200(
    http: httpx.AsyncClient, body: object, code: int
) -> None:
    response = await http.post("/", json=body)
    assert response.status_code == 200
    answer = response.json()
    assert answer["jsonrpc"] == "2.0"
    assert answer["error"]["code"] == code
    assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]


async def test_bodies_that_are_not_json_rpc_at_all(http: httpx.AsyncClient) -> None:
    response = await http.post("/", content=b"{nope", headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "the body is not JSON"},
    }
    deep = b"[" * 100_000 + b"]" * 100_000
    response = await http.post("/", content=deep, headers={"content-type": "application/json"})
    assert response.json()["error"]["code"] == -32700
    assert (
        await http.post("/", content=b"{}", headers={"content-type": "text/plain"})
    ).status_code == 415
    get = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    for version, code in (("0.3", -32009), ("2.0", -32009), ("1.0", -32001), ("1.0.2", -32001)):
        answer = (await http.post("/", json=get, headers={"A2A-Version": version})).json()
        assert answer["error"]["code"] == code, version
    assert (await http.get("/tasks")).status_code == 404
    assert (await http.put("/", json={})).status_code == 405


# -- authorization ---------------------------------------------------------------------------------


class Reader:
    """A principal who may read one context and decide in none."""

    id = "reader"

    def __init__(self, session: str) -> None:
        self.session = session

    def can_read(self, session: str) -> bool:
        return session == self.session

    def can_approve(self, session: str) -> bool:
        return False


async def test_authorize_guards_sending_reading_deciding_and_cancelling(
    bus: ts.EventBus, tasks: Turns
) -> None:
    def authorize(request: ts.RequestInfo) -> Any:
        token = request.headers.get("authorization", "")
        if token == "Bearer admin":
            return True
        if token == "Bearer reader":
            return Reader("ctx-1")
        return None

    with serve(A2AApp(bus, tasks, card=CARD, authorize=authorize)) as served:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
        mine = {**_MESSAGE, "contextId": "ctx-1", "parts": [{"text": "Email the team"}]}
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            body = {**rpc, "params": {"message": mine}}
            assert (await http.post("/", json=body)).status_code == 401
            other = {**body, "params": {"message": {**mine, "contextId": "ctx-2"}}}
            reader = {"authorization": "Bearer reader"}
            assert (await http.post("/", json=other, headers=reader)).status_code == 403
            task = (await http.post("/", json=body, headers=reader)).json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            approval = task["status"]["message"]["parts"][0]["data"]["approval_id"]
            data = {"data": {"approval_id": approval, "approved": True}}
            answer = {**mine, "taskId": task["id"], "parts": [data]}
            decide = {**rpc, "params": {"message": answer}}
            assert (await http.post("/", json=decide, headers=reader)).status_code == 403
            cancel = {**rpc, "method": "CancelTask", "params": {"id": task["id"]}}
            assert (await http.post("/", json=cancel, headers=reader)).status_code == 403
            get = {**rpc, "method": "GetTask", "params": {"id": task["id"]}}
            assert (await http.post("/", json=get, headers=reader)).status_code == 200
            admin = {"authorization": "Bearer admin"}
            done = (await http.post("/", json=decide, headers=admin)).json()["result"]["task"]
            assert done["status"]["state"] == "TASK_STATE_COMPLETED"


# -- another gateway -------------------------------------------------------------------------------


async def test_a_second_app_on_the_bus_gets_decides_and_replays_the_task(
    bus: ts.EventBus, tasks: Turns
) -> None:
    with serve(A2AApp(bus, tasks, card=CARD)) as one, serve(A2AApp(bus, tasks, card=CARD)) as two:
        async with httpx.AsyncClient(timeout=20) as http:
            first = await connect(one.url, http)
            second = await connect(two.url, http)
            asked = await stream(first, said("Email the team"))
            task = task_of(asked)
            approval = calls(asked)[-1]["approval_id"]
            rest = await stream(second, decision(task, approval, True))
            assert final(rest) == "TASK_STATE_COMPLETED"
            got = await second.get_task(GetTaskRequest(id=task["id"]))
            assert json_format.MessageToDict(got)["status"]["state"] == "TASK_STATE_COMPLETED"
            replay = await subscribe(second, task["id"], after=event_ids(asked)[-1])
            assert event_ids(replay) == event_ids(rest)


# -- sub-agents ------------------------------------------------------------------------------------


async def test_a_sub_agents_calls_are_nested_under_the_call_that_runs_it(bus: ts.EventBus) -> None:
    async def agent(session: str, run_id: str) -> None:
        async with (
            ts.Tracker(bus, session) as tracker,
            tracker.run(run_id),
            tracker.call("research", {"q": "tides"}) as call,
        ):
            async with call.subagent("researcher"), tracker.call("search", {"q": "t"}) as inner:
                inner.complete({"hits": 3})
            call.complete({"summary": "done"})

    async def start_task(request: TaskRequest) -> None:
        request.start_soon(agent, request.session, request.run_id)

    with serve(A2AApp(bus, start_task, card=CARD)) as served:
        async with httpx.AsyncClient(timeout=20) as http:
            got = await stream(await connect(served.url, http), said("research tides"))
    research = calls(got, "research")
    search = calls(got, "search")
    assert [d["state"] for d in search][-1] == "completed"
    assert all(d["parent_call_id"] == research[0]["call_id"] for d in search)
    assert "parent_call_id" not in research[0]
    assert final(got) == "TASK_STATE_COMPLETED"


# -- a framework's agent -------------------------------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_frameworks_chat_agent_is_a_start_task_as_it_is(
    bus: ts.EventBus, framework: str
) -> None:
    with serve(A2AApp(bus, start_turn_of(framework), card=CARD)) as served:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await connect(served.url, http)
            weather = await stream(client, said("What is the weather in Paris?"))
            assert [d["state"] for d in calls(weather, "get_weather")][-1] == "completed"
            assert any("21" in text for text in texts(weather))
            assert final(weather) == "TASK_STATE_COMPLETED"
            asked = await stream(client, said("Email the team"))
            assert final(asked) == "TASK_STATE_INPUT_REQUIRED"
            approval = calls(asked)[-1]["approval_id"]
            sent = await stream(client, decision(task_of(asked), approval, True))
    assert [d["state"] for d in calls(sent, "send_email")][-1] == "completed"
    assert final(sent) == "TASK_STATE_COMPLETED"


async def test_an_approval_of_another_task_is_refused_on_this_one(client: Client) -> None:
    first = await stream(client, said("Email the team"))
    one = task_of(first)
    second = await stream(client, message({"text": "Email the team"}, context=one["contextId"]))
    two = task_of(second)
    assert two["contextId"] == one["contextId"] and two["id"] != one["id"]
    with pytest.raises(InvalidParamsError, match="not of task"):
        await stream(client, decision(two, calls(first)[-1]["approval_id"], True))
    done = await stream(client, decision(one, calls(first)[-1]["approval_id"], True))
    assert final(done) == "TASK_STATE_COMPLETED"


async def test_a_decision_on_a_task_whose_start_the_bus_no_longer_holds_gets_its_state() -> None:
    # The task's first events leave the window at once: the continuation reads the run
    # from a reset, which it sends (the client cannot know what of it it has).
    bus = ts.EventBus(replay=3)
    try:
        with serve(A2AApp(bus, Turns(bus), card=CARD)) as served:
            async with httpx.AsyncClient(timeout=20) as http:
                client = await connect(served.url, http)
                first = await stream(client, said("Email the team"))
                task = task_of(first)
                approval = calls(first)[-1]["approval_id"]
                rest = await stream(client, decision(task, approval, True))
    finally:
        bus.close()
    assert final(rest) == "TASK_STATE_COMPLETED"
    assert texts(rest)[-1] == "Sent."


_METHOD_NAMES = [
    "SendStreamingMessage",
    "SendMessage",
    "GetTask",
    "CancelTask",
    "SubscribeToTask",
    "message/stream",
]
_MESSAGE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "messageId": json_values(max_leaves=2),
        "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 3]),
        "parts": json_values(max_leaves=6) | st.lists(json_values(max_leaves=4), max_size=3),
        "contextId": json_values(max_leaves=2),
        "taskId": json_values(max_leaves=2) | st.just("a2a-1-eA"),
    },
)


@settings(max_examples=150, deadline=None)
@given(
    method=st.sampled_from(_METHOD_NAMES),
    params=json_values() | st.fixed_dictionaries({"message": _MESSAGE_FIELDS, "id": json_values()}),
)
def test_any_params_get_a_json_rpc_answer_never_a_crash(
    sync_server: Served, method: str, params: object
) -> None:
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    with httpx.Client(base_url=sync_server.url, timeout=20) as http:
        response = http.post("/", content=json.dumps(body).encode(), headers=HEADERS_JSON)
    assert response.status_code == 200
    if response.headers["content-type"].startswith("application/json"):
        answer = response.json()
        assert answer["id"] == 9
        assert ("error" in answer) != ("result" in answer)
        if "error" in answer:
            assert answer["error"]["code"] in (-32602, -32001, -32004)
    else:
        frames = sse_data(response.text)
        assert frames and all(f["id"] == 9 for f in frames)


HEADERS_JSON = {"content-type": "application/json", **HEADERS}


@pytest.fixture(scope="module")
def sync_server() -> Iterator[Served]:
    """One server for the fuzz test's examples (its tasks answer at once)."""
    bus = ts.EventBus()

    async def start_task(request: TaskRequest) -> None:
        async def agent() -> None:
            async with ts.Tracker(bus, request.session) as tracker, tracker.run(request.run_id):
                pass

        request.start_soon(agent)

    with serve(A2AApp(bus, start_task, card=CARD)) as served:
        yield served
    bus.close()


async def test_an_agent_that_never_starts_its_task_gets_an_error_not_a_hang(
    bus: ts.EventBus,
) -> None:
    async def lost(request: TaskRequest) -> None:
        """A job handed to a worker that never takes it."""

    app = A2AApp(bus, lost, card=CARD, start_timeout=0.3, heartbeat=0.1)
    with serve(app) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            params = {"message": {**_MESSAGE, "parts": [{"text": "hello"}]}}
            body = {"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage", "params": params}
            frames = sse_data((await http.post("/", json=body)).text)
            assert frames[0]["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
            assert frames[-1] == {
                "jsonrpc": "2.0",
                "id": 3,
                "error": {"code": -32603, "message": "the agent did not start the task in time"},
            }
            answer = (await http.post("/", json={**body, "method": "SendMessage"})).json()
            assert answer["error"]["code"] == -32603


async def test_cancel_task_on_another_gateway_goes_through_cancel_task(bus: ts.EventBus) -> None:
    """A task runs where it was started; another gateway cancels it through the
    ``cancel_task`` hook (here: a registry of the agents' cancel scopes, as a worker
    pool keeps), and without one says it cannot."""
    scopes: dict[str, anyio.CancelScope] = {}

    async def agent(request: TaskRequest) -> None:
        with anyio.CancelScope() as scope:
            scopes[request.run_id] = scope
            await run_script(bus, request.session, request.run_id, request.user_text)

    async def start_task(request: TaskRequest) -> None:
        request.start_soon(agent, request)

    async def cancel_task(session: str, run_id: str) -> bool:
        scope = scopes.get(run_id)
        if scope is None:
            return False
        scope.cancel()
        return True

    one = A2AApp(bus, start_task, card=CARD)
    two = A2AApp(bus, start_task, card=CARD, cancel_task=cancel_task)
    three = A2AApp(bus, start_task, card=CARD)
    with serve(one) as a, serve(two) as b, serve(three) as c:
        async with httpx.AsyncClient(timeout=20) as http:
            first = await connect(a.url, http)
            got = await stream(first, said("wait for it"), upto=6)
            task = task_of(got)
            with pytest.raises(TaskNotCancelableError, match="does not run in this server"):
                await (await connect(c.url, http)).cancel_task(CancelTaskRequest(id=task["id"]))
            cancelled = await (await connect(b.url, http)).cancel_task(
                CancelTaskRequest(id=task["id"])
            )
            assert json_format.MessageToDict(cancelled)["status"]["state"] == "TASK_STATE_CANCELED"
