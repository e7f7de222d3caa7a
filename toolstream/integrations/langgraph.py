"""LangGraph: the tool calls of a graph run, live, through toolstream.

::

    from toolstream.integrations.langgraph import track_graph

    async for chunk in track_graph(tracker, graph, inputs, config):
        ...                                     # the graph's own chunks, re-yielded

``track_graph`` streams the graph with the modes it needs (``messages`` for the model's
tool-call chunks, ``tools`` for each tool's start, output and end with its
``tool_call_id``, ``custom`` for progress, ``updates`` for interrupts) and re-yields the
modes you asked for (``stream_mode``, default ``"updates"``). One toolstream run per
graph invocation. A tool that asks a person with ``interrupt({"tool_call_id": ...,
"reason": ...})`` makes the call wait for a decision and the run finish
``interrupted``; :func:`resume_command` waits for the decisions on the bus and builds
the ``Command(resume=...)`` that continues the graph. Tools report progress with
:func:`report_progress` (or write ``{"tool_call_id", "progress", "message"}`` to the
stream writer themselves).

Install with ``pip install "toolstream[langgraph]"``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from toolstream.integrations import require
from toolstream.integrations._calls import Bounded, calls_of, framework_run, refusal
from toolstream.integrations._chat import (
    ApprovalReason,
    TurnOptions,
    approval_timeout_for,
    start_turn_for,
)
from toolstream.integrations._nesting import Nest
from toolstream.integrations.langchain import apply_chunk, apply_custom, end_call

require("langgraph", "langgraph", "LangGraph")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langgraph.config import get_stream_writer  # noqa: E402
from langgraph.types import Command  # noqa: E402

try:  # the namespace LangGraph streams a task's chunks under (its own rule)
    from langgraph.pregel._messages import graph_namespace
except ImportError:  # pragma: no cover - older LangGraph: the task's graph

    def graph_namespace(metadata: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(str(metadata["langgraph_checkpoint_ns"]).split("|"))[:-1]


if TYPE_CHECKING:
    from toolstream import Decision, Tracker
    from toolstream.chat import StartTurn, TurnRequest

__all__ = ["chat_agent", "report_progress", "resume_command", "track_graph"]

#: The stream modes the integration reads.
NEEDED = ("messages", "tools", "custom", "updates")


def report_progress(
    tool_call_id: str, fraction: float | None = None, *, message: str | None = None
) -> None:
    """From inside a tool run by the graph: its progress (``tool_call_id`` is the tool's
    ``InjectedToolCallId``). Written to the graph's stream writer; ``track_graph`` reads it."""
    writer = get_stream_writer()
    writer({"tool_call_id": tool_call_id, "progress": fraction, "message": message})


async def track_graph(
    tracker: Tracker,
    graph: Any,
    input: Any,
    config: Any = None,
    *,
    stream_mode: str | Sequence[str] = "updates",
    run_id: str | None = None,
    approval_timeout: float | None = None,
    messages: bool = True,
    **options: Any,
) -> AsyncIterator[Any]:
    """Stream ``graph`` with ``input`` and ``config`` (``graph.astream``), announcing its
    tool calls on ``tracker`` and the model's text and reasoning as the run's messages
    (``messages=False``: calls only); re-yield the chunks of ``stream_mode`` as
    ``astream`` would (a chunk for one mode, ``(mode, chunk)`` for several)."""
    asked = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
    modes = list(dict.fromkeys([*asked, *NEEDED]))
    single = isinstance(stream_mode, str)
    # Subgraphs are always streamed (their calls are calls too); their chunks are
    # re-yielded only if the caller asked for them.
    namespaced = bool(options.pop("subgraphs", False))
    calls = calls_of(tracker)
    calls.approval_timeout = approval_timeout
    calls.words.enabled = messages
    nest = Nest(calls)
    owners = _Owners()
    config = _with_handler(config, owners)
    with framework_run(calls, run_id) as outcome:
        async for ns, mode, chunk in graph.astream(
            input, config, stream_mode=modes, subgraphs=True, **options
        ):
            on = calls if not ns else nest.sub(*owners.of(ns))
            if mode == "messages":
                message = chunk[0] if isinstance(chunk, tuple) else chunk
                apply_chunk(on, message)
            elif mode == "tools" and isinstance(chunk, dict):
                _tool_event(on, chunk, nest)
            elif mode == "custom":
                apply_custom(on, chunk)
            elif mode == "updates" and isinstance(chunk, dict) and "__interrupt__" in chunk:
                outcome.stopped = True
                outcome.waiting = _interrupts(on, chunk["__interrupt__"]) or outcome.waiting
            if mode in asked and (namespaced or not ns):
                if namespaced:
                    yield (ns, chunk) if single else (ns, mode, chunk)
                else:
                    yield chunk if single else (mode, chunk)


