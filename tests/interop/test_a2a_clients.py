"""The A2A JavaScript SDK's own client (``@a2a-js/sdk`` 1.3: ``ClientFactory`` and its
JSON-RPC transport) drives ``A2AApp`` through the canonical script
(tests/chat_scenarios.py), in Node (a2a_client.mjs), against a real uvicorn on
127.0.0.1: on an ``EventBus``, and on ``RedisBus`` across two gateway processes
(tests/a2a_procs.py), a cut stream resumed on the other one.

The driver runs all its scenarios in one process and reports every ``StreamResponse``
the client yielded (as proto-JSON) and every JSON-RPC result read off the wire; each is
validated here with the protocol's own schema (``a2a-sdk``'s ``a2a_pb2``, strictly:
an unknown field fails), and the client's reading is checked to be the wire's.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import a2a_pb2
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message

import toolstream as ts
from tests.chat_procs import wait_until_up
from tests.chat_scenarios import CRASH, STORY, run_script
from tests.conftest import require
from tests.redis_server import RedisServer, free_port
from tests.servers import serve
from toolstream.a2a import EXTENSION_URI, A2AApp, TaskRequest

from .sessions import HERE

pytestmark = pytest.mark.timeout(120)

Result = dict[str, Any]
Update = dict[str, Any]

#: The scenarios of a2a_client.mjs run against the EventBus server, in one process.
SCENARIOS = [
    "weather",
    "send",
    "build",
    "crash",
    "approve",
    "deny",
    "cancel",
    "story",
    "resume",
    "resume-after-end",
]
#: The JSON-RPC methods answered with a stream of ``StreamResponse`` objects.
STREAMING = {"SendStreamingMessage", "SubscribeToTask"}
#: What each JSON-RPC method answers, in the protocol's schema.
ANSWERS: dict[str, type[Message]] = {
    "SendStreamingMessage": a2a_pb2.StreamResponse,
    "SubscribeToTask": a2a_pb2.StreamResponse,
    "SendMessage": a2a_pb2.SendMessageResponse,
    "GetTask": a2a_pb2.Task,
    "CancelTask": a2a_pb2.Task,
}
#: The A2A JavaScript SDK these tests are pinned to (tests/interop/package.json).
VERSION = "1.3.0"


def a2a_client_available() -> tuple[bool, str]:
    if shutil.which("node") is None:
        return False, "Node.js is not installed"
    if not (HERE / "node_modules" / "@a2a-js" / "sdk").is_dir():
        return False, "@a2a-js/sdk is not installed (cd tests/interop && npm ci)"
    return True, ""


def run_client(url: str, other: str, *scenarios: str) -> Result:
    """Run a2a_client.mjs: its JSON document (each test checks its scenario ran)."""
    require(*a2a_client_available())
    done = subprocess.run(
        ["node", str(HERE / "a2a_client.mjs"), url, other, *scenarios],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    document: Result = json.loads(done.stdout)
    assert document["version"] == VERSION
    return document


def ran(results: dict[str, Result], scenario: str) -> Result:
    """A scenario's record, checked to have run to its end."""
    result = results[scenario]
    assert result["ok"], f"{scenario}: {result['error']}"
    return result


def scripted_app(bus: ts.Bus) -> A2AApp:
    """``A2AApp`` whose tasks play the canonical script in the server process."""

    async def start_task(request: TaskRequest) -> None:
        request.start_soon(run_script, bus, request.session, request.run_id, request.user_text)

    return A2AApp(bus, start_task, card={"name": "Scripted", "description": "The script"})


# -- reading what the client yielded -----------------------------------------------------


def parsed(result: Any, kind: type[Message]) -> Message:
    """``result`` parsed as ``kind`` by the protocol's own schema (unknown fields fail)."""
    message = kind()
    ParseDict(result, message)
    return message


def streams(result: Result) -> list[list[Update]]:
    """The updates of each stream call of a scenario, in order, each validated."""
    out = []
    for call in result["calls"]:
        if "updates" in call:
            assert call["end"] in ("done", "cut"), call["end"]
            for update in call["updates"]:
                parsed(update, a2a_pb2.StreamResponse)
            out.append(call["updates"])
    return out


