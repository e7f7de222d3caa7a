"""The OpenAI Agents SDK: every tool call of a run, live, through toolstream.

::

    from toolstream.integrations.openai_agents import ToolstreamHooks, run_config, track_run

    result = Runner.run_streamed(agent, prompt, hooks=ToolstreamHooks(tracker),
                                 run_config=run_config(tracker))
    async for event in track_run(tracker, result):
        ...                                   # the SDK's own stream events, re-yielded

``track_run`` follows the streamed run: the call's card appears when the model starts
the call (``response.output_item.added``) and its arguments stream in (the Responses
deltas carry the item id, correlated here to the call id); ``tool_called`` makes it
ready and ``tool_output`` ends it. ``ToolstreamHooks`` sees each tool start and end from
the SDK's ``RunHooks`` (``context.tool_call_id``): with it the card shows the call
running while it runs (the stream alone cannot tell: the SDK emits ``tool_called`` for a
call that waits for approval too). Each works alone; together they publish no event
twice.

The SDK has no tool error hook: a tool that raises becomes an output string ("An error
occurred while running the tool…"). :func:`run_config` (or :func:`error_formatter` in
your own ``RunConfig(tool_error_formatter=...)``) is how the integration learns it was a
failure, with the exception: such a call ends ``tool.failed``, not ``tool.completed``.

``needs_approval`` tools interrupt the run: its calls wait as ``awaiting_approval``, the
run finishes ``interrupted``; :func:`apply_decisions` waits for the decisions on the bus
and returns the ``RunState`` to resume with.

``Agent.as_tool()`` runs the tool's agent in a run of its own, whose events never
reach the outer stream (openai-agents-python#864); the SDK hands them to the tool's
``on_stream`` callback. ``agent.as_tool(..., on_stream=follow_subagent)`` makes that run
a sub-agent nested under the outer call: its calls and words, live.

Install with ``pip install "toolstream[openai-agents]"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from toolstream._core.scopes import current_runs
from toolstream.integrations import require
from toolstream.integrations._calls import (
    Calls,
    every_calls,
    follower_of,
    framework_run,
    parse_args,
    refusal,
)
from toolstream.integrations._chat import (
    ApprovalReason,
    TurnOptions,
    approval_timeout_for,
    history,
    start_turn_for,
)

require("agents", "openai-agents", "the OpenAI Agents SDK")

from agents import (  # noqa: E402 - after the check that names the extra
    RunConfig,
    RunHooks,
    Runner,
    RunState,
    default_tool_error_function,
)
from agents.run_config import ToolErrorFormatterArgs  # noqa: E402
from agents.stream_events import RawResponsesStreamEvent, RunItemStreamEvent  # noqa: E402

if TYPE_CHECKING:
    from agents import RunResultStreaming

    from toolstream import RunScope, Tracker
    from toolstream.chat import StartTurn, TurnRequest

__all__ = [
    "ToolstreamHooks",
    "apply_decisions",
    "chat_agent",
    "report_progress",
    "error_formatter",
    "follow_subagent",
    "run_config",
    "track_run",
]


def _field(item: Any, name: str) -> Any:
    """A field of an SDK item, which may be a model object or a plain dict."""
    if isinstance(item, dict):
        return item.get(name)
    return getattr(item, name, None)


class _Follower(Calls):
    """The calls of one tracker, the Responses item id of each streaming call and the
    failures the error formatter reported."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__(tracker)
        self.items: dict[str, str] = {}  # Responses item id -> call id
        self.failures: dict[str, BaseException | None] = {}
        self.response = 0  # the model response streaming now (its words' message key)
        #: The sub-agents of ``as_tool`` calls by the outer call's id (shared by the
        #: tracker's record and its sub-agents' own).
        self.subagents: dict[str, _Follower] = {}
        #: A sub-agent's record: the run nested under its call.
        self.scope: RunScope | None = None

    def nested(self, parent: str, agent: object) -> _Follower | None:
        """The record of the sub-agent run by the open call ``parent`` (started now)."""
        sub = self.subagents.get(parent)
        if sub is not None:
            if sub.scope is not None and not sub.scope.finished:
                return sub
            del self.subagents[parent]  # its call ended without returning (cancelled)
        handle = self.open(parent)
        if handle is None:
            return None
        name = getattr(agent, "name", None)
        scope = handle.subagent(name if isinstance(name, str) and name else None).start()
        if not scope.started:  # pragma: no cover - the call ended meanwhile
            return None
        sub = _Follower(self.tracker)
        for shared in ("handles", "failures", "approvals", "subagents", "reason_for"):
            setattr(sub, shared, getattr(self, shared))
        sub.approval_timeout = self.approval_timeout
        sub.words.enabled = self.words.enabled
        sub.scope = scope
        sub.run_id = scope.run_id
        self.subagents[parent] = sub
        return sub

    def owner_of(self, call_id: str) -> _Follower:
        """The record of the sub-agent whose call ``call_id`` is, else this one."""
        handle = self.open(call_id)
        parent = None if handle is None else handle.parent_call_id
        sub = self.subagents.get(parent) if parent is not None else None
        return self if sub is None else sub

    def suspend_subagents(self) -> None:
        """The run stops for approvals: its sub-agents' runs finish ``interrupted``,
        newest first (their waiting calls stay open; the resumed run's sub-agents adopt
        them)."""
        for parent in reversed(list(self.subagents)):
            sub = self.subagents.pop(parent)
            scope = sub.scope
            sub.words.end()
            if scope is not None and not scope.finished:
                scope.finish("interrupted")

    def _end_subagent(self, call_id: str, failure: object) -> None:
        """The ``as_tool`` call ``call_id`` returned: its sub-agent's run ends first."""
        sub = self.subagents.pop(call_id, None)
        scope = None if sub is None else sub.scope
        if sub is None or scope is None or scope.finished:
            return
        sub.words.end()
        if failure is None:
            scope.finish("completed")
        else:
            scope.finish("failed", error=failure if isinstance(failure, BaseException) else None)

    def started(self, call_id: str, tool: str, arguments: object) -> None:
        self.start(call_id, tool, parse_args(arguments))

    def ended(self, call_id: str, output: object) -> None:
        handle = self.open(call_id)
        if handle is None:
            return
        if call_id in self.failures:
            error = self.failures.pop(call_id)
            if self.subagents:
                self._end_subagent(call_id, error or output)
            handle.fail(error if error is not None else str(output))
            return
        failure = sdk_failure(output)
        if self.subagents:
            self._end_subagent(call_id, failure)
        if failure is not None:  # the SDK's own text for a tool that raised or timed out
            handle.fail(failure)
        else:
            handle.complete(output)

    def apply(self, event: object) -> None:
        if isinstance(event, RawResponsesStreamEvent):
            self._raw(event.data)
        elif isinstance(event, RunItemStreamEvent):
            raw = getattr(event.item, "raw_item", None)
            call_id = _field(raw, "call_id")
            if not isinstance(call_id, str):
                return
            if event.name == "tool_called":
                # The model called it: it runs next, or waits for approval (the SDK emits
                # this for both); ToolstreamHooks says when it really starts.
                name = _field(raw, "name") or getattr(event.item, "tool_name", None) or "tool"
                self.ready(call_id, str(name), parse_args(_field(raw, "arguments")))
            elif event.name == "tool_output":
                self.ended(call_id, getattr(event.item, "output", None))

    def _raw(self, data: Any) -> None:
        kind = getattr(data, "type", "")
        if kind in _TEXT:
            self.words.add(self.response, getattr(data, "delta", None))
        elif kind in _REASONING:
            self.words.add(self.response, getattr(data, "delta", None), "reasoning")
        elif kind == "response.created":
            self.response += 1
        elif kind in _ENDED:
            self.words.end()
        elif kind == "response.output_item.added":
            item = getattr(data, "item", None)
            if _field(item, "type") == "function_call":
                call_id = str(_field(item, "call_id"))
                item_id = _field(item, "id")
                if isinstance(item_id, str):
                    self.items[item_id] = call_id
                handle = self.handle(call_id, str(_field(item, "name") or "tool"))
                if handle.state is None:
                    handle.args_delta(_field(item, "arguments") or "")  # the card, at once
        elif kind == "response.function_call_arguments.delta":
            streaming = self.open(self.items.get(getattr(data, "item_id", "")))
            delta = getattr(data, "delta", "")
            state = None if streaming is None else streaming.state
            if streaming is not None and state is not None and state.value == "created" and delta:
                streaming.args_delta(delta)


