"""ChatApp over HTTP, under a real uvicorn on 127.0.0.1: turns, continuations, resume,
stop, a client going away, and every bad request a client can make. (The peers' own
clients drive it in tests/interop/test_chat_clients.py.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import httpx
import pytest

import toolstream as ts
from tests import raw_clients as raw
from tests.chat_scenarios import STORY, Turns, approval_reply, kinds, user
from tests.servers import Served, eventually, serve, settles
from toolstream import _serving as serving
from toolstream.chat import ChatApp, TurnRequest
from toolstream.testing import sse_data as chunks

API = "/api/chat"


async def post_then_leave(client: httpx.AsyncClient, body: dict[str, Any], seen: str) -> None:
    """POST a turn and go away (a tab closing) once a line with ``seen`` arrived."""
    async with client.stream("POST", API, json=body) as response:
        async for line in response.aiter_lines():
            if seen in line:
                return


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def turns(bus: ts.EventBus) -> Turns:
    return Turns(bus)


@pytest.fixture
def app(bus: ts.EventBus, turns: Turns) -> ChatApp:
    return ChatApp(bus, turns)


@pytest.fixture
def server(app: ChatApp) -> Iterator[Served]:
    with serve(app) as served:
        yield served


@pytest.fixture
async def client(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        yield http


async def test_a_turn_streams_text_and_calls_and_ends_where_it_waits_for_a_person(
    client: httpx.AsyncClient, turns: Turns
) -> None:
    response = await client.post(API, json=user("Email the team"))
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = chunks(response.text)
    seen = kinds(streamed)
    # The text may come in more than one delta (streamed redaction holds back its tail).
    assert [k for i, k in enumerate(seen) if k != "text-delta" or seen[i - 1] != k] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
        "[DONE]",
    ]
    assert streamed[0]["messageId"] == turns.started[0].run_id
    assert streamed[-2] == {"type": "finish", "finishReason": "tool-calls"}
    assert len(turns.started) == 1
    request = turns.started[0]
    assert (request.session, request.principal) == ("c1", None)
    assert request.body["trigger"] == "submit-message"


@pytest.mark.parametrize("approved", [True, False])
async def test_a_continuation_applies_the_decision_and_starts_no_turn(
    client: httpx.AsyncClient, turns: Turns, bus: ts.EventBus, approved: bool
) -> None:
    first = user("Email the team")
    streamed = chunks((await client.post(API, json=first)).text)
    response = await client.post(API, json=approval_reply(first, streamed, approved))
    assert response.status_code == 200
    more = chunks(response.text)
    assert len(turns.started) == 1, "a continuation is not a new turn"
    assert more[0] == {"type": "start", "messageId": streamed[0]["messageId"]}
    assert more[1] == {"type": "start-step"}
    assert "tool-input-start" not in kinds(more), "the call is not sent again"
    ended = "tool-output-available" if approved else "tool-output-denied"
    assert ended in kinds(more)
    said = "".join(c["delta"] for c in more if isinstance(c, dict) and c["type"] == "text-delta")
    assert said == ("Sent." if approved else "Not sent.")
    assert kinds(more)[-3:] == ["finish-step", "finish", "[DONE]"]
    (call,) = bus.snapshot("c1").calls
    assert call.decided_by == "anonymous"
    # The same decision again (a client retrying) is no error and runs nothing again:
    # it gets what followed the decision once more.
    again = await client.post(API, json=approval_reply(first, streamed, approved))
    assert again.status_code == 200
    assert chunks(again.text) == more
    assert len(turns.started) == 1
    assert len(bus.snapshot("c1").calls) == 1
    # The opposite decision is a conflict.
    other = await client.post(API, json=approval_reply(first, streamed, not approved))
    assert other.status_code == 409
    assert other.json()["code"] == "already_resolved"


async def test_words_after_an_approval_request_reach_the_client_once(bus: ts.EventBus) -> None:
    """The run goes on writing after it asked (the approval does not block it): the
    first response ends right at the request, and what followed it comes, once, in
    the response that continues the message."""

    async def agent(request: TurnRequest) -> None:
        async with ts.Tracker(bus, request.session) as tracker, tracker.run(request.run_id):
            call = tracker.create("send_email", call_id="c1")
            call.ready({"to": "team@example.com"})
            approval_id = call.await_approval("Sends an email")
            with tracker.message() as message:
                message.delta("While you decide: ")
                message.delta("the draft is ready.")
            decision = await tracker.decision(approval_id)
            if decision.approved:
                call.start()
                call.complete({"sent": True})
            with tracker.message() as message:
                message.delta("Done.")

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(agent, request)

    with serve(ChatApp(bus, start_turn)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            first = user("Email the team")
            streamed = chunks((await http.post(API, json=first)).text)
            assert kinds(streamed)[-4:] == [
                "tool-approval-request",
                "finish-step",
                "finish",
                "[DONE]",
            ]
            await eventually(lambda: len(bus.snapshot("c1").messages) == 1)
            reply = approval_reply(first, streamed, True)
            more = chunks((await http.post(API, json=reply)).text)
            again = chunks((await http.post(API, json=reply)).text)
    said = [c["delta"] for c in streamed + more if isinstance(c, dict) and "delta" in c]
    assert "".join(said) == "While you decide: the draft is ready.Done."
    assert more[0] == {"type": "start", "messageId": streamed[0]["messageId"]}
    assert "tool-input-start" not in kinds(more)
    assert again == more, "a retried continuation gets the same, and nothing runs twice"
    assert [c.state for c in bus.snapshot("c1").calls] == [ts.CallState.COMPLETED]


async def test_a_retried_continuation_after_the_chat_was_forgotten_is_empty_and_whole() -> None:
    """The chat left the bus (its session_ttl passed) before the client retried: the
    retry runs nothing and gets an empty, well-formed stream for the message it holds
    (DefaultChatTransport throws on a 204 to a POST)."""
    now = [1000.0]
    bus = ts.EventBus(session_ttl=60.0, clock=lambda: now[0])
    turns = Turns(bus)
    with serve(ChatApp(bus, turns)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            first = user("Email the team", chat="c9")
            streamed = chunks((await http.post(API, json=first)).text)
            reply = approval_reply(first, streamed, True)
            assert "text-delta" in kinds(chunks((await http.post(API, json=reply)).text))
            await eventually(lambda: not bus.snapshot("c9").open_runs)
            now[0] += 3600  # the chat is forgotten at the next sweep
            ts.Tracker(bus, "elsewhere").create("t").cancel()
            assert not bus.snapshot("c9").runs
            again = chunks((await http.post(API, json=reply)).text)
    assert kinds(again) == ["start", "start-step", "finish-step", "finish", "[DONE]"]
    assert again[0]["messageId"] == streamed[0]["messageId"]
    assert len(turns.started) == 1
    bus.close()


async def test_an_agent_that_stops_its_run_to_wait_is_resumed_in_the_same_message(
    bus: ts.EventBus,
) -> None:
    """A start_turn agent that finishes its run "interrupted" to wait: the continuation
    starts a new run (start_turn, once) that continues the client's message; the same
    continuation sent again replays it and starts nothing."""
    started: list[str] = []
    trackers: dict[str, ts.Tracker] = {}  # kept between requests: it holds the waiting call

    async def agent(request: TurnRequest) -> None:
        tracker = trackers.setdefault(request.session, ts.Tracker(bus, request.session))
        run = tracker.run(request.run_id).start()
        if len(started) == 1:  # the first run asks, and stops to wait
            with tracker.message(run_id=run.run_id) as message:
                message.delta("Asking first.")
            call = tracker.create("send_email", call_id="c1", run_id=run.run_id)
            call.ready({"to": "team@example.com"})
            call.await_approval("Sends an email")
            run.finish("interrupted")
            return
        async with tracker.call("send_email", call_id="c1", run_id=run.run_id) as call:
            call.complete({"sent": True})
        with tracker.message(run_id=run.run_id) as message:
            message.delta("Sent.")
        run.finish()

    async def start_turn(request: TurnRequest) -> None:
        started.append(request.run_id)
        request.start_soon(agent, request)

    with serve(ChatApp(bus, start_turn)) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            first = user("Email the team")
            streamed = chunks((await http.post(API, json=first)).text)
            reply = approval_reply(first, streamed, True)
            more = chunks((await http.post(API, json=reply)).text)
            again = chunks((await http.post(API, json=reply)).text)
    assert len(started) == 2, "the continuation resumed the agent once"
    assert more[0] == {"type": "start", "messageId": streamed[0]["messageId"]}
    assert "tool-output-available" in kinds(more)
    assert again == more
    assert len(started) == 2


async def test_an_approval_asked_from_inside_a_running_call_pauses_and_continues(
    client: httpx.AsyncClient, turns: Turns
) -> None:
    first = user("deploy it", chat="c7")
    streamed = chunks((await client.post(API, json=first)).text)
    assert kinds(streamed)[-4:] == ["tool-approval-request", "finish-step", "finish", "[DONE]"]
    assert "data-tool-progress" in kinds(streamed)  # the call runs while it asks
    asked = next(
        c for c in streamed if isinstance(c, dict) and c["type"] == "tool-approval-request"
    )
    reply = approval_reply(first, streamed, True)
    more = chunks((await client.post(API, json=reply)).text)
    assert len(turns.started) == 1
    assert [c for c in more if isinstance(c, dict) and c["type"] == "tool-output-available"] == [
        {
            "type": "tool-output-available",
            "toolCallId": asked["toolCallId"],
            "output": {"pushed": True},
        }
    ]
    assert kinds(more)[-1] == "[DONE]"


async def test_a_get_replays_the_active_run_from_its_start_or_answers_204(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get(f"{API}/c1/stream")).status_code == 204
    streamed = chunks((await client.post(API, json=user("Email the team"))).text)
    # The run waits for a person: a GET replays it and stops at the request.
    replay = await client.get(f"{API}/c1/stream")
    assert replay.status_code == 200
    assert replay.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert chunks(replay.text) == streamed
    assert (await client.get(f"{API}/nobody/stream")).status_code == 204


async def test_the_client_going_away_does_not_cancel_the_turn(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    await post_then_leave(client, user("a long story", chat="c2"), "text-delta")
    await eventually(lambda: bool(bus.snapshot("c2").runs), within=5)
    await eventually(lambda: bus.snapshot("c2").runs[0].state != "running", within=10)
    (run,) = bus.snapshot("c2").runs
    assert run.state == "completed"
    (message, _) = bus.snapshot("c2").messages
    assert message.text == "".join(STORY)
    # A resume after the turn ended finds nothing to replay.
    assert (await client.get(f"{API}/c2/stream")).status_code == 204


async def test_a_resume_mid_turn_gets_the_whole_message_so_far_then_the_rest(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    await post_then_leave(client, user("a long story", chat="c3"), "word3")
    replay = chunks((await client.get(f"{API}/c3/stream")).text)
    assert kinds(replay)[:2] == ["start", "start-step"]
    said = "".join(c["delta"] for c in replay if isinstance(c, dict) and c["type"] == "text-delta")
    assert said == "".join(STORY) + "The end."
    assert kinds(replay)[-1] == "[DONE]"


async def test_stop_cancels_the_turn_and_a_chat_with_none_gets_404(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    assert (await client.post(f"{API}/c4/stop")).status_code == 404
    async with anyio.create_task_group() as tg:
        streamed: list[Any] = []

        async def read() -> None:
            response = await client.post(API, json=user("a long story", chat="c4"))
            streamed.extend(chunks(response.text))

        tg.start_soon(read)
        await eventually(lambda: bool(bus.snapshot("c4").messages), within=5)
        stop = await client.post(f"{API}/c4/stop")
        assert stop.status_code == 200
        assert stop.json() == {"session": "c4", "stopped": [bus.snapshot("c4").runs[0].run_id]}
    (run,) = bus.snapshot("c4").runs
    assert run.state == "cancelled"
    assert kinds(streamed)[-4:] == ["abort", "finish-step", "finish", "[DONE]"]


async def test_the_chat_id_in_the_path_is_the_one_the_client_encoded(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    """The AI SDK builds ``api + "/" + encodeURIComponent(chatId) + "/stream"``: the id
    is decoded once, from its own segment, so a "/" or "%" in it stays in it (and
    another chat is never resumed or stopped in its place)."""
    for chat in ("a/b", "b", "xA", "x%41"):
        streamed = chunks((await client.post(API, json=user("Email the team", chat=chat))).text)
        assert kinds(streamed)[-1] == "[DONE]"
    run_of = {chat: bus.snapshot(chat).runs[0].run_id for chat in ("a/b", "b", "xA", "x%41")}
    for chat, path in (("a/b", "a%2Fb"), ("x%41", "x%2541"), ("xA", "xA")):
        replay = chunks((await client.get(f"{API}/{path}/stream")).text)
        assert replay[0] == {"type": "start", "messageId": run_of[chat]}, (chat, replay[:2])
    stop = await client.post(f"{API}/a%2Fb/stop")
    assert stop.status_code == 200
    assert stop.json() == {"session": "a/b", "stopped": [run_of["a/b"]]}
    await eventually(lambda: bus.snapshot("a/b").runs[0].state == "cancelled", within=5)
    assert bus.snapshot("b").runs[0].state == "running"
    stop = await client.post(f"{API}/x%2541/stop")
    assert stop.json() == {"session": "x%41", "stopped": [run_of["x%41"]]}
    assert bus.snapshot("xA").runs[0].state == "running"
    # Bytes that are not UTF-8 once decoded are no chat id; nor is one past the bound.
    assert (await client.get(f"{API}/%FF/stream")).status_code == 400
    too_long = await client.post(f"{API}/{'x' * 1025}/stop")
    assert too_long.status_code == 400 and "1024 bytes" in too_long.text


async def test_shutdown_ends_the_responses_and_cancels_the_turns(
    client: httpx.AsyncClient, bus: ts.EventBus, app: ChatApp
) -> None:
    async with client.stream("POST", API, json=user("a long story", chat="c5")) as response:
        async for line in response.aiter_lines():
            if "text-delta" in line:
                break
        assert app.active_turns == 1
        app.shutdown()  # as the lifespan's shutdown does
        await eventually(lambda: bus.snapshot("c5").runs[0].state != "running", within=5)
    assert bus.snapshot("c5").runs[0].state == "cancelled"
    await eventually(lambda: app.active_turns == 0)
    refused = await client.post(API, json=user("hi", chat="c6"))
    assert (refused.status_code, refused.json()["code"]) == (503, "unavailable")


def agui_input(text: str, thread: str, run: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": text}],
    }


async def raises_at_once(request: TurnRequest) -> None:
    raise RuntimeError("no worker available")


async def agent_raises_before_its_run(request: TurnRequest) -> None:
    async def agent() -> None:
        await anyio.sleep(0.05)
        raise RuntimeError("the model is unavailable")

    request.start_soon(agent)


async def agent_raises_in_its_run(request: TurnRequest) -> None:
    async def agent() -> None:
        assert request.bus is not None
        async with ts.Tracker(request.bus, request.session) as tracker:
            with tracker.run(request.run_id), tracker.message() as message:
                message.delta("Thinking.")
                raise RuntimeError("the model is unavailable")

    request.start_soon(agent)


@pytest.mark.parametrize(
    ("start_turn", "reason"),
    [
        (raises_at_once, "no worker available"),
        (agent_raises_before_its_run, "the model is unavailable"),
        (agent_raises_in_its_run, "the model is unavailable"),
    ],
)
async def test_a_turn_that_fails_ends_with_the_dialects_error_and_one_log_line(
    bus: ts.EventBus,
    caplog: pytest.LogCaptureFixture,
    start_turn: Any,
    reason: str,
) -> None:
    """start_turn raising, or the agent raising before or after it announced its run:
    a complete response (never a cut body) ending with the dialect's error, and one
    line in the server's log with the reason."""
    ai_sdk, agui = ChatApp(bus, start_turn), ChatApp(bus, start_turn, dialect="agui")
    with caplog.at_level("DEBUG", logger="toolstream"), serve(ai_sdk) as a, serve(agui) as b:
        async with httpx.AsyncClient(timeout=10) as http:
            failed = await http.post(a.url + API, json=user("hi"))
            ran = await http.post(b.url + "/agent", json=agui_input("hi", "t1", "r1"))
    assert failed.status_code == 200
    streamed = chunks(failed.text)
    assert kinds(streamed)[-4:] == ["error", "finish-step", "finish", "[DONE]"]
    assert reason in streamed[-4]["errorText"]
    events = chunks(ran.text)
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR" and reason in events[-1]["message"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2, [r.getMessage() for r in errors]  # one per request
    assert all(reason in r.getMessage() and r.exc_info is None for r in errors)
    assert not [r for r in caplog.records if "Exception in ASGI" in r.getMessage()]


