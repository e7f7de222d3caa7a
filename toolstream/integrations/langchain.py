"""LangChain: the tool calls of any runnable, live, through toolstream.

::

    from toolstream.integrations.langchain import ToolstreamCallbackHandler

    await chain.ainvoke(inputs, config={"callbacks": [ToolstreamCallbackHandler(tracker)]})

The handler sees a chat model's streamed tool-call chunks (``on_llm_new_token``: the
card appears at the model's first token and its arguments stream in), each tool's start
and end (``on_tool_start`` / ``on_tool_end`` / ``on_tool_error``, correlated by the
``tool_call_id`` LangChain passes when a tool runs for a tool call), and custom events
(``adispatch_custom_event`` with ``{"progress"?, "message"?}`` from inside a tool, or
anything the tool runs — attributed to that tool's call; ``"tool_call_id"`` names
another) as
progress. A handled ``ToolException`` comes back as a ``ToolMessage`` with
``status="error"``: that is ``tool.failed``, not ``tool.completed``.

Install with ``pip install "toolstream[langgraph]"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from toolstream.integrations import require
from toolstream.integrations._calls import Bounded, Calls, calls_of
from toolstream.integrations._nesting import Nest

require("langchain_core", "langgraph", "LangChain")

from langchain_core.callbacks import AsyncCallbackHandler  # noqa: E402

if TYPE_CHECKING:
    from toolstream import Tracker

__all__ = ["ToolstreamCallbackHandler", "apply_chunk", "apply_custom", "apply_words", "end_call"]


def apply_chunk(calls: Calls, message: Any) -> None:
    """An ``AIMessageChunk`` (or a whole ``AIMessage``): its text and reasoning as the
    run's message, then its ``tool_call_chunks`` — a card at a call's first chunk, its
    arguments as they stream (chunks after the first carry only their ``index``)."""
    apply_words(calls, message)
    chunks = getattr(message, "tool_call_chunks", None) or ()
    key = getattr(message, "id", None) or ""
    for chunk in chunks:
        index = chunk.get("index")
        call_id = chunk.get("id")
        slot = (key, index)
        if call_id:
            _INDEX[slot] = call_id
        else:
            call_id = _INDEX.get(slot)
        if not call_id:
            continue
        handle = calls.handle(call_id, chunk.get("name") or "tool")
        if calls.state_of(handle) in (None, "created"):
            handle.args_delta(chunk.get("args") or "")


def apply_words(calls: Calls, message: Any) -> None:
    """The text and reasoning of a model's message (chunk), in the order of its content
    blocks (LangChain's standard ``content_blocks``: any provider's format)."""
    if getattr(message, "type", None) not in ("AIMessageChunk", "ai") or not calls.words.enabled:
        return
    key = getattr(message, "id", None)
    content = getattr(message, "content", None)
    extra = getattr(message, "additional_kwargs", None)
    if isinstance(content, str) and not (
        isinstance(extra, dict) and extra.get("reasoning_content")
    ):
        # Plain text, the common case: what content_blocks would say, without building
        # them (that costs ~25 us per chunk).
        calls.words.add(key, content)
        return
    try:
        blocks = message.content_blocks
    except Exception:  # a provider format LangChain cannot read: its plain text only
        content = getattr(message, "content", None)
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            calls.words.add(key, block.get("text"))
        elif kind == "reasoning":
            calls.words.add(key, block.get("reasoning"), "reasoning")
        elif kind == "non_standard":  # e.g. Anthropic thinking without provider metadata
            value = block.get("value")
            if isinstance(value, dict) and value.get("type") == "thinking":
                calls.words.add(key, value.get("thinking"), "reasoning")


# (message id, chunk index) -> call id: a chunk after the first names only its index.
_INDEX: Bounded[tuple[str, Any], str] = Bounded()


def end_call(calls: Calls, call_id: object, output: Any) -> None:
    """A tool's output: ``tool.completed`` — or ``tool.failed`` for a ``ToolMessage``
    with ``status="error"`` (a handled ``ToolException``)."""
    handle = calls.open(call_id)
    if handle is None:
        return
    if getattr(output, "status", None) == "error":
        handle.fail({"type": "ToolException", "message": str(getattr(output, "content", ""))})
    else:
        handle.complete(getattr(output, "content", output))


def apply_custom(calls: Calls, data: Any, call_id: str | None = None) -> None:
    """A custom chunk ``{"tool_call_id"?, "progress"?, "message"?, ...}``: progress of
    the call it names (else of ``call_id``: the call it was dispatched from)."""
    if not isinstance(data, dict):
        return
    handle = calls.open(data.get("tool_call_id") or call_id)
    if handle is None:
        return
    fraction = data.get("progress")
    message = data.get("message")
    extra = {k: v for k, v in data.items() if k not in ("tool_call_id", "progress", "message")}
    handle.progress(
        fraction if isinstance(fraction, (int, float)) else None,
        message=message if isinstance(message, str) else None,
        data=extra or None,
    )


class ToolstreamCallbackHandler(AsyncCallbackHandler):
    """A LangChain callback handler that announces tool calls on ``tracker``, and the
    model's streamed text and reasoning as the run's messages (``messages=False``:
    calls only): ``config={"callbacks": [ToolstreamCallbackHandler(tracker)]}``."""

    def __init__(self, tracker: Tracker, *, messages: bool = True) -> None:
        self.tracker = tracker
        self.calls = calls_of(tracker)
        #: The model's streamed text and reasoning go out as the run's messages too.
        self.calls.words.enabled = messages
        self._runs: dict[UUID, str] = {}  # the tool's run id -> call id
        # A run's parent (chains and tools), to find the tool a custom event came from.
        self._parents: Bounded[UUID, UUID] = Bounded()
        # The sub-agents: what runs inside a tool (an agent as a tool) nests under it.
        self._nest = Nest(self.calls)
        self._models: Bounded[UUID, Calls] = Bounded()  # a model run inside a tool
        self._names: Bounded[str, str] = Bounded()  # call id -> the graph it runs

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model starts: inside a tool, its words are that call's sub-agent's."""
        if parent_run_id is not None:
            self._remember(run_id, parent_run_id)
            if self._runs:
                tool = self._tool_of(parent_run_id)
                if tool is not None:
                    self._models[run_id] = self._nest.sub(tool, self._names.get(tool))

    async def on_llm_new_token(
        self, token: Any, *, chunk: Any = None, run_id: UUID, **kwargs: Any
    ) -> None:
        """A streamed chunk: its tool-call chunks open cards and stream arguments."""
        message = getattr(chunk, "message", None)
        if message is not None:
            apply_chunk(self._models.get(run_id) or self.calls, message)

    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool starts; calls without a model's call id get one of their own. A tool
        run inside another tool (by an agent that tool runs) is a call of that call's
        sub-agent."""
        parent = kwargs.get("parent_run_id")
        self._remember(run_id, parent)
        call_id = kwargs.get("tool_call_id") or f"lc_{run_id.hex[:16]}"
        outer = self._tool_of(parent) if self._runs and isinstance(parent, UUID) else None
        self._runs[run_id] = call_id
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        calls = self.calls if outer is None else self._nest.sub(outer, self._names.get(outer))
        calls.start(call_id, name, inputs if inputs is not None else input_str)

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool returned (a ``ToolMessage`` of status ``error`` is a failure)."""
        call_id = self._runs.pop(run_id, None)
        failed = getattr(output, "status", None) == "error"
        self._nest.end(call_id, "failed" if failed else "completed")
        end_call(self.calls, call_id, output)

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool raised."""
        call_id = self._runs.pop(run_id, None) or kwargs.get("tool_call_id")
        handle = self.calls.open(call_id)
        if handle is not None:
            self._nest.end(call_id, "failed", error)
            handle.fail(error)

    async def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A runnable starts (remembered: a custom event inside it belongs to the tool
        it runs in; a graph run by a tool names the tool's sub-agent)."""
        self._remember(run_id, parent_run_id)
        if self._runs and parent_run_id in self._runs:
            name = kwargs.get("name")
            if isinstance(name, str) and name != "LangGraph":
                self._names[self._runs[parent_run_id]] = name

    async def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """``adispatch_custom_event(name, {"progress"?, "message"?, ...})`` from inside a
        tool (or anything it runs): that call's progress. ``tool_call_id`` in the data
        names another call."""
        apply_custom(self.calls, data, self._tool_of(run_id))

    def _remember(self, run_id: UUID, parent: object) -> None:
        if isinstance(parent, UUID):
            self._parents[run_id] = parent

    def _tool_of(self, run_id: UUID) -> str | None:
        """The call of the tool run ``run_id`` is, or runs inside."""
        seen = 0
        current: UUID | None = run_id
        while current is not None and seen < 64:
            call_id = self._runs.get(current)
            if call_id is not None:
                return call_id
            current = self._parents.get(current)
            seen += 1
        return None