#: What the SDK writes as a tool's output when the tool raised (its default failure
#: function) or timed out (``timeout_behavior="error_as_result"``).
_DEFAULT_FAILURE = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
_TIMED_OUT = re.compile(r"Tool '.*' timed out after [0-9.]+ seconds\.", re.DOTALL)


def sdk_failure(output: object) -> dict[str, str] | None:
    """The failure an output string of the SDK's own stands for (a tool that raised and
    was handled by the default failure function, or timed out), else None: how the
    hooks or the stream alone, without :func:`run_config`'s formatter, tell a failure
    from a result. A tool's own ``failure_error_function`` text cannot be told apart."""
    if not isinstance(output, str):
        return None
    if output == _DEFAULT_FAILURE:
        return {"type": "ToolError", "message": output}
    if _TIMED_OUT.fullmatch(output):
        return {"type": "TimeoutError", "message": output}
    return None


#: The Responses stream events that carry the model's answer text, its reasoning, and
#: the end of a model response.
_TEXT = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
_ENDED = frozenset({"response.completed", "response.failed", "response.incomplete"})


def report_progress(
    context: Any,
    fraction: float | None = None,
    *,
    current: float | None = None,
    total: float | None = None,
    message: str | None = None,
) -> None:
    """From inside a function tool: its progress (a ``tool.progress`` of this call).
    ``context`` is the tool's ``ToolContext`` (declare a first parameter ``ctx:
    ToolContext``), which carries the call's id. The SDK has no progress channel of its
    own for function tools."""
    call_id = getattr(context, "tool_call_id", None)
    if not isinstance(call_id, str):
        raise TypeError("report_progress takes the tool's ToolContext (its first parameter)")
    for follower in every_calls(_Follower):
        handle = follower.open(call_id)
        if handle is not None:
            handle.progress(fraction, current=current, total=total, message=message)


