"""A2A v1.0 on the wire: the JSON-RPC requests the clients send, and the task, status
updates and artifact updates (proto-JSON: camelCase, enums by name) toolstream's events
become."""

from __future__ import annotations

import base64
import binascii
import datetime
import secrets
from typing import Any

import attrs

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    CallSnapshot,
    CallState,
    Decision,
    ErrorInfo,
    Event,
    MessageDelta,
    MessageFinished,
    MessageStarted,
    RunFinished,
    RunStarted,
    Snapshot,
    StreamReset,
    ToolCancelled,
    ToolCompleted,
    ToolCreated,
    ToolDenied,
    ToolFailed,
    ToolProgress,
    ToolQueued,
    ToolReady,
    ToolStarted,
)
from toolstream._core.jsonenc import is_utf8
from toolstream.dialects._framing import error_text

__all__ = [
    "EXTENSION_URI",
    "Encoder",
    "task_runs",
    "RpcError",
    "SentMessage",
    "parse_message",
    "session_of",
    "task_id",
    "task_of",
]

#: The A2A extension toolstream's tool-lifecycle data parts follow.
EXTENSION_URI = "urn:toolstream:a2a:tool-lifecycle:v1"

#: The longest ``contextId`` accepted, in bytes of UTF-8 (it is part of the task id).
MAX_CONTEXT_BYTES = 512

# JSON-RPC 2.0 and A2A v1.0 error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED = -32004
VERSION_NOT_SUPPORTED = -32009

_TASK_PREFIX = "a2a-"

_OUTCOME_STATES = {
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "cancelled": "TASK_STATE_CANCELED",
    "interrupted": "TASK_STATE_INPUT_REQUIRED",
}


class RpcError(Exception):
    """A JSON-RPC error to answer with (HTTP 200, never a 5xx)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def body(self, request_id: object) -> dict[str, Any]:
        """The JSON-RPC error response."""
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": self.code, "message": self.message},
        }


# -- task ids ---------------------------------------------------------------------------


def task_id(session: str) -> str:
    """A new task id on ``session``: the session rides in it (base64url), so a request
    that names only the task (``GetTask``, ``CancelTask``, ``SubscribeToTask``) finds
    it on any gateway process of the bus."""
    encoded = base64.urlsafe_b64encode(session.encode()).decode("ascii").rstrip("=")
    return f"{_TASK_PREFIX}{secrets.token_hex(8)}-{encoded}"


def session_of(task: object) -> str:
    """The session (``contextId``) a task id names; ``RpcError`` (unknown task) for an id
    this server never made."""
    if not isinstance(task, str) or not task.startswith(_TASK_PREFIX):
        raise RpcError(TASK_NOT_FOUND, f"task {task!r} was not found")
    _, _, encoded = task[len(_TASK_PREFIX) :].partition("-")
    try:
        session = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise RpcError(TASK_NOT_FOUND, f"task {task!r} was not found") from None
    if not session or not is_utf8(session):
        raise RpcError(TASK_NOT_FOUND, f"task {task!r} was not found")
    return session


# -- requests ---------------------------------------------------------------------------


@attrs.frozen
class SentMessage:
    """A client's ``Message``: its session (``contextId``, new when it named none), the
    task it continues (``taskId``), the decisions its data parts carry, and its text."""

    session: str
    task: str | None
    message: dict[str, Any]
    decisions: list[Decision]
    text: str


def _text_field(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"{what} must be a non-empty string")
    if not is_utf8(value) or len(value.encode()) > MAX_CONTEXT_BYTES:
        raise RpcError(
            INVALID_PARAMS, f"{what} must be valid text of at most {MAX_CONTEXT_BYTES} bytes"
        )
    return value


def _decision(data: dict[str, Any]) -> Decision:
    approval_id = data.get("approval_id")
    approved = data.get("approved")
    if not isinstance(approval_id, str) or not approval_id:
        raise RpcError(INVALID_PARAMS, "a decision's approval_id must be a non-empty string")
    if not isinstance(approved, bool):
        raise RpcError(INVALID_PARAMS, "a decision's approved must be true or false")
    reason = data.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise RpcError(INVALID_PARAMS, "a decision's reason must be a string")
    args = data.get("args")
    if args is not None and not isinstance(args, dict):
        raise RpcError(INVALID_PARAMS, "a decision's args must be an object")
    return Decision(approval_id=approval_id, approved=approved, reason=reason, args=args)


def parse_message(params: object) -> SentMessage:
    """``SendMessage`` / ``SendStreamingMessage`` params: ``{message, configuration?,
    metadata?}``; ``RpcError`` (invalid params) for anything else."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    message = params.get("message")
    if not isinstance(message, dict):
        raise RpcError(INVALID_PARAMS, "params.message must be an object")
    _text_field(message.get("messageId"), "message.messageId")
    role = message.get("role", "ROLE_USER")
    if role not in ("ROLE_USER", "user"):
        raise RpcError(INVALID_PARAMS, "message.role must be ROLE_USER")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise RpcError(INVALID_PARAMS, "message.parts must be a non-empty list")
    decisions: list[Decision] = []
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            raise RpcError(INVALID_PARAMS, "every part must be an object")
        if "text" in part:
            if not isinstance(part["text"], str) or not is_utf8(part["text"]):
                raise RpcError(INVALID_PARAMS, "a text part's text must be a string")
            texts.append(part["text"])
        elif "data" in part:
            data = part["data"]
            if isinstance(data, dict) and "approval_id" in data:
                decisions.append(_decision(data))
        elif not any(k in part for k in ("url", "raw")):
            raise RpcError(INVALID_PARAMS, "a part holds one of text, data, url or raw")
    context = message.get("contextId")
    task = message.get("taskId")
    if task is not None and task != "":
        task = _text_field(task, "message.taskId")
        session = session_of(task)
        if context not in (None, "", session):
            raise RpcError(INVALID_PARAMS, f"task {task!r} is not in context {context!r}")
    else:
        task = None
        if decisions:
            raise RpcError(INVALID_PARAMS, "a decision names the task it answers (taskId)")
        session = (
            secrets.token_hex(16)
            if context in (None, "")
            else _text_field(context, "message.contextId")
        )
    return SentMessage(session, task, message, decisions, "".join(texts))


