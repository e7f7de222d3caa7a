"""WebSocketApp under a real uvicorn on 127.0.0.1, with the websockets client."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.connection import Connection
from websockets.typing import Origin

import toolstream as ts
from tests.strategies import json_values
from toolstream.websocket import WebSocketApp

from . import raw_clients as raw
from .memory import held_by, traced
from .servers import Served, serve, settles


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


def ws_serve(app: Any, **options: Any) -> Any:
    return serve(app, ws="websockets-sansio", **options)


@pytest.fixture
def server(bus: ts.EventBus) -> Iterator[Served]:
    with ws_serve(WebSocketApp(bus)) as served:
        yield served


def ws_url(served: Served) -> str:
    return served.url.replace("http://", "ws://") + "/"


def send(ws: Connection, **message: Any) -> None:
    ws.send(json.dumps(message))


def recv(ws: Connection, timeout: float = 5.0) -> dict[str, Any]:
    """The next message that is not a keepalive ping."""
    while True:
        message: dict[str, Any] = json.loads(ws.recv(timeout=timeout))
        if message.get("op") != "ping":
            return message


def close_code(ws: Connection) -> int:
    """Read until the server closes the socket; the close code it sent."""
    try:
        while True:
            ws.recv(timeout=10)
    except ConnectionClosed as closed:
        frame = closed.rcvd
    assert frame is not None, "closed without a close frame"
    return frame.code


def until(ws: Connection, predicate: Any, timeout: float = 5.0) -> list[dict[str, Any]]:
    out = []
    deadline = time.monotonic() + timeout
    while True:
        message = recv(ws, max(0.01, deadline - time.monotonic()))
        out.append(message)
        if predicate(message):
            return out


def test_subscribe_reset_then_live(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    tracker.create("open_call", call_id="a").start()
    with connect(ws_url(server)) as ws:
        send(ws, op="subscribe", session="s1")
        assert recv(ws) == {"op": "subscribed", "session": "s1", "dialect": "native"}
        reset = recv(ws)
        assert reset["op"] == "event" and reset["event"] == "stream.reset"
        assert [c["call_id"] for c in reset["data"]["snapshot"]["calls"]] == ["a"]
        tracker.create("t", call_id="b").complete({"n": 1})
        got = until(ws, lambda m: m.get("data", {}).get("type") == "tool.completed")
        assert [m["data"]["type"] for m in got] == [
            "tool.created",
            "tool.started",
            "tool.completed",
        ]
        assert got[-1]["data"]["result"] == {"n": 1}
        assert isinstance(got[-1]["data"], dict), "the payload is JSON, not a string to parse again"


def test_several_sessions_on_one_socket_each_with_its_cursor(
    bus: ts.EventBus, server: Served
) -> None:
    first = ts.Tracker(bus, "one")
    second = ts.Tracker(bus, "two")
    first.create("x", call_id="one_a").complete()
    seen = bus.subscribe(session="one", after=f"{bus.epoch}-0").take_nowait()
    first.create("x", call_id="one_b").complete()
    with connect(ws_url(server)) as ws:
        send(ws, op="subscribe", session="one", after=seen[-1].id)
        send(ws, op="subscribe", session="two", dialect="hermes")
        messages = until(ws, lambda m: m.get("op") == "subscribed" and m["session"] == "two")
        second.create("y", call_id="two_a").complete()
        messages += until(
            ws,
            lambda m: m.get("session") == "two" and m.get("data", {}).get("status") == "completed",
        )
    events = [m for m in messages if m["op"] == "event"]
    one = [m["data"]["call_id"] for m in events if m["session"] == "one"]
    assert set(one) == {"one_b"}, "resumed after its cursor: only what it missed"
    two = [m["data"]["status"] for m in events if m["session"] == "two"]
    assert two == ["running", "completed"]


def test_bad_input_gets_a_specific_error_and_the_socket_stays_open(server: Served) -> None:
    with connect(ws_url(server)) as ws:
        ws.send("not json")
        assert recv(ws)["code"] == "bad_json"
        ws.send("[1, 2]")
        assert recv(ws)["code"] == "invalid"
        send(ws, op="dance")
        assert recv(ws)["code"] == "unknown_op"
        send(ws, op="subscribe")
        assert recv(ws) == {"op": "error", "code": "invalid", "message": "missing field 'session'"}
        send(ws, op="subscribe", session=42)
        assert recv(ws)["code"] == "invalid"
        send(ws, op="subscribe", session="x" * 1025)  # past MAX_ID_BYTES
        reply = recv(ws)
        assert reply["code"] == "invalid" and "at most 1024 bytes" in reply["message"], reply
        send(ws, op="subscribe", session="s", run="r" * 1025)
        assert recv(ws)["code"] == "invalid"
        send(ws, op="subscribe", session="s", types=["tool.exploded"])
        assert recv(ws)["code"] == "invalid"
        send(ws, op="subscribe", session="s", dialect="klingon")
        assert recv(ws)["code"] == "invalid"
        send(ws, op="unsubscribe", session="never")
        assert recv(ws)["code"] == "not_subscribed"
        send(ws, op="subscribe", session="s")
        assert recv(ws)["op"] == "subscribed"
        send(ws, op="subscribe", session="s")
        error = until(ws, lambda m: m["op"] == "error")[-1]
        assert error["code"] == "already_subscribed" and error["session"] == "s"
        send(ws, op="unsubscribe", session="s")
        assert until(ws, lambda m: m["op"] == "unsubscribed")[-1] == {
            "op": "unsubscribed",
            "session": "s",
        }
        send(ws, op="ping", id=1)
        assert recv(ws) == {"op": "pong", "id": 1}


def test_authentication_origin_and_session_isolation(bus: ts.EventBus) -> None:
    class User:
        def __init__(self, name: str) -> None:
            self.name = name

        def can_read(self, session: str) -> bool:
            return session == self.name

    def authorize(request: ts.RequestInfo) -> User | None:
        name = request.query.get("token")
        return User(name) if name in ("alice", "bob") else None

    app = WebSocketApp(bus, authorize=authorize, allowed_origins=["https://app.example"])
    with ws_serve(app) as served:
        url = ws_url(served)
        with connect(url + "?token=alice", origin=Origin("https://evil.example")) as ws:
            assert close_code(ws) == 4403
        with connect(url + "?token=mallory", origin=Origin("https://app.example")) as ws:
            assert close_code(ws) == 4401
        with connect(url + "?token=bob", origin=Origin("https://app.example")) as ws:
            send(ws, op="subscribe", session="alice")
            assert recv(ws)["code"] == "forbidden"
            send(ws, op="subscribe", session="bob")
            assert recv(ws)["op"] == "subscribed"
            recv(ws)  # bob's reset
            for _ in range(10):
                ts.Tracker(bus, "alice").create("secret_plans").complete()
            ts.Tracker(bus, "bob").create("bobs_tool").complete()
            got = until(ws, lambda m: m.get("data", {}).get("type") == "tool.completed")
        assert {m["session"] for m in got} == {"bob"}
        assert all(m["data"]["tool"] == "bobs_tool" for m in got)


def test_oversized_messages_close_1009(bus: ts.EventBus) -> None:
    with (
        ws_serve(WebSocketApp(bus, max_message_bytes=1024)) as served,
        connect(ws_url(served)) as ws,
    ):
        ws.send(json.dumps({"op": "ping", "pad": "x" * 2000}))
        assert close_code(ws) == 1009


def test_a_silent_peer_is_detected_and_released(bus: ts.EventBus) -> None:
    with ws_serve(WebSocketApp(bus, ping_interval=0.2)) as served:
        with connect(ws_url(served)) as ws:
            send(ws, op="subscribe", session="s1")
            assert recv(ws)["op"] == "subscribed"
            assert bus.subscriber_count("s1") == 1
            time.sleep(1.0)  # answer no ping
            assert close_code(ws) == 1011
        deadline = time.monotonic() + 5
        while bus.subscriber_count("s1") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bus.subscriber_count("s1") == 0


def test_a_peer_answering_pings_stays(bus: ts.EventBus) -> None:
    with ws_serve(WebSocketApp(bus, ping_interval=0.2)) as served, connect(ws_url(served)) as ws:
        deadline = time.monotonic() + 1.0
        pings = 0
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=1))
            if message["op"] == "ping":
                pings += 1
                send(ws, op="pong")
        send(ws, op="ping", id="still-there")
        assert until(ws, lambda m: m["op"] == "pong")[-1]["id"] == "still-there"
        assert pings >= 3


def test_a_slow_client_is_cut_with_4408_and_resumes(bus: ts.EventBus) -> None:
    bus = ts.EventBus(replay=10_000, replay_bytes=64 * 2**20)
    with ws_serve(WebSocketApp(bus, buffer=16)) as served:
        tracker = ts.Tracker(bus, "s1")
        ids: list[str] = []
        with connect(ws_url(served), max_size=None) as ws:
            send(ws, op="subscribe", session="s1")
            assert recv(ws)["op"] == "subscribed"
            cursor = recv(ws)["id"]  # the reset: where to resume if cut before any event
            for i in range(300):
                tracker.create("t").complete({"i": i, "blob": "x" * 20_000})
            time.sleep(1.0)  # not reading: the server's sends block, the backlog grows
            code = None
            try:
                while True:
                    message = recv(ws)
                    if message["op"] == "event":
                        ids.append(message["id"])
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
            assert code == 4408
        assert len(ids) < 900, "the server cut the slow client"
        with connect(ws_url(served), max_size=None) as ws:
            send(ws, op="subscribe", session="s1", after=ids[-1] if ids else cursor)
            rest = until(
                ws,
                lambda m: (
                    m.get("data", {}).get("type") == "tool.completed"
                    and m["data"]["result"]["i"] == 299
                ),
                timeout=20,
            )
        ids += [m["id"] for m in rest if m["op"] == "event"]
        assert len(ids) == len(set(ids)) == 900, "every event exactly once across the cut"
    bus.close()


def test_run_subscription_ends_after_its_run(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    with connect(ws_url(server)) as ws:
        send(ws, op="subscribe", session="s1", run="turn-1", dialect="ai_sdk")
        assert recv(ws)["op"] == "subscribed"
        with tracker.run(run_id="turn-1"), tracker.call("t", {"x": 1}) as call:
            call.complete("ok")
        got = until(ws, lambda m: m["op"] == "unsubscribed")
        assert got[-1] == {"op": "unsubscribed", "session": "s1", "reason": "ended"}
        chunks = [m for m in got if m["op"] == "event"]
        assert chunks[-1]["raw"] == "[DONE]"
        assert [c["data"]["type"] for c in chunks[:-1]][-2:] == ["finish-step", "finish"]


def test_types_filter(bus: ts.EventBus, server: Served) -> None:
    with connect(ws_url(server)) as ws:
        send(ws, op="subscribe", session="s1", types=["tool.completed"])
        assert recv(ws)["op"] == "subscribed"
        assert recv(ws)["event"] == "stream.reset"
        ts.Tracker(bus, "s1").create("t").complete()
        assert recv(ws)["event"] == "tool.completed"


def test_disconnect_releases_every_subscription(bus: ts.EventBus, server: Served) -> None:
    with connect(ws_url(server)) as ws:
        for session in ("a", "b", "c"):
            send(ws, op="subscribe", session=session)
        until(ws, lambda m: m["op"] == "subscribed" and m["session"] == "c")
        assert bus.subscriber_count() == 3
    deadline = time.monotonic() + 5
    while bus.subscriber_count() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bus.subscriber_count() == 0


def test_shutdown_closes_sockets_1001(bus: ts.EventBus) -> None:
    app = WebSocketApp(bus)
    with ws_serve(app) as served, connect(ws_url(served)) as ws:
        send(ws, op="subscribe", session="s1")
        recv(ws)
        app.shutdown()
        assert close_code(ws) == 1001


def test_one_clients_partial_resume_never_costs_another_client_an_event(
    bus: ts.EventBus, server: Served
) -> None:
    # A client cut inside an event resumes from "<id>/0" and needs nothing more of it;
    # the encodings shared between sockets must still give the event whole to a client
    # that resumes normally (it used to get nothing: a cached empty frame).
    first = bus.publish(ts.ToolStarted, session="s1", call_id="a", tool="t")
    target = bus.publish(ts.ToolCompleted, session="s1", call_id="a", tool="t", result=7)
    with (
        connect(ws_url(server)) as watcher,
        connect(ws_url(server)) as cut,
        connect(ws_url(server)) as normal,
    ):
        send(watcher, op="subscribe", session="s1")
        until(watcher, lambda m: m.get("event") == "stream.reset")
        send(cut, op="subscribe", session="s1", after=f"{target.id}/0")
        assert recv(cut)["op"] == "subscribed"
        send(normal, op="subscribe", session="s1", after=first.id)
        got = until(normal, lambda m: m.get("op") == "event")
        assert got[-1]["id"] == target.id and got[-1]["data"]["result"] == 7
        live = bus.publish(ts.ToolProgress, session="s1", call_id="b", tool="t")
        assert until(cut, lambda m: m.get("op") == "event")[-1]["id"] == live.id
        assert until(normal, lambda m: m.get("op") == "event")[-1]["id"] == live.id


def test_hostile_messages_get_errors_and_leak_nothing(bus: ts.EventBus) -> None:
    # 202 messages at once: over the default inbound budget (200), which is not what
    # this checks.
    app = WebSocketApp(bus, inbound_burst=1_000)
    with ws_serve(app) as server, connect(ws_url(server), max_size=None) as ws:
        ws.send("[" * 30_000 + "]" * 30_000)  # ~60 KB of nesting
        assert recv(ws)["code"] == "bad_json"
        for _ in range(200):  # a session name that cannot be encoded
            ws.send('{"op": "subscribe", "session": "\\ud800"}')
            reply = recv(ws)
            assert reply["op"] == "error" and reply["code"] == "invalid", reply
        send(ws, op="ping", id=1)
        assert recv(ws) == {"op": "pong", "id": 1}, "the socket stays open"
    assert bus.subscriber_count() == 0


def test_a_closed_bus_answers_unavailable(bus: ts.EventBus, server: Served) -> None:
    bus.close()
    with connect(ws_url(server)) as ws:
        send(ws, op="subscribe", session="s1")
        reply = recv(ws)
        assert reply["op"] == "error" and reply["code"] == "unavailable", reply
        send(ws, op="ping")
        assert recv(ws) == {"op": "pong"}


def test_a_result_that_cannot_be_encoded_never_kills_a_socket(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s1")
    with tracker.run(run_id="r1"):
        tracker.create("list_files", call_id="c").complete({"files": ["report-\udcff.txt"]})
    for dialect in ("native", "agui", "ai_sdk", "hermes"):
        with connect(ws_url(server)) as ws:
            send(
                ws, op="subscribe", session="s1", dialect=dialect, run="r1", after=f"{bus.epoch}-0"
            )
            got = until(ws, lambda m: m.get("op") == "unsubscribed")  # the run, to its end
            assert "report-\ufffd.txt" in json.dumps(got, ensure_ascii=False), dialect
            send(ws, op="ping")
            assert until(ws, lambda m: m.get("op") == "pong")


_DOCUMENTED_OPS = {"subscribed", "unsubscribed", "event", "error", "pong", "ping"}
_DOCUMENTED_CODES = {
    "bad_json",
    "invalid",
    "unknown_op",
    "already_subscribed",
    "not_subscribed",
    "too_many",
    "forbidden",
    "unavailable",
}
_VALUES = json_values(max_leaves=8, text=6)
_MESSAGE = st.one_of(
    st.text(max_size=30),
    st.binary(max_size=30),
    st.integers(100, 20_000).map(lambda n: "[" * n + "]" * n),
    st.fixed_dictionaries(
        {"op": st.sampled_from(["subscribe", "unsubscribe", "ping", "pong", "x", 3])},
        optional={
            "session": st.one_of(st.sampled_from(["s1", "", "\ud800", "s2"]), _VALUES),
            "after": st.one_of(st.sampled_from(["x-1", "1/0", "e-1/r0"]), _VALUES),
            "run": _VALUES,
            "types": st.one_of(st.lists(st.sampled_from(["tool.started", "nope"])), _VALUES),
            "dialect": st.one_of(st.sampled_from(["agui", "hermes", "klingon"]), _VALUES),
            "id": _VALUES,
        },
    ).map(json.dumps),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_MESSAGE, max_size=8))
def test_fuzzed_messages_get_documented_replies_only(messages: list[str | bytes]) -> None:
    import anyio

    bus = ts.EventBus()
    bus.publish(ts.ToolStarted, session="s1", call_id="c", tool="t")
    app = WebSocketApp(bus)
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        inbox: list[dict[str, Any]] = [{"type": "websocket.connect"}]
        for m in messages:
            key = "bytes" if isinstance(m, bytes) else "text"
            inbox.append({"type": "websocket.receive", key: m})
        inbox.append({"type": "websocket.disconnect", "code": 1000})
        it = iter(inbox)

        async def receive() -> dict[str, Any]:
            await anyio.lowlevel.checkpoint()
            try:
                return next(it)
            except StopIteration:
                await anyio.sleep_forever()
                raise

        async def send(message: Any) -> None:
            if "text" in message:
                message["text"].encode("utf-8")  # what a server must do: may raise
            sent.append(dict(message))

        scope = {"type": "websocket", "path": "/", "headers": [], "query_string": b""}
        with anyio.fail_after(10):
            await app(scope, receive, send)  # never raises

    anyio.run(main)
    assert sent[0] == {"type": "websocket.accept"}
    for message in sent[1:]:
        if message["type"] == "websocket.close":
            assert message["code"] in (1000, 1009), message
            continue
        reply = json.loads(message["text"])
        assert reply["op"] in _DOCUMENTED_OPS, reply
        if reply["op"] == "error":
            assert reply["code"] in _DOCUMENTED_CODES, reply
    assert bus.subscriber_count() == 0, "every subscription released"


class _Errors(logging.Handler):
    """Collects the ERROR records uvicorn logs ("Exception in ASGI application")."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(
    ("ws_impl", "framework"),
    [("websockets-sansio", False), ("auto", False), ("auto", True)],
    ids=["sansio", "uvicorn-default", "fastapi"],
)
def test_clients_closing_at_any_point_log_no_error(ws_impl: str, framework: bool) -> None:
    import random
    import threading

    bus = ts.EventBus()
    app: Any = WebSocketApp(bus)
    if framework:
        from fastapi import FastAPI
        from starlette.routing import WebSocketRoute

        api = FastAPI()
        api.routes.append(WebSocketRoute("/", app))
        app = api
    errors = _Errors()
    logging.getLogger("uvicorn.error").addHandler(errors)
    stop = threading.Event()

    def publish() -> None:
        tracker = ts.Tracker(bus, "s1")
        call = tracker.create("busy")
        i = 0
        while not stop.is_set():  # a busy stream, ~1,000 events/s
            call.progress(current=i)
            i += 1
            time.sleep(0.001)

    producer = threading.Thread(target=publish, daemon=True)
    rng = random.Random(7)
    try:
        with serve(app, ws=ws_impl) as server:
            producer.start()
            for _ in range(300):
                with connect(ws_url(server), close_timeout=1, max_queue=None) as ws:
                    send(ws, op="subscribe", session="s1")
                    for _ in range(rng.randrange(0, 30)):
                        ws.recv(timeout=5)
                # the client closes cleanly, mid-stream
            stop.set()
            producer.join()
            deadline = time.monotonic() + 10
            while bus.subscriber_count() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert bus.subscriber_count() == 0, "every subscription released"
    finally:
        stop.set()
        logging.getLogger("uvicorn.error").removeHandler(errors)
    assert [r.getMessage() for r in errors.records] == []


