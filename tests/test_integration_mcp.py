"""MCP through toolstream, against the real SDK (2.x), offline: an in-process
``MCPServer`` and an ``mcp.Client`` connected to it, on asyncio and trio."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
import pytest
from mcp import Client, types
from mcp.server.mcpserver import Context, ElicitationResult, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

import toolstream as ts
from tests.integration_checks import (
    cancel_once_running,
    events_of,
    import_error_names_the_extra,
    types_of,
)
from toolstream.integrations.mcp import call_tool, elicitation_callback, report_progress
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
        await cancel_once_running(
            bus, "c3", lambda: call_tool(tracker, client, "slow", {"seconds": 30}, call_id="c3")
        )
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


# Elicitation: a server asking the user during a call is an approval of that call.


class Confirm(BaseModel):
    confirm: bool = True
    note: str = ""


@server.tool()
async def delete_file(path: str, ctx: Context) -> str:
    """Delete a file, after asking (a mid-call request: the legacy protocol)."""
    answer = await ctx.elicit(f"Delete {path}?", Confirm)
    if answer.action != "accept":
        return f"kept {path} ({answer.action})"
    return f"deleted {path} note={answer.data.note!r}"


def ask(path: str) -> Elicit[Confirm]:
    return Elicit(f"Drop table {path}?", Confirm)


@server.tool()
async def drop_table(path: str, ok: Annotated[ElicitationResult[Confirm], Resolve(ask)]) -> str:
    """Drop a table, after asking (a resolver: the 2026 protocol's input-required round)."""
    return f"dropped {path}" if ok.action == "accept" else f"kept {path} ({ok.action})"


async def decide(bus: ts.EventBus, **decision: Any) -> ts.ApprovalRequested:
    """Wait for the approval asked on session "s" and decide it, as a page would."""
    decision.setdefault("by", "alice")
    sub = bus.subscribe(session="s", after=f"{bus.epoch}-0")
    async for event in sub:
        if isinstance(event, ts.ApprovalRequested):
            await bus.resolve_approval("s", event.approval_id, **decision)
            return event
    raise AssertionError("no approval asked")


async def call_deciding(
    tracker: ts.Tracker,
    tool: str,
    path: str,
    *,
    mode: str = "legacy",
    asked: list[ts.ApprovalRequested] | None = None,
    **decision: Any,
) -> Any:
    """Call ``tool`` through a client whose elicitations are approvals, while a person
    decides the first approval asked with ``decision``."""
    bus = tracker.bus
    assert isinstance(bus, ts.EventBus)
    callback = elicitation_callback(tracker, timeout=30)
    async with (
        Client(server, elicitation_callback=callback, mode=mode) as client,
        anyio.create_task_group() as tg,
    ):

        async def person() -> None:
            request = await decide(bus, **decision)
            if asked is not None:
                asked.append(request)

        tg.start_soon(person)
        return await call_tool(tracker, client, tool, {"path": path}, call_id=path)


@pytest.mark.parametrize(
    ("tool", "mode"), [("delete_file", "legacy"), ("drop_table", "auto"), ("drop_table", "legacy")]
)
async def test_an_elicitation_is_approved_by_a_person(tool: str, mode: str) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    asked: list[ts.ApprovalRequested] = []
    result = await call_deciding(tracker, tool, "c1", mode=mode, asked=asked, approved=True)
    tracker.close()
    assert "kept" not in _text_of(result)
    assert asked[0].running and asked[0].call_id == "c1" and "c1?" in (asked[0].reason or "")
    assert types_of(bus, "c1") == [
        "tool.started",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.completed",
    ]
    assert_lifecycle(events_of(bus), compare=bus.compare)


async def test_edited_args_are_the_forms_content() -> None:
    tracker = ts.Tracker(ts.EventBus(), "s")
    edited = {"confirm": True, "note": "backup first"}
    result = await call_deciding(tracker, "delete_file", "b", approved=True, args=edited)
    assert "note='backup first'" in _text_of(result)


@pytest.mark.parametrize(("by", "action"), [("alice", "decline"), ("timeout", "cancel")])
async def test_a_refusal_declines_and_a_timeout_cancels(by: str, action: str) -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    result = await call_deciding(tracker, "delete_file", "c", approved=False, by=by)
    tracker.close()
    assert _text_of(result) == f"kept c ({action})"
    # the tool decides what a refusal means (here: it keeps the file and succeeds)
    assert types_of(bus, "c")[-1] == "tool.completed"


async def test_an_approval_that_expires_is_cancelled() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    callback = elicitation_callback(tracker, timeout=0.2)
    async with Client(server, elicitation_callback=callback, mode="legacy") as client:
        result = await call_tool(tracker, client, "delete_file", {"path": "/tmp/d"}, call_id="d")
    tracker.close()
    assert _text_of(result) == "kept /tmp/d (cancel)"
    resolved = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalResolved))
    assert (resolved.approved, resolved.by) == (False, "timeout")


async def test_an_elicitation_outside_a_tracked_call_goes_to_the_fallback() -> None:
    tracker = ts.Tracker(ts.EventBus(), "s")
    seen: list[str] = []

    async def fallback(context: Any, params: Any) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="decline")

    callback = elicitation_callback(tracker, fallback=fallback)
    async with Client(server, elicitation_callback=callback, mode="legacy") as client:
        result = await client.call_tool("delete_file", {"path": "/tmp/e"})  # not tracked
    assert _text_of(result) == "kept /tmp/e (decline)"
    assert seen == ["Delete /tmp/e?"]


async def test_without_a_fallback_it_is_refused_with_a_reason() -> None:
    tracker = ts.Tracker(ts.EventBus(), "s")
    with pytest.raises(BaseException) as info:  # the SDK raises it in a group
        async with Client(
            server,
            elicitation_callback=elicitation_callback(tracker),
            mode="legacy",
        ) as client:
            await client.call_tool("delete_file", {"path": "/tmp/f"})
    errors = _leaves(info.value)
    assert any(
        isinstance(e, MCPError) and "no tracked call is in flight" in str(e) for e in errors
    ), errors


async def test_concurrent_calls_each_get_their_own_approval_on_the_2026_protocol() -> None:
    """On the 2026 protocol the client answers input requests from the caller's task, so
    even with several calls in flight each elicitation names its call."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    asked: list[str] = []

    async def people() -> None:
        async for event in bus.subscribe(session="s", after=f"{bus.epoch}-0"):
            if isinstance(event, ts.ApprovalRequested):
                asked.append(event.call_id)
                await bus.resolve_approval("s", event.approval_id, approved=True, by="bob")
                if len(asked) == 2:
                    return

    callback = elicitation_callback(tracker)
    results: dict[str, str] = {}
    async with Client(server, elicitation_callback=callback, mode="auto") as client:

        async def one(path: str) -> None:
            result = await call_tool(tracker, client, "drop_table", {"path": path}, call_id=path)
            results[path] = _text_of(result)

        async with anyio.create_task_group() as tg:
            tg.start_soon(people)
            tg.start_soon(one, "t1")
            tg.start_soon(one, "t2")
    assert sorted(asked) == ["t1", "t2"]
    assert results == {"t1": "dropped t1", "t2": "dropped t2"}


def _leaves(exc: BaseException) -> list[BaseException]:
    inner = getattr(exc, "exceptions", None)  # an exception group (3.10: the backport's)
    return [leaf for e in inner for leaf in _leaves(e)] if inner else [exc]


def _text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)