def answer(result: Result, call: str) -> Result:
    """The Task a unary call (``getTask``, ``cancelTask``) of a scenario answered."""
    (found,) = [c for c in result["calls"] if c["call"] == call]
    assert "result" in found, found.get("error")
    task: Result = found["result"]
    parsed(task, a2a_pb2.Task)
    return task


def short(state: str) -> str:
    return state.removeprefix("TASK_STATE_")


def state(update: Update) -> str:
    if "task" in update:
        return short(update["task"]["status"]["state"])
    return short(update["statusUpdate"]["status"]["state"])


def data(update: Update) -> dict[str, Any] | None:
    """The data part of a status update's message (a call's lifecycle event)."""
    parts = update.get("statusUpdate", {}).get("status", {}).get("message", {}).get("parts", [])
    found: dict[str, Any] | None = parts[0].get("data") if parts else None
    return found


def event_id(update: Update) -> str | None:
    body = update.get("statusUpdate") or update.get("artifactUpdate") or {}
    found: str | None = body.get("metadata", {}).get("event_id")
    return found


def event_ids(updates: list[Update]) -> list[str]:
    ids = [event_id(u) for u in updates if "task" not in u]
    assert None not in ids, "an update without metadata.event_id"
    return [i for i in ids if i is not None]


def outline(updates: list[Update]) -> list[tuple[Any, ...]]:
    """The stream at a glance: ``("task", state)``; ``("status", state)``; ``("call",
    tool, its state, the task's state)``; ``("text", <chunks joined>)`` per run of
    chunks of one artifact."""
    out: list[tuple[Any, ...]] = []
    for update in updates:
        if "artifactUpdate" in update:
            artifact = update["artifactUpdate"]["artifact"]
            (part,) = artifact["parts"]
            if out and out[-1][0] == "text" and out[-1][2] == artifact["artifactId"]:
                out[-1] = ("text", out[-1][1] + part["text"], artifact["artifactId"])
            else:
                out.append(("text", part["text"], artifact["artifactId"]))
        elif "task" in update:
            out.append(("task", state(update)))
        elif (call := data(update)) is not None and "tool" in call:
            out.append(("call", call["tool"], call["state"], state(update)))
        else:
            out.append(("status", state(update)))
    return [entry[:2] if entry[0] == "text" else entry for entry in out]


def calls(updates: list[Update], tool: str) -> list[dict[str, Any]]:
    """The data of every lifecycle event of ``tool``'s calls, in order."""
    return [d for u in updates if (d := data(u)) is not None and d.get("tool") == tool]


def texts(updates: list[Update], *, whole: bool = True) -> dict[str, str]:
    """Each artifact's chunks joined, by artifact id, checking the chunk flags: append
    false on an artifact's first chunk and true after, lastChunk on its last only (and,
    unless the stream was cut, there)."""
    joined: dict[str, str] = {}
    last: dict[str, bool] = {}
    for update in updates:
        if "artifactUpdate" not in update:
            continue
        body = update["artifactUpdate"]
        artifact = body["artifact"]["artifactId"]
        assert bool(body.get("append")) == (artifact in joined), body
        assert not last.get(artifact), f"a chunk after the last chunk of {artifact}"
        joined[artifact] = joined.get(artifact, "") + body["artifact"]["parts"][0]["text"]
        last[artifact] = bool(body.get("lastChunk"))
    assert all(last.values()) or not whole, "an artifact without its last chunk"
    return joined


def artifacts(task: Result) -> list[tuple[str, str]]:
    """A Task's artifacts: (id, its text parts joined)."""
    return [
        (a["artifactId"], "".join(p.get("text", "") for p in a["parts"]))
        for a in task.get("artifacts", [])
    ]


