"""Identifiers a client or an agent chooses are bounded (MAX_ID_BYTES) and refused where
they enter: IdTooLong from the API, 400 over HTTP (the broker buses' own checks are in
their modules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import toolstream as ts
from tests.servers import asgi_get
from toolstream.providers import OpenAIChatIngest
from toolstream.sse import SSEApp

LONG = "x" * (ts.MAX_ID_BYTES + 1)
FITS = "y" * ts.MAX_ID_BYTES
WIDE = "é" * (ts.MAX_ID_BYTES // 2 + 1)  # 513 characters, 1,026 bytes of UTF-8


@pytest.fixture
def bus() -> Iterator[ts.EventBus]:
    bus = ts.EventBus()
    yield bus
    bus.close()


def test_the_bound_is_bytes_of_utf8_and_its_error_a_value_error() -> None:
    assert ts.MAX_ID_BYTES == 1024
    assert issubclass(ts.IdTooLong, ValueError)
    assert issubclass(ts.IdTooLong, ts.ToolstreamError)


def test_every_identifier_an_agent_chooses_is_checked(bus: ts.EventBus) -> None:
    for bad in (LONG, WIDE):
        with pytest.raises(ts.IdTooLong, match="session is"):
            ts.Tracker(bus, bad)
    tracker = ts.Tracker(bus, FITS)  # exactly at the bound: fine
    with pytest.raises(ts.IdTooLong, match="run_id"):
        tracker.run(run_id=LONG)
    with pytest.raises(ts.IdTooLong, match="call_id"):
        tracker.create("search", call_id=LONG)
    with pytest.raises(ts.IdTooLong, match="tool"):
        tracker.create(LONG)
    with pytest.raises(ts.IdTooLong, match="message_id"):
        tracker.message(WIDE)
    with tracker.call("search", {}, call_id=FITS) as call:
        call.complete(1)
    assert [c.call_id for c in bus.snapshot(FITS).calls] == [FITS]
    tracker.close()


def test_a_model_naming_a_tool_past_the_bound_is_a_stream_error(bus: ts.EventBus) -> None:
    ingest = OpenAIChatIngest(ts.Tracker(bus, "s"), messages=False)
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": LONG, "function": {"name": "f", "arguments": ""}}
                    ]
                },
            }
        ]
    }
    with pytest.raises(ts.ProviderStreamError, match="call_id"):
        ingest.feed(chunk)


def test_subscribing_and_publishing_past_the_bound_are_refused(bus: ts.EventBus) -> None:
    with pytest.raises(ts.IdTooLong, match="session"):
        bus.subscribe(session=LONG)
    with pytest.raises(ts.IdTooLong, match="run"):
        bus.subscribe(session="s", run=WIDE, snapshot=True)
    with pytest.raises(ts.IdTooLong, match="session"):
        bus.resume(session=LONG, after=f"{bus.epoch}-0")
    with pytest.raises(ts.IdTooLong, match="call_id"):
        bus.publish(ts.ToolStarted, session="s", call_id=LONG, tool="t")
    with pytest.raises(ts.IdTooLong, match="session"):
        bus.publish(ts.RunStarted, session=WIDE)
    assert bus.snapshot(LONG).calls == ()  # a name that can hold nothing: empty


async def test_sse_refuses_a_session_or_run_past_the_bound_with_400(bus: ts.EventBus) -> None:
    app = SSEApp(bus)
    status, body = await asgi_get(app, f"/?session={LONG}")
    assert status == 400
    assert b"at most 1024 bytes" in body
    status, body = await asgi_get(app, f"/?session=s&run={LONG}")
    assert (status, b"at most 1024 bytes" in body) == (400, True)
    status, body = await asgi_get(app, f"/?session={FITS}")
    assert status == 200 and b"stream.reset" in body
