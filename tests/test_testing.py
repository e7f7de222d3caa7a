"""toolstream.testing's helpers for users' own gateway tests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from toolstream.testing import serve, sse_data


def test_sse_data_reads_every_frame() -> None:
    body = (
        ': ping\n\nid: 1\nevent: x\ndata: {"a": 1}\n\n'
        'data: [DONE]\r\n\r\ndata:{"b":\ndata: 2}\n\nretry: 10\n\n'
    )
    assert sse_data(body) == [{"a": 1}, "[DONE]", {"b": 2}]


def test_serve_runs_an_app_for_the_block_and_stops_it() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    with serve(app) as url:
        assert httpx.get(url).text == "hello"
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)