def shape(update: Update) -> tuple[Any, ...]:
    """What an update says, without what differs from run to run (ids, times)."""
    if "artifactUpdate" in update:
        body = update["artifactUpdate"]
        text = body["artifact"]["parts"][0]["text"]
        return ("text", text, bool(body.get("append")), bool(body.get("lastChunk")))
    call = data(update)
    if call is None:
        return ("status", state(update))
    kept = {k: v for k, v in call.items() if k not in ("call_id", "summary", "approval_id")}
    return ("call", state(update), json.dumps(kept, sort_keys=True))


# -- what the bus holds ------------------------------------------------------------------


History = Callable[[str, str, str], list[ts.Event]]


async def read_history(bus: ts.Bus, session: str, task: str, first: str) -> list[ts.Event]:
    """The task's events as the bus holds them, from its ``run.started`` (event id
    ``first``) to its ``run.finished``, read with a plain subscription."""
    out: list[ts.Event] = []
    with anyio.fail_after(10):
        sub = bus.resume(session=session, run=task, after=first, at=True)
        async with contextlib.aclosing(sub):
            async for event in sub:
                out.append(event)
                if isinstance(event, ts.RunFinished) and event.run_id == task:
                    break
    return out


def sent_ids(events: list[ts.Event], task: str) -> list[str]:
    """The ids of the events A2A sends as updates (DESIGN.md §16): the run's start and
    end, every call and approval event, each text chunk and the end of each text."""
    with_text: set[str] = set()
    out: list[str] = []
    for event in events:
        if isinstance(event, ts.MessageDelta):
            if event.kind == "text" and event.text:
                with_text.add(event.message_id)
                out.append(event.id)
        elif isinstance(event, ts.MessageFinished):
            if event.message_id in with_text:
                out.append(event.id)
        elif isinstance(event, (ts.RunStarted, ts.RunFinished)):
            if event.run_id == task:
                out.append(event.id)
        elif event.type.startswith(("tool.", "approval.")):
            out.append(event.id)
    return out


# -- the EventBus server -----------------------------------------------------------------


class Served:
    def __init__(self, bus: ts.EventBus, url: str, document: Result) -> None:
        self.bus = bus
        self.url = url
        self.card: Result = document["card"]
        self.results: dict[str, Result] = document["results"]

    def __getitem__(self, scenario: str) -> Result:
        return ran(self.results, scenario)

    def history(self, session: str, task: str, first: str) -> list[ts.Event]:
        return anyio.run(read_history, self.bus, session, task, first)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """One server on an EventBus, every scenario driven against it by one Node process."""
    require(*a2a_client_available())
    with contextlib.ExitStack() as stack:
        bus = ts.EventBus()
        stack.callback(bus.close)
        server = stack.enter_context(serve(scripted_app(bus)))
        document = run_client(server.url, server.url, *SCENARIOS)
        yield Served(bus, server.url, document)


# -- the tests ---------------------------------------------------------------------------


def test_the_client_reads_the_card(served: Served) -> None:
    raw = httpx.get(served.url + "/.well-known/agent-card.json").json()
    parsed(raw, a2a_pb2.AgentCard)
    card = served.card  # as the client read it
    parsed(card, a2a_pb2.AgentCard)
    assert card["supportedInterfaces"] == [
        {"url": served.url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["capabilities"]["streaming"] is True
    assert EXTENSION_URI in [e["uri"] for e in card["capabilities"]["extensions"]]


def check_wire(name: str, result: Result) -> None:
    """Every JSON-RPC result of a scenario on the wire is valid proto-JSON of its type;
    every stream the client yielded is what the wire said, field for field; every
    request named the extension."""
    wire = result["wire"]
    assert wire, name
    for exchange in wire:
        assert exchange["status"] == 200, (name, exchange)
        assert exchange["headers"]["a2a-extensions"] == EXTENSION_URI
        assert exchange["results"], (name, exchange)
        for item in exchange["results"]:
            assert "result" in item, (name, exchange["method"], item)
            parsed(item["result"], ANSWERS[exchange["method"]])
    on_wire = [e for e in wire if e["method"] in STREAMING]
    yielded = [c for c in result["calls"] if "updates" in c]
    assert len(on_wire) == len(yielded), name
    for exchange, call in zip(on_wire, yielded, strict=True):
        sent = [item["result"] for item in exchange["results"]]
        if call["end"] == "done":
            assert len(sent) == len(call["updates"]), name
        for update, raw in zip(call["updates"], sent, strict=False):
            read = parsed(update, a2a_pb2.StreamResponse)
            assert read == parsed(raw, a2a_pb2.StreamResponse), (name, raw)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "send"])
