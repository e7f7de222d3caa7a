"""pydantic-ai: every tool call of an agent run, live, through toolstream.

::

    from toolstream.integrations.pydantic_ai import capability

    result = await agent.run(prompt, capabilities=[capability(tracker)])

The capability hooks into the run (one toolstream run per agent run, its ``run_id``), its
event stream (a call's card appears at the model's first token, its arguments stream in)
and each tool's execution (started, then completed, failed or cancelled, whatever the
tool does: pydantic-ai ends the run when a tool raises, and the call still ends
``tool.failed``). Tools report progress with :func:`report_progress`. A tool with
``requires_approval=True`` makes the run finish ``interrupted`` with the call awaiting a
person's decision; :func:`deferred_tool_results` waits for the decisions on the bus and
builds what the next run takes.

An agent run inside a tool of a tracked agent (a delegate, ``await other.run(...,
usage=ctx.usage)``) is a sub-agent: with ``capability()`` on that agent (no tracker: it
follows the tracker of the call it runs in), its run is nested under the tool's call.

Install with ``pip install "toolstream[pydantic-ai]"``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from toolstream._core.scopes import cancel_reason, current_call, is_cancellation
from toolstream.integrations import require
from toolstream.integrations._calls import Calls, every_calls, follower_of, framework_run, refusal
from toolstream.integrations._chat import (
    ApprovalReason,
    TurnOptions,
    approval_timeout_for,
    history,
    start_turn_for,
)

require("pydantic_ai", "pydantic-ai", "pydantic-ai")

from pydantic_ai import (  # noqa: E402 - after the check that names the extra
    CustomEvent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    SkipToolExecution,
)
from pydantic_ai.messages import (  # noqa: E402
    DeferredToolRequestsEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
    UserPromptPart,
)

if TYPE_CHECKING:
    from toolstream import CallHandle, Tracker
    from toolstream.chat import StartTurn, TurnRequest

__all__ = [
    "ToolstreamCapability",
    "ToolstreamProgress",
    "capability",
    "chat_agent",
    "deferred_tool_results",
    "event_stream_handler",
    "report_progress",
]

#: Exceptions that defer or skip a call rather than end it.
_CONTROL = (ApprovalRequired, CallDeferred, SkipToolExecution)


@dataclasses.dataclass(kw_only=True)
class ToolstreamProgress(CustomEvent):
    """Progress from inside a tool (emit it with :func:`report_progress`)."""

    fraction: float | None = None
    current: float | None = None
    total: float | None = None
    message: str | None = None


async def report_progress(
    ctx: RunContext[Any],
    fraction: float | None = None,
    *,
    current: float | None = None,
    total: float | None = None,
    message: str | None = None,
) -> None:
    """From inside a tool: report its progress (a ``tool.progress`` of this call).

    ``ctx`` is the tool's ``RunContext``; pydantic-ai stamps the event with the call's id.
    """
    for follower in every_calls(_Follower):  # reported at once, not when the stream gets it
        handle = follower.open(ctx.tool_call_id)
        if handle is not None:
            handle.progress(fraction, current=current, total=total, message=message)
    await ctx.emit(
        ToolstreamProgress(fraction=fraction, current=current, total=total, message=message)
    )


class _Follower(Calls):
    """The calls of one tracker, and the part index of each call in the response
    streaming now."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__(tracker)
        self.by_index: dict[int, str] = {}
        self.response = 0  # the model response streaming now (its parts' message key)

    def apply(self, event: object) -> None:
        """Map one event of the agent's stream."""
        if isinstance(event, PartStartEvent):
            self._part_start(event)
        elif isinstance(event, PartDeltaEvent):
            self._part_delta(event)
        elif isinstance(event, FunctionToolCallEvent):
            self._tool_call(event)
        elif isinstance(event, FunctionToolResultEvent):
            self._tool_result(event)
        elif isinstance(event, DeferredToolRequestsEvent):
            self._deferred(event)
        elif isinstance(event, ToolstreamProgress):
            pass  # reported by report_progress itself, when it happened
        elif isinstance(event, CustomEvent) and event.tool_call_id:
            self._custom(event)

    def _part_start(self, event: PartStartEvent) -> None:
        part = event.part
        if event.index == 0:
            self.response += 1
        if isinstance(part, TextPart):
            self.words.add(self.response, part.content)
        elif isinstance(part, ThinkingPart):
            self.words.add(self.response, part.content, "reasoning")
        if not isinstance(part, ToolCallPart):
            return
        self.by_index[event.index] = part.tool_call_id
        handle = self.handle(part.tool_call_id, part.tool_name)
        if isinstance(part.args, str) or part.args is None:
            handle.args_delta(part.args or "")  # announces the card at once
        else:
            handle.ready(part.args)

    def _part_delta(self, event: PartDeltaEvent) -> None:
        delta = event.delta
        if isinstance(delta, TextPartDelta):
            self.words.add(self.response, delta.content_delta)
        elif isinstance(delta, ThinkingPartDelta):
            self.words.add(self.response, delta.content_delta, "reasoning")
        if not isinstance(delta, ToolCallPartDelta) or not isinstance(delta.args_delta, str):
            return
        handle = self.open(delta.tool_call_id or self.by_index.get(event.index))
        if handle is not None and delta.args_delta:
            handle.args_delta(delta.args_delta)

    def _tool_call(self, event: FunctionToolCallEvent) -> None:
        part = event.part
        if event.args_valid is None and self.open(part.tool_call_id) is None:
            # Settled without running in this step (a resumed deferred call that was not
            # approved...): its call has ended already; the result event says no more.
            return
        handle = self.handle(part.tool_call_id, part.tool_name)
        if handle.state is None or handle.state.value == "created":
            handle.ready(part.args_as_dict() if event.args_valid is not False else part.args)
        if event.args_valid is False:  # the model is asked again: this call will not run
            handle.fail(
                {"type": "InvalidArguments", "message": "the arguments did not validate"},
                retryable=True,
            )

    def _tool_result(self, event: FunctionToolResultEvent) -> None:
        part = event.part
        handle = self.open(part.tool_call_id)
        if handle is None:
            return
        outcome = part.outcome
        if outcome == "success":
            handle.complete(part.content)
        elif outcome == "retried":
            handle.fail({"type": "Retry", "message": str(part.content)}, retryable=True)
        elif outcome == "failed":
            handle.fail({"type": "ToolFailed", "message": str(part.content)})
        elif outcome == "denied":  # denied outside toolstream's approvals
            handle.deny(str(part.content))
        else:
            handle.cancel(str(outcome))

    def _deferred(self, event: DeferredToolRequestsEvent) -> None:
        for part in event.requests.approvals:
            self.ask(part.tool_call_id, part.tool_name, part.args_as_dict())

    def _custom(self, event: CustomEvent) -> None:
        handle = self.open(event.tool_call_id)
        if handle is not None:
            fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
            handle.progress(message=event.name, data=fields)


