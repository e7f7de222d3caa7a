"""MCP (the Model Context Protocol, the official ``mcp`` SDK 2.x): an MCP tool call as a
tracked call, on the client side and on the server side.

::

    from toolstream.integrations.mcp import call_tool

    result = await call_tool(tracker, client, "search", {"q": "anyio"})

Client side, :func:`call_tool` calls a server's tool through an ``mcp.Client`` (or a
``ClientSession``) as one toolstream call: the server's progress notifications become
``tool.progress`` (a fraction when it gives a total), a result with ``isError`` becomes
``tool.failed`` (MCP reports a tool's failure as a result, not an error), and a call
cancelled while it waits ends ``tool.cancelled`` (the SDK tells the server). Server side,
:func:`report_progress` reports a tool's progress to the MCP client and to the toolstream
call the tool runs in at once.

Install with ``pip install "toolstream[mcp]"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from toolstream._core.scopes import current_call
from toolstream.integrations import require

require("mcp", "mcp", "the MCP SDK")

if TYPE_CHECKING:
    from toolstream import Tracker

__all__ = ["call_tool", "report_progress"]

ProgressCallback = Callable[[float, "float | None", "str | None"], Awaitable[None]]


def _text(content: Any) -> str:
    parts = [getattr(c, "text", None) for c in content or ()]
    return "\n".join(p for p in parts if isinstance(p, str))


async def call_tool(
    tracker: Tracker,
    client: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    call_id: str | None = None,
    title: str | None = None,
    read_timeout_seconds: float | None = None,
    progress_callback: ProgressCallback | None = None,
) -> Any:
    """Call MCP tool ``name`` through ``client`` (an ``mcp.Client`` or ``ClientSession``) as
    a tracked call on ``tracker``; returns the ``CallToolResult``. ``progress_callback``
    still gets every progress notification."""
    async with tracker.call(name, arguments or {}, call_id=call_id, title=title) as call:

        async def progress(value: float, total: float | None, message: str | None) -> None:
            fraction = value / total if total else None
            call.progress(fraction, current=value, total=total, message=message)
            if progress_callback is not None:
                await progress_callback(value, total, message)

        result = await client.call_tool(
            name, arguments, read_timeout_seconds, progress_callback=progress
        )
        if getattr(result, "is_error", False):
            message = _text(getattr(result, "content", None)) or "the tool reported an error"
            call.fail({"type": "MCPToolError", "message": message})
        else:
            structured = getattr(result, "structured_content", None)
            call.complete(structured if structured is not None else _text(result.content))
        return result


async def report_progress(
    ctx: Any, progress: float, total: float | None = None, message: str | None = None
) -> None:
    """From a tool served by an ``MCPServer``: report progress to the MCP client
    (``ctx.report_progress``) and to the toolstream call the tool runs in, if any (a tool
    wrapped in ``tracker.call`` or ``@tracker.tool``)."""
    await ctx.report_progress(progress, total, message)
    call = current_call.get()
    if call is not None and not call.done:
        call.progress(
            progress / total if total else None, current=progress, total=total, message=message
        )
