"""smolagents: the tool calls of an agent run, through toolstream.

::

    from toolstream.integrations.smolagents import step_callback, track_stream

    for event in track_stream(tracker, agent.run(task, stream=True)):
        ...                                    # smolagents' own stream, re-yielded

:func:`track_stream` follows a streamed run (``ToolCall`` / ``ToolOutput``, by their
``id``): one toolstream run, each call started when the model's call is run and ended
with its output. When a tool raises, smolagents emits no ``ToolOutput`` and records the
error on the step without a call id: the step's calls still waiting for an output end
``tool.failed`` with that error, exactly once. With ``stream_outputs=True`` the model's
argument fragments (``ChatMessageStreamDelta.tool_calls``) stream as ``tool.args.delta``
before the call runs. :func:`step_callback` (for
``step_callbacks=[...]``) reports each step's calls after the step, for runs that are not
streamed. The ``final_answer`` tool, smolagents' way to end a run, is not a call.
:func:`follow_managed` (a managed agent's ``step_callbacks=[follow_managed]``) nests a
managed agent's calls under the manager's call of it, as a sub-agent's run.

Install with ``pip install "toolstream[smolagents]"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from toolstream.integrations import require
from toolstream.integrations._calls import Calls, calls_of, framework_run
from toolstream.integrations._nesting import Nest

require("smolagents", "smolagents", "smolagents")

from smolagents import ActionStep, ToolCall, ToolOutput  # noqa: E402
from smolagents.models import ChatMessageStreamDelta  # noqa: E402

if TYPE_CHECKING:
    from toolstream import Tracker

__all__ = ["follow_managed", "step_callback", "track_stream"]

#: smolagents ends a run by calling this tool: not one of the agent's calls.
FINAL = "final_answer"


class _Manager:
    """A streamed run :func:`track_stream` follows, as its managed agents see it: its
    record, its sub-agents, and which call each managed agent object runs in now."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.nest = Nest(calls)
        self.running: dict[int, str] = {}  # id(managed agent) -> the call it runs in


#: The streamed run whose step is being played (set around each step of the stream:
#: a managed agent's run, in the manager's thread or a worker's copy of its context,
#: finds its manager here).
_manager: ContextVar[_Manager | None] = ContextVar("toolstream_smolagents", default=None)


def _error_of(step: Any) -> dict[str, str]:
    error = step.error
    return {"type": type(error).__name__, "message": str(error)}


def track_stream(
    tracker: Tracker, events: Iterable[Any], *, run_id: str | None = None, messages: bool = True
) -> Iterator[Any]:
    """Re-yield the events of ``agent.run(task, stream=True)`` while announcing its calls
    on ``tracker`` (one toolstream run around them), and the model's streamed text (with
    ``stream_outputs=True``) as the run's messages (``messages=False``: calls only)."""
    calls = calls_of(tracker)
    calls.words.enabled = messages
    waiting: list[str] = []  # calls of the current step without an output yet
    streaming: dict[int, tuple[str, str]] = {}  # delta index -> (call id, tool), this step
    step = 0  # the model's message of the current step (its words' message key)
    manager = _Manager(calls)
    nest = manager.nest
    with framework_run(calls, run_id):
        for event in _played_by(manager, events):
            if isinstance(event, ChatMessageStreamDelta):
                calls.words.add(step, event.content)
                for delta in event.tool_calls or ():
                    _stream_args(calls, streaming, delta)
            elif isinstance(event, ToolCall) and event.name != FINAL:
                calls.start(event.id, event.name, event.arguments or {})
                waiting.append(event.id)
            elif isinstance(event, ToolOutput):
                handle = calls.open(event.id)
                if handle is not None:
                    nest.end(event.id)  # a managed agent's run ends before its call
                    handle.complete(event.output)
            elif isinstance(event, ActionStep):
                for call_id in waiting:
                    handle = calls.open(call_id)
                    if handle is None:
                        continue
                    if event.error is not None:
                        nest.end(call_id, "failed", _error_of(event))
                        handle.fail(_error_of(event))
                    else:
                        handle.cancel("the step ended without an output for this call")
                waiting.clear()
                streaming.clear()
                calls.words.end()
                step += 1
            yield event


