"""SSEApp under a real uvicorn on 127.0.0.1, read with httpx and httpx-sse."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

import toolstream as ts
from toolstream.sse import SSEApp

from . import raw_clients as raw
from .memory import held_by, traced
from .servers import Served, eventually, serve, settles


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


@pytest.fixture
def server(bus: ts.EventBus) -> Iterator[Served]:
    with serve(SSEApp(bus, heartbeat=0.2)) as served:
        yield served


DEADLINE = 20.0  # no single read in these tests may take longer


async def collect(
    url: str,
    count: int,
    *,
    headers: dict[str, str] | None = None,
    until_closed: bool = False,
) -> list[ServerSentEvent]:
    """The first ``count`` SSE events of a stream (or all of them until it ends)."""
    out: list[ServerSentEvent] = []
    with anyio.fail_after(DEADLINE):
        async with (
            httpx.AsyncClient(timeout=None) as client,
            aconnect_sse(client, "GET", url, headers=headers or {}) as source,
        ):
            assert source.response.status_code == 200, await source.response.aread()
            async for sse in source.aiter_sse():
                if not sse.data and sse.event == "message":
                    continue  # httpx-sse surfaces ": ping" comments this way; browsers do not
                out.append(sse)
                if not until_closed and len(out) >= count:
                    break
    return out


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


def payloads(events: list[ServerSentEvent]) -> list[dict[str, Any]]:
    return [json.loads(e.data) for e in events]


async def test_snapshot_first_then_live(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    running = tracker.create("web_search", call_id="open_call")
    running.start()
    got: list[ServerSentEvent] = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            got.extend(await collect(f"{server.url}/?session=s1", 3))

        tg.start_soon(read)
        await eventually(lambda: bus.subscriber_count("s1") > 0)
        running.progress(0.5)
        running.complete("done")
    reset, progress, completed = got
    assert reset.event == "stream.reset"
    snapshot = json.loads(reset.data)["snapshot"]
    assert [(c["call_id"], c["state"]) for c in snapshot["calls"]] == [("open_call", "running")]
    assert (progress.event, completed.event) == ("tool.progress", "tool.completed")
    assert [e.id for e in got] == [reset.id, progress.id, completed.id]
    assert ts.from_dict(json.loads(completed.data)).type == "tool.completed"


async def test_headers_and_retry(server: Served, client: httpx.AsyncClient) -> None:
    async with client.stream("GET", f"{server.url}/?session=s1") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        first = await response.aiter_bytes().__anext__()
        assert first.startswith(b"retry: 3000\nevent: stream.reset\n")
    async with client.stream("GET", f"{server.url}/?session=s1&dialect=ai_sdk") as response:
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"


@pytest.mark.parametrize("cut", [0, 1, 5, 11, 18])
async def test_resume_gets_exactly_the_missed_events(
    bus: ts.EventBus, server: Served, cut: int
) -> None:
    tracker = ts.Tracker(bus, "s1")
    with tracker.run():
        for i in range(4):
            with tracker.call("t", {"i": i}) as call:
                call.progress(0.5)
                call.output_delta(f"line {i}\n")
    all_ids = [e.id for e in bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()]
    assert len(all_ids) == 18
    expected = all_ids[cut:]
    last_seen = all_ids[cut - 1] if cut else f"{bus.epoch}-0"
    missed = (
        await collect(
            f"{server.url}/?session=s1", len(expected), headers={"Last-Event-ID": last_seen}
        )
        if expected
        else []
    )
    assert [e.id for e in missed] == expected
    # the query parameter works as well as the header
    if expected:
        again = await collect(f"{server.url}/?session=s1&last_event_id={last_seen}", len(expected))
        assert [e.id for e in again] == expected


async def test_resume_inside_the_messages_of_one_event(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    with tracker.run(run_id="r1"):
        tracker.create("a", call_id="a", announce=False).start({"q": 1})  # START, ARGS, END at once
        tracker.create("b", call_id="b").complete("ok")
        url = f"{server.url}/?session=s1&dialect=agui"
        events = bus.subscribe(session="s1", after=f"{bus.epoch}-0").take_nowait()
        base = events[0].id  # run.started
        everything = await collect(url, 7, headers={"Last-Event-ID": base})
        kinds = [json.loads(e.data)["type"] for e in everything]
        assert kinds[:3] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
        started_id = everything[2].id
        assert [e.id for e in everything[:3]] == [f"{started_id}/0", f"{started_id}/1", started_id]
        # a client cut after the first message of that event gets the rest, exactly once
        rest = await collect(url, len(everything) - 1, headers={"Last-Event-ID": f"{started_id}/0"})
        assert [e.data for e in rest] == [e.data for e in everything[1:]]
        assert [e.id for e in rest] == [e.id for e in everything[1:]]


async def test_resume_inside_a_reset(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    with tracker.run(run_id="r1"):
        for i in range(3):
            tracker.create("t", call_id=f"c{i}").start({"i": i})
        url = f"{server.url}/?session=s1&dialect=agui"
        fresh = await collect(url, 10)
        kinds = [json.loads(e.data)["type"] for e in fresh]
        assert kinds == ["RUN_STARTED"] + ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"] * 3
        assert fresh[-1].id == bus.position and fresh[0].id.endswith("/r0")
        resumed = await collect(url, 6, headers={"Last-Event-ID": fresh[3].id})
        assert [e.data for e in resumed] == [e.data for e in fresh[4:]]


async def test_a_cursor_out_of_the_window_or_from_another_bus_gets_a_reset(
    bus: ts.EventBus,
) -> None:
    small = ts.EventBus(replay=5)
    tracker = ts.Tracker(small, "s1")
    first = small.publish(ts.ToolStarted, session="s1", call_id="x", tool="t")
    for _ in range(100):
        tracker.create("t").complete()
    with serve(SSEApp(small)) as served:
        stale = await collect(f"{served.url}/?session=s1", 1, headers={"Last-Event-ID": first.id})
        assert stale[0].event == "stream.reset"
        other = ts.EventBus().publish(ts.ToolStarted, session="s1", call_id="y", tool="t")
        restarted = await collect(
            f"{served.url}/?session=s1", 1, headers={"Last-Event-ID": other.id}
        )
        assert restarted[0].event == "stream.reset"
        garbage = await collect(
            f"{served.url}/?session=s1", 1, headers={"Last-Event-ID": "nonsense!/r"}
        )
        assert garbage[0].event == "stream.reset"
    small.close()


async def test_a_run_stream_ends_after_its_run(bus: ts.EventBus, server: Served) -> None:
    tracker = ts.Tracker(bus, "s1")
    got: list[ServerSentEvent] = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            got.extend(
                await collect(
                    f"{server.url}/?session=s1&run=turn-1&dialect=ai_sdk", 0, until_closed=True
                )
            )

        tg.start_soon(read)
        await eventually(lambda: bus.subscriber_count("s1") > 0)
        with tracker.run(run_id="turn-0"):
            tracker.create("other_run").complete()
        with tracker.run(run_id="turn-1"), tracker.call("web_search", {"q": "x"}) as call:
            call.complete(["r"])
        with tracker.run(run_id="turn-2"):
            tracker.create("after").complete()
    data = [e.data for e in got]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert [c["type"] for c in chunks] == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "finish",
    ]
    assert chunks[0]["messageId"] == "turn-1"


async def test_heartbeat_on_an_idle_stream(server: Served, client: httpx.AsyncClient) -> None:
    raw = b""
    with anyio.fail_after(5):
        async with client.stream("GET", f"{server.url}/?session=idle") as response:
            async for chunk in response.aiter_bytes():
                raw += chunk
                if b": ping\n\n" in raw:
                    break
    assert b"event: stream.reset" in raw and raw.count(b": ping") >= 1


async def test_errors(server: Served, client: httpx.AsyncClient) -> None:
    put = await client.put(f"{server.url}/?session=s1")
    assert put.status_code == 405 and put.headers["allow"] == "GET, POST"
    post = await client.post(f"{server.url}/?session=s1")
    assert post.status_code == 415, "a decision is JSON (POST decides approvals)"
    missing = await client.get(f"{server.url}/")
    assert missing.status_code == 400 and "session" in missing.json()["error"]
    unknown = await client.get(f"{server.url}/?session=s1&dialect=klingon")
    assert unknown.status_code == 400 and "native" in unknown.json()["error"]


class Token:
    def __init__(self, sessions: set[str]) -> None:
        self.sessions = sessions

    async def can_read(self, session: str) -> bool:
        return session in self.sessions


async def test_authorization_and_isolation(bus: ts.EventBus) -> None:
    def authorize(request: ts.RequestInfo) -> Token | None:
        token = request.headers.get("authorization", "")
        return {"Bearer alice": Token({"alice"}), "Bearer bob": Token({"bob"})}.get(token)

    ts.Tracker(bus, "alice").create("alice_tool").start({"secret_plan": 1})
    ts.Tracker(bus, "bob").create("bob_tool").start()
    with serve(SSEApp(bus, authorize=authorize)) as served:
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{served.url}/?session=alice")).status_code == 401
            assert (
                await client.get(
                    f"{served.url}/?session=alice", headers={"authorization": "Bearer nobody"}
                )
            ).status_code == 401
            forbidden = await client.get(
                f"{served.url}/?session=alice", headers={"authorization": "Bearer bob"}
            )
            assert forbidden.status_code == 403
        got: list[ServerSentEvent] = []
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                got.extend(
                    await collect(
                        f"{served.url}/?session=bob", 2, headers={"authorization": "Bearer bob"}
                    )
                )

            tg.start_soon(read)
            await eventually(lambda: bus.subscriber_count("bob") > 0)
            for _ in range(20):
                ts.Tracker(bus, "alice").create("alice_tool").complete()
            ts.Tracker(bus, "bob").create("bob_tool_2").complete()
        everything = " ".join(e.data for e in got)
        assert "alice" not in everything
        assert {json.loads(e.data)["session"] for e in got} == {"bob"}


EVIL = 'x\n\nevent: tool.completed\ndata: {"pwned": true}\nid: 999\r\rretry: 1\x00'


def hostile_call(tracker: ts.Tracker, tag: str) -> None:
    call = tracker.create(EVIL + tag, call_id=EVIL + tag)
    call.args_delta(json.dumps({EVIL: EVIL}))
    call.ready()
    call.progress(0.5, message=EVIL)
    call.output_delta(EVIL + "\n")
    call.complete({"result": EVIL})


@pytest.mark.parametrize("dialect", ["native", "agui", "ai_sdk", "hermes"])
async def test_hostile_strings_cannot_create_or_alter_frames(
    bus: ts.EventBus, server: Served, client: httpx.AsyncClient, dialect: str
) -> None:
    tracker = ts.Tracker(bus, "s1")
    raw = b""
    with anyio.fail_after(10):
        async with client.stream("GET", f"{server.url}/?session=s1&dialect={dialect}") as response:
            chunks = response.aiter_bytes()
            await eventually(lambda: bus.subscriber_count("s1") > 0)
            hostile_call(tracker, dialect)
            async for chunk in chunks:
                raw += chunk
                if b"data: " in raw and raw.endswith(b": ping\n\n"):
                    break
    text = raw.decode()
    assert "\r" not in text and "\x00" not in text
    frames = [f for f in text.split("\n\n") if f and not f.startswith(":")]
    assert len(frames) >= 2, frames  # hermes: running + completed
    for frame in frames:
        lines = [line for line in frame.split("\n") if not line.startswith("retry: ")]
        names = [line.split(":", 1)[0] for line in lines]
        assert names.count("data") == 1, (dialect, frame)
        assert set(names) <= {"event", "id", "data"}, (dialect, frame)
        head, data = frame.split("data: ", 1)
        assert "pwned" not in head
        assert "id: 999" not in head.split("\n"), "an injected id line"
        json.loads(data)


async def test_client_disconnect_releases_the_subscription(
    bus: ts.EventBus, server: Served
) -> None:
    async with (
        httpx.AsyncClient() as client,
        client.stream("GET", f"{server.url}/?session=s1") as response,
    ):
        await response.aiter_bytes().__anext__()
        assert bus.subscriber_count("s1") == 1
    await eventually(lambda: bus.subscriber_count("s1") == 0)


async def test_slow_client_is_cut_and_resumes() -> None:
    bus = ts.EventBus(replay=10_000, replay_bytes=64 * 2**20)
    app = SSEApp(bus, buffer=16)
    with serve(app) as served:
        tracker = ts.Tracker(bus, "s1")
        received: list[ServerSentEvent] = []
        async with (
            httpx.AsyncClient(timeout=None) as client,
            aconnect_sse(client, "GET", f"{served.url}/?session=s1") as source,
        ):
            events = source.aiter_sse()
            received.append(await events.__anext__())  # the reset
            for i in range(300):  # ~12 MB: more than the socket buffers hold
                tracker.create("t").complete({"i": i, "blob": "x" * 20_000})
            await anyio.sleep(1.0)  # the client does not read: the server's writes block
            with anyio.fail_after(20):
                async for sse in events:
                    if sse.data:
                        received.append(sse)
        assert len(received) < 601, "the server cut the slow client"
        rest = await collect(
            f"{served.url}/?session=s1",
            601 - len(received),
            headers={"Last-Event-ID": received[-1].id},
        )
        ids = [e.id for e in received[1:]] + [e.id for e in rest]
        assert len(ids) == len(set(ids)) == 600, "every event exactly once across the cut"
    bus.close()


#: Where an SSE stream's frames and chunks are made.
STREAM_CODE = (
    "*/toolstream/sse/*",
    "*/toolstream/dialects/*",
    "*/toolstream/_serving.py",
    "*/toolstream/_watch.py",
)


def test_a_client_that_stops_reading_is_cut_at_the_write_deadline() -> None:
    # Clients that stop reading (a laptop lid closed) mid-stream: the server's writes to
    # them wait in its flow control. At the write deadline each stream ends while they
    # still read nothing, releasing its subscription, its request task and the chunk it
    # was writing; a client that reads again finds its response ended.
    bus = ts.EventBus(replay=10_000)
    app = SSEApp(bus, buffer=16, write_timeout=0.5)
    with serve(app, sndbuf=16384) as served, traced():
        # ai_sdk: a dialect whose frames are not shared between clients (no cache).
        clients = [raw.sse_open(served.port, f"session=s{k}&dialect=ai_sdk") for k in range(3)]
        trackers = [ts.Tracker(bus, f"s{k}") for k in range(3)]
        for i in range(50):  # 1 MB per client, paced: the streams keep up with the bus
            for tracker in trackers:  # until their writes block
                tracker.create("t").complete({"i": i, "blob": "x" * 20_000})
            time.sleep(0.01)
        tasks = served.server.server_state.tasks
        settles(lambda: app.open_streams == 0 and bus.subscriber_count() == 0 and not tasks)
        stream_bytes = held_by(*STREAM_CODE)
        assert stream_bytes < 64 * 1024, stream_bytes
        for sock in clients:  # reading again: what was written, then the response's end
            sock.settimeout(10)
            data = b""
            while not data.endswith(b"0\r\n\r\n") and (chunk := sock.recv(65536)):
                data += chunk
            sock.close()
    bus.close()


def stream_scope(session: str) -> dict[str, Any]:
    """The ASGI scope of an SSE request for ``session``, for driving an app by hand."""
    return {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [],
        "query_string": f"session={session}".encode(),
    }


async def silent() -> dict[str, Any]:
    """An ASGI ``receive`` of a client that says nothing (and does not go away)."""
    await anyio.sleep_forever()
    raise AssertionError


async def test_a_stream_whose_writes_never_return_ends_at_the_deadline() -> None:
    # The deadline holds on asyncio and trio, watched from outside the writer (the
    # loop's one watch): a server whose send never returns, as a client that stopped
    # reading makes it.
    bus = ts.EventBus()
    app = SSEApp(bus, write_timeout=0.2)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)
        if len(sent) >= 3:  # the head and the reset went out; then nothing does
            await anyio.sleep_forever()

    scope = stream_scope("s1")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, silent, send)
            await anyio.sleep(0.05)
            ts.Tracker(bus, "s1").create("t").complete("r")
    assert bus.subscriber_count() == 0 and app.open_streams == 0
    assert sent[-1]["body"].startswith(b": too slow"), sent[-1]


async def test_a_write_under_way_is_filed_with_the_watch_while_it_lasts() -> None:
    # The watch looks at the writes under way alone: a write that waits is filed with
    # it (and ends at its deadline, above); once it returns it is not looked at again.
    from toolstream import _watch

    bus = ts.EventBus()
    app = SSEApp(bus, write_timeout=30)
    sent: list[Any] = []
    release = anyio.Event()

    async def send(message: Any) -> None:
        sent.append(message)
        if len(sent) == 3:  # the head and the reset went out; the next write waits
            await release.wait()

    scope = stream_scope("s1")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, silent, send)
            await eventually(lambda: len(sent) == 2)
            (watch,) = _watch._WATCHES.values()
            assert not watch.writing
            ts.Tracker(bus, "s1").create("t")
            await eventually(lambda: len(sent) == 3)
            assert len(watch.writing) == 1
            (deadline,) = watch.writing
            left = deadline.left()
            assert left is not None and left > 29
            release.set()
            await eventually(lambda: not watch.writing)
            app.shutdown()
        await eventually(lambda: not _watch._WATCHES)
    assert app.open_streams == 0


async def test_idle_streams_share_one_watch_and_cost_no_wakeups() -> None:
    # 10,000 idle clients once cost a core: each stream's own watch woke four times a
    # second to look for a server exit. One watch per event loop now looks at them all,
    # and only while there are some; it looks at the writes under way alone, so an
    # idle stream is not even looked at (10,000 looked at four times a second cost a
    # tenth of a core).
    from toolstream import _watch

    bus = ts.EventBus()
    app = SSEApp(bus)
    heads = 0

    async def send(message: Any) -> None:
        nonlocal heads
        if message["type"] == "http.response.start":
            heads += 1

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for k in range(200):
                tg.start_soon(app, stream_scope(f"s{k}"), silent, send)
            await eventually(lambda: app.open_streams == 200 and heads == 200)
            watches = list(_watch._WATCHES.values())
            assert len(watches) == 1 and len(watches[0].entries) == 200
            assert not watches[0].writing  # idle: nothing under way, nothing to look at
            app.shutdown()
        await eventually(lambda: not _watch._WATCHES)
    assert app.open_streams == 0


async def test_shutdown_ends_open_streams(bus: ts.EventBus) -> None:
    app = SSEApp(bus)
    with serve(app) as served:
        done = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                await collect(f"{served.url}/?session=s1", 0, until_closed=True)
                done.set()

            tg.start_soon(read)
            await eventually(lambda: app.open_streams > 0)
            app.shutdown()
            with anyio.fail_after(5):
                await done.wait()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{served.url}/?session=s1")).status_code == 503


async def test_uvicorn_exit_with_open_streams_is_prompt(bus: ts.EventBus) -> None:
    served_cm = serve(SSEApp(bus))
    served = served_cm.__enter__()
    try:
        async with (
            httpx.AsyncClient(timeout=None) as client,
            client.stream("GET", f"{served.url}/?session=s1") as response,
        ):
            await response.aiter_bytes().__anext__()
            took = await anyio.to_thread.run_sync(served.stop)
        assert took < 3, f"uvicorn took {took:.1f} s to exit with an open stream"
    finally:
        served_cm.__exit__(None, None, None)


async def test_shared_encodings_never_mix_per_client_resets(
    bus: ts.EventBus, server: Served
) -> None:
    tracker = ts.Tracker(bus, "s1")
    with tracker.run(run_id="r1"):
        tracker.create("in_r1", call_id="a").start()
        whole = await collect(f"{server.url}/?session=s1", 1)
        run_only = await collect(f"{server.url}/?session=s1&run=r1", 1)
        tracker.create("elsewhere", call_id="b", run_id="r2").start()
        again = await collect(f"{server.url}/?session=s1&run=r1", 1)

    def ids(sse: ServerSentEvent) -> list[str]:
        return [c["call_id"] for c in json.loads(sse.data)["snapshot"]["calls"]]

    assert ids(whole[0]) == ["a"] and ids(run_only[0]) == ["a"] and ids(again[0]) == ["a"]
    full = await collect(f"{server.url}/?session=s1", 1)
    assert sorted(ids(full[0])) == ["a", "b"]


async def test_text_that_cannot_be_encoded_never_poisons_a_session(
    bus: ts.EventBus, server: Served
) -> None:
    # os.fsdecode of a file name that is not UTF-8 holds a lone surrogate.
    name = "report-\udcff.txt"
    tracker = ts.Tracker(bus, "s1")
    with tracker.run(run_id="r1"), tracker.call("list_files", {"dir": name}, call_id="c") as call:
        call.output_delta(f"found {name}\n")
        call.complete({"files": [name], name: 1})
    for dialect in ("native", "agui", "ai_sdk", "hermes"):
        url = f"{server.url}/?session=s1&run=r1&dialect={dialect}&last_event_id={bus.epoch}-0"
        got = await collect(url, 0, until_closed=True)  # the whole run, to its end
        messages = [json.loads(e.data) for e in got if e.data.startswith("{")]
        assert "report-\ufffd.txt" in json.dumps(messages, ensure_ascii=False), dialect
    reset = (await collect(f"{server.url}/?session=s1", 1))[0]
    assert "report-\ufffd.txt" in reset.data


async def test_a_closed_bus_answers_503(bus: ts.EventBus, server: Served) -> None:
    await bus.aclose()
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"{server.url}/?session=s1")
    assert response.status_code == 503
    assert "unavailable" in response.json()["error"]


async def test_frames_keep_a_connection_alive_by_default() -> None:
    import inspect

    from toolstream import dialects
    from toolstream.sse import frames

    defaults = inspect.signature(frames).parameters
    assert defaults["heartbeat"].default == 15.0, "docs/sse.md says 15 s"
    assert defaults["retry_ms"].default == 3000
    bus = ts.EventBus()
    sub = bus.subscribe(session="s1")
    chunks = frames(sub, dialects.get("native"), heartbeat=0.05)
    with anyio.fail_after(5):
        first = await chunks.__anext__()
    await chunks.aclose()
    assert first == b": ping\n\n"