async def test_a_turn_that_never_starts_its_run_says_so(bus: ts.EventBus) -> None:
    async def silent(request: TurnRequest) -> None:
        return None  # never announces its run

    with serve(ChatApp(bus, silent, start_timeout=0.3)) as b:
        async with httpx.AsyncClient(timeout=10) as http:
            quiet = await http.post(b.url + API, json=user("hi"))
            assert quiet.status_code == 200
            assert kinds(chunks(quiet.text)) == ["error", "[DONE]"]


BAD_BODIES: list[tuple[Any, str]] = [
    ([1, 2], "JSON object"),
    ({"messages": []}, "chat id"),
    ({"id": "", "messages": [{"role": "user"}]}, "chat id"),
    ({"id": "c\nx", "messages": [{"role": "user"}]}, "chat id"),
    ({"id": "c1"}, "messages"),
    ({"id": "c1", "messages": []}, "messages"),
    ({"id": "c1", "messages": ["hi"]}, "messages[0]"),
    ({"id": "c1", "messages": [{"role": "user", "parts": "x"}]}, "parts"),
    ({"id": "c1", "messages": [{"role": "user"}], "trigger": "explode"}, "trigger"),
    ({"id": "c1", "messages": [{"role": "assistant", "parts": []}]}, "approval"),
]


