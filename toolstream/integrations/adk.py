"""Google ADK (the Agent Development Kit): an agent's tool calls through toolstream.

::

    from google.adk.apps import App
    from toolstream.integrations.adk import ToolstreamPlugin, confirmation_message, track_events

    app = App(name="app", root_agent=agent, plugins=[ToolstreamPlugin(tracker)])
    runner = InMemoryRunner(app=app)
    async for event in track_events(tracker, runner.run_async(...)):
        ...                                     # ADK's own events, re-yielded

``ToolstreamPlugin`` is a ``BasePlugin``: ``before_tool_callback`` starts a call (the
model's function-call id, or ADK's ``adk-<uuid>``), ``after_tool_callback`` completes it
with the tool's response, ``on_tool_error_callback`` fails it (or cancels it, for a
cancellation). :func:`track_events` brackets a run (``runner.run_async``) as one toolstream
run, which sees how it ends (ADK calls no plugin when a run raises).

Confirmation is toolstream's approval: a tool with ``require_confirmation`` (or one that
calls ``tool_context.request_confirmation()``) leaves its call ``awaiting_approval`` (or
running with an approval pending) and the run finishes ``interrupted``; once a person
decides (a page, a ``POST``, ``bus.resolve_approval``), :func:`confirmation_message` is
the ``adk_request_confirmation`` function response the next ``run_async`` takes. ADK then
calls the tool again with the same id: the same call goes on, one lifecycle.

Install with ``pip install "toolstream[adk]"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import TYPE_CHECKING, Any

from toolstream._core.errors import ApprovalError
from toolstream._core.scopes import cancel_reason, is_cancellation
from toolstream.integrations import require
from toolstream.integrations._calls import (
    Bounded,
    Calls,
    every_calls,
    follower_of,
    framework_run,
    refusal,
)

require("google.adk", "adk", "Google ADK")

from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.genai import types  # noqa: E402

if TYPE_CHECKING:
    from toolstream import Decision, Tracker

__all__ = [
    "CONFIRMATION",
    "ToolstreamPlugin",
    "confirmation_message",
    "report_progress",
    "track_events",
]

#: The name of the function call by which ADK asks the client to confirm a call.
CONFIRMATION = "adk_request_confirmation"

#: ``by`` of a decision that came as ADK's own confirmation, not through toolstream.
_ADK_BY = "adk"


class _AdkCalls(Calls):
    def __init__(self, tracker: Tracker) -> None:
        super().__init__(tracker)
        #: original call id -> the id of ADK's ``adk_request_confirmation`` call.
        self.confirmations: Bounded[str, str] = Bounded()


def _calls(tracker: Tracker) -> _AdkCalls:
    return follower_of(tracker, _AdkCalls)


def _call_id(tool_context: Any) -> str | None:
    call_id = getattr(tool_context, "function_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


class ToolstreamPlugin(BasePlugin):
    """An ADK plugin that announces each tool call on ``tracker``:
    ``App(..., plugins=[ToolstreamPlugin(tracker)])``.

    ``approval_timeout``: seconds a call that needs confirmation waits for a person
    before its approval expires (and the call is denied)."""

    def __init__(
        self, tracker: Tracker, *, name: str = "toolstream", approval_timeout: float | None = None
    ) -> None:
        super().__init__(name=name)
        self.tracker = tracker
        self.calls = _calls(tracker)
        self.calls.approval_timeout = approval_timeout

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        """The tool is about to run, or to ask for confirmation, or to run confirmed."""
        call_id = _call_id(tool_context)
        if call_id is None:
            return None
        confirmation = getattr(tool_context, "tool_confirmation", None)
        if confirmation is not None:
            return await self._confirmed(call_id, tool, tool_args, confirmation)
        if await _needs_confirmation(tool, tool_args, tool_context):
            self.calls.ask(call_id, str(tool.name), dict(tool_args or {}))
            return None
        self.calls.start(call_id, str(tool.name), dict(tool_args or {}))
        return None

    async def _confirmed(
        self, call_id: str, tool: Any, tool_args: dict[str, Any], confirmation: Any
    ) -> dict[str, Any] | None:
        """The pass after a confirmation: apply toolstream's decision (ADK's own
        confirmation becomes the decision when none was made through toolstream)."""
        calls = self.calls
        approval_id = calls.approvals.get(call_id)
        handle = calls.open(call_id)
        if approval_id is None:  # confirmed outside toolstream's view: just run
            calls.start(call_id, str(tool.name), dict(tool_args or {}))
            return None
        if handle is None:  # refused already: the call has ended denied
            calls.approvals.pop(call_id, None)
            return _rejected(await self.tracker.decision(approval_id))
        decision = await self.tracker.bus.decision(self.tracker.session, approval_id)
        if decision is None:
            confirmed = bool(getattr(confirmation, "confirmed", False))
            try:
                await self.tracker.bus.resolve_approval(
                    self.tracker.session, approval_id, approved=confirmed, by=_ADK_BY
                )
            except ApprovalError:
                pass  # decided meanwhile (or expired): that decision stands
        decision = await self.tracker.decision(approval_id)
        calls.approvals.pop(call_id, None)
        if not decision.approved:
            return _rejected(decision)  # never run a call toolstream refused
        if not getattr(confirmation, "confirmed", False):
            handle.cancel("rejected by the ADK confirmation")
            return None
        if decision.args is not None:
            tool_args.clear()  # ADK runs the tool with this very dict
            tool_args.update(decision.args)
        calls.start(call_id, str(tool.name), dict(tool_args))
        return None

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        """The tool returned (or asked for confirmation instead)."""
        call_id = _call_id(tool_context)
        handle = self.calls.open(call_id)
        if handle is None or call_id is None:
            return None
        actions = getattr(tool_context, "actions", None)
        asked = getattr(actions, "requested_tool_confirmations", None) or {}
        if call_id in asked:  # gated (asked already), or asked from inside the tool
            self.calls.ask_for(handle, getattr(asked[call_id], "hint", None) or None)
            return None
        handle.complete(result)
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> dict[str, Any] | None:
        """The tool raised (or was cancelled)."""
        handle = self.calls.open(_call_id(tool_context))
        if handle is not None:
            if is_cancellation(error):
                handle.cancel(cancel_reason(error))
            else:
                handle.fail(error)
        return None


async def _needs_confirmation(tool: Any, tool_args: dict[str, Any], tool_context: Any) -> bool:
    """What ADK's confirmation gate will decide for this call (ADK asks the same)."""
    check = getattr(tool, "check_require_confirmation", None)
    if check is None:
        return False
    try:
        return await check(tool_args, tool_context) is True
    except Exception:  # the gate raises again when ADK asks: the call fails then
        return False


