"""Google ADK (the Agent Development Kit): an agent's tool calls through toolstream.

::

    from google.adk.apps import App
    from toolstream.integrations.adk import ToolstreamPlugin, confirmation_message, track_events

    app = App(name="app", root_agent=agent, plugins=[ToolstreamPlugin(tracker)])
    runner = InMemoryRunner(app=app)
    async for event in track_events(tracker, runner.run_async(...)):
        ...                                     # ADK's own events, re-yielded

``ToolstreamPlugin`` is a ``BasePlugin``: ``before_run_callback`` / ``after_run_callback``
make each ADK invocation one toolstream run (its ``invocation_id``; ``interrupted`` when
ADK stopped to ask for confirmations), ``before_tool_callback`` starts a call (the
model's function-call id, or ADK's ``adk-<uuid>``), ``after_tool_callback`` completes it
with the tool's response, ``on_tool_error_callback`` fails it (or cancels it, for a
cancellation). ADK calls no plugin when a run raises: :func:`track_events` around
``runner.run_async`` also sees that (the run ends ``failed``); with the plugin alone,
such a run ends when the tracker closes (``cancelled``).

Confirmation is toolstream's approval: a tool with ``require_confirmation`` (or one that
calls ``tool_context.request_confirmation()``) leaves its call ``awaiting_approval`` (or
running with an approval pending) and the run finishes ``interrupted``; once a person
decides (a page, a ``POST``, ``bus.resolve_approval``), :func:`confirmation_message` (every
confirmation waiting) or :func:`confirmation_response` (those of one ADK event) is the
``adk_request_confirmation`` function response the next ``run_async`` takes. ADK then
calls the tool again with the same id: the same call goes on, one lifecycle.

Install with ``pip install "toolstream[adk]"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextvars import ContextVar, Token
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
from toolstream.integrations._nesting import Nest, SubCalls

require("google.adk", "adk", "Google ADK")

from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.genai import types  # noqa: E402

if TYPE_CHECKING:
    from toolstream import CallHandle, Decision, RunScope, Tracker

__all__ = [
    "CONFIRMATION",
    "ToolstreamPlugin",
    "confirmation_message",
    "confirmation_response",
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
        self.response = 0  # the model response now (its words' message key)
        self.streamed = False  # its text came as partial events already

    def words_of(self, event: Any) -> None:
        """The model's text and thoughts in an event: partial events (streaming) as they
        come; a whole response's event unless its text was streamed."""
        content = getattr(event, "content", None)
        if getattr(event, "author", "user") == "user" or content is None:
            return
        partial = bool(getattr(event, "partial", False))
        for part in getattr(content, "parts", None) or ():
            text = getattr(part, "text", None)
            if not isinstance(text, str) or not text or (self.streamed and not partial):
                continue
            self.words.add(self.response, text, "reasoning" if part.thought else "text")
        if partial:
            self.streamed = True
        else:
            self.streamed = False
            self.response += 1

    def saw(self, event: Any) -> bool:
        """Record the confirmations ADK asks in ``event``; True when it asks any."""
        asked = False
        for call in _function_calls(event):
            if call.name == CONFIRMATION and call.id:
                original = (call.args or {}).get("originalFunctionCall") or {}
                if isinstance(original, dict) and isinstance(original.get("id"), str):
                    self.confirmations[original["id"]] = call.id
                    asked = True
        return asked


class _SubCalls(SubCalls, _AdkCalls):
    """An ADK sub-agent's record (an ``AgentTool``'s runner): its calls and words in
    the run nested under the call; the confirmations asked are the outer record's."""

    def __init__(self, outer: Calls, parent: CallHandle, agent: str | None = None) -> None:
        super().__init__(outer, parent, agent)
        if isinstance(outer, _AdkCalls):
            self.confirmations = outer.confirmations


#: The call whose tool is running in this context: an ADK runner started inside it (an
#: ``AgentTool``'s) is that call's sub-agent.
_RUNNING: ContextVar[CallHandle | None] = ContextVar("toolstream_adk_running", default=None)


def _calls(tracker: Tracker) -> _AdkCalls:
    return follower_of(tracker, _AdkCalls)