class _Owners(BaseCallbackHandler):
    """Which tool call each subgraph namespace runs in, from LangChain's run tree.

    A compiled graph invoked inside a tool (an agent used as a tool) streams its chunks
    under a namespace of its own, which does not say which call of the tool node started
    it (parallel calls share the node's task). LangChain's callbacks do: every run knows
    its parent, so the nearest tool run above a namespace's first node is its call. A
    namespace with no tool above it is a subgraph added as a node: its calls are the
    enclosing agent's own (``None``)."""

    run_inline = True  # before the chunks it explains reach the stream

    # Chain and tool starts are all it reads (LangChain files tool events under
    # "agent"). Every other kind of event skips it: the model's (a handler without
    # ``on_chat_model_start`` makes LangChain render every message as text for
    # ``on_llm_start``, at each model call), tokens, retries, retrievers, custom events.
    ignore_llm = ignore_chat_model = ignore_retry = ignore_retriever = True
    ignore_custom_event = True

    def __init__(self) -> None:
        self._parents: Bounded[UUID, UUID] = Bounded()
        self._tools: Bounded[UUID, str] = Bounded()  # tool run -> its call id
        self._names: dict[str, str] = {}  # call id -> the graph it runs
        self._owners: dict[tuple[str, ...], str | None] = {}

    def of(self, ns: tuple[str, ...]) -> tuple[str | None, str | None]:
        """The call namespace ``ns`` runs in (None: no call), and the graph's name."""
        call_id = self._owners.get(ns)
        return call_id, (self._names.get(call_id) if call_id is not None else None)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            self._parents[run_id] = parent_run_id
        # the call id LangGraph's "tools" stream gives the call (StreamToolCallHandler)
        self._tools[run_id] = kwargs.get("tool_call_id") or str(run_id)

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is None:
            return
        self._parents[run_id] = parent_run_id
        tool = self._tools.get(parent_run_id)
        name = kwargs.get("name")
        if tool is not None and isinstance(name, str) and name != "LangGraph":
            self._names.setdefault(tool, name)  # the graph the tool runs, if named
        if not metadata or not metadata.get("langgraph_checkpoint_ns"):
            return
        ns = graph_namespace(metadata)
        if ns and ns not in self._owners:
            self._owners[ns] = self._tool_above(parent_run_id)

    def _tool_above(self, run_id: UUID | None) -> str | None:
        seen = 0
        while run_id is not None and seen < 256:
            call_id = self._tools.get(run_id)
            if call_id is not None:
                return call_id
            run_id = self._parents.get(run_id)
            seen += 1
        return None


def _with_handler(config: Any, handler: BaseCallbackHandler) -> dict[str, Any]:
    """``config`` with ``handler`` among its callbacks (inherited by every run)."""
    out = dict(config or {})
    callbacks = out.get("callbacks")
    if callbacks is None:
        out["callbacks"] = [handler]
    elif isinstance(callbacks, list):
        out["callbacks"] = [*callbacks, handler]
    else:  # a callback manager
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        out["callbacks"] = manager
    return out


def _tool_event(calls: Any, data: dict[str, Any], nest: Nest | None = None) -> None:
    call_id = data.get("tool_call_id")
    if not isinstance(call_id, str):
        return
    kind = data.get("event")
    if call_id in _REFUSED:
        # A tool that asked from inside and was refused is entered again on resume (as
        # LangGraph does): the call ended denied; what the tool does now is not a card.
        if kind in ("tool-finished", "tool-error"):
            _REFUSED.pop(call_id)
        return
    if kind == "tool-started":
        calls.start(call_id, str(data.get("tool_name") or "tool"), data.get("input") or {})
    elif kind == "tool-output-delta":
        handle = calls.open(call_id)
        if handle is not None:
            delta = data.get("delta")
            if isinstance(delta, str):
                handle.output_delta(delta)
            else:
                handle.output_partial(delta)
    elif kind == "tool-finished":
        if nest is not None:
            failed = getattr(data.get("output"), "status", None) == "error"
            nest.end(call_id, "failed" if failed else "completed")
        end_call(calls, call_id, data.get("output"))
    elif kind == "tool-error":
        handle = calls.open(call_id)
        if handle is not None:
            message = str(data.get("message", ""))
            if nest is not None:
                nest.end(call_id, "failed", message)
            handle.fail({"type": "ToolError", "message": message})