def test_every_response_is_valid_and_read_as_sent(served: Served, scenario: str) -> None:
    check_wire(scenario, served[scenario])


#: The scenarios whose streams the SDK's ResultManager folds into the task getTask
#: answers (a resubscription: see test_a_resubscription_folds_to_the_task).
FOLDED = ["weather", "build", "crash", "approve", "deny", "cancel", "story"]


@pytest.mark.parametrize("scenario", FOLDED)
def test_the_sdk_folds_the_stream_into_the_task(served: Served, scenario: str) -> None:
    """What the SDK's own ResultManager makes of a scenario's stream responses, in
    order, is the task getTask answers: its state, and each artifact's text once."""
    result = served[scenario]
    folded, task = result["folded"], answer(result, "getTask")
    assert folded["status"]["state"] == task["status"]["state"]
    assert artifacts(folded) == artifacts(task)


@pytest.mark.parametrize("scenario", ["resume", "resume-after-end"])
def test_a_resubscription_folds_to_the_task(served: Served, scenario: str) -> None:
    """The driver resubscribes once the task has gone on past the cut (or ended)."""
    result = served[scenario]
    (reference,) = streams(served["story"])
    assert [text for _, text in artifacts(result["folded"])] == list(texts(reference).values())
    cut, rest = streams(result)
    opening = rest[0]["task"]
    # The opening Task is the task at the cursor: what the cut part had, still running.
    assert short(opening["status"]["state"]) == "WORKING"
    assert artifacts(opening) == list(texts(cut, whole=False).items())


def test_send_message(served: Served) -> None:
    check_wire("send", served.results["send"])
    result = served["send"]
    task = answer(result, "sendMessage")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [text for _, text in artifacts(task)] == [
        "Let me check the weather in Paris.",
        "It is 21 degrees in Paris.",
    ]
    assert task == answer(result, "getTask")


def test_stream(served: Served) -> None:
    (updates,) = streams(served["weather"])
    assert outline(updates) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "Let me check the weather in Paris."),
        ("call", "get_weather", "running", "WORKING"),
        ("call", "get_weather", "running", "WORKING"),
        ("call", "get_weather", "completed", "WORKING"),
        ("text", "It is 21 degrees in Paris."),
        ("status", "COMPLETED"),
    ]
    started, progress, completed = calls(updates, "get_weather")
    assert started["args"] == {"city": "Paris"}
    assert (progress["progress"], progress["message"]) == (0.5, "halfway there")
    assert completed["result"] == {"city": "Paris", "temperature": 21}
    assert len({c["call_id"] for c in (started, progress, completed)}) == 1
    assert list(texts(updates).values()) == [
        "Let me check the weather in Paris.",
        "It is 21 degrees in Paris.",
    ]
    task = updates[0]["task"]
    for update in updates[1:]:
        body = update.get("statusUpdate") or update["artifactUpdate"]
        assert (body["taskId"], body["contextId"]) == (task["id"], task["contextId"])
    ids = event_ids(updates)
    assert len(set(ids)) == len(ids)


def test_a_failing_call(served: Served) -> None:
    (updates,) = streams(served["build"])
    assert outline(updates) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "Running the build."),
        ("call", "run_build", "running", "WORKING"),
        ("call", "run_build", "failed", "WORKING"),
        ("text", "The build failed."),
        ("status", "COMPLETED"),
    ]
    failed = calls(updates, "run_build")[-1]
    assert failed["error"]["type"] == "RuntimeError"
    assert "exit code 1" in failed["error"]["message"]


