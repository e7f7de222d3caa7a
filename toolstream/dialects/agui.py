"""The AG-UI protocol: run-framed tool call events, camelCase, no nulls."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from typing import Any

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    BatchPhase,
    CallSnapshot,
    CallState,
    Decision,
    ErrorInfo,
    Event,
    JSONValue,
    MessageStarted,
    RunFinished,
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

from ._base import WireMessage, drop_none, typed
from ._framing import CallMemory, RunFramedDialect, SubRun, error_text, input_done

__all__ = ["AGUI", "decisions"]


def _json(value: JSONValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class AGUI(RunFramedDialect):
    """AG-UI events: ``RUN_STARTED`` / ``RUN_FINISHED`` (or ``RUN_ERROR``) around
    ``TOOL_CALL_START`` → ``TOOL_CALL_ARGS`` → ``TOOL_CALL_END`` → ``TOOL_CALL_RESULT``,
    and the agent's messages: ``TEXT_MESSAGE_START`` / ``CONTENT`` / ``END`` (the
    message's id) and ``REASONING_START``, ``REASONING_MESSAGE_START`` / ``CONTENT`` /
    ``END``, ``REASONING_END`` (id ``<message id>-reasoning``).

    AG-UI has no tool error event: a failed or cancelled call gets a result whose
    content says so, plus a ``CUSTOM`` event (``toolstream.tool.failed`` /
    ``toolstream.tool.cancelled``) with the structured status. Progress, output and
    batch phases are ``CUSTOM`` events too (names under ``custom_prefix``). A call first
    seen already running gets START, ARGS and END at once; a START is never sent twice
    for an id. Messages carry no SSE ``event:`` name (AG-UI clients read ``data:`` only).

    An approval finishes the AG-UI run with the interrupt outcome (``RUN_FINISHED``
    ``outcome: {type: "interrupt", interrupts: [{id: approval_id, reason: "tool_call",
    toolCallId, message, expiresAt}]}``); what follows in the same toolstream run (the
    decision, the call going on) opens a new AG-UI run on the same thread
    (``<run id>.<n>``). The decision and a denial are ``CUSTOM`` events
    (``toolstream.tool.approval.resolved``, ``toolstream.tool.denied``), a denied call's
    result says so.
    """

    name = "agui"
    headers: Mapping[str, str] = {}

    def __init__(self, *, custom_prefix: str = "toolstream") -> None:
        super().__init__()
        self.custom_prefix = custom_prefix
        # The id of the AG-UI run open on the wire (the toolstream run's, or a
        # continuation's after an interrupt), and whether the toolstream run is
        # suspended on the wire (finished with the interrupt outcome, still open here).
        self._wire_run: str | None = None
        self._suspended = False
        self._continuations = 0
        #: The id of the next continuation run (a client's ``runId``), else
        #: ``<run id>.<n>``; used once.
        self.continuation_id: str | None = None

    # -- message builders -----------------------------------------------------------

    @staticmethod
    def _msg(kind: str, **fields: Any) -> WireMessage:
        return WireMessage(payload=typed(kind, fields))

    def _custom(self, name: str, value: dict[str, Any], subrun: str | None = None) -> WireMessage:
        return self._msg(
            "CUSTOM",
            name=f"{self.custom_prefix}.{name}",
            value=drop_none(value),
            subagentRunId=subrun,
        )

    def _run_started(self, run_id: str) -> WireMessage:
        return self._msg("RUN_STARTED", threadId=self._frame.thread, runId=run_id)

    def _open_run(self, run_id: str, implicit: bool) -> list[WireMessage]:
        frame = self._frame
        frame.run = run_id
        frame.implicit = implicit
        self._wire_run = run_id
        self._suspended = False
        self._continuations = 0
        return [self._run_started(run_id)]

    def encode(self, event: Event) -> list[WireMessage]:
        """As the run framing does; around an interrupt, the AG-UI run is finished and a
        continuation opened when the toolstream run goes on."""
        frame = self._frame
        if not self._suspended or frame.run is None:
            return super().encode(event)
        if isinstance(event, RunFinished) and event.run_id == frame.run:
            # Already finished on the wire (the interrupt); nothing more to say.
            frame.run = None
            frame.implicit = False
            frame.nested.clear()
            self._suspended = False
            self._wire_run = None
            return []
        if isinstance(event, StreamReset):
            self._suspended = False  # the reset decides what is open
            self._wire_run = None
            frame.run = None
            return super().encode(event)
        if event.call_id and frame.finished(event.call_id):
            return []
        message_id = getattr(event, "message_id", None)
        if message_id is not None and (
            frame.message_done(message_id) or isinstance(event, MessageStarted)
        ):
            return []  # ended at the interrupt, or nothing to say yet
        # The run goes on after the interrupt: a continuation run on the same thread.
        return [*self._continue(), *super().encode(event)]

    def _continue(self) -> list[WireMessage]:
        """A continuation of the toolstream run suspended on the wire: ``<run>.<n>``, and
        the sub-agents still running in it, started again (outermost first)."""
        self._continuations += 1
        self._wire_run = self.continuation_id or f"{self._frame.run}.{self._continuations}"
        self.continuation_id = None
        self._suspended = False
        out = [self._run_started(self._wire_run)]
        for sub in list(self._frame.subruns.values()):
            if sub.open and not sub.wire:
                out += self._subrun_started(sub)
        return out

    def _interrupt(self) -> list[WireMessage]:
        """Finish the AG-UI run with the interrupt outcome (the calls awaiting a decision
        stay open here; the toolstream run goes on)."""
        frame = self._frame
        waiting = frame.awaiting()
        if frame.run is None or not waiting or self._suspended:
            return []
        out = self._end_messages()
        for call in frame.open_calls():
            out += self._close_input(call)
        # The sub-agents still running pause with the run (innermost first), each naming
        # the interrupts it raised itself.
        for sub in reversed(list(frame.subruns.values())):
            if sub.wire:
                sub.wire = False
                own = [c.approval for c in waiting if c.subrun == sub.run_id and c.approval]
                out.append(self._suspended_subagent(sub, own))
        interrupts = [
            drop_none(
                {
                    "id": call.approval,
                    "reason": "tool_call",
                    "toolCallId": call.call_id,
                    "message": call.approval_reason or f"{call.tool} needs approval",
                    "expiresAt": _iso(call.approval_expires),
                    "subagentRunId": call.subrun,
                }
            )
            for call in waiting
        ]
        out.append(
            self._msg(
                "RUN_FINISHED",
                threadId=frame.thread,
                runId=self._wire_run or frame.run,
                outcome={"type": "interrupt", "interrupts": interrupts},
            )
        )
        self._suspended = True
        return out

    def _close_run(self, event: RunFinished | None = None) -> list[WireMessage]:
        frame = self._frame
        if frame.run is None:
            return []
        if event is not None and event.outcome == "interrupted" and frame.awaiting():
            interrupt = self._interrupt()
            frame.end_run()
            self._suspended = False
            self._wire_run = None
            return interrupt
        out = self._end_messages()
        for call in frame.open_calls():
            # The run cannot end with a call open, but the call itself may still end
            # well: close its input only; its result can follow (AG-UI does not order
            # results).
            out += self._close_input(call)
        for sub in reversed(list(frame.subruns.values())):  # nor with a sub-agent running
            out += self._cut_subagent(sub, "the run ended before the sub-agent")
        if event is not None and event.outcome == "failed":
            out.append(
                self._msg(
                    "RUN_ERROR",
                    message=error_text(event.error, "run failed"),
                    code=event.error.type if event.error else None,
                )
            )
        else:
            # A stopped turn says so (@ag-ui/core 1.0 reads a bare RUN_FINISHED as success).
            cancelled = event is not None and event.outcome == "cancelled"
            out.append(
                self._msg(
                    "RUN_FINISHED",
                    threadId=frame.thread,
                    runId=self._wire_run or frame.run,
                    outcome={"type": "cancelled"} if cancelled else None,
                )
            )
        self._wire_run = None
        frame.end_run()
        return out

    def _part(
        self, kind: str, phase: str, message_id: str, text: str = "", subrun: str | None = None
    ) -> list[WireMessage]:
        msg = self._msg
        if subrun is not None:
            started = self._activate(subrun)
            if started:
                return started + self._part(kind, phase, message_id, text, subrun)
        if kind == "text":
            if phase == "start":
                return [
                    msg(
                        "TEXT_MESSAGE_START",
                        messageId=message_id,
                        role="assistant",
                        subagentRunId=subrun,
                    )
                ]
            if phase == "delta":
                return [
                    msg(
                        "TEXT_MESSAGE_CONTENT",
                        messageId=message_id,
                        delta=text,
                        subagentRunId=subrun,
                    )
                ]
            return [msg("TEXT_MESSAGE_END", messageId=message_id, subagentRunId=subrun)]
        reasoning = f"{message_id}-reasoning"
        if phase == "start":
            return [
                msg("REASONING_START", messageId=reasoning, subagentRunId=subrun),
                msg(
                    "REASONING_MESSAGE_START",
                    messageId=reasoning,
                    role="reasoning",
                    subagentRunId=subrun,
                ),
            ]
        if phase == "delta":
            return [
                msg(
                    "REASONING_MESSAGE_CONTENT",
                    messageId=reasoning,
                    delta=text,
                    subagentRunId=subrun,
                )
            ]
        return [
            msg("REASONING_MESSAGE_END", messageId=reasoning, subagentRunId=subrun),
            msg("REASONING_END", messageId=reasoning, subagentRunId=subrun),
        ]

    # -- sub-agents -----------------------------------------------------------------------

    def _subrun_started(self, sub: SubRun) -> list[WireMessage]:
        """``SUBAGENT_STARTED {subagentRunId, name, parentToolCallId,
        parentSubagentRunId?}`` (no ``RUN_STARTED``: AG-UI nests sub-agents inside the
        run), after the parent call's input was closed."""
        frame = self._frame
        out: list[WireMessage] = []
        parent = frame.calls.get(sub.parent_call_id)
        if parent is not None:
            out += self._close_input(parent)
        sub.wire = True
        out.append(self._subagent_started(sub))
        return out

    def _subagent_started(self, sub: SubRun) -> WireMessage:
        return self._msg(
            "SUBAGENT_STARTED",
            subagentRunId=sub.run_id,
            name=sub.agent,
            parentToolCallId=sub.parent_call_id,
            parentSubagentRunId=sub.parent,
        )

    def _subrun_finished(self, sub: SubRun, event: RunFinished) -> list[WireMessage]:
        """``SUBAGENT_FINISHED`` (outcome ``success``; ``suspended`` with the interrupts it
        raised when it stopped for a person) or ``SUBAGENT_ERROR {message, code}`` when it
        failed or was cancelled."""
        out = self._end_messages(sub.run_id)
        if not sub.wire:
            return out
        sub.wire = False
        if event.outcome == "completed":
            out.append(
                self._msg(
                    "SUBAGENT_FINISHED", subagentRunId=sub.run_id, outcome={"type": "success"}
                )
            )
        elif event.outcome == "interrupted":
            own = [
                c.approval
                for c in self._frame.calls.values()
                if c.subrun == sub.run_id and c.approval
            ]
            out.append(self._suspended_subagent(sub, own))
        elif event.outcome == "failed":
            out.append(
                self._msg(
                    "SUBAGENT_ERROR",
                    subagentRunId=sub.run_id,
                    message=error_text(event.error, "the sub-agent failed"),
                    code=event.error.type if event.error else "failed",
                )
            )
        else:
            out.append(
                self._msg(
                    "SUBAGENT_ERROR",
                    subagentRunId=sub.run_id,
                    message=f"cancelled: {event.reason}" if event.reason else "cancelled",
                    code="cancelled",
                )
            )
        return out

    def _cut_subagent(self, sub: SubRun, message: str) -> list[WireMessage]:
        """``SUBAGENT_ERROR`` (``cancelled``) for a sub-agent still open on the wire when
        its run or the stream ends first; nothing for one already ended there."""
        if not sub.wire:
            return []
        sub.wire = False
        return [
            self._msg("SUBAGENT_ERROR", subagentRunId=sub.run_id, message=message, code="cancelled")
        ]

    def _suspended_subagent(self, sub: SubRun, interrupts: list[str]) -> WireMessage:
        outcome: dict[str, Any] = {"type": "suspended"}
        if interrupts:
            outcome["interruptIds"] = interrupts
        return self._msg("SUBAGENT_FINISHED", subagentRunId=sub.run_id, outcome=outcome)

    def _end_call(self, call: CallMemory, reason: str) -> list[WireMessage]:
        """Close a call the run is leaving behind: END, a result saying why, CUSTOM."""
        out = self._close_input(call)
        out.append(self._result(call, reason))
        out.append(
            self._custom(
                "tool.cancelled", {"toolCallId": call.call_id, "reason": reason}, call.subrun
            )
        )
        self._frame.finish(call.call_id)
        return out

    def _result(self, call: CallMemory, content: str) -> WireMessage:
        return self._msg(
            "TOOL_CALL_RESULT",
            messageId=f"result-{call.call_id}",
            toolCallId=call.call_id,
            content=content,
            role="tool",
            subagentRunId=call.subrun,
        )

    def _open_call(
        self, call: CallMemory, parent_message_id: str | None = None
    ) -> list[WireMessage]:
        if call.opened:
            return []
        call.opened = True
        message = self._frame.messages.get(parent_message_id or "")
        if message is not None and message.subrun != call.subrun:
            parent_message_id = None  # another agent's message cannot hold the call
        return [
            self._msg(
                "TOOL_CALL_START",
                toolCallId=call.call_id,
                toolCallName=call.tool,
                parentMessageId=parent_message_id,
                subagentRunId=call.subrun,
            )
        ]

    def _args(self, call: CallMemory, text: str) -> list[WireMessage]:
        if call.input_done or not text:
            return []
        call.input_streamed = True
        return [
            self._msg(
                "TOOL_CALL_ARGS", toolCallId=call.call_id, delta=text, subagentRunId=call.subrun
            )
        ]

    def _close_input(self, call: CallMemory, args: JSONValue = None) -> list[WireMessage]:
        """START if needed, the whole input as ARGS if none was streamed, END."""
        out = self._open_call(call)
        if call.input_done:
            return out
        if not call.input_streamed and args is not None:
            out += self._args(call, _json(args))
        call.input_done = True
        out.append(self._msg("TOOL_CALL_END", toolCallId=call.call_id, subagentRunId=call.subrun))
        return out

    # -- the hooks of the run framing ---------------------------------------------------

    def _batch_phase(self, event: BatchPhase) -> list[WireMessage]:
        sub = self._frame.subruns.get(event.run_id or "")
        subrun = sub.run_id if sub is not None and sub.wire else None
        return [
            self._custom(
                "batch.phase",
                {
                    "batchId": event.batch_id,
                    "phase": event.phase,
                    "callIds": list(event.call_ids),
                    "counts": dict(event.counts),
                },
                subrun,
            )
        ]

    def _call_event(self, call: CallMemory, event: Event) -> list[WireMessage]:
        if call.subrun is None:
            return self._own_call_event(call, event)
        # A call of a sub-agent: its sub-agent is started on the wire first if it is not
        # (it stopped for a person in an earlier AG-UI run, and its call goes on).
        frame = self._frame
        sub = frame.subruns.get(call.subrun)
        if sub is None:
            return self._own_call_event(call, event)
        out = self._activate(sub.run_id)
        out += self._own_call_event(call, event)
        if not sub.open and not any(c.subrun == sub.run_id for c in frame.calls.values()):
            # its run was over already: this segment ends with its last call
            sub.wire = False
            out.append(
                self._msg(
                    "SUBAGENT_FINISHED", subagentRunId=sub.run_id, outcome={"type": "success"}
                )
            )
        return out

    def _activate(self, subrun: str) -> list[WireMessage]:
        """``SUBAGENT_STARTED`` for a sub-agent (and those it is nested in) not running in
        the current AG-UI run, before anything attributed to it: it stopped for a person
        in an earlier AG-UI run, or that run ended while it went on."""
        frame = self._frame
        sub = frame.subruns.get(subrun)
        if sub is None or sub.wire:
            return []
        out: list[WireMessage] = []
        for up in frame.lineage(sub):
            if not up.wire:
                up.wire = True
                out.append(self._subagent_started(up))
        return out

    def _own_call_event(self, call: CallMemory, event: Event) -> list[WireMessage]:
        frame = self._frame
        out: list[WireMessage] = []
        if isinstance(event, ToolCreated):
            out += self._open_call(call, event.parent_id)
        elif isinstance(event, ToolArgsDelta):
            out += self._open_call(call) + self._args(call, event.delta)
        elif isinstance(event, ToolReady):
            out += self._close_input(call, event.args)
        elif isinstance(event, ToolQueued):
            out += self._open_call(call)
            out.append(
                self._custom(
                    "tool.queued",
                    {
                        "toolCallId": call.call_id,
                        "batchId": event.batch_id,
                        "position": event.position,
                    },
                    call.subrun,
                )
            )
        elif isinstance(event, ToolStarted):
            out += self._close_input(call, event.args if event.args is not None else {})
        elif isinstance(event, ToolProgress):
            out += self._close_input(call, {})
            out.append(
                self._custom(
                    "tool.progress",
                    {
                        "toolCallId": call.call_id,
                        "fraction": event.fraction,
                        "current": event.current,
                        "total": event.total,
                        "message": event.message,
                        "data": event.data,
                    },
                    call.subrun,
                )
            )
        elif isinstance(event, ToolOutputDelta):
            out += self._close_input(call, {})
            out.append(
                self._custom(
                    "tool.output", {"toolCallId": call.call_id, "delta": event.text}, call.subrun
                )
            )
        elif isinstance(event, ToolOutputPartial):
            out += self._close_input(call, {})
            out.append(
                self._custom(
                    "tool.output.partial",
                    {"toolCallId": call.call_id, "value": event.value},
                    call.subrun,
                )
            )
        elif isinstance(event, ToolCompleted):
            out += self._close_input(call, {})
            out.append(self._result(call, _json(event.result)))
            frame.finish(call.call_id)
        elif isinstance(event, ToolFailed):
            out += self._close_input(call, {})
            out.append(self._result(call, _error_content(event.error)))
            out.append(
                self._custom(
                    "tool.failed",
                    {
                        "toolCallId": call.call_id,
                        "error": drop_none(
                            {
                                "type": event.error.type,
                                "message": event.error.message,
                                "retryable": event.error.retryable,
                            }
                        ),
                        "summary": event.summary,
                    },
                    call.subrun,
                )
            )
            frame.finish(call.call_id)
        elif isinstance(event, ToolCancelled):
            out += self._close_input(call, {})
            reason = event.reason or "cancelled"
            out.append(self._result(call, f"Cancelled: {reason}"))
            out.append(
                self._custom(
                    "tool.cancelled",
                    {"toolCallId": call.call_id, "reason": reason, "summary": event.summary},
                    call.subrun,
                )
            )
            frame.finish(call.call_id)
        elif isinstance(event, ApprovalRequested):
            out += self._close_input(call, event.args if event.args is not None else {})
            call.approval = event.approval_id
            call.approval_reason = event.reason or event.summary
            call.approval_expires = event.expires_at
            out.append(
                self._custom(
                    "tool.approval.requested",
                    {
                        "toolCallId": call.call_id,
                        "approvalId": event.approval_id,
                        "reason": event.reason,
                        "expiresAt": _iso(event.expires_at),
                    },
                    call.subrun,
                )
            )
            out += self._interrupt()
        elif isinstance(event, ApprovalResolved):
            if call.approval == event.approval_id:
                call.approval = None
            out.append(
                self._resolved(call, event.approval_id, event.approved, event.by, event.reason)
            )
        elif isinstance(event, ToolDenied):
            out += self._close_input(call, {})
            reason = event.reason or ("not approved in time" if event.by == "timeout" else "")
            out.append(self._result(call, f"Denied: {reason}" if reason else "Denied"))
            out.append(
                self._custom(
                    "tool.denied",
                    {
                        "toolCallId": call.call_id,
                        "by": event.by,
                        "reason": event.reason,
                        "summary": event.summary,
                    },
                    call.subrun,
                )
            )
            frame.finish(call.call_id)
        return out

    def _reset(self, snapshot: Snapshot) -> list[WireMessage]:
        """As the run framing does, then the interrupt when a reopened call awaits a
        decision (a client connecting mid-wait can answer it)."""
        out = super()._reset(snapshot)
        if not self._suspended:
            out += self._interrupt()
        return out

    def _reopen(self, call: CallMemory, snap: CallSnapshot) -> list[WireMessage]:
        out = self._open_call(call, snap.parent_id)
        if snap.state is CallState.CREATED:
            out += self._args(call, snap.args_text)
        elif input_done(snap):
            out += self._close_input(call, snap.args if snap.args is not None else {})
        pending = snap.approval
        if pending is not None:
            call.approval = pending.approval_id
            call.approval_reason = pending.reason or snap.summary
            call.approval_expires = pending.expires_at
        elif snap.decided is not None:
            # Decided, the call not yet gone on: the decision, as a client that watched
            # saw it (there is nothing left to interrupt for).
            d = snap.decided
            out.append(self._resolved(call, d.approval_id, d.approved, d.by, d.reason))
        return out

    def _resolved(
        self, call: CallMemory, approval_id: str, approved: bool, by: str | None, reason: str | None
    ) -> WireMessage:
        """``CUSTOM toolstream.tool.approval.resolved``."""
        return self._custom(
            "tool.approval.resolved",
            {
                "toolCallId": call.call_id,
                "approvalId": approval_id,
                "approved": approved,
                "by": by,
                "reason": reason,
            },
            call.subrun,
        )

    def fail(self, text: str, code: str) -> list[WireMessage]:
        """``RUN_ERROR {message, code}``."""
        return [self._msg("RUN_ERROR", message=text, code=code)]

    def pause(self) -> list[WireMessage]:
        """End this response where the run waits for a person: ``RUN_FINISHED`` with the
        interrupt outcome (the calls awaiting a decision stay open); what follows opens
        a continuation run (``<run id>.<n>``)."""
        return self._interrupt()

    def close(self) -> list[WireMessage]:
        """End the open calls (END, a result, CUSTOM) and the open run."""
        out: list[WireMessage] = []
        frame = self._frame
        if self._suspended and frame.run is not None:
            if not frame.open_calls():  # finished on the wire already (the interrupt)
                self._suspended = False
                frame.run = None
                self._wire_run = None
                return out
            out += self._continue()
        ended = "Cancelled: the stream ended before the call"
        for sub in reversed(list(frame.subruns.values())):  # children before parents
            for call in frame.open_calls():
                if call.subrun == sub.run_id:
                    out += self._end_call(call, ended)
            out += self._end_messages(sub.run_id)
            out += self._cut_subagent(sub, "the stream ended before the sub-agent")
        for call in frame.open_calls():
            out += self._end_call(call, ended)
        return out + self._close_run()


