"""The Vercel AI SDK UI message stream (v1): what ``useChat`` and ``readUIMessageStream`` read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    BatchPhase,
    CallSnapshot,
    CallState,
    Decision,
    Event,
    JSONValue,
    MessageSnapshot,
    RunFinished,
    RunSnapshot,
    RunStarted,
    Snapshot,
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

from ._base import WireMessage, drop_none, typed
from ._framing import CallMemory, RunFramedDialect, SubRun, error_text, input_done
from ._ui_message import UIMessageBuilder

_UNSET: Any = object()

__all__ = ["AISDK", "decisions"]


class AISDK(RunFramedDialect):
    """UI message stream chunks: ``start`` / ``start-step`` … ``finish-step`` / ``finish``
    around the message's text (``text-start`` / ``-delta`` / ``-end``, part id = the
    message id) and reasoning (``reasoning-*``, part id ``<message id>-reasoning``), and
    ``tool-input-start`` → ``tool-input-delta`` → ``tool-input-available`` (or
    ``tool-input-error``) → ``tool-output-available`` (or ``tool-output-error``).

    Partial output is ``tool-output-available`` with ``preliminary: true`` carrying the
    whole output so far (the client replaces it); progress is a transient
    ``data-tool-progress`` part (delivered to ``onData``, never stored in the message).
    A cancelled call ends with ``tool-output-error`` saying so. A failed run adds an
    ``error`` chunk, a cancelled one ``abort``. ``close()`` ends with ``[DONE]``.
    An approval is ``tool-approval-request`` (the part goes ``approval-requested``) and
    a denied call ``tool-output-denied``; a run finished ``interrupted`` leaves its calls
    awaiting a decision as they are. The decision itself is never sent as a
    ``tool-approval-response`` chunk, which only ``ai`` 7 knows (``ai`` 6's schema
    refuses it and its transport throws): a client that answered the request in the
    request continuing the message (after :meth:`pause`) holds the decision already; a
    client that did not (a replay from ``start``) sees an approved call go back to
    ``tool-input-available`` (running) with the input that runs, which both generations
    accept. A delta or output is never sent for a call whose start was not sent.

    A sub-agent (a call whose tool is itself an agent) is its call's output, as the AI SDK
    shows sub-agents: ``tool-output-available`` with ``preliminary: true`` carrying the
    sub-agent's whole ``UIMessage`` so far (what ``readUIMessageStream`` builds from the
    sub-agent's own stream: its text and its tool calls with their states, a nested
    sub-agent's call carrying its own sub-agent's message), then the final output: that
    message with the tool's result in ``metadata.result`` (``metadata.subagents`` names
    the runs and agents). A call waiting for a person inside a sub-agent shows
    ``approval-requested`` inside that message; the AI SDK has no approvals inside
    sub-agents, so it is decided through toolstream's decision endpoints.
    """

    name = "ai_sdk"
    headers: Mapping[str, str] = {"x-vercel-ai-ui-message-stream": "v1"}

    def __init__(self, *, dynamic: bool = False, max_output_chars: int = 32_000) -> None:
        super().__init__()
        #: Mark tool parts as dynamic (for clients without static tool definitions).
        self.dynamic = dynamic
        self.max_output_chars = max_output_chars
        # The message left waiting for a person (a run finished "interrupted").
        self._waiting: str | None = None
        self._message_id: str | None = None
        # The response ended at a wait (pause()): the next output restarts the message.
        self._paused = False
        # The approvals the client was asked when the response paused: it answers them
        # in the request that continues the message, so it holds their decisions.
        self._answered: set[str] = set()
        # The client's assistant message the next run continues (continue_message()).
        self._continued: str | None = None
        # Sub-agents: the direct ones of each call (its output), and which of them each
        # sub-agent's run (at any depth) goes to.
        self._nested: dict[str, list[_Nested]] = {}
        self._routes: dict[str, _Nested] = {}
        # A call with sub-agents: its own output so far (shown in metadata.output).
        self._own_output: dict[str, JSONValue] = {}

    @staticmethod
    def _msg(kind: str, **fields: Any) -> WireMessage:
        return WireMessage(payload=typed(kind, fields))

    def _data(self, name: str, call_id: str, data: dict[str, Any]) -> WireMessage:
        return self._msg(f"data-{name}", id=call_id, data=drop_none(data), transient=True)

    # -- runs ---------------------------------------------------------------------------

    def _open_run(self, run_id: str, implicit: bool) -> list[WireMessage]:
        self._frame.run = run_id
        self._frame.implicit = implicit
        message_id = run_id
        if self._waiting is not None and self._frame.calls:
            # The run that resumes calls left waiting for a person continues their
            # assistant message (the client keeps the parts of the same message id).
            message_id = self._waiting
        elif self._continued is not None:
            message_id = self._continued
        self._waiting = None
        self._continued = None
        self._message_id = message_id
        return [self._msg("start", messageId=message_id), self._msg("start-step")]

    def _close_run(self, event: RunFinished | None = None) -> list[WireMessage]:
        frame = self._frame
        if frame.run is None:
            return []
        out = self._end_messages()
        closing = frame.closing_calls(event)
        if event is not None and event.outcome == "interrupted" and self._nested:
            # a call whose sub-agent waits for a person is suspended with it
            closing = [c for c in closing if not self._waits_below(c.call_id)]
        for call in closing:
            out += self._end_call(call, "Cancelled: the run ended before the call")
        if event is not None and event.outcome == "failed":
            out.append(self._msg("error", errorText=error_text(event.error, "run failed")))
        elif event is not None and event.outcome == "cancelled":
            out.append(self._msg("abort"))
        out += [self._msg("finish-step"), self._msg("finish")]
        if frame.calls:  # interrupted with calls waiting: the next run continues them
            self._waiting = self._message_id
        frame.end_run()
        return out

    # -- messages ------------------------------------------------------------------------

    def _part(
        self, kind: str, phase: str, message_id: str, text: str = "", subrun: str | None = None
    ) -> list[WireMessage]:
        part = message_id if kind == "text" else f"{message_id}-reasoning"
        return [self._msg(f"{kind}-{phase}", id=part, delta=text if phase == "delta" else None)]

    # -- calls ---------------------------------------------------------------------------

    def _open_call(self, call: CallMemory, title: str | None = None) -> list[WireMessage]:
        if call.opened:
            return []
        call.opened = True
        return [
            self._msg(
                "tool-input-start",
                toolCallId=call.call_id,
                toolName=call.tool,
                dynamic=True if self.dynamic else None,
                title=title,
            )
        ]

    def _available(
        self, call: CallMemory, args: JSONValue, valid: bool = True
    ) -> list[WireMessage]:
        out = self._open_call(call)
        if call.input_done:
            return out
        call.input_done = True
        if valid:
            call.input = {} if args is None else args
            out.append(
                self._msg(
                    "tool-input-available",
                    toolCallId=call.call_id,
                    toolName=call.tool,
                    input={} if args is None else args,
                    dynamic=True if self.dynamic else None,
                )
            )
        else:
            call.input = args  # the raw text (what runs, if it is approved)
            out.append(
                self._msg(
                    "tool-input-error",
                    toolCallId=call.call_id,
                    toolName=call.tool,
                    input=args,
                    errorText="the tool input is not valid JSON",
                    dynamic=True if self.dynamic else None,
                )
            )
        return out

    def _output(self, call: CallMemory, output: JSONValue, *, preliminary: bool) -> WireMessage:
        if preliminary and call.call_id in self._nested:
            # a call with sub-agents: its own output rides in their message's metadata
            self._own_output[call.call_id] = output
            return self._subagents_output(call)
        return self._msg(
            "tool-output-available",
            toolCallId=call.call_id,
            output=output,
            preliminary=True if preliminary else None,
            dynamic=True if self.dynamic else None,
        )

    def _error(self, call: CallMemory, text: str) -> WireMessage:
        return self._msg(
            "tool-output-error",
            toolCallId=call.call_id,
            errorText=text,
            dynamic=True if self.dynamic else None,
        )

    def _end_call(self, call: CallMemory, reason: str) -> list[WireMessage]:
        out = self._open_call(call)
        out.append(self._error(call, reason))
        self._finish(call.call_id)
        return out

    def _finish(self, call_id: str) -> None:
        """The call ended on the wire: its sub-agents' messages are forgotten with it."""
        self._frame.finish(call_id)
        if self._nested:
            for node in self._nested.pop(call_id, ()):
                for run_id in [k for k, v in self._routes.items() if v is node]:
                    del self._routes[run_id]
            self._own_output.pop(call_id, None)

    # -- the hooks of the run framing ---------------------------------------------------

    def _batch_phase(self, event: BatchPhase) -> list[WireMessage]:
        return [
            self._msg(
                "data-batch-phase",
                id=event.batch_id,
                data={
                    "batchId": event.batch_id,
                    "phase": event.phase,
                    "callIds": list(event.call_ids),
                    "counts": dict(event.counts),
                },
                transient=True,
            )
        ]

    def _call_event(self, call: CallMemory, event: Event) -> list[WireMessage]:
        out: list[WireMessage] = []
        if isinstance(event, ToolCreated):
            out += self._open_call(call, event.title)
        elif isinstance(event, ToolArgsDelta):
            out += self._open_call(call)
            if event.delta and not call.input_done:
                call.input_streamed = True
                out.append(
                    self._msg(
                        "tool-input-delta", toolCallId=call.call_id, inputTextDelta=event.delta
                    )
                )
        elif isinstance(event, ToolReady):
            out += self._available(call, event.args, event.args_valid)
        elif isinstance(event, ToolQueued):
            out += self._open_call(call)
            out.append(
                self._data(
                    "tool-progress",
                    call.call_id,
                    {"toolCallId": call.call_id, "state": "queued", "position": event.position},
                )
            )
        elif isinstance(event, ToolStarted):
            out += self._available(call, event.args)
        elif isinstance(event, ToolProgress):
            out += self._available(call, None)
            out.append(
                self._data(
                    "tool-progress",
                    call.call_id,
                    {
                        "toolCallId": call.call_id,
                        "state": "running",
                        "fraction": event.fraction,
                        "current": event.current,
                        "total": event.total,
                        "message": event.message,
                        "data": event.data,
                    },
                )
            )
        elif isinstance(event, ToolOutputDelta):
            out += self._available(call, None)
            text = call.output_text + event.text
            if len(text) > self.max_output_chars:
                text = text[-self.max_output_chars :]
            call.output_text = text
            out.append(self._output(call, text, preliminary=True))
        elif isinstance(event, ToolOutputPartial):
            out += self._available(call, None)
            out.append(self._output(call, event.value, preliminary=True))
        elif isinstance(event, ToolCompleted):
            out += self._available(call, None)
            if call.call_id in self._nested:  # the sub-agents' message, the result in it
                out.append(self._subagents_output(call, result=event.result))
            else:
                out.append(self._output(call, event.result, preliminary=False))
            self._finish(call.call_id)
        elif isinstance(event, ToolFailed):
            out += self._open_call(call)
            out.append(self._error(call, error_text(event.error)))
            self._finish(call.call_id)
        elif isinstance(event, ToolCancelled):
            out += self._open_call(call)
            out.append(self._error(call, f"Cancelled: {event.reason or 'cancelled'}"))
            self._finish(call.call_id)
        elif isinstance(event, ApprovalRequested):
            out += self._available(call, event.args)
            out += self._approval_request(call, event.approval_id, event.reason)
            call.approval_running = event.running
        elif isinstance(event, ApprovalResolved):
            if call.approval == event.approval_id:
                answered = event.approval_id in self._answered
                self._answered.discard(event.approval_id)
                if answered:  # the client answered it: it holds the decision
                    call.approval = None
                    if event.args is not None:
                        call.input = event.args
                else:
                    out += self._resolved(call, event.approved, event.args)
        elif isinstance(event, ToolDenied):
            out += self._available(call, None)
            out.append(self._msg("tool-output-denied", toolCallId=call.call_id))
            self._finish(call.call_id)
        return out

    def _resolved(
        self, call: CallMemory, approved: bool, args: JSONValue | None
    ) -> list[WireMessage]:
        """A decision the client does not hold (it did not answer it, or it rebuilds the
        message from the stream): an approved call, or one asked from inside (which
        goes on running), leaves "approval-requested" for "running" with the input that
        runs; a refused call's ``tool-output-denied`` follows. Never the
        ``tool-approval-response`` chunk only ``ai`` 7 knows."""
        call.approval = None
        if args is not None:
            call.input = args
        if not (approved or call.approval_running):
            return []
        return [
            self._msg(
                "tool-input-available",
                toolCallId=call.call_id,
                toolName=call.tool,
                input={} if call.input is None else call.input,
                dynamic=True if self.dynamic else None,
            )
        ]

    def _approval_request(
        self, call: CallMemory, approval_id: str, reason: str | None
    ) -> list[WireMessage]:
        call.approval = approval_id
        return [
            self._msg(
                "tool-approval-request",
                approvalId=approval_id,
                toolCallId=call.call_id,
                reason=reason,
            )
        ]

    def _reopen(self, call: CallMemory, snap: CallSnapshot) -> list[WireMessage]:
        out = self._open_call(call, snap.title)
        if snap.state is CallState.CREATED:
            if snap.args_text and not call.input_done:
                call.input_streamed = True
                out.append(
                    self._msg(
                        "tool-input-delta", toolCallId=call.call_id, inputTextDelta=snap.args_text
                    )
                )
        elif input_done(snap):
            out += self._available(call, snap.args, snap.args_valid is not False)
            if snap.output_text:
                call.output_text = snap.output_text[-self.max_output_chars :]
                out.append(self._output(call, call.output_text, preliminary=True))
            elif snap.output is not None:
                out.append(self._output(call, snap.output, preliminary=True))
            pending = snap.approval
            if pending is not None and call.approval != pending.approval_id:
                out += self._approval_request(call, pending.approval_id, pending.reason)
                call.approval_running = snap.state is CallState.RUNNING
            decided = snap.decided
            if pending is None and decided is not None:
                # Decided, and the call not yet gone on (or gone on from inside): the
                # request, then the state the decision led to.
                out += self._approval_request(call, decided.approval_id, decided.request_reason)
                call.approval_running = decided.running
                out += self._resolved(call, decided.approved, None)
        return out

    def encode(self, event: Event) -> list[WireMessage]:
        """As the run framing does; after :meth:`pause`, output continues the same
        message (a ``start`` with its id, ``start-step``), as ``useChat`` expects of the
        response to the request that carries the decision. A sub-agent's events become
        its call's output."""
        routed = self._route(event) if self._routes else None
        out = super().encode(event) if routed is None else routed
        if self._paused and out:
            self._paused = False
            first = out[0].payload
            if not (isinstance(first, dict) and first.get("type") == "start"):
                restart = [self._msg("start", messageId=self._message_id), self._msg("start-step")]
                out = restart + out
        return out

    def continue_message(self, message_id: str) -> None:
        """The next run continues the client's assistant message ``message_id`` (its
        ``start`` carries that id): a run that resumes an agent which stopped to wait
        for a person, so the client keeps one message for the turn."""
        self._continued = message_id

    def pause(self) -> list[WireMessage]:
        """End this response where the run waits for a person: the open text parts end,
        then ``finish-step``, ``finish`` (``finishReason: "tool-calls"``, which ``useChat``
        reads as a turn to continue once the approval is answered) and ``[DONE]``. The
        calls stay as they are; what follows goes on the same message."""
        out: list[WireMessage] = []
        self._answered.update(c.approval for c in self._frame.awaiting() if c.approval)
        if self._frame.run is not None and not self._paused:
            out += self._end_messages()
            out += [self._msg("finish-step"), self._msg("finish", finishReason="tool-calls")]
            self._paused = True
        out.append(WireMessage(raw="[DONE]"))
        return out

    def fail(self, text: str, code: str) -> list[WireMessage]:
        """An ``error`` chunk (``errorText``), then ``[DONE]``."""
        del code  # the UI message stream's error has text only
        return [self._msg("error", errorText=text), WireMessage(raw="[DONE]")]

    def close(self) -> list[WireMessage]:
        """End the open calls and the open message, then ``[DONE]``."""
        if self._paused:  # the response ended at the wait already
            return [WireMessage(raw="[DONE]")]
        out: list[WireMessage] = []
        for call in self._frame.open_calls():
            out += self._end_call(call, "Cancelled: the stream ended before the call")
        out += self._close_run()
        out.append(WireMessage(raw="[DONE]"))
        return out

    # -- sub-agents ----------------------------------------------------------------------

    def _subrun_started(self, sub: SubRun) -> list[WireMessage]:
        """A sub-agent of a call of this message: from now on its events build a message
        of its own, which is the call's output."""
        frame = self._frame
        call = frame.calls.get(sub.parent_call_id)
        frame.subruns.pop(sub.run_id, None)  # its events are routed, not framed here
        if call is None or frame.finished(sub.parent_call_id):
            return []
        node = _Nested(sub.run_id, sub.agent, sub.parent_call_id, self)
        self._nested.setdefault(sub.parent_call_id, []).append(node)
        self._routes[sub.run_id] = node
        node.feed(node.dialect._open_run(sub.run_id, implicit=False))
        return [*self._available(call, None), self._subagents_output(call)]

    def _route(self, event: Event) -> list[WireMessage] | None:
        """An event of a sub-agent's run (at any depth), as its call's new output; None
        for an event of this message's own run."""
        run_id = event.run_id
        node = self._routes.get(run_id) if run_id is not None else None
        if node is None:
            if type(event) is not RunStarted or event.parent_run_id not in self._routes:
                return None
            node = self._routes[event.parent_run_id or ""]  # a sub-agent's sub-agent
            self._routes[run_id or ""] = node
        frame = self._frame
        call = frame.calls.get(node.call_id)
        if call is None:
            return []
        out: list[WireMessage] = []
        if frame.run is None:  # between runs (the message waits for a person): resumed
            out += self._open_run(frame.implicit_id(event.id), implicit=True)
        changed, forward = node.feed(node.dialect.encode(event))
        out += forward
        if changed:
            out.append(self._subagents_output(call))
        return out

    def _subagents_output(self, call: CallMemory, *, result: Any = _UNSET) -> WireMessage:
        """``tool-output-available`` of a call with sub-agents: their message so far
        (``preliminary``), or the final one with the call's ``result`` in its metadata."""
        nodes = self._nested.get(call.call_id, [])
        parts: list[Any] = []
        for node in nodes:
            parts += node.message.message()["parts"]
        metadata: dict[str, Any] = {
            "subagents": [{"runId": n.run_id, "agent": n.agent} for n in nodes]
        }
        own = self._own_output.get(call.call_id)
        if own is not None:
            metadata["output"] = own
        if result is not _UNSET:
            metadata["result"] = result
        first = nodes[0] if nodes else None
        message = {
            "id": (first.message.id or first.run_id) if first is not None else call.call_id,
            "role": "assistant",
            "metadata": metadata,
            "parts": parts,
        }
        return self._msg(
            "tool-output-available",
            toolCallId=call.call_id,
            output=message,
            preliminary=True if result is _UNSET else None,
            dynamic=True if self.dynamic else None,
        )

    def _waits_below(self, call_id: str) -> bool:
        """True when a call of one of this call's sub-agents waits for a person."""
        return any(node.waits() for node in self._nested.get(call_id, ()))

    def _reset(self, snapshot: Snapshot) -> list[WireMessage]:
        """As the run framing does for this message's own calls; a call with sub-agents
        then gets their whole message rebuilt from the snapshot (finished calls included:
        an output replaces the one before)."""
        for call_id in list(self._nested):
            self._nested.pop(call_id)
        self._routes.clear()
        self._own_output.clear()
        nested = {r.run_id for r in snapshot.runs if r.parent_call_id is not None}
        if not nested:
            return super()._reset(snapshot)
        own = Snapshot(
            calls=tuple(c for c in snapshot.calls if c.run_id not in nested),
            runs=tuple(r for r in snapshot.runs if r.run_id not in nested),
            batches=snapshot.batches,
            messages=tuple(m for m in snapshot.messages if m.run_id not in nested),
        )
        out = super()._reset(own)
        by_id = {c.call_id: c for c in snapshot.calls}
        for call in list(self._frame.calls.values()):
            snap = by_id.get(call.call_id)
            if snap is not None and snap.subruns:
                out += self._rebuild(call, snap.subruns, snapshot)
        return out

    def _rebuild(
        self, call: CallMemory, subruns: tuple[str, ...], snapshot: Snapshot, result: Any = _UNSET
    ) -> list[WireMessage]:
        """A call's sub-agents' message from a snapshot, as its output."""
        runs = {r.run_id: r for r in snapshot.runs}
        for run_id in subruns:
            run = runs.get(run_id)
            if run is None:
                continue  # left out of a bounded snapshot
            node = _Nested(run_id, run.agent or call.tool, call.call_id, self)
            self._nested.setdefault(call.call_id, []).append(node)
            node.feed(node.dialect._replay_run(run, snapshot))
            for routed in (run_id, *node.dialect._routes):
                self._routes[routed] = node
        if call.call_id not in self._nested:
            return []
        return [self._subagents_output(call, result=result)]

    def _replay_run(self, run: RunSnapshot, snapshot: Snapshot) -> list[WireMessage]:
        """(A sub-agent's dialect) its whole run from a snapshot: every call and message
        of it in the order they began, finished ones with their end, then the run's end
        if it is over."""
        out = self._open_run(run.run_id, implicit=False)
        items: list[CallSnapshot | MessageSnapshot] = [
            *(c for c in snapshot.calls if c.run_id == run.run_id),
            *(m for m in snapshot.messages if m.run_id == run.run_id),
        ]
        items.sort(key=lambda item: seq_key(item.first_event_id))
        frame = self._frame
        for item in items:
            if isinstance(item, MessageSnapshot):
                out += self._message_snapshot(item)
                continue
            call = frame.calls[item.call_id] = CallMemory(item.call_id, item.tool)
            if not item.state.terminal:
                out += self._reopen(call, item)
                if item.subruns:
                    out += self._rebuild(call, item.subruns, snapshot)
                continue
            out += self._available(call, item.args, item.args_valid is not False)
            if item.state is CallState.COMPLETED:
                if item.subruns:
                    out += self._rebuild(call, item.subruns, snapshot, result=item.result)
                else:
                    out.append(self._output(call, item.result, preliminary=False))
            elif item.state is CallState.DENIED:
                out.append(self._msg("tool-output-denied", toolCallId=call.call_id))
            elif item.state is CallState.FAILED:
                out.append(self._error(call, error_text(item.error)))
            else:
                out.append(self._error(call, f"Cancelled: {item.reason or 'cancelled'}"))
            self._finish(call.call_id)
        if run.state != "running":
            end = RunFinished(
                id="", session="", ts=0.0, run_id=run.run_id, outcome=run.state, error=run.error
            )
            out += self._close_run(end)
        return out