def test_an_agent_error(served: Served) -> None:
    result = served["crash"]
    (updates,) = streams(result)
    assert outline(updates) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "Thinking."),
        ("status", "FAILED"),
    ]
    parts = updates[-1]["statusUpdate"]["status"]["message"]["parts"]
    assert parts == [
        {"text": f"RuntimeError: {CRASH}"},
        {"data": {"error": {"type": "RuntimeError", "message": CRASH}}},
    ]
    assert answer(result, "getTask")["status"]["state"] == "TASK_STATE_FAILED"


def decided(served: Served, scenario: str) -> tuple[list[Update], list[Update]]:
    """The two responses of an approval: the question, and what the decision continued."""
    asked, answered = streams(served[scenario])
    assert outline(asked) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "I will email the team."),
        ("call", "send_email", "ready", "WORKING"),
        ("call", "send_email", "awaiting_approval", "INPUT_REQUIRED"),
    ]
    question = data(asked[-1])
    assert question is not None
    assert question["reason"] == "Sends an email"
    assert question["args"] == {"to": "team@example.com"}
    assert question["approval_id"]
    if answered and "task" in answered[0]:  # a continuation may start with the Task
        assert answered[0]["task"]["id"] == asked[0]["task"]["id"]
        answered = answered[1:]
    for update in answered:
        assert (update.get("statusUpdate") or update["artifactUpdate"])["taskId"] == asked[0][
            "task"
        ]["id"]
    assert not set(event_ids(asked)) & set(event_ids(answered)), "an event sent twice"
    first = data(answered[0])
    assert first is not None and first["approval_id"] == question["approval_id"]
    return asked, answered


def test_approve(served: Served) -> None:
    _, answered = decided(served, "approve")
    assert outline(answered) == [
        ("call", "send_email", "approved", "WORKING"),
        ("call", "send_email", "running", "WORKING"),
        ("call", "send_email", "completed", "WORKING"),
        ("text", "Sent."),
        ("status", "COMPLETED"),
    ]
    assert calls(answered, "send_email")[-1]["result"] == {"sent": True}


def test_deny(served: Served) -> None:
    asked, answered = decided(served, "deny")
    assert outline(answered) == [
        ("call", "send_email", "denied", "WORKING"),
        ("text", "Not sent."),
        ("status", "COMPLETED"),
    ]
    assert calls(answered, "send_email")[0]["reason"] == "not now"
    states = {c["state"] for c in calls(asked + answered, "send_email")}
    assert not states & {"running", "completed"}


def test_cancel(served: Served) -> None:
    result = served["cancel"]
    (updates,) = streams(result)
    assert outline(updates) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "Working on it."),
        ("call", "sleep", "running", "WORKING"),
        ("call", "sleep", "cancelled", "WORKING"),
        ("status", "CANCELED"),
    ]
    cancelled = answer(result, "cancelTask")
    assert cancelled["id"] == updates[0]["task"]["id"]
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert answer(result, "getTask")["status"]["state"] == "TASK_STATE_CANCELED"
    session = updates[0]["task"]["contextId"]
    assert [r.state for r in served.bus.snapshot(session).runs] == ["cancelled"]


def test_get(served: Served) -> None:
    result = served["weather"]
    (updates,) = streams(result)
    task = answer(result, "getTask")
    assert (task["id"], task["contextId"]) == (
        updates[0]["task"]["id"],
        updates[0]["task"]["contextId"],
    )
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    streamed = texts(updates)
    assert [(a["artifactId"], a["parts"]) for a in task["artifacts"]] == [
        (artifact, [{"text": text}]) for artifact, text in streamed.items()
    ]