def _follower(tracker: Tracker) -> _Follower:
    return follower_of(tracker, _Follower)


def follow_subagent(event: Any) -> None:
    """The ``on_stream`` callback of ``agent.as_tool(..., on_stream=follow_subagent)``:
    the tool's agent run becomes a sub-agent nested under the outer call (its
    ``run.started`` carries the call; its calls, their arguments streaming in, and its
    words carry it too), on the tracker following the outer run. It finishes when the
    call returns (``failed`` when the tool failed); the call's end ends what is left.

    The tracker is the one whose open call has the outer call's id: the tracker of the
    toolstream run the outer ``Runner`` call was made in first (a ``chat_agent`` turn),
    else any tracker following an Agents SDK run. A call of the sub-agent's tool that
    never needs approval runs as soon as the model made it (the stream says no more)."""
    call_id = _field(event.get("tool_call"), "call_id")
    if not isinstance(call_id, str):
        return
    sub = _subagent_of(call_id, event.get("agent"))
    if sub is None:
        return
    inner = event.get("event")
    sub.apply(inner)
    if isinstance(inner, RunItemStreamEvent) and inner.name == "tool_called":
        raw = getattr(inner.item, "raw_item", None)
        inner_id = _field(raw, "call_id")
        name = _field(raw, "name")
        if isinstance(inner_id, str) and _runs_at_once(event.get("agent"), name):
            sub.start(inner_id, str(name), parse_args(_field(raw, "arguments")))