def _interrupts(calls: Any, interrupts: Sequence[Any]) -> bool:
    """The graph stopped for ``interrupts``: those naming a call make it wait for a
    person. True when any does."""
    waiting = False
    for item in interrupts:
        value = getattr(item, "value", None)
        if not isinstance(value, dict):
            continue
        requests = value.get("action_requests")
        if isinstance(requests, list) and "tool_call_id" not in value:
            batch = _batch(calls, requests)
            if batch is not None:
                _BATCHES[getattr(item, "id", "")] = batch
                waiting = True
            continue
        handle = calls.open(value.get("tool_call_id"))
        if handle is None:
            continue
        # our convention names a reason; HumanInTheLoopMiddleware a description
        reason = value.get("reason", value.get("description"))
        calls.ask_for(handle, reason if isinstance(reason, str) else None)
        _INTERRUPTS[getattr(item, "id", "")] = handle.call_id
        waiting = True
    return waiting


# interrupt id -> call id, for resume_command.
_INTERRUPTS: Bounded[str, str] = Bounded()
# Calls refused while their tool waited inside (ended denied): their re-entry is ignored.
_REFUSED: Bounded[str, bool] = Bounded()
# interrupt id -> the call id of each of its action requests (a batched HITL interrupt).
_BATCHES: Bounded[str, list[str]] = Bounded()


def _batch(calls: Any, requests: list[Any]) -> list[str] | None:
    """A ``HumanInTheLoopMiddleware`` batched interrupt lists the gated calls of the
    model's turn by name and args, in order, without their ids: match each to the first
    call of this run with that name and those args that has not started (by name alone
    if the args differ), and make it wait for a person. None when one matches no call
    (the interrupt then asks toolstream nothing)."""
    waiting = [
        h
        for h in calls.handles.values()
        if not h.done and h.run_id == calls.run_id and calls.state_of(h) in ("created", "ready")
    ]
    chosen: list[Any] = []
    for request in requests:
        if not isinstance(request, dict):
            return None
        name, args = request.get("name"), request.get("args")
        free = [h for h in waiting if h.tool == name and h not in chosen]
        exact = [h for h in free if h.args == args]
        if not (exact or free):
            return None
        chosen.append((exact or free)[0])
    for handle, request in zip(chosen, requests, strict=True):
        if handle.approval_id is None:
            description = request.get("description")
            calls.ask(
                handle.call_id,
                handle.tool,
                request.get("args"),
                description if isinstance(description, str) else None,
            )
    return [h.call_id for h in chosen]


async def resume_command(tracker: Tracker, interrupts: Sequence[Any]) -> Command[Any]:
    """Wait for the decisions on the calls the graph stopped for (``interrupts``: from
    ``(await graph.aget_state(config)).interrupts``) and build the ``Command(resume=...)``
    that continues it: each interrupt's ``interrupt()`` returns ``{"approved", "by",
    "reason", "args"}`` (``args``: the person's edited arguments, or None)."""
    calls = calls_of(tracker)
    resume: dict[str, Any] = {}
    for item in interrupts:
        interrupt_id = getattr(item, "id", "")
        value = getattr(item, "value", None)
        batch = _BATCHES.pop(interrupt_id)
        if batch is not None and isinstance(value, dict):
            decisions = []
            for batched, request in zip(batch, value.get("action_requests") or (), strict=True):
                approval_id = calls.approvals.pop(batched, None)
                if approval_id is None:
                    raise LookupError(f"call {batched!r} waits for no approval")
                asked = {"type": "tool_approval", "name": request.get("name")}
                decisions.append(_answer(asked, await tracker.decision(approval_id)))
            resume[interrupt_id] = {"decisions": decisions}
            continue
        call_id = _INTERRUPTS.pop(interrupt_id)
        if call_id is None and isinstance(value, dict):
            call_id = value.get("tool_call_id")
        approval_id = calls.approvals.pop(call_id, None) if isinstance(call_id, str) else None
        if approval_id is None and isinstance(call_id, str):
            # Asked by another tracker of the session (a previous request's): ask again
            # here only if no approval is pending for the call on the bus.
            approval_id = await _pending_approval(tracker, call_id)
        if approval_id is None:
            raise LookupError(
                f"interrupt {interrupt_id!r} waits for no approval: it names no tool call "
                "toolstream was asked about (stream the graph with track_graph)"
            )
        decision = await tracker.decision(approval_id)
        if not decision.approved and isinstance(call_id, str):
            handle = calls.open(call_id)
            if handle is not None:  # the refusal ends the call; the tool re-entered is not it
                _REFUSED[call_id] = True
                handle.deny(refusal(decision), by=decision.by)
        resume[interrupt_id] = _answer(value, decision)
    return Command(resume=resume)