def _rejected(decision: Decision) -> dict[str, Any]:
    """What the model reads for a call that was not approved (the tool does not run)."""
    return {"error": f"This tool call is rejected: {refusal(decision, 'rejected')}."}


def report_progress(
    tool_context: Any,
    fraction: float | None = None,
    *,
    current: float | None = None,
    total: float | None = None,
    message: str | None = None,
) -> None:
    """From inside a tool: report its progress (a ``tool.progress`` of this call;
    ``tool_context`` is the tool's ``ToolContext``, which carries the call's id). ADK has
    no progress channel of its own for function tools."""
    call_id = _call_id(tool_context)
    for calls in every_calls(_AdkCalls):
        handle = calls.open(call_id)
        if handle is not None:
            handle.progress(fraction, current=current, total=total, message=message)


async def track_events(
    tracker: Tracker, events: AsyncIterable[Any], *, run_id: str | None = None
) -> AsyncIterator[Any]:
    """Re-yield the events of ``runner.run_async(...)`` as one toolstream run: the
    plugin's calls join it; it ends ``completed``, ``failed`` (the run raised),
    ``cancelled``, or ``interrupted`` when ADK stopped to ask for confirmations."""
    calls = _calls(tracker)
    with framework_run(calls, run_id) as outcome:
        async for event in events:
            for call in _function_calls(event):
                if call.name == CONFIRMATION and call.id:
                    original = (call.args or {}).get("originalFunctionCall") or {}
                    if isinstance(original, dict) and isinstance(original.get("id"), str):
                        calls.confirmations[original["id"]] = call.id
                        outcome.waiting = True
            yield event


def _function_calls(event: Any) -> list[Any]:
    get = getattr(event, "get_function_calls", None)
    return list(get()) if callable(get) else []


async def confirmation_message(tracker: Tracker) -> types.Content | None:
    """Wait for the decisions on every confirmation ADK asked in this tracker's runs and
    return the message the next ``runner.run_async(new_message=...)`` takes: one
    ``FunctionResponse(name="adk_request_confirmation", response={"confirmed": ...})``
    per call; ``None`` when none is waiting. Decisions come from the bus; an approval
    that expires is denied. Edited args reach the tool when ADK runs it."""
    calls = _calls(tracker)
    parts = []
    for call_id, approval_id in list(calls.approvals.items()):
        request_id = calls.confirmations.get(call_id)
        if request_id is None:
            continue
        decision = await tracker.decision(approval_id)
        calls.confirmations.pop(call_id)
        response = {"confirmed": decision.approved}
        parts.append(
            types.Part(
                function_response=types.FunctionResponse(
                    name=CONFIRMATION, id=request_id, response=response
                )
            )
        )
    return types.Content(role="user", parts=parts) if parts else None