def _subagent_of(call_id: str, agent: object) -> _Follower | None:
    """The sub-agent record of the open call ``call_id``: on the tracker of the enclosing
    toolstream run first, else on any tracker's record that has that call open."""
    for scope in reversed(current_runs.get()):
        follower = _follower(scope._tracker)
        sub = follower.nested(call_id, agent)
        if sub is not None:
            return sub
    for follower in every_calls(_Follower):
        sub = follower.nested(call_id, agent)
        if sub is not None:
            return sub
    return None


def _runs_at_once(agent: object, name: object) -> bool:
    """True when ``agent``'s tool ``name`` never waits for approval."""
    for tool in getattr(agent, "tools", None) or ():
        if getattr(tool, "name", None) == name:
            return getattr(tool, "needs_approval", False) is False
    return False


class ToolstreamHooks(RunHooks[Any]):
    """``RunHooks`` that announce each tool's start and end on ``tracker`` (the call id is
    ``context.tool_call_id``). Pass as ``Runner.run(..., hooks=ToolstreamHooks(tracker))``."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        """The tool starts running."""
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str):
            arguments = getattr(context, "tool_arguments", None)
            _follower(self.tracker).started(call_id, str(tool.name), arguments)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        """The tool returned (or its exception became an output string)."""
        call_id = getattr(context, "tool_call_id", None)
        if not isinstance(call_id, str):
            return
        _follower(self.tracker).ended(call_id, result)


def error_formatter(tracker: Tracker) -> Callable[[ToolErrorFormatterArgs[Any]], str | None]:
    """A ``RunConfig(tool_error_formatter=...)`` that tells the integration which calls
    failed (and with what exception); the model still gets the SDK's default message."""
    follower = _follower(tracker)

    def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        if args.kind == "tool_exception":
            follower.failures[args.call_id] = args.error
        return None

    return formatter


def run_config(tracker: Tracker, **options: Any) -> RunConfig:
    """A ``RunConfig`` (with your ``options``) whose error formatter reports tool failures
    to the integration."""
    return RunConfig(tool_error_formatter=error_formatter(tracker), **options)


async def track_run(
    tracker: Tracker,
    result: RunResultStreaming,
    *,
    run_id: str | None = None,
    approval_timeout: float | None = None,
    messages: bool = True,
) -> AsyncIterator[Any]:
    """Re-yield the events of ``Runner.run_streamed(...)`` while announcing its calls,
    and the model's text and reasoning deltas as the run's messages (``messages=False``:
    calls only): one toolstream run per SDK run (finished ``interrupted`` when it stops
    for approvals; ``approval_timeout`` seconds before an approval expires)."""
    follower = _follower(tracker)
    follower.approval_timeout = approval_timeout
    follower.words.enabled = messages
    with framework_run(follower, run_id) as outcome:
        async for event in result.stream_events():
            follower.apply(event)
            yield event
        for item in result.interruptions:
            raw = getattr(item, "raw_item", None)
            call_id = _field(raw, "call_id")
            if not isinstance(call_id, str):
                continue
            tool = str(getattr(item, "tool_name", None) or "tool")
            asker = follower.owner_of(call_id)
            if asker.ask(call_id, tool, parse_args(_field(raw, "arguments"))) is not None:
                outcome.waiting = True
        if outcome.waiting and follower.subagents:
            follower.suspend_subagents()


async def apply_decisions(tracker: Tracker, result: RunResultStreaming) -> RunState[Any]:
    """Wait for the decisions on the approvals a run stopped for, and return the
    ``RunState`` to resume with (``Runner.run_streamed(agent, state, ...)``): approved calls
    ``state.approve``-d, refused and expired ones ``state.reject``-ed with why.

    The SDK runs an approved call with the arguments the model gave; an approval that
    edited them is applied as a rejection whose message gives the person's arguments,
    so the model can call the tool again with them (never a call run with arguments
    nobody approved)."""
    follower = _follower(tracker)
    state: RunState[Any] = result.to_state()
    for item in result.interruptions:
        call_id = _field(getattr(item, "raw_item", None), "call_id")
        approval_id = follower.approvals.get(call_id) if isinstance(call_id, str) else None
        if approval_id is None:
            raise LookupError(f"no approval was asked for call {call_id!r} (use track_run)")
        decision = await tracker.decision(approval_id)
        follower.approvals.pop(str(call_id), None)
        if decision.approved and decision.args is None:
            state.approve(item)
        elif decision.approved:
            edited = json.dumps(decision.args, ensure_ascii=False)
            skipped = follower.open(str(call_id))
            if skipped is not None:  # this call will not run; the model's next one may
                skipped.cancel("approved with other arguments: the model is asked to call again")
            state.reject(
                item,
                rejection_message=(
                    f"A person approved this call with different arguments: {edited}. "
                    "Call the tool again with them."
                ),
            )
        else:
            state.reject(item, rejection_message=refusal(decision))
    return state