def _read_events(ws: Connection, count: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """Read until ``count`` event messages arrived; (the events, the raw messages)."""
    events: list[dict[str, Any]] = []
    raw: list[Any] = []
    deadline = time.monotonic() + 10
    while len(events) < count:
        parsed = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        raw.append(parsed)
        for message in parsed if isinstance(parsed, list) else [parsed]:
            if message.get("op") == "event":
                events.append(message)
    return events, raw


@pytest.mark.parametrize("batched", [True, False])
def test_the_batch_subprotocol_sends_events_in_arrays(
    bus: ts.EventBus, server: Served, batched: bool
) -> None:
    """Offered ``toolstream.batch``, a client gets several events per message (JSON
    arrays, in order, nothing lost or doubled); not offered, one object per message."""
    from websockets.typing import Subprotocol

    from toolstream.websocket import BATCH_SUBPROTOCOL

    offered = [Subprotocol(BATCH_SUBPROTOCOL)] if batched else None
    with connect(ws_url(server), subprotocols=offered) as ws:
        assert ws.subprotocol == (BATCH_SUBPROTOCOL if batched else None)
        send(ws, op="subscribe", session="s")
        assert recv(ws)["op"] == "subscribed"
        call = ts.Tracker(bus, "s").create("t")
        call.start()
        for i in range(500):
            call.progress(current=i)
        call.complete("done")
        events, raw = _read_events(ws, 1 + 2 + 500 + 1)  # reset, created, started, ..., done
        arrays = [m for m in raw if isinstance(m, list)]
        if batched:
            assert arrays and max(len(a) for a in arrays) > 1, "several events per message"
            assert all(m.get("op") == "event" for a in arrays for m in a)
        else:
            assert not arrays
        kinds = [m["event"] for m in events]
        assert kinds[0] == "stream.reset" and kinds[-1] == "tool.completed"
        progress = [m["data"]["current"] for m in events if m["event"] == "tool.progress"]
        assert progress == list(range(500))
        seqs = [int(m["id"].rpartition("-")[2]) for m in events[1:]]
        assert seqs == sorted(set(seqs)), "in order, nothing twice"
        send(ws, op="ping", id=7)  # other messages stay single objects
        assert recv(ws) == {"op": "pong", "id": 7}


def test_a_batch_stays_under_its_size_cap(bus: ts.EventBus, server: Served) -> None:
    from websockets.typing import Subprotocol

    from toolstream.websocket import BATCH_SUBPROTOCOL
    from toolstream.websocket._app import BATCH_CHARS

    big = "x" * 40_000
    with connect(
        ws_url(server), subprotocols=[Subprotocol(BATCH_SUBPROTOCOL)], max_size=None
    ) as ws:
        send(ws, op="subscribe", session="s")
        assert recv(ws)["op"] == "subscribed"
        call = ts.Tracker(bus, "s").create("t")
        call.start()
        sizes: list[int] = []
        for i in range(30):
            call.progress(current=i, message=big)
        events, raw = _read_events(ws, 1 + 2 + 30)
        for message in raw:
            text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
            sizes.append(len(text))
        assert max(sizes) <= BATCH_CHARS + 1_000, sizes
        assert sum(isinstance(m, list) for m in raw) >= 3, "split into several batches"
        progress = [m["data"]["current"] for m in events if m["event"] == "tool.progress"]
        assert progress == list(range(30))


# -- clients that stop reading, clients that flood ---------------------------------------------

#: Where a socket's messages are made.
SOCKET_CODE = (
    "*/toolstream/websocket/*",
    "*/toolstream/dialects/*",
    "*/toolstream/_serving.py",
    "*/toolstream/_watch.py",
)


def publish_paced(bus: ts.EventBus, sessions: list[str], rounds: int = 40) -> None:
    """20 KB results, a few at a time: the socket's pumps keep up with the bus until its
    writes block (then the bus cuts them)."""
    trackers = [ts.Tracker(bus, session) for session in sessions]
    for i in range(rounds):
        for tracker in trackers:
            tracker.create("t").complete({"i": i, "blob": "x" * 20_000})
        time.sleep(0.01)


def subscribe_raw(sock: Any, sessions: list[str]) -> None:
    for session in sessions:
        sock.sendall(raw.ws_text(json.dumps({"op": "subscribe", "session": session})))


def test_a_socket_that_stops_reading_is_closed_4408_at_the_write_deadline(
    bus: ts.EventBus,
) -> None:
    # A client subscribed to eight sessions stops reading: the server's writes wait in
    # its flow control, one of its pumps holding the socket while the others hold their
    # encoded batches. At the write deadline, while the client still reads nothing,
    # the socket is closed: every subscription and what it was writing is released;
    # the client, reading again, finds the close frame 4408. The server offers that
    # frame for one more write deadline (a peer that never reads again cannot hold it
    # longer), so the client reads again at once, while the memory is counted: what
    # it drains is the server's socket buffer, not anything toolstream holds.
    app = WebSocketApp(bus, write_timeout=1.0, ping_interval=600)
    sessions = [f"s{k}" for k in range(8)]
    with ws_serve(app, sndbuf=16384) as served, traced():
        sock = raw.ws_open(served.port)
        subscribe_raw(sock, sessions)
        settles(lambda: bus.subscriber_count() == len(sessions))
        publish_paced(bus, sessions)
        settles(lambda: app.open_sockets == 0 and bus.subscriber_count() == 0)
        codes: list[int | None] = []
        reader = threading.Thread(target=lambda: codes.append(raw.ws_close_code(sock)))
        reader.start()
        socket_bytes = held_by(*SOCKET_CODE)
        reader.join(timeout=30)
        assert socket_bytes < 64 * 1024, socket_bytes
        assert codes == [4408]
        sock.close()


def test_a_silent_peer_is_closed_1011_even_while_a_write_is_stuck(bus: ts.EventBus) -> None:
    # A client that stops reading but still talks (its pongs keep it alive) until a
    # pump's write is stuck, holding the socket; then it falls silent too (a phone on a
    # dead network). The keepalive does not wait behind the stuck write: two intervals
    # without a word close the socket (1011), long before the write deadline, and
    # release its subscriptions.
    app = WebSocketApp(bus, write_timeout=60.0, ping_interval=0.3)
    with ws_serve(app, sndbuf=16384) as served:
        sock = raw.ws_open(served.port)
        subscribe_raw(sock, ["s1", "s2"])
        settles(lambda: bus.subscriber_count() == 2)
        alive = threading.Event()
        alive.set()

        def talk() -> None:
            while alive.is_set():
                sock.sendall(raw.ws_text('{"op": "pong"}'))
                time.sleep(0.1)

        talker = threading.Thread(target=talk, daemon=True)
        talker.start()
        publish_paced(bus, ["s1", "s2"])  # its writes are stuck by now
        time.sleep(1.0)
        assert app.open_sockets == 1, "alive while it talks"
        alive.clear()
        talker.join()
        settles(lambda: app.open_sockets == 0 and bus.subscriber_count() == 0)
        assert raw.ws_close_code(sock) == 1011
        sock.close()


class Turns:
    """An ASGI wrapper that counts, for each WebSocket, the messages the app takes from it
    in each turn of the server's event loop (a task that yields at every turn numbers
    them): how long any other task of the server waits while one socket is served."""

    def __init__(self, app: WebSocketApp) -> None:
        self.app = app
        self.turn = 0
        self.taken: list[Counter[int]] = []
        self.ticking = True
        self._ticker: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        taken: Counter[int] = Counter()
        self.taken.append(taken)

        async def counted() -> Any:
            message = await receive()
            if message["type"] == "websocket.receive":
                taken[self.turn] += 1
            return message

        await self.app(scope, counted, send)

    async def _tick(self) -> None:
        while self.ticking:
            await asyncio.sleep(0)
            self.turn += 1


def flood(port: int, messages: int, text: str = '{"op": "ping"}') -> tuple[Any, bytes]:
    """A raw socket that sends ``messages`` copies of ``text`` in one write."""
    sock = raw.ws_open(port, rcvbuf=None)
    return sock, raw.ws_text(text) * messages


def test_a_flooding_socket_gets_one_message_handled_per_turn_of_the_loop(
    bus: ts.EventBus,
) -> None:
    # One write of 10,000 pings: the server takes them from its queue without waiting
    # and writing a pong seldom waits either. The app yields after every message, so
    # no other task of the server (another socket, an HTTP request) waits longer than
    # one of the flood's messages; without that it waited for thousands of them.
    unlimited = WebSocketApp(bus, inbound_rate=math.inf, inbound_burst=10**9)
    app = Turns(unlimited)
    with ws_serve(app) as served:
        with connect(ws_url(served)) as other:
            send(other, op="subscribe", session="s1")
            assert recv(other)["op"] == "subscribed"
            sock, burst = flood(served.port, 10_000)
            pongs = [0]

            def read_pongs() -> None:
                for opcode, _ in raw.ws_frames(sock):
                    pongs[0] += opcode == 0x1
                    if pongs[0] == 10_000:
                        return

            reader = threading.Thread(target=read_pongs, daemon=True)
            reader.start()
            sock.sendall(burst)
            settles(lambda: sum(app.taken[-1].values()) > 100)  # the flood is being served
            ts.Tracker(bus, "s1").create("t").complete("r")
            got = until(other, lambda m: m.get("data", {}).get("type") == "tool.completed")
            assert got[-1]["data"]["result"] == "r"
            reader.join(30)
            assert pongs[0] == 10_000, "every ping answered"
            sock.close()
        app.ticking = False
    flood_turns = app.taken[-1]
    assert sum(flood_turns.values()) == 10_000
    assert max(flood_turns.values()) <= 2, flood_turns.most_common(3)


def test_a_socket_over_its_inbound_budget_is_closed_4429(bus: ts.EventBus) -> None:
    # The default budget: 200 messages at once, 50 a second after. A flood of 10,000
    # is answered up to the budget, then closed with 4429; the others are unaffected.
    app = WebSocketApp(bus)
    with ws_serve(app) as served, connect(ws_url(served)) as other:
        sock, burst = flood(served.port, 10_000)
        sock.sendall(burst)
        pongs = 0
        code = None
        for opcode, payload in raw.ws_frames(sock):
            if opcode == 0x1:
                pongs += 1
            elif opcode == 0x8:
                code = int.from_bytes(payload[:2], "big")
                break
        sock.close()
        assert code == 4429
        assert 200 <= pongs < 400, pongs
        send(other, op="ping", id="still-served")
        assert until(other, lambda m: m["op"] == "pong")[-1]["id"] == "still-served"


def test_work_for_a_socket_that_is_gone_stops(bus: ts.EventBus) -> None:
    # A client sends 10,000 pings and leaves at once. The answers it will never read
    # fail to be written as soon as the server learns it is gone, and the rest of its
    # queued messages are dropped instead of being answered to a dead connection.
    app = Turns(WebSocketApp(bus, inbound_rate=math.inf, inbound_burst=10**9))
    with ws_serve(app) as served:
        sock, burst = flood(served.port, 10_000)
        sock.sendall(burst)
        sock.close()
        settles(lambda: app.app.open_sockets == 0)
        app.ticking = False
    handled = sum(app.taken[-1].values())
    assert handled < 1_000, handled


async def test_a_socket_whose_writes_never_return_is_closed_at_the_deadline() -> None:
    # The deadline is watched beside the writers, on asyncio and trio: a server whose
    # send never returns once the subscription is answered, as a client that stopped
    # reading makes it. The socket is closed 4408 and its subscription released; the
    # close frame, which cannot be written either, is given up after one more deadline.
    import anyio

    bus = ts.EventBus()
    app = WebSocketApp(bus, write_timeout=0.2, ping_interval=600)
    sent: list[Any] = []
    inbox = iter(
        [
            {"type": "websocket.connect"},
            {"type": "websocket.receive", "text": '{"op": "subscribe", "session": "s1"}'},
        ]
    )

    async def receive() -> Any:
        for message in inbox:
            return message
        await anyio.sleep_forever()
        raise AssertionError("never woken")

    async def send(message: Any) -> None:
        sent.append(message)
        if message["type"] == "websocket.close" or len(sent) > 2:  # accept, subscribed
            await anyio.sleep_forever()

    scope = {"type": "websocket", "path": "/", "headers": [], "query_string": b""}
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, receive, send)
            await anyio.sleep(0.05)
            ts.Tracker(bus, "s1").create("t").complete("r")
    assert bus.subscriber_count() == 0 and app.open_sockets == 0
    assert sent[-1]["type"] == "websocket.close" and sent[-1]["code"] == 4408, sent[-1]