def task_param(params: object) -> str:
    """The ``id`` of ``GetTask`` / ``CancelTask`` / ``SubscribeToTask`` params."""
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    task = params.get("id")
    if not isinstance(task, str) or not task:
        raise RpcError(INVALID_PARAMS, "params.id must be the task id")
    return task


# -- the stream -------------------------------------------------------------------------


def _timestamp(ts: float) -> str:
    moment = datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _progress(fraction: float | None, current: float | None, total: float | None) -> float | None:
    if fraction is not None:
        return fraction
    if current is not None and total:
        return max(0.0, min(1.0, current / total))
    return None


def _error(error: ErrorInfo | None) -> dict[str, str] | None:
    return None if error is None else {"type": error.type, "message": error.message}


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


_EVENT_STATES: dict[type[Event], str] = {
    ToolCreated: "created",
    ToolReady: "ready",
    ToolQueued: "queued",
    ToolStarted: "running",
    ToolProgress: "running",
    ToolCompleted: "completed",
    ToolFailed: "failed",
    ToolCancelled: "cancelled",
    ToolDenied: "denied",
    ApprovalRequested: "awaiting_approval",
}


def call_data(event: Event) -> dict[str, Any]:
    """The data part of one call event (``{call_id, tool, state, …}``)."""
    data: dict[str, Any] = {
        "call_id": event.call_id,
        "tool": event.tool,
        "state": _EVENT_STATES[type(event)],
        "parent_call_id": event.parent_call_id,
    }
    if isinstance(event, ToolProgress):
        data["progress"] = _progress(event.fraction, event.current, event.total)
        data["message"] = event.message
    elif isinstance(event, (ToolReady, ToolStarted)):
        data["args"] = event.args
        data["summary"] = event.summary
    elif isinstance(event, ToolCompleted):
        data["result"] = event.result
        data["summary"] = event.summary
    elif isinstance(event, ToolFailed):
        data["error"] = _error(event.error)
        data["summary"] = event.summary
    elif isinstance(event, (ToolCancelled, ToolDenied)):
        data["reason"] = event.reason
        data["summary"] = event.summary
    elif isinstance(event, ApprovalRequested):
        data["approval_id"] = event.approval_id
        data["reason"] = event.reason
        data["args"] = event.args
        data["summary"] = event.summary
    return _clean(data)


def snapshot_data(call: CallSnapshot) -> dict[str, Any]:
    """The data part of a call as a snapshot holds it (after a reset)."""
    state = call.state.value if isinstance(call.state, CallState) else str(call.state)
    data: dict[str, Any] = {
        "call_id": call.call_id,
        "tool": call.tool,
        "state": "awaiting_approval" if call.approval is not None else state,
        "parent_call_id": call.parent_call_id,
        "args": call.args,
        "summary": call.summary,
        "progress": _progress(call.fraction, call.current, call.total),
        "message": call.message,
        "error": _error(call.error),
        "result": call.result,
        "reason": call.reason,
    }
    if call.approval is not None:
        data["approval_id"] = call.approval.approval_id
        data["reason"] = call.approval.reason
    return _clean(data)