class _Nested:
    """A sub-agent's run shown as its parent call's output: a dialect of its own writes
    the sub-agent's stream, and a :class:`UIMessageBuilder` builds the message the AI SDK
    client would from it."""

    __slots__ = ("agent", "call_id", "dialect", "message", "run_id")

    def __init__(self, run_id: str, agent: str, call_id: str, parent: AISDK) -> None:
        self.run_id = run_id
        self.agent = agent
        #: The call of the parent's message whose output this sub-agent is.
        self.call_id = call_id
        self.dialect = AISDK(dynamic=parent.dynamic, max_output_chars=parent.max_output_chars)
        self.message = UIMessageBuilder()

    def feed(self, messages: list[WireMessage]) -> tuple[bool, list[WireMessage]]:
        """The sub-agent's chunks applied to its message: whether it changed, and the
        transient data parts (progress), which go on the wire as they are."""
        changed = False
        forward: list[WireMessage] = []
        for message in messages:
            chunk = message.payload
            if not isinstance(chunk, dict):
                continue  # [DONE]
            if str(chunk.get("type", "")).startswith("data-"):
                forward.append(message)
            elif self.message.apply(chunk):
                changed = True
        return changed, forward

    def waits(self) -> bool:
        """True while a call of this sub-agent (or of its own sub-agents) waits for a
        person."""
        dialect = self.dialect
        if dialect._frame.awaiting():
            return True
        return any(node.waits() for nodes in dialect._nested.values() for node in nodes)


def decisions(messages: object) -> list[Decision]:
    """The approval decisions in AI SDK UI messages: what ``useChat``'s
    ``addToolApprovalResponse`` puts in the next chat request (tool parts in state
    ``approval-responded``, with ``approval: {id, approved, reason?}``).

    Takes the request's ``messages`` (a list of UI message dicts); anything that is not
    a well-formed approval response is skipped. Each :class:`~toolstream.Decision`
    carries the ``approval_id`` for ``bus.resolve_approval``; ``by`` is left for the
    host to set from its own principal (never from the request).
    """
    out: list[Decision] = []
    seen: set[str] = set()
    if not isinstance(messages, list):
        return out
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        for part in parts:
            if not isinstance(part, dict) or part.get("state") != "approval-responded":
                continue
            approval = part.get("approval")
            if not isinstance(approval, dict):
                continue
            approval_id, approved = approval.get("id"), approval.get("approved")
            reason = approval.get("reason")
            if not isinstance(approval_id, str) or not approval_id or approval_id in seen:
                continue
            if not isinstance(approved, bool):
                continue
            seen.add(approval_id)
            out.append(
                Decision(
                    approval_id=approval_id,
                    approved=approved,
                    reason=reason if isinstance(reason, str) else None,
                )
            )
    return out