async def test_a_sockets_writers_take_turns_and_a_cancelled_one_passes_its_turn_on() -> None:
    # A socket's writers (its pumps, its keepalive, the answers to its messages) take
    # turns without anyio.Lock's per-acquisition cost: each writes its messages
    # together, nobody is lost when a waiting writer is cancelled, the turn is free at
    # the end.
    import anyio

    from toolstream.websocket._app import _Turns

    turns = _Turns()
    written: list[tuple[int, int]] = []

    async def writer(k: int) -> None:
        if turns.busy:
            await turns.wait()
        turns.busy = True
        try:
            for part in range(3):
                written.append((k, part))
                await anyio.sleep(0.001)  # a write that waits (flow control)
        finally:
            turns.release()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for k in range(5):
                tg.start_soon(writer, k)
            await anyio.sleep(0.0005)  # they are writing, or waiting for their turn
            with anyio.CancelScope() as doomed:
                doomed.deadline = anyio.current_time() + 0.002  # cancelled while it waits
                await writer(99)
            assert doomed.cancelled_caught
            for k in range(5, 8):
                tg.start_soon(writer, k)
    assert sorted({k for k, _ in written}) == list(range(8)), "99 never had its turn"
    for i in range(0, len(written), 3):  # each writer's messages together, in order
        assert [p for _, p in written[i : i + 3]] == [0, 1, 2]
        assert len({k for k, _ in written[i : i + 3]}) == 1
    assert not turns.busy and not turns.waiting