async def _pending_approval(tracker: Tracker, call_id: str) -> str | None:
    """The approval pending for ``call_id`` in the tracker's session, as the bus says."""
    fetch = getattr(tracker.bus, "fetch_snapshot", None)
    snapshot = (
        await fetch(tracker.session) if fetch is not None else tracker.bus.snapshot(tracker.session)
    )
    for call in snapshot.calls:
        if call.call_id == call_id and call.approval is not None:
            return call.approval.approval_id
    return None


def _answer(value: object, decision: Decision) -> dict[str, Any]:
    """What ``interrupt()`` returns to the tool: a ``HumanInTheLoopMiddleware`` decision
    for its per-call requests (``type == "tool_approval"``), else toolstream's own."""
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        if not decision.approved:
            return {"type": "reject", "message": refusal(decision, "rejected")}
        if decision.args is not None:
            action = {"name": value.get("name"), "args": decision.args}
            return {"type": "edit", "edited_action": action}
        return {"type": "approve"}
    return {
        "approved": decision.approved,
        "by": decision.by,
        "reason": decision.reason,
        "args": decision.args,
    }


def chat_agent(
    graph: Any,
    *,
    config: Mapping[str, Any] | None = None,
    input: Callable[[TurnRequest], Any] | None = None,
    approval_timeout: float | None = None,
    approval_reason: ApprovalReason | None = None,
    messages: bool = True,
    **tracker_options: Any,
) -> StartTurn:
    """The ``start_turn`` that serves ``graph`` (compiled, with a checkpointer) to a chat
    client: ``ChatApp(bus, chat_agent(graph))`` is the whole gateway.

    Each turn streams the graph on the chat's thread (``thread_id`` = the chat id;
    ``config`` is merged under it) with the user's new message (``input(request)``
    builds something else), as one toolstream run: the model's text and reasoning
    (``messages=False``: calls only), every call's lifecycle. When the graph stops for
    a person — ``HumanInTheLoopMiddleware``, or ``interrupt({"tool_call_id", "reason"})``
    inside a tool — the turn waits in this process (up to ``approval_timeout`` seconds,
    by default the bus's ``session_ttl``) for the decisions, which any gateway process
    of the bus may take, then resumes the graph with ``Command(resume=...)`` in the same
    run: the client's continuation goes on in the same assistant message. A refused
    call ends ``denied`` (a tool that asked from inside is entered again, as LangGraph
    does, and is told). ``approval_reason``: why a call needs a person where the graph
    gives no reason (a sentence, ``{tool: sentence}`` or ``(tool, args) -> sentence``).
    ``tracker_options``: the ``Tracker``'s (``summarizer``,
    ``payload``, ``hidden``, ``coalesce``, ``strict``)."""
    options = TurnOptions(
        approval_timeout=approval_timeout,
        messages=messages,
        tracker_options=tracker_options,
        approval_reason=approval_reason,
    )
    base = dict(config or {})
    if not hasattr(graph, "astream") or not hasattr(graph, "aget_state"):
        raise TypeError("chat_agent takes a compiled LangGraph graph (graph.compile(...))")

    async def drive(tracker: Tracker, request: TurnRequest) -> None:
        configurable = {**dict(base.get("configurable") or {}), "thread_id": request.session}
        run_config = {**base, "configurable": configurable}
        given: Any = (
            input(request)
            if input is not None
            else {"messages": [{"role": "user", "content": request.user_text}]}
        )
        timeout = approval_timeout_for(options, tracker.bus)
        calls_of(tracker).reason_for = options.reason_for
        while True:
            async for _ in track_graph(
                tracker,
                graph,
                given,
                run_config,
                approval_timeout=timeout,
                messages=options.messages,
            ):
                pass
            if not calls_of(tracker).outcome.stopped:  # ran to its end: no state to read
                return
            interrupts = (await graph.aget_state(run_config)).interrupts
            if not interrupts:
                return
            given = await resume_command(tracker, interrupts)

    return start_turn_for(drive, options)