def _call_id(tool_context: Any) -> str | None:
    call_id = getattr(tool_context, "function_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


class ToolstreamPlugin(BasePlugin):
    """An ADK plugin that announces each tool call on ``tracker``, and the model's text
    and thoughts as the run's messages (``messages=False``: calls only):
    ``App(..., plugins=[ToolstreamPlugin(tracker)])``.

    ``approval_timeout``: seconds a call that needs confirmation waits for a person
    before its approval expires (and the call is denied)."""

    def __init__(
        self,
        tracker: Tracker,
        *,
        name: str = "toolstream",
        approval_timeout: float | None = None,
        messages: bool = True,
    ) -> None:
        super().__init__(name=name)
        self.tracker = tracker
        self.calls = _calls(tracker)
        self.calls.approval_timeout = approval_timeout
        self.calls.words.enabled = messages
        # The runs this plugin opened, by ADK invocation id, and whether each waits.
        self._runs: dict[str, tuple[RunScope, bool]] = {}
        # How often each invocation id made a run (ADK resumes a confirmation in the
        # invocation that asked: the next run is "<invocation id>#2").
        self._used: Bounded[str, int] = Bounded()
        # Sub-agents: an invocation started inside a call (an AgentTool's runner) is a
        # run nested under it; its record by invocation id, the context var's tokens.
        self._nest = Nest(self.calls, _SubCalls)
        self._inner: dict[str, _AdkCalls] = {}
        self._tokens: dict[str, Token[CallHandle | None]] = {}

    def _of(self, context: Any) -> _AdkCalls:
        """The record of the invocation ``context`` (a tool's, a callback's) belongs to:
        a sub-agent's, or this plugin's own."""
        if self._inner:
            invocation = getattr(context, "invocation_id", None)
            inner = self._inner.get(invocation) if isinstance(invocation, str) else None
            if inner is not None:
                return inner
        return self.calls

    async def before_run_callback(self, *, invocation_context: Any) -> types.Content | None:
        """An ADK invocation starts: one toolstream run (its ``invocation_id``), unless
        the caller's ``track_events`` or ``tracker.run()`` already holds one."""
        invocation = str(getattr(invocation_context, "invocation_id", "") or "")
        running = _RUNNING.get()
        if running is not None and not running.done and self.calls.open(running.call_id):
            agent = getattr(getattr(invocation_context, "agent", None), "name", None)
            sub = self._nest.sub(running.call_id, agent)
            if isinstance(sub, _SubCalls):
                self._inner[invocation] = sub
                return None
        if self.calls.run_id is not None or self.tracker._run_for(None) is not None:
            return None
        uses = (self._used.get(invocation) or 0) + 1
        self._used[invocation] = uses
        run_id = (invocation if uses == 1 else f"{invocation}#{uses}") if invocation else None
        run = self.tracker.run(run_id=run_id).start()
        self._runs[invocation] = (run, False)
        self.calls.run_id = run.run_id
        return None

    async def on_event_callback(self, *, invocation_context: Any, event: Any) -> Any:
        """An event of the invocation: the model's words (unless ``messages=False``), the
        confirmations ADK asks."""
        calls = self._of(invocation_context)
        calls.words_of(event)
        if calls.saw(event):
            invocation = str(getattr(invocation_context, "invocation_id", "") or "")
            opened = self._runs.get(invocation)
            if opened is not None:
                self._runs[invocation] = (opened[0], True)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        """The invocation ended: its run finishes (``interrupted`` when it stopped to ask
        for confirmations)."""
        invocation = str(getattr(invocation_context, "invocation_id", "") or "")
        inner = self._inner.pop(invocation, None)
        if isinstance(inner, _SubCalls):
            inner.finish("completed")
            return
        opened = self._runs.pop(invocation, None)
        if opened is None:
            return
        run, waiting = opened
        self.calls.words.end()
        if self.calls.run_id == run.run_id:
            self.calls.run_id = None
        run.finish("interrupted" if waiting else "completed")

    async def before_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any
    ) -> dict[str, Any] | None:
        """The tool is about to run, or to ask for confirmation, or to run confirmed."""
        call_id = _call_id(tool_context)
        if call_id is None:
            return None
        calls = self._of(tool_context)
        confirmation = getattr(tool_context, "tool_confirmation", None)
        if confirmation is not None:
            answer = await self._confirmed(calls, call_id, tool, tool_args, confirmation)
        elif await _needs_confirmation(tool, tool_args, tool_context):
            calls.ask(call_id, str(tool.name), dict(tool_args or {}))
            return None
        else:
            calls.start(call_id, str(tool.name), dict(tool_args or {}))
            answer = None
        handle = calls.open(call_id)
        if answer is None and handle is not None and calls.state_of(handle) == "running":
            # the tool runs in this context: a runner it starts is the call's sub-agent
            self._tokens[call_id] = _RUNNING.set(handle)
        return answer

    def _ran(self, call_id: str | None) -> None:
        """The tool of ``call_id`` returned or raised (in the context it ran in)."""
        token = self._tokens.pop(call_id, None) if call_id is not None else None
        if token is not None:
            try:
                _RUNNING.reset(token)
            except ValueError:  # another context: it ends with its task
                pass

    async def _confirmed(
        self,
        calls: _AdkCalls,
        call_id: str,
        tool: Any,
        tool_args: dict[str, Any],
        confirmation: Any,
    ) -> dict[str, Any] | None:
        """The pass after a confirmation: apply toolstream's decision (ADK's own
        confirmation becomes the decision when none was made through toolstream)."""
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
        self._ran(call_id)
        calls = self._of(tool_context)
        handle = calls.open(call_id)
        if handle is None or call_id is None:
            return None
        actions = getattr(tool_context, "actions", None)
        asked = getattr(actions, "requested_tool_confirmations", None) or {}
        if call_id in asked:  # gated (asked already), or asked from inside the tool
            calls.ask_for(handle, getattr(asked[call_id], "hint", None) or None)
            return None
        self._nest.end(call_id)
        handle.complete(result)
        return None

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> dict[str, Any] | None:
        """The tool raised (or was cancelled)."""
        call_id = _call_id(tool_context)
        self._ran(call_id)
        handle = self._of(tool_context).open(call_id)
        if handle is not None:
            if is_cancellation(error):
                handle.cancel(cancel_reason(error))
            else:
                self._nest.end(call_id, "failed", error)
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
            if calls.saw(event):
                outcome.waiting = True
            yield event