def _error_content(error: ErrorInfo | None) -> str:
    """A failed call's result content: ``"Error: <type>: <message>"``, without a second
    ``Error`` when the error already starts with one (an error of type ``Error``)."""
    text = error_text(error)
    return text if text.lower().startswith("error") else f"Error: {text}"


def _iso(ts: float | None) -> str | None:
    """An epoch time as ISO 8601 (UTC), as AG-UI types ``expiresAt``."""
    if ts is None:
        return None
    moment = datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def decisions(run_input: object) -> list[Decision]:
    """The approval decisions in an AG-UI ``RunAgentInput`` (a dict, or the
    ``ag-ui-protocol`` model): its ``resume`` entries answer the interrupts a run
    finished with. ``{"interruptId", "status": "resolved", "payload"}`` approves unless
    the payload says ``false`` or ``{"approved": false}`` (a payload object may carry a
    ``reason`` and edited ``args``); ``status: "cancelled"`` denies (reason
    ``"cancelled"``). Malformed entries are skipped; ``by`` is left for the host to set
    from its own principal.
    """
    data: Any = run_input
    dump = getattr(run_input, "model_dump", None)
    if callable(dump):
        data = dump(by_alias=True)
    entries = data.get("resume") if isinstance(data, dict) else None
    out: list[Decision] = []
    seen: set[str] = set()
    if not isinstance(entries, list):
        return out
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        interrupt_id = entry.get("interruptId", entry.get("interrupt_id"))
        status = entry.get("status")
        if not isinstance(interrupt_id, str) or not interrupt_id or interrupt_id in seen:
            continue
        if status not in ("resolved", "cancelled"):
            continue
        payload = entry.get("payload")
        approved = status == "resolved"
        reason: str | None = None
        args: dict[str, Any] | None = None
        if isinstance(payload, bool):
            approved = approved and payload
        elif isinstance(payload, dict):
            flag = payload.get("approved")
            if isinstance(flag, bool):
                approved = approved and flag
            text = payload.get("reason")
            reason = text if isinstance(text, str) else None
            edited = payload.get("args")
            args = edited if isinstance(edited, dict) and approved else None
        if status == "cancelled" and reason is None:
            reason = "cancelled"  # what a client sends for an interrupt it gave up on
        seen.add(interrupt_id)
        out.append(Decision(approval_id=interrupt_id, approved=approved, reason=reason, args=args))
    return out
