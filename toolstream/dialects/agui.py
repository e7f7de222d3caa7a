"""The AG-UI protocol: run-framed tool call events, camelCase, no nulls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolstream import (
    BatchPhase,
    CallSnapshot,
    CallState,
    Event,
    JSONValue,
    RunFinished,
    ToolArgsDelta,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolQueued,
    ToolReady,
    ToolStarted,
)

from ._base import WireMessage, drop_none
from ._framing import CallMemory, RunFramedDialect, error_text, input_done

__all__ = ["AGUI"]


def _json(value: JSONValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class AGUI(RunFramedDialect):
    """AG-UI events: ``RUN_STARTED`` / ``RUN_FINISHED`` (or ``RUN_ERROR``) around
    ``TOOL_CALL_START`` → ``TOOL_CALL_ARGS`` → ``TOOL_CALL_END`` → ``TOOL_CALL_RESULT``.

    AG-UI has no tool error event: a failed or cancelled call gets a result whose
    content says so, plus a ``CUSTOM`` event (``toolstream.tool.failed`` /
    ``toolstream.tool.cancelled``) with the structured status. Progress, output and
    batch phases are ``CUSTOM`` events too (names under ``custom_prefix``). A call first
    seen already running gets START, ARGS and END at once; a START is never sent twice
    for an id. Messages carry no SSE ``event:`` name (AG-UI clients read ``data:`` only).
    """

    name = "agui"
    headers: Mapping[str, str] = {}

    def __init__(self, *, custom_prefix: str = "toolstream") -> None:
        super().__init__()
        self.custom_prefix = custom_prefix

    # -- message builders -----------------------------------------------------------

    @staticmethod
    def _msg(kind: str, **fields: Any) -> WireMessage:
        return WireMessage(payload=drop_none({"type": kind, **fields}))

    def _custom(self, name: str, value: dict[str, Any]) -> WireMessage:
        return self._msg("CUSTOM", name=f"{self.custom_prefix}.{name}", value=drop_none(value))

    def _run_started(self, run_id: str) -> WireMessage:
        return self._msg("RUN_STARTED", threadId=self._frame.thread, runId=run_id)

    def _open_run(self, run_id: str, implicit: bool) -> list[WireMessage]:
        frame = self._frame
        frame.run = run_id
        frame.implicit = implicit
        return [self._run_started(run_id)]

    def _close_run(self, event: RunFinished | None = None) -> list[WireMessage]:
        frame = self._frame
        if frame.run is None:
            return []
        out: list[WireMessage] = []
        for call in frame.open_calls():
            # The run cannot end with a call open, but the call itself may still end
            # well: close its input only; its result can follow (AG-UI does not order
            # results).
            out += self._close_input(call)
        if event is not None and event.outcome == "failed":
            out.append(
                self._msg(
                    "RUN_ERROR",
                    message=error_text(event.error, "run failed"),
                    code=event.error.type if event.error else None,
                )
            )
        else:
            out.append(self._msg("RUN_FINISHED", threadId=frame.thread, runId=frame.run))
        frame.run = None
        frame.implicit = False
        frame.nested.clear()
        return out

    def _end_call(self, call: CallMemory, reason: str) -> list[WireMessage]:
        """Close a call the run is leaving behind: END, a result saying why, CUSTOM."""
        out = self._close_input(call)
        out.append(self._result(call.call_id, reason))
        out.append(self._custom("tool.cancelled", {"toolCallId": call.call_id, "reason": reason}))
        self._frame.finish(call.call_id)
        return out

    def _result(self, call_id: str, content: str) -> WireMessage:
        return self._msg(
            "TOOL_CALL_RESULT",
            messageId=f"result-{call_id}",
            toolCallId=call_id,
            content=content,
            role="tool",
        )

    def _open_call(
        self, call: CallMemory, parent_message_id: str | None = None
    ) -> list[WireMessage]:
        if call.opened:
            return []
        call.opened = True
        return [
            self._msg(
                "TOOL_CALL_START",
                toolCallId=call.call_id,
                toolCallName=call.tool,
                parentMessageId=parent_message_id,
            )
        ]

    def _args(self, call: CallMemory, text: str) -> list[WireMessage]:
        if call.input_done or not text:
            return []
        call.input_streamed = True
        return [self._msg("TOOL_CALL_ARGS", toolCallId=call.call_id, delta=text)]

    def _close_input(self, call: CallMemory, args: JSONValue = None) -> list[WireMessage]:
        """START if needed, the whole input as ARGS if none was streamed, END."""
        out = self._open_call(call)
        if call.input_done:
            return out
        if not call.input_streamed and args is not None:
            out += self._args(call, _json(args))
        call.input_done = True
        out.append(self._msg("TOOL_CALL_END", toolCallId=call.call_id))
        return out

    # -- the hooks of the run framing ---------------------------------------------------

    def _batch_phase(self, event: BatchPhase) -> list[WireMessage]:
        return [
            self._custom(
                "batch.phase",
                {
                    "batchId": event.batch_id,
                    "phase": event.phase,
                    "callIds": list(event.call_ids),
                    "counts": dict(event.counts),
                },
            )
        ]

    def _call_event(self, call: CallMemory, event: Event) -> list[WireMessage]:
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
                )
            )
        elif isinstance(event, ToolOutputDelta):
            out += self._close_input(call, {})
            out.append(
                self._custom("tool.output", {"toolCallId": call.call_id, "delta": event.text})
            )
        elif isinstance(event, ToolOutputPartial):
            out += self._close_input(call, {})
            out.append(
                self._custom(
                    "tool.output.partial", {"toolCallId": call.call_id, "value": event.value}
                )
            )
        elif isinstance(event, ToolCompleted):
            out += self._close_input(call, {})
            out.append(self._result(call.call_id, _json(event.result)))
            frame.finish(call.call_id)
        elif isinstance(event, ToolFailed):
            out += self._close_input(call, {})
            out.append(self._result(call.call_id, f"Error: {error_text(event.error)}"))
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
                )
            )
            frame.finish(call.call_id)
        elif isinstance(event, ToolCancelled):
            out += self._close_input(call, {})
            reason = event.reason or "cancelled"
            out.append(self._result(call.call_id, f"Cancelled: {reason}"))
            out.append(
                self._custom(
                    "tool.cancelled",
                    {"toolCallId": call.call_id, "reason": reason, "summary": event.summary},
                )
            )
            frame.finish(call.call_id)
        return out

    def _reopen(self, call: CallMemory, snap: CallSnapshot) -> list[WireMessage]:
        out = self._open_call(call, snap.parent_id)
        if snap.state is CallState.CREATED:
            out += self._args(call, snap.args_text)
        elif input_done(snap):
            out += self._close_input(call, snap.args if snap.args is not None else {})
        return out

    def close(self) -> list[WireMessage]:
        """End the open calls (END, a result, CUSTOM) and the open run."""
        out: list[WireMessage] = []
        for call in self._frame.open_calls():
            out += self._end_call(call, "Cancelled: the stream ended before the call")
        return out + self._close_run()