def _follower(tracker: Tracker) -> _Follower:
    return follower_of(tracker, _Follower)


def _sub_follower(tracker: Tracker) -> _Follower:
    """The record of a sub-agent's run: its own run, words and stream positions; the
    tracker's calls and approvals (``report_progress`` and ``deferred_tool_results``
    find its calls there)."""
    main = _follower(tracker)
    sub = _Follower(tracker)
    sub.handles = main.handles
    sub.approvals = main.approvals
    sub.reason_for = main.reason_for
    return sub


@dataclasses.dataclass(init=False)
class ToolstreamCapability(AbstractCapability[Any]):
    """The pydantic-ai capability that announces an agent's tool calls on ``tracker``
    (made by :func:`capability`). Each run gets its own copy (``for_run``), bound to the
    record of its calls: the tracker's, or a sub-agent's when the run is started inside
    the tool of a tracked call."""

    tracker: Tracker | None
    approval_timeout: float | None
    messages: bool

    def __init__(
        self,
        tracker: Tracker | None = None,
        *,
        approval_timeout: float | None = None,
        messages: bool = True,
    ) -> None:
        self.tracker = tracker
        self.approval_timeout = approval_timeout
        self.messages = messages
        self._calls: _Follower | None = None  # this run's record (set by for_run)
        self._parent: CallHandle | None = None  # the call this run is a sub-agent of

    async def for_run(self, ctx: RunContext[Any]) -> ToolstreamCapability:
        """This run's copy: a sub-agent's when the run starts in the tool of an open call
        (of ``tracker``, or of any tracker when none was given); without a tracker and
        outside any call, a copy that reports nothing."""
        tracker = self.tracker
        parent = current_call.get()
        if parent is not None and (
            parent.done or (tracker is not None and parent._tracker is not tracker)
        ):
            parent = None
        run = copy.copy(self)
        if parent is not None:
            run._parent = parent
            run._calls = _sub_follower(parent._tracker)
        elif tracker is not None:
            run._calls = _follower(tracker)
        return run

    def _record(self) -> _Follower | None:
        """The record this run reports to (a copy that ``for_run`` did not make — a
        framework that skips it — reports to the tracker's)."""
        calls = self._calls
        if calls is None and self.tracker is not None:
            calls = self._calls = _follower(self.tracker)
        return calls

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Callable[[], Awaitable[Any]]) -> Any:
        """One toolstream run per agent run (its ``run_id``); ``interrupted`` when the run
        ends waiting for approvals. A sub-agent's run is nested under its call."""
        follower = self._record()
        if follower is None:
            return await handler()
        follower.approval_timeout = self.approval_timeout
        follower.words.enabled = self.messages
        parent = self._parent
        with framework_run(
            follower,
            ctx.run_id or None,
            framework_id=True,
            parent=parent,
            agent=None if parent is None else _agent_name(ctx),
        ) as outcome:
            result = await handler()
            output = getattr(result, "output", None)
            outcome.waiting = isinstance(output, DeferredToolRequests) and bool(output.approvals)
        return result

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[Any]
    ) -> AsyncIterator[Any]:
        """Every event of the run's stream, followed as it passes: call cards, arguments,
        progress, results. (A wrapper of the stream rather than ``on_event``, which
        pydantic-ai dispatches per event at about twice the cost.)"""
        follower = self._calls
        try:
            async for event in stream:
                if follower is not None:
                    follower.apply(event)
                yield event
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: Any,
        args: Any,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        """The tool runs: started, then completed, failed or cancelled — whatever happens.
        Its code runs in the call's block: an agent run there is the call's sub-agent."""
        follower = self._record()
        if follower is None:
            return await handler(args)
        handle = follower.handle(call.tool_call_id, call.tool_name)
        handle.start(args if isinstance(args, dict) else call.args_as_dict())
        token = current_call.set(handle)
        try:
            result = await handler(args)
        except _CONTROL:
            raise  # deferred or skipped: the stream says what becomes of the call
        except BaseException as exc:
            if handle.done:
                raise
            if is_cancellation(exc):
                handle.cancel(cancel_reason(exc))
            else:
                retry = type(exc).__name__ in ("ToolRetryError", "ModelRetry")
                handle.fail(exc, retryable=True if retry else None)
            raise
        finally:
            try:
                current_call.reset(token)
            except ValueError:  # pragma: no cover - the handler switched contexts
                pass
        if not handle.done:
            handle.complete(result)
        return result


