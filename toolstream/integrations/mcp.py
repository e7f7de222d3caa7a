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

Elicitation as approval: :func:`elicitation_callback` is a client's
``elicitation_callback`` that turns a server's form elicitation during a
:func:`call_tool` (``ctx.elicit(...)``, or a ``Resolve(...)`` parameter) into an approval
of that call: a person approves or denies it from any client, and the decision is the
elicitation's answer.

Install with ``pip install "toolstream[mcp]"``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from toolstream._core.errors import LifecycleError
from toolstream._core.scopes import current_call
from toolstream.integrations import require
from toolstream.integrations._calls import Calls, follower_of

require("mcp", "mcp", "the MCP SDK")

from mcp import types  # noqa: E402
from mcp.client.session import ClientRequestContext, ElicitationFnT  # noqa: E402

if TYPE_CHECKING:
    from toolstream import CallHandle, Tracker

__all__ = ["call_tool", "elicitation_callback", "report_progress"]


class _InFlight(Calls):
    """The :func:`call_tool` calls of one tracker now waiting on a server, with the
    client session each went through (an elicitation names only its session)."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__(tracker)
        self.flying: list[tuple[object, CallHandle]] = []

    @contextlib.contextmanager
    def flight(self, session: object, call: CallHandle) -> Iterator[None]:
        entry = (session, call)
        self.flying.append(entry)
        try:
            yield
        finally:
            self.flying.remove(entry)

    def of(self, session: object) -> CallHandle | None:
        """The call an elicitation on ``session`` belongs to: the current call when the
        SDK asks from the caller's task, else the only call in flight on ``session``
        (None when there are several: which one asked cannot be told)."""
        mine = [call for s, call in self.flying if s is session and not call.done]
        current = current_call.get()
        if current is not None and current in mine:
            return current
        return mine[0] if len(mine) == 1 else None

    def count(self, session: object) -> int:
        return sum(1 for s, call in self.flying if s is session and not call.done)


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

        with follower_of(tracker, _InFlight).flight(getattr(client, "session", client), call):
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


def elicitation_callback(
    tracker: Tracker,
    *,
    timeout: float | None = None,
    fallback: ElicitationFnT | None = None,
) -> ElicitationFnT:
    """An ``elicitation_callback`` for ``mcp.Client(..., elicitation_callback=...)`` (or a
    ``ClientSession``): a server's form elicitation during a :func:`call_tool` on
    ``tracker`` asks a person to approve that call (``reason`` is the server's message;
    ``timeout`` seconds before it expires) and answers with the decision: approved is
    ``accept`` with the person's edited args as the form's content (else the schema's
    defaults), refused is ``decline``, expired or withdrawn is ``cancel``.

    Other elicitations (URL mode, none of this tracker's calls in flight, several calls
    in flight on the session so that which one asked cannot be told) go to ``fallback``,
    or are refused as an MCP error when there is none."""
    flights = follower_of(tracker, _InFlight)

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        session = getattr(context, "session", None)
        call = flights.of(session)
        why = None
        if getattr(params, "mode", "form") != "form":
            why = "URL mode is not an approval"
        elif call is None:
            several = flights.count(session) > 1
            why = "several calls are in flight" if several else "no tracked call is in flight"
        else:
            try:
                decision = await call.request_approval(str(params.message), timeout=timeout)
            except LifecycleError as exc:  # e.g. an approval of this call is pending
                why = str(exc)
        if why is not None:
            if fallback is not None:
                return await fallback(context, params)
            return types.ErrorData(
                code=types.INVALID_REQUEST, message=f"Elicitation not supported: {why}"
            )
        if decision.approved:
            content = decision.args
            if content is None:
                content = _defaults(getattr(params, "requested_schema", None))
            return types.ElicitResult(action="accept", content=content)
        if decision.by in ("timeout", "cancelled"):
            return types.ElicitResult(action="cancel")
        return types.ElicitResult(action="decline")

    return elicit


def _defaults(schema: object) -> dict[str, Any]:
    """The default values a form's JSON schema gives its fields."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {
        name: field["default"]
        for name, field in properties.items()
        if isinstance(field, dict) and "default" in field
    }
