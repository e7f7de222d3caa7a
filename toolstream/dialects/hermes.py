"""hermes-agent's chat-completions companion events: ``event: hermes.tool.progress``."""

from __future__ import annotations

import json
from collections.abc import Mapping

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    CallState,
    Event,
    RunStarted,
    Snapshot,
    StreamReset,
    ToolCancelled,
    ToolCompleted,
    ToolDenied,
    ToolFailed,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolProgress,
    ToolReady,
    ToolStarted,
)

from ._base import BaseDialect, WireMessage, drop_none

__all__ = ["Hermes"]

EVENT = "hermes.tool.progress"
_MAX_PLACES = 10_000


class Hermes(BaseDialect):
    """``{toolCallId, tool, status, label, input?, output?}`` with ``status`` running,
    then exactly one of completed / failed / cancelled per call.

    Meant to be interleaved by a chat-completions host with its own chunks, never
    inside ``delta.content`` (progress text there teaches the model to imitate it).
    ``running`` goes out when the call starts running; hidden tools never appear
    (the tracker does not publish them).

    Approvals ride the same channel as hermes-agent's own approval prompts, a typed
    payload: ``{type: "hermes.approval", toolCallId, tool, approvalId, command,
    description, label, expiresAt?}`` when a person must decide (``command``: what
    would run; ``description``: why it was flagged), ``{type:
    "hermes.approval.resolved", toolCallId, approvalId, approved, by}`` once decided. A
    denied call ends with ``status: "cancelled"``, ``denied: true`` (statuses hermes
    clients know), after a ``running`` if it never ran: one of each per call, always.

    A call made by a sub-agent (a call whose tool is itself an agent) carries
    ``parentToolCallId`` (that call) and ``subagentRunId`` (the sub-agent's run), so a
    host can indent it under its parent.
    """

    name = "hermes"
    headers: Mapping[str, str] = {}

    def __init__(self, *, max_output_chars: int = 2000) -> None:
        self.max_output_chars = max_output_chars
        self._running: dict[str, str] = {}  # call_id -> tool, "running" sent, no terminal yet
        self._done: set[str] = set()
        self._inputs: dict[str, object] = {}
        # Sub-agents' runs seen, and the place in the tree of the calls open in them.
        self._subruns: dict[str, None] = {}
        self._nested: dict[str, dict[str, str]] = {}

    def _message(
        self, call_id: str, tool: str, status: str, label: str, **extra: object
    ) -> WireMessage:
        payload = drop_none(
            {"toolCallId": call_id, "tool": tool, "status": status, "label": label, **extra}
        )
        if self._nested:
            payload.update(self._nested.get(call_id, ()))
        return WireMessage(event=EVENT, payload=payload)

    def _sub(self, run_id: str) -> None:
        """A sub-agent's run seen (the newest ones remembered: bounded)."""
        self._subruns[run_id] = None
        if len(self._subruns) > _MAX_PLACES:
            del self._subruns[next(iter(self._subruns))]

    def _place(self, call_id: str, parent_call_id: str | None, run_id: str | None) -> None:
        """Remember where a call sits in the sub-agents' tree (if anywhere)."""
        if parent_call_id is None or call_id in self._nested:
            return
        place = {"parentToolCallId": parent_call_id}
        if run_id is not None and run_id in self._subruns:
            place["subagentRunId"] = run_id
        self._nested[call_id] = place
        if len(self._nested) > _MAX_PLACES:  # bounded: the oldest calls are over
            del self._nested[next(iter(self._nested))]

    def _output(self, value: object) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(text) > self.max_output_chars:
            text = text[: self.max_output_chars] + "…"
        return text

    def _ensure_running(self, event: Event, label: str | None = None) -> list[WireMessage]:
        call_id = event.call_id
        if call_id in self._running or call_id in self._done:
            return []
        self._running[call_id] = event.tool
        return [
            self._message(
                call_id,
                event.tool,
                "running",
                label or event.tool,
                input=self._inputs.get(call_id),
            )
        ]

    def encode(self, event: Event) -> list[WireMessage]:
        """``running`` when the call starts, its terminal status when it ends."""
        call_id = event.call_id
        if not call_id:
            if isinstance(event, StreamReset):
                return self._reset(event)
            if isinstance(event, RunStarted) and event.parent_call_id is not None:
                self._sub(event.run_id or "")
            return []
        if call_id in self._done:
            return []
        if event.parent_call_id is not None:
            self._place(call_id, event.parent_call_id, event.run_id)
        if isinstance(event, ToolReady):
            self._inputs[call_id] = event.args
            return []
        if isinstance(event, ApprovalRequested):
            return [
                self._approval(
                    call_id,
                    event.tool,
                    event.approval_id,
                    event.args,
                    event.reason,
                    event.summary,
                    event.expires_at,
                )
            ]
        if isinstance(event, ApprovalResolved):
            return [
                self._resolved(
                    call_id, event.tool, event.approval_id, event.approved, event.by, event.reason
                )
            ]
        if isinstance(event, ToolDenied):
            # One running and one terminal status per call, as for a call cancelled
            # before it started: hermes clients pair them.
            out = self._ensure_running(event)
            self._running.pop(call_id, None)
            self._done.add(call_id)
            self._inputs.pop(call_id, None)
            label = event.summary or f"{event.tool} denied"
            output = event.reason or ("not approved in time" if event.by == "timeout" else "denied")
            out.append(
                self._message(call_id, event.tool, "cancelled", label, output=output, denied=True)
            )
            return out
        if isinstance(event, ToolStarted):
            if event.args is not None:
                self._inputs[call_id] = event.args
            return self._ensure_running(event, event.summary)
        if isinstance(event, (ToolProgress, ToolOutputDelta, ToolOutputPartial)):
            return self._ensure_running(event)
        if isinstance(event, (ToolCompleted, ToolFailed, ToolCancelled)):
            out = self._ensure_running(event)
            self._running.pop(call_id, None)
            self._done.add(call_id)
            self._inputs.pop(call_id, None)
            if isinstance(event, ToolCompleted):
                status, output = "completed", self._output(event.result)
            elif isinstance(event, ToolFailed):
                status, output = "failed", f"{event.error.type}: {event.error.message}"
            else:
                status, output = "cancelled", event.reason or "cancelled"
            label = event.summary or f"{event.tool} {status}"
            out.append(self._message(call_id, event.tool, status, label, output=output))
            return out
        return []

    def _approval(
        self,
        call_id: str,
        tool: str,
        approval_id: str,
        args: object,
        reason: str | None,
        summary: str | None,
        expires_at: float | None,
    ) -> WireMessage:
        command = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        payload = drop_none(
            {
                **self._nested.get(call_id, {}),
                "type": "hermes.approval",
                "toolCallId": call_id,
                "tool": tool,
                "approvalId": approval_id,
                "command": f"{tool} {command}"[: self.max_output_chars],
                "description": reason or f"{tool} needs approval",
                "label": summary or f"{tool} needs approval",
                "expiresAt": None if expires_at is None else int(expires_at * 1000),
            }
        )
        return WireMessage(event=EVENT, payload=payload)

    def _resolved(
        self,
        call_id: str,
        tool: str,
        approval_id: str,
        approved: bool,
        by: str | None,
        reason: str | None,
    ) -> WireMessage:
        payload = drop_none(
            {
                **self._nested.get(call_id, {}),
                "type": "hermes.approval.resolved",
                "toolCallId": call_id,
                "tool": tool,
                "approvalId": approval_id,
                "approved": approved,
                "by": by,
                "reason": reason,
            }
        )
        return WireMessage(event=EVENT, payload=payload)

    def _learn(self, snapshot: Snapshot) -> None:
        for run in snapshot.runs:
            if run.parent_call_id is not None:
                self._sub(run.run_id)
        for call in snapshot.calls:
            if not call.state.terminal:
                self._place(call.call_id, call.parent_call_id, call.run_id)

    def _reset(self, event: StreamReset) -> list[WireMessage]:
        self._learn(event.snapshot)
        out: list[WireMessage] = []
        present = {c.call_id for c in event.snapshot.calls}
        for call_id, tool in list(self._running.items()):
            if call_id not in present:  # vanished (a restart): say it ended
                self._running.pop(call_id)
                self._done.add(call_id)
                out.append(self._message(call_id, tool, "cancelled", f"{tool} lost", output="lost"))
        for call in event.snapshot.calls:
            pending = call.approval
            if pending is not None and call.call_id not in self._done:
                out.append(
                    self._approval(
                        call.call_id,
                        call.tool,
                        pending.approval_id,
                        call.args,
                        pending.reason,
                        call.summary,
                        pending.expires_at,
                    )
                )
            decided = call.decided
            if decided is not None and call.call_id not in self._done:
                # Decided, the call not yet gone on: the prompt and its answer.
                out.append(
                    self._approval(
                        call.call_id,
                        call.tool,
                        decided.approval_id,
                        call.args,
                        decided.request_reason,
                        call.summary,
                        None,
                    )
                )
                out.append(
                    self._resolved(
                        call.call_id,
                        call.tool,
                        decided.approval_id,
                        decided.approved,
                        decided.by,
                        decided.reason,
                    )
                )
            if call.state is CallState.RUNNING and call.call_id not in self._running:
                self._running[call.call_id] = call.tool
                out.append(
                    self._message(
                        call.call_id,
                        call.tool,
                        "running",
                        call.summary or call.tool,
                        input=call.args,
                    )
                )
        return out

    def prime(self, snapshot: Snapshot) -> None:
        """Remember which calls a client already saw running, and which ended."""
        self._learn(snapshot)
        for call in snapshot.calls:
            if call.state is CallState.RUNNING:
                self._running[call.call_id] = call.tool
            elif call.state.terminal:
                self._done.add(call.call_id)

    def close(self) -> list[WireMessage]:
        """Calls still running when the stream ends are reported cancelled."""
        out = [
            self._message(
                call_id, tool, "cancelled", f"{tool}: stream ended", output="stream ended"
            )
            for call_id, tool in self._running.items()
        ]
        self._done.update(self._running)
        self._running.clear()
        return out