@pytest.mark.parametrize(("body", "reason"), BAD_BODIES)
async def test_bad_bodies_get_400_with_the_reason(
    client: httpx.AsyncClient, turns: Turns, body: Any, reason: str
) -> None:
    response = await client.post(API, json=body)
    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert response.json()["code"] == "invalid"
    assert turns.started == []


async def test_bad_requests_of_every_other_kind(client: httpx.AsyncClient) -> None:
    not_json = await client.post(API, content=b"{", headers={"content-type": "application/json"})
    assert (not_json.status_code, not_json.json()["error"]) == (400, "the body is not JSON")
    text = await client.post(API, content=b"hi", headers={"content-type": "text/plain"})
    assert text.status_code == 415
    huge = await client.post(API, json={"id": "c1", "pad": "x" * (5 * 1024 * 1024)})
    assert huge.status_code == 413
    assert (await client.put(API, json=user("hi"))).status_code == 405
    assert (await client.get(API)).status_code == 404
    bad_id = await client.get(f"{API}/%ED%A0%80/stream")  # a lone surrogate's bytes
    assert bad_id.status_code in (204, 400)


async def test_a_decision_for_another_chats_approval_is_404(
    client: httpx.AsyncClient, bus: ts.EventBus
) -> None:
    first = user("Email the team", chat="a")
    streamed = chunks((await client.post(API, json=first)).text)
    foreign = {**approval_reply(first, streamed, True), "id": "b"}
    response = await client.post(API, json=foreign)
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    (call,) = bus.snapshot("a").calls
    assert call.approval is not None, "the approval in chat a is still waiting"