def _agent_name(ctx: RunContext[Any]) -> str | None:
    """The agent's name, when it has one (a sub-agent's run is named after it)."""
    name = getattr(getattr(ctx, "agent", None), "name", None)
    return name if isinstance(name, str) and name else None


def capability(
    tracker: Tracker | None = None,
    *,
    approval_timeout: float | None = None,
    messages: bool = True,
) -> ToolstreamCapability:
    """The capability to pass to ``Agent(capabilities=[...])`` or ``agent.run(...,
    capabilities=[...])``: the agent's tool calls, live, on ``tracker``, and the model's
    text and reasoning as the run's messages (``messages=False``: calls only).
    ``approval_timeout``: seconds a call that needs approval waits for a person before
    its approval expires (and the call is denied).

    A run started inside a tool of a tracked agent (a delegate) is a sub-agent: nested
    under that tool's call. Without ``tracker`` the capability follows the tracker of
    the call its run is started in, and reports nothing outside one — what an agent
    used as a delegate carries (``Agent(..., capabilities=[capability()])``)."""
    return ToolstreamCapability(tracker, approval_timeout=approval_timeout, messages=messages)


def event_stream_handler(
    tracker: Tracker, *, messages: bool = True
) -> Callable[[RunContext[Any], AsyncIterable[Any]], Awaitable[None]]:
    """A handler for ``agent.run(..., event_stream_handler=...)`` that follows the
    calls of the stream alone (cards, arguments, progress, results).

    pydantic-ai does not show an event handler a tool's exception (the run ends) nor the
    run's end: calls whose result never came are ended ``cancelled`` (reason "the run
    stopped before the call returned") when the stream they started in closes. Prefer
    :func:`capability`, which sees both.
    """
    follower = _follower(tracker)
    follower.words.enabled = messages

    async def handle(ctx: RunContext[Any], events: AsyncIterable[Any]) -> None:
        started: set[str] = set()
        try:
            async for event in events:
                follower.apply(event)
                if isinstance(event, FunctionToolCallEvent) and event.args_valid:
                    running = follower.open(event.part.tool_call_id)
                    if running is not None:
                        running.start()
                        started.add(event.part.tool_call_id)
        finally:
            follower.words.end()
            for call_id in started:
                left = follower.open(call_id)
                if left is not None:
                    left.cancel("the run stopped before the call returned")

    return handle