def resumed(history: History, result: Result, reference: list[Update], end: str) -> None:
    """A cut stream and its resubscription add up to the task's whole stream: exactly
    the updates of the bus's events, in order, none lost or doubled, saying what an
    uncut reading (``reference``) says."""
    cut, rest = streams(result)
    assert [c["end"] for c in result["calls"] if "updates" in c] == ["cut", "done"]
    task = cut[0]["task"]
    assert sum("artifactUpdate" in u for u in cut) == 10  # where the driver cut
    (resubscribe,) = [c for c in result["calls"] if c["call"] == "resubscribeTask"]
    assert resubscribe["headers"] == {"Last-Event-ID": event_ids(cut)[-1]}
    # SubscribeToTask answers the Task as it stood at the cut, then what followed it.
    assert rest[0]["task"]["id"] == task["id"]
    assert state(rest[0]) == end
    rest = rest[1:]
    ids = event_ids(cut) + event_ids(rest)
    assert len(set(ids)) == len(ids), "an event sent twice"
    events = history(task["contextId"], task["id"], event_ids(cut)[0])
    assert ids == sent_ids(events, task["id"])
    assert [shape(u) for u in cut + rest] == [shape(u) for u in reference]
    story, *_ = texts(cut + rest).values()
    assert story == "".join(STORY)
    assert state(rest[-1]) == "COMPLETED"


def test_resubscribe_after_a_cut(served: Served) -> None:
    (reference,) = streams(served["story"])
    assert outline(reference) == [
        ("task", "SUBMITTED"),
        ("status", "WORKING"),
        ("text", "".join(STORY)),
        ("call", "lookup", "running", "WORKING"),
        ("call", "lookup", "completed", "WORKING"),
        ("text", "The end."),
        ("status", "COMPLETED"),
    ]
    result = served["resume"]
    resumed(served.history, result, reference, "WORKING")
    assert answer(result, "getTask")["status"]["state"] == "TASK_STATE_COMPLETED"


def test_resubscribe_after_the_end(served: Served) -> None:
    (reference,) = streams(served["story"])
    resumed(served.history, served["resume-after-end"], reference, "WORKING")


# -- RedisBus, two gateway processes -----------------------------------------------------


class Gateways:
    """Two gateway processes (tests/a2a_procs.py) of one RedisBus."""

    def __init__(self, redis_url: str) -> None:
        from tests.a2a_procs import spawn

        self.redis_url = redis_url
        self.prefix = f"a2a{uuid.uuid4().hex[:10]}"
        self.urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
        self.procs = [
            spawn("gateway", redis_url, self.prefix, url.rpartition(":")[2]) for url in self.urls
        ]

    def history(self, session: str, task: str, first: str) -> list[ts.Event]:
        """:func:`read_history` on a RedisBus of the deployment, in an asyncio loop of its
        own (redis-py has no trio support)."""
        from toolstream.redis import RedisBus

        async def read() -> list[ts.Event]:
            async with RedisBus(self.redis_url, prefix=self.prefix) as bus:
                return await read_history(bus, session, task, first)

        return anyio.run(read, backend="asyncio")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def gateways(redis_server: RedisServer) -> Iterator[tuple[Gateways, Result]]:
    """The story started on gateway A and cut, resumed on gateway B while it runs, and
    again after it ended; the uncut story for reference. One Node process."""
    require(*a2a_client_available())
    deployment = Gateways(redis_server.url)
    try:
        for url in deployment.urls:
            wait_until_up(url, deployment.procs)
        document = run_client(*deployment.urls, "story", "resume", "resume-after-end")
        yield deployment, document["results"]
    finally:
        deployment.close()


def across(gateways: tuple[Gateways, Result], scenario: str) -> None:
    deployment, results = gateways
    result = ran(results, scenario)
    a, b = deployment.urls
    # the story started on gateway A; it was resubscribed to on gateway B
    assert [(e["method"], e["url"]) for e in result["wire"]][:1] == [
        ("SendStreamingMessage", a + "/")
    ]
    assert ("SubscribeToTask", b + "/") in [(e["method"], e["url"]) for e in result["wire"]]
    assert {e["url"] for e in result["wire"] if e["method"] != "SendStreamingMessage"} == {b + "/"}
    check_wire(scenario, result)
    (reference,) = streams(ran(results, "story"))
    end = "WORKING"  # the Task as it stood at the cursor, whenever the client comes back
    resumed(deployment.history, result, reference, end)


def test_resubscribe_on_another_gateway(gateways: tuple[Gateways, Result]) -> None:
    across(gateways, "resume")


def test_resubscribe_on_another_gateway_after_the_end(gateways: tuple[Gateways, Result]) -> None:
    across(gateways, "resume-after-end")