def chat_agent(
    agent: Any,
    *,
    approval_timeout: float | None = None,
    approval_reason: ApprovalReason | None = None,
    messages: bool = True,
    run_config: RunConfig | None = None,
    max_turns: int | None = None,
    **tracker_options: Any,
) -> StartTurn:
    """The ``start_turn`` that serves an Agents SDK ``agent`` to a chat client:
    ``ChatApp(bus, chat_agent(agent))`` is the whole gateway.

    Each turn streams ``Runner.run_streamed`` on the user's new message with the
    conversation the client sent as input — its user and assistant *text* only (tool
    calls, outputs and approval responses in the client's copy are never taken as real)
    — as one toolstream run, through :func:`track_run` and :class:`ToolstreamHooks`
    (the model's raw text and reasoning deltas too, unless ``messages=False``), with the
    error formatter that tells failed calls apart (``run_config``'s own
    ``tool_error_formatter`` is kept if it has one). ``needs_approval`` tools interrupt
    the SDK's run: the turn then waits in this process (up to ``approval_timeout``
    seconds, by default the bus's ``session_ttl``) for the decisions, which any gateway
    process of the bus may take, and resumes the ``RunState`` (:func:`apply_decisions`)
    in the same run, so the client's continuation goes on in the same assistant message.
    ``approval_reason``: why a call needs a person (the SDK gives no reason: a sentence,
    ``{tool: sentence}`` or ``(tool, args) -> sentence``).
    ``tracker_options``: the ``Tracker``'s (``summarizer``, ``payload``, ``hidden``,
    ``coalesce``, ``strict``)."""
    options = TurnOptions(
        approval_timeout=approval_timeout,
        messages=messages,
        tracker_options=tracker_options,
        approval_reason=approval_reason,
    )
    if not hasattr(agent, "name") or not hasattr(agent, "tools"):
        raise TypeError("chat_agent takes an Agents SDK Agent")
    limits: dict[str, Any] = {} if max_turns is None else {"max_turns": max_turns}

    async def drive(tracker: Tracker, request: TurnRequest) -> None:
        said, prompt = history(request)
        items: list[Any] = [{"role": role, "content": text} for role, text in said]
        items.append({"role": "user", "content": prompt})
        hooks = ToolstreamHooks(tracker)
        _follower(tracker).reason_for = options.reason_for
        config = _config_for(tracker, run_config)
        timeout = approval_timeout_for(options, tracker.bus)
        given: Any = items
        while True:
            result = Runner.run_streamed(agent, given, hooks=hooks, run_config=config, **limits)
            async for _ in track_run(
                tracker, result, approval_timeout=timeout, messages=options.messages
            ):
                pass
            if not result.interruptions:
                return
            given = await apply_decisions(tracker, result)

    return start_turn_for(drive, options)


def _config_for(tracker: Tracker, config: RunConfig | None) -> RunConfig:
    """``config`` (or a new one) whose tool error formatter tells the integration which
    calls failed; a formatter of the caller's still decides what the model reads."""
    import dataclasses

    ours = error_formatter(tracker)
    if config is None:
        return RunConfig(tool_error_formatter=ours)
    theirs = config.tool_error_formatter
    if theirs is None:
        return dataclasses.replace(config, tool_error_formatter=ours)

    def both(args: ToolErrorFormatterArgs[Any]) -> Any:
        ours(args)
        return theirs(args)

    return dataclasses.replace(config, tool_error_formatter=both)
