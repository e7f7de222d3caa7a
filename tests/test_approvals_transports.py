"""Deciding approvals over the wire: SSEApp's POST and WebSocketApp's ``approve`` op,
under a real uvicorn on 127.0.0.1, with the security a gateway needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import httpx
import pytest
from websockets.sync.client import connect

import toolstream as ts
from toolstream.sse import SSEApp
from toolstream.websocket import WebSocketApp

from .servers import Served, serve


@attrs.frozen
class User:
    id: str
    sessions: frozenset[str]
    approver: bool

    def can_read(self, session: str) -> bool:
        return session in self.sessions

    def can_approve(self, session: str) -> bool:
        return self.approver and session in self.sessions


USERS = {
    "alice": User("alice", frozenset({"s1"}), approver=True),
    "watcher": User("watcher", frozenset({"s1"}), approver=False),
    "mallory": User("mallory", frozenset({"s2"}), approver=True),
}


def authorize(request: ts.RequestInfo) -> User | None:
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    return USERS.get(token or request.query.get("token", ""))


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def server(bus: ts.EventBus) -> Iterator[Served]:
    app = SSEApp(bus, authorize=authorize, allowed_origins=["https://app.example"])
    with serve(app) as served:
        yield served


def ask(bus: ts.EventBus, session: str = "s1", **fields: Any) -> str:
    tracker = ts.Tracker(bus, session)
    handle = tracker.create("send_email", **fields)
    handle.ready({"to": "bob@example.com"})
    return handle.await_approval("Sends mail")


def post(
    served: Served,
    body: Any,
    *,
    user: str | None = "alice",
    session: str = "s1",
    content_type: str = "application/json",
    origin: str | None = None,
) -> httpx.Response:
    headers = {"content-type": content_type}
    if user:
        headers["authorization"] = f"Bearer {user}"
    if origin:
        headers["origin"] = origin
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(f"{served.url}/?session={session}", content=data, headers=headers)


def test_post_decides_and_by_is_the_principal(bus: ts.EventBus, server: Served) -> None:
    approval_id = ask(bus)
    # "by" in the body is not a field a client may set
    forged = post(server, {"approval_id": approval_id, "approved": True, "by": "root"})
    assert forged.status_code == 400 and "unknown fields: by" in forged.json()["error"]
    response = post(server, {"approval_id": approval_id, "approved": True, "reason": "ok"})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "session": "s1",
        "approval_id": approval_id,
        "approved": True,
        "by": "alice",
        "reason": "ok",
    }
    again = post(server, {"approval_id": approval_id, "approved": False})
    assert again.status_code == 409
    assert again.json()["code"] == "already_resolved"
    assert again.json()["resolution"]["by"] == "alice"


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"user": None}, 401, None),
        ({"user": "watcher"}, 403, "forbidden"),
        ({"user": "mallory"}, 403, "forbidden"),
        ({"content_type": "application/x-www-form-urlencoded"}, 415, "invalid"),
        ({"content_type": "text/plain"}, 415, "invalid"),
        ({"origin": "https://evil.example"}, 403, None),
    ],
)
def test_who_may_decide(
    bus: ts.EventBus, server: Served, kwargs: dict[str, Any], status: int, code: str | None
) -> None:
    approval_id = ask(bus)
    response = post(server, {"approval_id": approval_id, "approved": True}, **kwargs)
    assert response.status_code == status, response.text
    if code is not None:
        assert response.json()["code"] == code
    assert bus.snapshot("s1").calls[0].approval is not None, "still pending"


def test_another_sessions_approval_is_not_found_like_an_unknown_one(
    bus: ts.EventBus, server: Served
) -> None:
    foreign = ask(bus, "s2")
    as_alice = post(server, {"approval_id": foreign, "approved": True})
    unknown = post(server, {"approval_id": "apr_" + "0" * 32, "approved": True})
    assert as_alice.status_code == unknown.status_code == 404
    assert as_alice.json() == unknown.json()


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"not json", 400),
        (b"[1, 2]", 400),
        ({"approved": True}, 400),
        ({"approval_id": 7, "approved": True}, 400),
        ({"approval_id": "x", "approved": "yes"}, 400),
        ({"approval_id": "APR", "approved": True, "args": [1]}, 400),
        ({"approval_id": "APR", "approved": True, "args": {"big": "x" * 40_000}}, 413),
        ({"approval_id": "APR", "approved": True, "extra": 1}, 400),
        (b"{" * 100_000, 413),
        ('{"approval_id": "\\ud800", "approved": true}', 400),
    ],
)
def test_bad_bodies_get_a_clear_4xx(
    bus: ts.EventBus, server: Served, body: Any, status: int
) -> None:
    approval_id = ask(bus)
    if isinstance(body, dict) and body.get("approval_id") == "APR":
        body = {**body, "approval_id": approval_id}
    response = post(server, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]
    assert bus.snapshot("s1").calls[0].approval is not None, "still pending"


def test_secrets_in_edited_args_are_redacted_on_the_wire_and_real_for_the_tool(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s1")
    handle = tracker.create("call_api", call_id="c1")
    handle.ready({"url": "https://api.example"})
    approval_id = handle.await_approval()
    secret = "sk-live-0123456789abcdef0123456789"
    response = post(
        server,
        {"approval_id": approval_id, "approved": True, "args": {"url": "u", "token": secret}},
    )
    assert response.status_code == 200
    wire = [
        ts.to_dict(e) for e in bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()
    ]
    assert secret not in json.dumps(wire)
    decision = bus.decision_now("s1", approval_id)
    assert decision is not None and decision.args == {"url": "u", "token": secret}


def test_without_authorize_anyone_who_reads_decides_as_anonymous(bus: ts.EventBus) -> None:
    approval_id = ask(bus)
    with serve(SSEApp(bus)) as served:
        response = post(served, {"approval_id": approval_id, "approved": False}, user=None)
    assert response.status_code == 200 and response.json()["by"] == "anonymous"
    assert bus.snapshot("s1").calls[0].state is ts.CallState.DENIED


def test_an_expired_approval_is_410(bus: ts.EventBus) -> None:
    now = [1000.0]
    clocked = ts.EventBus(clock=lambda: now[0])
    tracker = ts.Tracker(clocked, "s1")
    approval_id = tracker.create("send").await_approval(timeout=10)
    now[0] += 11
    with serve(SSEApp(clocked)) as served:
        response = post(served, {"approval_id": approval_id, "approved": True}, user=None)
    assert response.status_code == 410 and response.json()["resolution"]["by"] == "timeout"
    clocked.close()


# -- WebSocket ------------------------------------------------------------------------------


def ws_messages(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    while True:
        answer: dict[str, Any] = json.loads(ws.recv(timeout=5))
        if answer.get("op") not in ("ping", "event"):
            return answer


def test_websocket_approve_op(bus: ts.EventBus) -> None:
    approval_id = ask(bus)
    foreign = ask(bus, "s2")
    app = WebSocketApp(bus, authorize=authorize)
    with serve(app, ws="websockets-sansio") as served:
        url = served.url.replace("http://", "ws://") + "/?token="
        with connect(url + "watcher") as ws:
            refused = ws_messages(
                ws, {"op": "approve", "session": "s1", "approval_id": approval_id, "approved": True}
            )
            assert refused["op"] == "error" and refused["code"] == "forbidden"
        with connect(url + "alice") as ws:
            bad = ws_messages(ws, {"op": "approve", "session": "s1", "approval_id": approval_id})
            assert bad["code"] == "invalid"
            other = ws_messages(
                ws, {"op": "approve", "session": "s1", "approval_id": foreign, "approved": True}
            )
            assert other["code"] == "not_found"
            done = ws_messages(
                ws,
                {"op": "approve", "session": "s1", "approval_id": approval_id, "approved": False},
            )
            assert done == {
                "op": "approved",
                "session": "s1",
                "approval_id": approval_id,
                "approved": False,
                "by": "alice",
            }
            replay = ws_messages(
                ws, {"op": "approve", "session": "s1", "approval_id": approval_id, "approved": True}
            )
            assert replay["code"] == "already_resolved"
            assert replay["resolution"]["approved"] is False
            # the socket stays usable
            assert ws_messages(ws, {"op": "ping"})["op"] == "pong"
    assert bus.snapshot("s1").calls[0].state is ts.CallState.DENIED