def _played_by(manager: _Manager, events: Iterable[Any]) -> Iterator[Any]:
    """``events``, each produced with ``manager`` in the context (the step that runs a
    managed agent runs while the next event is produced)."""
    it = iter(events)
    while True:
        token = _manager.set(manager)
        try:
            event = next(it)
        except StopIteration:
            return
        finally:
            _manager.reset(token)
        yield event


def follow_managed(step: Any, *args: Any, agent: Any = None, **kwargs: Any) -> None:
    """A step callback for a *managed* agent (``ToolCallingAgent(...,
    step_callbacks=[follow_managed])``): run by a manager that :func:`track_stream`
    follows, each of its steps is reported — its calls started and ended, after the
    step, as :func:`step_callback` does — inside a sub-agent's run nested under the
    manager's call of it. Outside such a run it reports nothing.

    smolagents gives a managed agent the task, not the call id: the call is the
    manager's open call of that agent (by its ``name``) whose ``task`` the agent is
    running; two calls of one agent with the same task are the same work either way."""
    manager = _manager.get()
    if manager is None or agent is None or not isinstance(step, ActionStep):
        return
    call_id = _call_running(manager, agent)
    if call_id is None:
        return
    sub = manager.nest.sub(call_id, getattr(agent, "name", None))
    if sub is manager.calls:
        return  # refused (a lenient tracker): nothing nests, nothing is reported flat
    _report_step(sub, step)


def _call_running(manager: _Manager, agent: Any) -> str | None:
    """The manager's open call ``agent`` runs in (claimed at its first step)."""
    key = id(agent)
    claimed = manager.running.get(key)
    if claimed is not None and manager.calls.open(claimed) is not None:
        return claimed
    name = getattr(agent, "name", None)
    task = str(getattr(agent, "task", "") or "")
    taken = set(manager.running.values())
    for call_id, handle in list(manager.calls.handles.items()):
        if handle.done or handle.tool != name or call_id in taken:
            continue
        given = handle.args.get("task") if isinstance(handle.args, dict) else None
        if isinstance(given, str) and given in task:
            manager.running[key] = call_id
            return call_id
    return None


def _stream_args(calls: Calls, streaming: dict[int, tuple[str, str]], delta: Any) -> None:
    """One fragment of a call the model is writing: the first names it (id, tool)."""
    function = getattr(delta, "function", None)
    index = delta.index if isinstance(delta.index, int) else 0
    known = streaming.get(index)
    if known is None:
        name = getattr(function, "name", None)
        if not delta.id or not name or name == FINAL:
            return
        known = streaming[index] = (delta.id, name)
    text = getattr(function, "arguments", None)
    handle = calls.open(known[0]) or calls.handle(*known)
    if isinstance(text, str) and text and calls.state_of(handle) in (None, "created"):
        handle.args_delta(text)


def _step_calls(step: Any) -> list[tuple[str, str, Any]]:
    """A step's calls: its ``tool_calls`` — or, on a step whose tool raised (smolagents
    records no calls then), the calls of the model's message."""
    if step.tool_calls:
        return [(c.id, c.name, c.arguments) for c in step.tool_calls]
    message = getattr(step, "model_output_message", None)
    out = []
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        out.append((call.id, getattr(function, "name", "tool"), getattr(function, "arguments", {})))
    return out


def step_callback(tracker: Tracker) -> Callable[..., None]:
    """A callback for ``step_callbacks=[...]``: after each step, its calls (started then
    ended: ``tool.failed`` with the step's error, else ``tool.completed`` with the step's
    observations — smolagents does not split them per call here)."""
    calls = calls_of(tracker)

    def callback(step: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(step, ActionStep):
            _report_step(calls, step)

    return callback


def _report_step(calls: Calls, step: Any) -> None:
    """A step's calls, after the step: started, then ended."""
    for call_id, name, arguments in _step_calls(step):
        if name == FINAL:
            continue
        handle = calls.open(call_id)
        if handle is None:
            if call_id in calls.handles:
                continue  # reported already (track_stream, or an earlier step)
            handle = calls.start(call_id, name, arguments or {})
        if step.error is not None:
            handle.fail(_error_of(step))
        else:
            handle.complete(step.observations)