class Encoder:
    """One response's translator: toolstream events of task ``task`` (a run and its
    sub-agents' runs) into A2A ``StreamResponse`` objects."""

    def __init__(self, task: str, session: str) -> None:
        self.task = task
        self.session = session
        self._texts: set[str] = set()  # messages whose first chunk was sent
        self._denied: set[str] = set()  # calls whose denial was sent
        self._people: set[str] = set()  # messages that are a person's words
        #: Approvals asked and not decided (the task requires input while any is).
        self.waiting: dict[str, dict[str, Any]] = {}
        #: The final state, once the task's run ended.
        self.final: str | None = None

    def message(self, parts: list[dict[str, Any]], stamp: str) -> dict[str, Any]:
        """An agent message of the task (a status's message)."""
        return {
            "messageId": f"{self.task}-{stamp}",
            "contextId": self.session,
            "taskId": self.task,
            "role": "ROLE_AGENT",
            "parts": parts,
        }

    def task_object(self, state: str) -> dict[str, Any]:
        """``{"task": Task}`` in ``state``."""
        return {"task": {"id": self.task, "contextId": self.session, "status": {"state": state}}}

    def status(
        self,
        state: str,
        event: Event | None,
        parts: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """``{"statusUpdate": …}`` in ``state``, with ``parts`` as its message."""
        status: dict[str, Any] = {"state": state}
        if parts:
            stamp = event.id if event is not None else secrets.token_hex(4)
            status["message"] = self.message(parts, stamp)
        if event is not None:
            status["timestamp"] = _timestamp(event.ts)
        update: dict[str, Any] = {"taskId": self.task, "contextId": self.session, "status": status}
        if event is not None:
            update["metadata"] = {"event_id": event.id}
        return {"statusUpdate": update}

    def _artifact(self, event: Event, message_id: str, text: str, last: bool) -> dict[str, Any]:
        first = message_id not in self._texts
        self._texts.add(message_id)
        update = {
            "taskId": self.task,
            "contextId": self.session,
            "artifact": {"artifactId": message_id, "parts": [{"text": text}]},
            "append": not first,
            "lastChunk": last,
            "metadata": {"event_id": event.id},
        }
        return {"artifactUpdate": update}

    def encode(self, event: Event) -> list[dict[str, Any]]:
        """What ``event`` becomes (often nothing: argument deltas, reasoning, a
        sub-agent's run starting)."""
        kind = type(event)
        if kind in _EVENT_STATES:
            if kind is ToolDenied and event.call_id in self._denied:
                return []  # the decision said so already
            data = call_data(event)
            if isinstance(event, ApprovalRequested):
                self.waiting[event.approval_id] = data
                return [self.status("TASK_STATE_INPUT_REQUIRED", event, [{"data": data}])]
            return [self.status("TASK_STATE_WORKING", event, [{"data": data}])]
        if kind is MessageStarted:
            assert isinstance(event, MessageStarted)
            if event.role != "assistant":
                self._people.add(event.message_id)
            return []
        if kind is MessageDelta:
            assert isinstance(event, MessageDelta)
            if event.kind != "text" or not event.text or event.message_id in self._people:
                return []
            return [self._artifact(event, event.message_id, event.text, False)]
        if kind is MessageFinished:
            assert isinstance(event, MessageFinished)
            if event.message_id not in self._texts:
                return []
            return [self._artifact(event, event.message_id, "", True)]
        if kind is ApprovalResolved:
            assert isinstance(event, ApprovalResolved)
            self.waiting.pop(event.approval_id, None)
            if not event.approved:
                self._denied.add(event.call_id)
            data = _clean(
                {
                    "call_id": event.call_id,
                    "tool": event.tool,
                    "state": "approved" if event.approved else "denied",
                    "approval_id": event.approval_id,
                    "reason": event.reason,
                    "parent_call_id": event.parent_call_id,
                }
            )
            return [self.status("TASK_STATE_WORKING", event, [{"data": data}])]
        if kind is RunStarted:
            if event.run_id != self.task:
                return []
            return [self.status("TASK_STATE_WORKING", event)]
        if kind is RunFinished:
            assert isinstance(event, RunFinished)
            if event.run_id != self.task:
                return []
            return [self.finish(event)]
        if kind is StreamReset:
            assert isinstance(event, StreamReset)
            return self.reset(event)
        return []

    def finish(self, event: RunFinished) -> dict[str, Any]:
        """The task's end: its final status (a failure says why in its message)."""
        state = _OUTCOME_STATES[event.outcome]
        self.final = state
        parts: list[dict[str, Any]] = []
        if event.error is not None:
            parts.append({"text": error_text(event.error)})
            parts.append({"data": {"error": _error(event.error)}})
        elif event.reason:
            parts.append({"text": event.reason})
        if event.outcome == "interrupted":
            parts.extend({"data": data} for data in self.waiting.values())
            self.final = None  # waits for a person: not an end
        return self.status(state, event, parts)

    def reset(self, event: StreamReset) -> list[dict[str, Any]]:
        """The client lost its place (a cursor outside the replay window, a slow
        reader): the task's state as the snapshot has it."""
        return self.from_snapshot(event.snapshot, event)

    def from_snapshot(self, snapshot: Snapshot, event: Event | None) -> list[dict[str, Any]]:
        """Status updates that bring a client to ``snapshot``: every call's state, each
        message whole, and the task's state (with ``event`` None: the state the client
        has, taken on and not sent)."""
        runs = task_runs(snapshot, self.task)
        out: list[dict[str, Any]] = []
        self.waiting = {}
        for call in snapshot.calls:
            if call.run_id not in runs:
                continue
            data = snapshot_data(call)
            if call.approval is not None:
                self.waiting[call.approval.approval_id] = data
            out.append(self.status("TASK_STATE_WORKING", event, [{"data": data}]))
        for message in snapshot.messages:
            if message.role != "assistant" or not message.text or message.run_id not in runs:
                continue
            if event is None:  # the client has it (a resume's starting state)
                self._texts.add(message.message_id)
                continue
            self._texts.discard(message.message_id)
            out.append(self._artifact(event, message.message_id, message.text, message.finished))
        closing = self.closing(snapshot, event)
        if closing is not None:
            out.append(closing)
        return out

    def closing(self, snapshot: Snapshot, event: Event | None) -> dict[str, Any] | None:
        """The task's state as a status update where it says more than working: its end,
        or the approvals it waits for (``waiting``); None while it just works."""
        run = next((r for r in snapshot.runs if r.run_id == self.task), None)
        if run is not None and run.state != "running":
            ended = RunFinished(
                id=event.id if event is not None else "0-0",
                ts=run.ended_ts or 0.0,
                session=self.session,
                run_id=self.task,
                outcome=run.state,
                error=run.error,
                reason=run.reason,
            )
            return self.finish(ended)
        if run is not None and self.waiting:
            parts = [{"data": data} for data in self.waiting.values()]
            return self.status("TASK_STATE_INPUT_REQUIRED", event, parts)
        return None


def task_runs(snapshot: Snapshot, task: str) -> set[str | None]:
    """The task's run and its sub-agents' runs (at any depth) in ``snapshot``."""
    runs: set[str | None] = {task}
    grown = True
    while grown:
        more = {r.run_id for r in snapshot.runs if r.parent_run_id in runs} - runs
        runs |= more
        grown = bool(more)
    return runs


def opening_task(snapshot: Snapshot, encoder: Encoder, event_id: str) -> dict[str, Any]:
    """``{"task": Task}`` as ``snapshot`` has it, the encoder brought to that state (what
    follows is sent as updates), and ``metadata.event_id``: where a client that is cut
    again resumes."""
    body = task_of(snapshot, encoder.task, encoder.session)
    if body is None:
        body = encoder.task_object("TASK_STATE_SUBMITTED")["task"]
    encoder.from_snapshot(snapshot, None)
    body["metadata"] = {**body.get("metadata", {}), "event_id": event_id}
    return {"task": body}


def task_of(snapshot: Snapshot, task: str, session: str) -> dict[str, Any] | None:
    """The ``Task`` object for ``GetTask`` / ``CancelTask``: its state (with the reason
    of a failure, or the approvals it waits for), the agent's text as artifacts, each
    call's state; None when the bus no longer knows the task."""
    run = next((r for r in snapshot.runs if r.run_id == task), None)
    if run is None:
        return None
    runs = task_runs(snapshot, task)
    mine = [c for c in snapshot.calls if c.run_id in runs]
    encoder = Encoder(task, session)
    encoder.waiting = {
        c.approval.approval_id: snapshot_data(c) for c in mine if c.approval is not None
    }
    closing = encoder.closing(snapshot, None)
    status: dict[str, Any] = (
        closing["statusUpdate"]["status"]
        if closing is not None
        else {"state": "TASK_STATE_WORKING"}
    )
    stamp = run.ended_ts or run.started_ts
    if stamp is not None:
        status["timestamp"] = _timestamp(stamp)
    body: dict[str, Any] = {"id": task, "contextId": session, "status": status}
    artifacts = [
        {"artifactId": m.message_id, "parts": [{"text": m.text}]}
        for m in snapshot.messages
        if m.role == "assistant" and m.text and m.run_id in runs
    ]
    if artifacts:
        body["artifacts"] = artifacts
    # Each call's state, not its arguments or result (the status updates carry those):
    # a Task stays small whatever its calls returned (a JS client refuses an SSE event
    # over 4 MiB, and a resubscription opens with the Task).
    calls = [
        {k: v for k, v in snapshot_data(c).items() if k not in ("args", "result")} for c in mine
    ]
    if calls:
        body["metadata"] = {"tool_calls": calls}
    return body