@attrs.frozen
class User:
    id: str
    chats: frozenset[str]
    approver: bool

    def can_read(self, session: str) -> bool:
        return session in self.chats

    def can_approve(self, session: str) -> bool:
        return self.approver and session in self.chats


USERS = {
    "alice": User("alice", frozenset({"c1"}), approver=True),
    "watcher": User("watcher", frozenset({"c1"}), approver=False),
}


def authorize(request: ts.RequestInfo) -> User | None:
    return USERS.get(request.headers.get("authorization", "").removeprefix("Bearer "))


async def test_auth_origin_and_foreign_chats(bus: ts.EventBus, turns: Turns) -> None:
    app = ChatApp(bus, turns, authorize=authorize, allowed_origins=["https://app.example"])
    with serve(app) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:

            def as_(name: str) -> dict[str, str]:
                return {"authorization": f"Bearer {name}"}

            assert (await http.post(API, json=user("hi"))).status_code == 401
            foreign = await http.post(API, json=user("hi", chat="c9"), headers=as_("alice"))
            assert foreign.status_code == 403
            assert (await http.get(f"{API}/c9/stream", headers=as_("alice"))).status_code == 403
            origin = {**as_("alice"), "origin": "https://evil.example"}
            assert (await http.post(API, json=user("hi"), headers=origin)).status_code == 403
            first = user("Email the team")
            streamed = chunks((await http.post(API, json=first, headers=as_("alice"))).text)
            assert turns.started[0].principal == USERS["alice"]
            reply = approval_reply(first, streamed, True)
            refused = await http.post(API, json=reply, headers=as_("watcher"))
            assert refused.status_code == 403
            assert (await http.post(f"{API}/c1/stop", headers=as_("watcher"))).status_code == 403
            done = await http.post(API, json=reply, headers=as_("alice"))
            assert done.status_code == 200
            (call,) = bus.snapshot("c1").calls
            assert call.decided_by == "alice"


