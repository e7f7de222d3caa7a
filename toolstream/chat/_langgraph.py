"""LangGraph's ``useStream`` (``@langchain/langgraph-sdk``'s custom transport,
``FetchStreamTransport``) served by ``ChatApp(..., dialect="langgraph")``.

The client rebuilds the thread from every ``values`` event (the whole state, earlier
turns included), merges the ``messages`` chunks of the model's words into it by message
id, hands ``tools`` events to ``onToolEvent`` and reads ``__interrupt__`` as the
interrupts waiting for a person. That state is the thread's, not the run's: the dialect
is seeded with the chat's snapshot from the bus, which is why it lives here, beside
``ChatApp``, and not among the transport-agnostic dialects.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    BatchPhase,
    Bus,
    CallSnapshot,
    CallState,
    Event,
    LiveView,
    MessageDelta,
    MessageFinished,
    MessageSnapshot,
    MessageStarted,
    RunFinished,
    RunStarted,
    Snapshot,
    StreamReset,
    ToolArgsDelta,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolDenied,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolQueued,
    ToolReady,
    ToolStarted,
)
from toolstream._core.ids import seq_key
from toolstream.dialects import WireMessage
from toolstream.dialects._framing import RunFramedDialect, error_text

__all__ = ["LangGraph", "publish_user_messages", "thread_history"]

#: The states in which a call's whole input is known (its AI message holds the call).
_ANNOUNCED = frozenset(
    {
        CallState.READY,
        CallState.AWAITING_APPROVAL,
        CallState.QUEUED,
        CallState.RUNNING,
        CallState.COMPLETED,
        CallState.FAILED,
        CallState.CANCELLED,
        CallState.DENIED,
        CallState.LOST,
    }
)
#: Events with nothing to say on their own (a pause says what an approval asks).
_SILENT: frozenset[type[Event]] = frozenset(
    {MessageStarted, ToolCreated, ToolArgsDelta, ApprovalRequested, ApprovalResolved, BatchPhase}
)
#: How an ended call that returned nothing is said: the word, and the reason when the
#: call has none of its own.
_ENDED_WORDS = {
    CallState.CANCELLED: ("Cancelled", "the call was cancelled"),
    CallState.DENIED: ("Denied", "the call was not approved"),
    CallState.LOST: ("Lost", "the call was lost"),
}


def _values(payload: dict[str, Any]) -> WireMessage:
    return WireMessage(event="values", payload=payload)


class LangGraph(RunFramedDialect):
    """One ``useStream`` response: ``metadata`` ``{run_id, thread_id}`` and the thread's
    whole state as ``values`` first; then ``messages`` (``[AIMessageChunk, metadata]``)
    for the model's words, ``tools`` (``on_tool_start`` / ``on_tool_event`` /
    ``on_tool_end`` / ``on_tool_error``) for the calls, ``values`` whenever the state's
    messages change, ``error`` when the run failed; where the run waits for a person, a
    last ``values`` with ``__interrupt__``.

    ``history``: the thread's state before this response (the chat's snapshot);
    ``run_id``: the run the response is for (``metadata``)."""

    name = "langgraph"
    headers: Mapping[str, str] = {}

    def __init__(self, *, thread: str, run_id: str | None, history: Snapshot | None) -> None:
        super().__init__()
        self.thread = thread
        self.run_id = run_id
        self._view = LiveView()
        if history is not None:
            self._view.reset(history)
        self._opened = False  # this response sent its metadata and first values
        self._sent: dict[str, Any] | None = None  # the state the client holds
        self._announced: set[str] = set()  # calls whose AI message was sent with them
        self._started: set[str] = set()  # calls that got on_tool_start

    def seen(self, events: list[Event]) -> None:
        """Take ``events`` into the state without sending them (the user's message,
        published by this request, which the bus's snapshot may not show yet)."""
        for event in events:
            self._view.apply(event)

    # -- the state ------------------------------------------------------------------------

    def state(self, *, interrupts: bool = False) -> dict[str, Any]:
        """The thread's state as LangGraph's ``values``: its messages (LangChain message
        dicts), and with ``interrupts`` the approvals waiting, if any (never ``[]``,
        which the client reads as a breakpoint)."""
        snapshot = self._view.snapshot()
        state: dict[str, Any] = {"messages": _messages(snapshot)}
        if interrupts:
            waiting = _interrupts(snapshot)
            if waiting:
                state["__interrupt__"] = waiting
        return state

    def _values(self) -> list[WireMessage]:
        """``values`` when the state changed since the client's copy."""
        state = self.state()
        if state == self._sent:
            return []
        self._sent = state
        return [_values(state)]

    def _preamble(self) -> list[WireMessage]:
        self._opened = True
        metadata: dict[str, Any] = {"run_id": self.run_id or "", "thread_id": self.thread}
        self._sent = state = self.state()
        return [WireMessage(event="metadata", payload=metadata), _values(state)]

    # -- the run framing's interface ------------------------------------------------------

    def encode(self, event: Event) -> list[WireMessage]:
        """The messages for one event (the state is updated with every event)."""
        view = self._view
        view.apply(event)
        if isinstance(event, RunStarted) and self.run_id is None and not event.parent_call_id:
            self.run_id = event.run_id
        said = self._say(event)
        if self._opened:
            return said
        if not said and not isinstance(event, (RunStarted, StreamReset)):
            return []
        return self._preamble() + [m for m in said if m.event != "values"]

    def _say(self, event: Event) -> list[WireMessage]:
        kind = type(event)
        if kind is MessageDelta:
            assert isinstance(event, MessageDelta)
            return self._chunk(event)
        if kind in _SILENT:
            return []
        if kind is MessageFinished:
            return self._values() if self._own(event.run_id) else []
        if isinstance(event, RunStarted):
            return []
        if isinstance(event, RunFinished):
            return self._finished(event)
        if isinstance(event, StreamReset):
            self._sent = None
            return self._values()
        return self._call(event)

    def _own(self, run_id: str | None) -> bool:
        """Whether ``run_id`` is a turn's own (not a sub-agent's run)."""
        run = self._view.runs.get(run_id or "")
        return run is None or run.parent_call_id is None

    def _chunk(self, event: MessageDelta) -> list[WireMessage]:
        """The model's words as stream mode ``messages-tuple`` sends them."""
        if not event.text or not self._own(event.run_id):
            return []
        message = self._view.messages.get(event.message_id)
        if message is not None and message.role != "assistant":
            return []
        chunk: dict[str, Any] = {"type": "AIMessageChunk", "id": event.message_id}
        if event.kind == "reasoning":
            chunk["content"] = ""
            chunk["additional_kwargs"] = {"reasoning_content": event.text}
        else:
            chunk["content"] = event.text
        metadata: dict[str, Any] = {
            "run_id": event.run_id or self.run_id or "",
            "thread_id": self.thread,
        }
        return [WireMessage(event="messages", payload=[chunk, metadata])]

    def _call(self, event: Event) -> list[WireMessage]:
        call = self._view.calls.get(event.call_id)
        if call is None:
            return []
        out: list[WireMessage] = []
        if (
            call.call_id not in self._announced
            and call.state in _ANNOUNCED
            and call.parent_call_id is None
            and self._own(call.run_id)
        ):
            self._announced.add(call.call_id)
            out += self._values()
        kind = type(event)
        if kind in (ToolReady, ToolQueued):
            return out
        if kind is ToolProgress:
            return out + self._tool_event(call, _progress(call))
        if kind is ToolOutputDelta:
            assert isinstance(event, ToolOutputDelta)
            return out + self._tool_event(call, {"output_delta": event.text})
        if kind is ToolOutputPartial:
            assert isinstance(event, ToolOutputPartial)
            return out + self._tool_event(call, {"output": event.value})
        if kind is ToolStarted:
            return out + self._start(call)
        if kind is ToolCompleted:
            assert isinstance(event, ToolCompleted)
            out += self._start(call)
            out.append(self._tools("on_tool_end", call, output=event.result))
        elif kind is ToolFailed or (
            kind in (ToolCancelled, ToolDenied) and call.call_id in self._started
        ):
            # A call refused or cancelled after it started (asked from inside) ends as
            # an error; one that never started says nothing here, only its tool message.
            out += self._start(call)
            out.append(self._tools("on_tool_error", call, error=_ended_text(call)))
        return out + self._values()

    def _start(self, call: CallSnapshot) -> list[WireMessage]:
        """``on_tool_start``, once per call (before any other of its ``tools`` events)."""
        if call.call_id in self._started:
            return []
        self._started.add(call.call_id)
        args = call.args if isinstance(call.args, dict) else {}
        return [self._tools("on_tool_start", call, input=args)]

    def _tool_event(self, call: CallSnapshot, data: dict[str, Any]) -> list[WireMessage]:
        if not data:
            return []
        return [*self._start(call), self._tools("on_tool_event", call, data=data)]

    @staticmethod
    def _tools(kind: str, call: CallSnapshot, **fields: Any) -> WireMessage:
        payload = {"event": kind, "toolCallId": call.call_id, "name": call.tool, **fields}
        return WireMessage(event="tools", payload=payload)

    def _finished(self, event: RunFinished) -> list[WireMessage]:
        if not self._own(event.run_id):
            return []
        out = self._values()
        if event.outcome == "failed":
            error = event.error
            kind = error.type if error is not None else "Error"
            message = error.message if error is not None and error.message else kind
            out.append(WireMessage(event="error", payload={"error": kind, "message": message}))
        return out

    def pause(self) -> list[WireMessage]:
        """Where the run waits for a person: the state with its ``__interrupt__``. What
        follows is another response (it starts with ``metadata`` and ``values``)."""
        out = [] if self._opened else self._preamble()
        out += self._values()
        state = self.state(interrupts=True)
        if "__interrupt__" in state:
            out.append(_values(state))
        self._opened = False
        self._sent = None
        return out

    def fail(self, text: str, code: str) -> list[WireMessage]:
        """An error of the transport's own: LangGraph's ``error`` event."""
        out = [] if self._opened else self._preamble()
        return [*out, WireMessage(event="error", payload={"error": code, "message": text})]

    def close(self) -> list[WireMessage]:
        """A response that said nothing still gives the client the thread's state."""
        return [] if self._opened else self._preamble()

    def prime(self, snapshot: Snapshot) -> None:
        """Take on the state at a cursor (nothing is sent)."""
        self._view.reset(snapshot)


# -- LangChain messages ---------------------------------------------------------------------


def _messages(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The thread's messages as LangChain message dicts, oldest first: the user's
    (``human``), the agent's (``ai``, with the calls that followed its words as
    ``tool_calls``) and a ``tool`` message per ended call. A sub-agent's messages and
    calls are its own, not the thread's."""
    subruns = {r.run_id for r in snapshot.runs if r.parent_call_id is not None}
    items: list[tuple[tuple[int, str], MessageSnapshot | CallSnapshot]] = [
        (seq_key(m.first_event_id), m) for m in snapshot.messages if m.run_id not in subruns
    ]
    items += [
        (seq_key(c.first_event_id), c)
        for c in snapshot.calls
        if c.parent_call_id is None and c.run_id not in subruns
    ]
    items.sort(key=lambda item: item[0])
    out: list[dict[str, Any]] = []
    ai: dict[str, Any] | None = None  # the AI message the next calls belong to
    results: list[dict[str, Any]] = []  # the tool messages that follow it
    for _, item in items:
        if isinstance(item, MessageSnapshot):
            out += results
            results = []
            message = _message(item)
            out.append(message)
            ai = message if message["type"] == "ai" else None
            continue
        if ai is None:
            ai = {"type": "ai", "id": f"ai-{item.call_id}", "content": ""}
            out.append(ai)
        ai.setdefault("tool_calls", []).append(
            {
                "type": "tool_call",
                "id": item.call_id,
                "name": item.tool,
                "args": item.args if isinstance(item.args, dict) else {},
            }
        )
        result = _tool_message(item)
        if result is not None:
            results.append(result)
    return out + results


def _message(message: MessageSnapshot) -> dict[str, Any]:
    kind = {"user": "human", "system": "system"}.get(message.role, "ai")
    out: dict[str, Any] = {"type": kind, "id": message.message_id, "content": message.text}
    if message.reasoning and kind == "ai":
        out["additional_kwargs"] = {"reasoning_content": message.reasoning}
    return out


def _tool_message(call: CallSnapshot) -> dict[str, Any] | None:
    """The ``tool`` message of an ended call (None while it runs or waits)."""
    if not call.state.terminal and call.state is not CallState.LOST:
        return None
    if call.state is CallState.COMPLETED:
        result = call.result
        content = result if isinstance(result, str) else _json(result)
        status = "success"
    else:
        content, status = _ended_text(call), "error"
    return {
        "type": "tool",
        "id": f"tool-{call.call_id}",
        "tool_call_id": call.call_id,
        "name": call.tool,
        "content": content,
        "status": status,
    }


def _ended_text(call: CallSnapshot) -> str:
    """``"TimeoutError: timed out"``, ``"Denied: <reason>"``, ``"Cancelled: <reason>"``."""
    if call.state is CallState.FAILED:
        return error_text(call.error)
    word, otherwise = _ENDED_WORDS.get(call.state, ("Ended", "the call ended"))
    return f"{word}: {call.reason or otherwise}"


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _progress(call: CallSnapshot) -> dict[str, Any]:
    """``on_tool_event``'s ``data`` for progress: ``{progress: <0..1>, message?}``."""
    data: dict[str, Any] = {}
    if call.fraction is not None:
        data["progress"] = call.fraction
    if call.message is not None:
        data["message"] = call.message
    return {"progress": data} if data else {}


def _interrupts(snapshot: Snapshot) -> list[dict[str, Any]]:
    """The approvals waiting, as LangGraph interrupts (the interrupt id is the
    approval's: ``command.resume`` maps it to the decision)."""
    waiting = sorted(
        (c for c in snapshot.calls if c.approval is not None),
        key=lambda c: seq_key(c.first_event_id),
    )
    out: list[dict[str, Any]] = []
    for call in waiting:
        assert call.approval is not None
        approval_id = call.approval.approval_id
        value = {
            "approval_id": approval_id,
            "call_id": call.call_id,
            "tool": call.tool,
            "args": call.args,
            "reason": call.approval.reason,
        }
        out.append({"id": approval_id, "value": value})
    return out


# -- the user's messages ----------------------------------------------------------------------


def publish_user_messages(
    bus: Bus, session: str, messages: list[Any], history: Snapshot
) -> list[Event]:
    """Publish the user's new messages on the chat (``message.*`` events with role
    ``user``), so that any gateway process of the bus finds them in the thread's
    state; the events published. A message keeps the client's id unless the thread
    knows that id already."""
    known = {m.message_id for m in history.messages}
    events: list[Event] = []
    for message in messages:
        message_id = message.get("id")
        if not isinstance(message_id, str) or message_id in known:
            message_id = f"msg_{secrets.token_hex(8)}"
        known.add(message_id)
        events.append(
            bus.publish(MessageStarted, session=session, message_id=message_id, role="user")
        )
        if message["content"]:
            events.append(
                bus.publish(
                    MessageDelta, session=session, message_id=message_id, text=message["content"]
                )
            )
        events.append(bus.publish(MessageFinished, session=session, message_id=message_id))
    return events


def thread_history(history: Snapshot) -> list[dict[str, Any]]:
    """The thread's earlier words from the bus as ``{"role", "content"}`` (what
    ``TurnRequest.messages`` holds for a LangGraph client, which sends only its new
    message): the user's and the agent's text, oldest first."""
    subruns = {r.run_id for r in history.runs if r.parent_call_id is not None}
    ordered = sorted(history.messages, key=lambda m: seq_key(m.first_event_id))
    return [
        {"role": "user" if m.role == "user" else "assistant", "content": m.text, "id": m.message_id}
        for m in ordered
        if m.text and m.run_id not in subruns and m.role in ("user", "assistant")
    ]
