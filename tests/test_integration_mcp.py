"""MCP through toolstream, against the real SDK (2.x), offline: an in-process
``MCPServer`` and an ``mcp.Client`` connected to it, on asyncio and trio."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer

import toolstream as ts
from tests.integration_checks import events_of, import_error_names_the_extra, types_of
from toolstream.integrations.mcp import call_tool, report_progress
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio

server_tracker_bus = ts.EventBus()
server_tracker = ts.Tracker(server_tracker_bus, "server")
server = MCPServer("toolstream-tests")
cancelled_on_the_server: list[bool] = []


@server.tool()
async def search(q: str, ctx: Context) -> list[str]:
    """Search the web."""
    async with server_tracker.call("search", {"q": q}):  # the server's own record
        for i in range(3):
            await report_progress(ctx, i + 1, 3, f"page {i + 1} of 3")
    return [f"https://example.com/{q}"]


@server.tool()
async def shell(cmd: str) -> str:
    """Run a command."""
    raise RuntimeError(f"command failed: {cmd}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep."""
    try:
        await anyio.sleep(seconds)
    except BaseException:
        cancelled_on_the_server.append(True)
        raise
    return "slept"


async def test_a_tool_call_with_progress_ends_completed() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    seen: list[float] = []

    async def mine(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with Client(server) as client:
        result = await call_tool(
            tracker, client, "search", {"q": "anyio"}, call_id="c1", progress_callback=mine
        )
    assert not result.is_error
    tracker.close()
    assert types_of(bus, "c1") == [
        "tool.started",
        "tool.progress",
        "tool.progress",
        "tool.progress",
        "tool.completed",
    ]
    progress = [e for e in events_of(bus) if isinstance(e, ts.ToolProgress)]
    assert [(p.fraction, p.message) for p in progress][-1] == (1.0, "page 3 of 3")
    done = next(e for e in events_of(bus) if isinstance(e, ts.ToolCompleted))
    assert done.result == {"result": ["https://example.com/anyio"]}
    assert seen == [1, 2, 3], "the caller's own callback still gets them"
    # the server side reported to its own tracker at the same time
    server_progress = [
        e for e in events_of(server_tracker_bus, "server") if isinstance(e, ts.ToolProgress)
    ]
    assert server_progress and server_progress[-1].fraction == 1.0


async def test_an_error_result_ends_failed() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    async with Client(server) as client:
        result = await call_tool(tracker, client, "shell", {"cmd": "make"}, call_id="c2")
    assert result.is_error
    tracker.close()
    assert types_of(bus, "c2")[-1] == "tool.failed"
    failed = next(e for e in events_of(bus) if isinstance(e, ts.ToolFailed))
    assert failed.error.type == "MCPToolError" and failed.error.message


async def test_a_cancelled_call_is_cancelled_on_both_sides() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    cancelled_on_the_server.clear()
    async with Client(server) as client:
        with anyio.move_on_after(0.3):
            await call_tool(tracker, client, "slow", {"seconds": 30}, call_id="c3")
        with anyio.fail_after(5):
            while not cancelled_on_the_server:  # noqa: ASYNC110 - set by the server's task
                await anyio.sleep(0.01)
    tracker.close()
    assert types_of(bus, "c3") == ["tool.started", "tool.cancelled"]


async def test_parallel_calls() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    async with Client(server) as client:

        async def one(q: str) -> None:
            await call_tool(tracker, client, "search", {"q": q}, call_id=q)

        async with anyio.create_task_group() as tg:
            for q in ("anyio", "trio"):
                tg.start_soon(one, q)
    tracker.close()
    assert types_of(bus, "anyio")[-1] == types_of(bus, "trio")[-1] == "tool.completed"
    assert_lifecycle(events_of(bus), compare=bus.compare)


def test_without_the_sdk_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.integrations.mcp", "mcp", "mcp")