def _function_calls(event: Any) -> list[Any]:
    get = getattr(event, "get_function_calls", None)
    return list(get()) if callable(get) else []


async def confirmation_response(tracker: Tracker, event: Any) -> types.Content | None:
    """Wait for the decisions on the confirmations ADK asks in ``event`` (an event of
    ``run_async`` carrying ``adk_request_confirmation`` calls) and return the message the
    next ``runner.run_async(new_message=...)`` takes; ``None`` when it asks none. Like
    :func:`confirmation_message`, for one event."""
    calls = _calls(tracker)
    calls.saw(event)
    originals: list[str] = []
    for call in _function_calls(event):
        if call.name == CONFIRMATION and call.id:
            original = (call.args or {}).get("originalFunctionCall") or {}
            if isinstance(original, dict) and isinstance(original.get("id"), str):
                originals.append(original["id"])
    return await _responses(tracker, calls, originals)


async def confirmation_message(tracker: Tracker) -> types.Content | None:
    """Wait for the decisions on every confirmation ADK asked in this tracker's runs and
    return the message the next ``runner.run_async(new_message=...)`` takes: one
    ``FunctionResponse(name="adk_request_confirmation", response={"confirmed": ...})``
    per call; ``None`` when none is waiting. Decisions come from the bus; an approval
    that expires is denied. Edited args reach the tool when ADK runs it."""
    calls = _calls(tracker)
    return await _responses(tracker, calls, list(calls.approvals))


async def _responses(
    tracker: Tracker, calls: _AdkCalls, call_ids: list[str]
) -> types.Content | None:
    """The ``adk_request_confirmation`` responses for ``call_ids`` (those waiting)."""
    parts = []
    for call_id in call_ids:
        approval_id = calls.approvals.get(call_id)
        request_id = calls.confirmations.get(call_id)
        if approval_id is None or request_id is None:
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