async def deferred_tool_results(
    tracker: Tracker, requests: DeferredToolRequests
) -> DeferredToolResults:
    """Wait for the decisions on the approvals a run left (``result.output``, a
    ``DeferredToolRequests``) and return what the next ``agent.run(...,
    deferred_tool_results=...)`` takes: ``ToolApproved`` (with the person's edited args)
    or ``ToolDenied`` (with why), per call. Decisions come from the bus (a page, a
    ``POST``, ``bus.resolve_approval``); an approval that expires is denied."""
    follower = _follower(tracker)
    results = DeferredToolResults()
    for part in requests.approvals:
        approval_id = follower.approvals.get(part.tool_call_id) or follower.ask(
            part.tool_call_id, part.tool_name, part.args_as_dict()
        )
        if approval_id is None:
            raise LookupError(f"no approval was asked for call {part.tool_call_id!r}")
        decision = await tracker.decision(approval_id)
        follower.approvals.pop(part.tool_call_id, None)
        if decision.approved:
            results.approvals[part.tool_call_id] = ToolApproved(override_args=decision.args)
        else:
            results.approvals[part.tool_call_id] = ToolDenied(message=refusal(decision))
    return results


def chat_agent(
    agent: Any,
    *,
    approval_timeout: float | None = None,
    approval_reason: ApprovalReason | None = None,
    messages: bool = True,
    run_options: dict[str, Any] | None = None,
    **tracker_options: Any,
) -> StartTurn:
    """The ``start_turn`` that serves a pydantic-ai ``agent`` to a chat client:
    ``ChatApp(bus, chat_agent(agent))`` is the whole gateway.

    Each turn runs the agent on the user's new message with the conversation the client
    sent as history — its user and assistant *text* only (tool calls, results and
    approval responses in the client's copy are never taken as real) — as one toolstream
    run, through :func:`capability` (the model's text and reasoning too, unless
    ``messages=False``). Tools with ``requires_approval=True`` end the agent's run with
    ``DeferredToolRequests`` (added to the agent's output types for the turn): the turn
    then waits in this process (up to ``approval_timeout`` seconds, by default the bus's
    ``session_ttl``) for the decisions, which any gateway process of the bus may take,
    and runs the agent again with them in the same run, so the client's continuation goes
    on in the same assistant message. ``run_options``: more keyword arguments for
    ``agent.run`` (``deps``, ``model_settings``...). ``approval_reason``: why a call
    needs a person (``requires_approval`` gives no reason: a sentence, ``{tool:
    sentence}`` or ``(tool, args) -> sentence``). ``tracker_options``: the
    ``Tracker``'s (``summarizer``, ``payload``, ``hidden``, ``coalesce``, ``strict``)."""
    options = TurnOptions(
        approval_timeout=approval_timeout,
        messages=messages,
        tracker_options=tracker_options,
        approval_reason=approval_reason,
    )
    if not hasattr(agent, "run") or not hasattr(agent, "output_type"):
        raise TypeError("chat_agent takes a pydantic-ai Agent")
    extra = dict(run_options or {})
    for reserved in ("message_history", "deferred_tool_results", "capabilities", "output_type"):
        if reserved in extra:
            raise ValueError(f"run_options may not set {reserved!r}: chat_agent sets it")
    output_type = _with_deferred(agent.output_type)

    async def drive(tracker: Tracker, request: TurnRequest) -> None:
        said, prompt = history(request)
        _follower(tracker).reason_for = options.reason_for
        hooks = [
            capability(
                tracker,
                approval_timeout=approval_timeout_for(options, tracker.bus),
                messages=options.messages,
            )
        ]
        result = await agent.run(
            prompt,
            message_history=_model_messages(said),
            capabilities=hooks,
            output_type=output_type,
            **extra,
        )
        while isinstance(result.output, DeferredToolRequests) and result.output.approvals:
            decided = await deferred_tool_results(tracker, result.output)
            result = await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=decided,
                capabilities=hooks,
                output_type=output_type,
                **extra,
            )

    return start_turn_for(drive, options)


def _with_deferred(output_type: Any) -> Any:
    """The agent's output types, with ``DeferredToolRequests`` (how a run stops to wait)."""
    kinds = list(output_type) if isinstance(output_type, (list, tuple)) else [output_type]
    return kinds if DeferredToolRequests in kinds else [*kinds, DeferredToolRequests]


def _model_messages(said: Sequence[tuple[str, str]]) -> list[ModelMessage]:
    """The conversation's text as pydantic-ai messages (user prompts, model text)."""
    out: list[ModelMessage] = []
    for role, text in said:
        if role == "user":
            out.append(ModelRequest(parts=[UserPromptPart(content=text)]))
        else:
            out.append(ModelResponse(parts=[TextPart(content=text)]))
    return out