def test_the_chat_package_exports_what_the_docs_name() -> None:
    import inspect

    import toolstream.chat as chat

    assert chat.__all__ == ["BadBody", "CancelTurn", "ChatApp", "StartTurn", "TurnRequest"]
    for name in ("BadBody", "ChatApp", "TurnRequest"):
        obj = getattr(chat, name)
        assert inspect.isclass(obj) and obj.__doc__, name
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and callable(member):
                assert member.__doc__, f"{name}.{attr}"
    doc = (Path(__file__).parent.parent / "docs" / "chat.md").read_text()
    for name in ("ChatApp", "TurnRequest", "start_turn", "cancel_turn", "user_text"):
        assert name in doc


async def delegating_agent(request: TurnRequest) -> None:
    """A turn whose tool runs a sub-agent, one of whose calls needs a person."""
    assert request.bus is not None
    async with (
        ts.Tracker(request.bus, request.session) as tracker,
        tracker.run(request.run_id),
        tracker.call("assistant", {"task": "mail"}, call_id="c1") as assistant,
        assistant.subagent("mailer"),
        tracker.call("send_email", {"to": "bob"}, approval="Sends mail", call_id="c2") as mail,
    ):
        mail.complete({"sent": True})


@pytest.mark.parametrize("dialect", ["ai_sdk", "agui"])
async def test_a_subagents_approval_in_a_chat(bus: ts.EventBus, dialect: str) -> None:
    """AI SDK: the response does not end at a sub-agent's approval (the client only
    answers its message's own); the person decides with POST …/<chat id>/decide and the
    same response goes on to the end. AG-UI: the response ends at the interrupt (tagged
    with the sub-agent) and a resume continues the turn."""

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(delegating_agent, request)

    app = ChatApp(bus, start_turn, dialect=dialect)  # type: ignore[arg-type]
    with serve(app) as served:
        async with httpx.AsyncClient(base_url=served.url, timeout=20) as http:
            if dialect == "agui":
                first = await http.post(API, json=agui_input("Mail bob", "c1", "t1"))
                events = chunks(first.text)
                finished = events[-1]
                assert finished["type"] == "RUN_FINISHED"
                [interrupt] = finished["outcome"]["interrupts"]
                assert interrupt["subagentRunId"].startswith("run_")
                resumed = agui_input("", "c1", "t2")
                resumed["messages"] = []
                resumed["resume"] = [
                    {"interruptId": interrupt["id"], "status": "resolved", "payload": True}
                ]
                more = chunks((await http.post(API, json=resumed)).text)
                assert [e["type"] for e in more][:2] == ["RUN_STARTED", "SUBAGENT_STARTED"]
                assert more[-1]["type"] == "RUN_FINISHED" and "outcome" not in more[-1]
                return

            async def decide() -> None:
                await eventually(lambda: any(c.approval for c in bus.snapshot("c1").calls))
                pending = next(c.approval for c in bus.snapshot("c1").calls if c.approval)
                wrong = await http.post(
                    "/api/c1/decide", content=b"{}", headers={"content-type": "text/plain"}
                )
                assert wrong.status_code == 415
                response = await http.post(
                    "/api/c1/decide", json={"approval_id": pending.approval_id, "approved": True}
                )
                assert response.status_code == 200, response.text
                assert response.json()["by"] == "anonymous"

            async with anyio.create_task_group() as tg:
                tg.start_soon(decide)
                response = await http.post(API, json=user("Mail bob"))
    streamed = chunks(response.text)
    assert kinds(streamed)[-3:] == ["finish-step", "finish", "[DONE]"]
    assert {"type": "finish", "finishReason": "tool-calls"} not in streamed
    final = [c for c in streamed if isinstance(c, dict) and c["type"] == "tool-output-available"]
    states = [c["output"]["parts"][-1]["state"] for c in final if c["output"]["parts"][1:]]
    assert "approval-requested" in states and states[-1] == "output-available"
    assert final[-1]["output"]["metadata"]["subagents"][0]["agent"] == "mailer"


def test_a_chat_client_that_stops_reading_is_cut_at_the_write_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A turn streams a long answer to a client that stopped reading: ChatApp's response
    # goes through the same event stream as SSEApp's, with its write deadline, so it
    # ends while the client reads nothing and releases its subscription and request.
    monkeypatch.setattr(serving, "DEFAULT_WRITE_TIMEOUT", 0.5)
    bus = ts.EventBus(replay=10_000)

    async def long_answer(session: str, run_id: str) -> None:
        async with ts.Tracker(bus, session) as tracker, tracker.run(run_id):
            with tracker.message() as message:
                for i in range(60):  # 1 MB, paced: the response keeps up until it blocks
                    message.delta(f"{i:04d} " + "x" * 16_000)
                    await anyio.sleep(0.01)

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(long_answer, request.session, request.run_id)

    with serve(ChatApp(bus, start_turn), sndbuf=16384) as served:
        sock = raw.connect(served.port)
        body = json.dumps(user("tell me everything"))
        sock.sendall(
            (
                f"POST {API} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}"
            ).encode()
        )
        assert raw.read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 200")
        tasks = served.server.server_state.tasks
        settles(lambda: bus.subscriber_count() == 0 and not tasks)
        sock.close()
