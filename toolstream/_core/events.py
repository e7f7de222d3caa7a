"""The lifecycle event vocabulary: immutable classes built by the bus at publish."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar, Literal, TypeAlias

import attrs

#: Any value that survives ``json.dumps``; every payload field holds one after the
#: payload policy ran.
JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None

RunOutcome: TypeAlias = Literal["completed", "failed", "cancelled", "interrupted"]
BatchPhaseName: TypeAlias = Literal["queued", "running", "done"]
#: What a ``message.delta`` adds to: the message's answer text or its reasoning.
MessageKind: TypeAlias = Literal["text", "reasoning"]


class CallState(str, enum.Enum):
    """The state of one tool call, as a client sees it (a ``str``: ``"running"``...)."""

    CREATED = "created"
    READY = "ready"
    #: A person must approve the call before it runs (``tool.approval.requested``).
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: The call's approval was refused or expired: it never ran.
    DENIED = "denied"
    #: Open when a ``stream.reset`` arrived that no longer knew it (e.g. a server restart).
    LOST = "lost"

    @property
    def terminal(self) -> bool:
        """True for completed, failed, cancelled, denied and lost: nothing follows."""
        return self in _TERMINAL_STATES

    def __str__(self) -> str:
        return self.value


_TERMINAL_STATES = frozenset(
    {CallState.COMPLETED, CallState.FAILED, CallState.CANCELLED, CallState.DENIED, CallState.LOST}
)


@attrs.frozen(kw_only=True)
class ErrorInfo:
    """What went wrong, as published: an exception's type name and message."""

    type: str
    message: str
    retryable: bool | None = None


@attrs.frozen(kw_only=True)
class Event:
    """Base of every lifecycle event; the envelope every event carries.

    Events are built by the bus when they are published, after the payload
    policy ran, so every field a subscriber sees is final.
    """

    #: The wire name of the event (``"tool.completed"``...); a class-level constant.
    type: ClassVar[str] = ""
    #: Assigned by the bus; ordered by ``bus.compare``, never by string comparison.
    id: str
    #: The session (conversation, workflow) the event belongs to.
    session: str
    #: Publish time, seconds since the epoch, from the bus's clock.
    ts: float
    #: The run the call belongs to, when it is inside one.
    run_id: str | None = None
    #: The call's correlation id; ``""`` on run, batch and reset events.
    call_id: str = ""
    #: The tool's name; ``""`` on run, batch and reset events.
    tool: str = ""
    #: The call whose sub-agent made this call, if any.
    parent_call_id: str | None = None


@attrs.frozen(kw_only=True)
class RunStarted(Event):
    """A run (one agent turn or request) began."""

    type: ClassVar[str] = "run.started"
    title: str | None = None
    #: A sub-agent's run: the name of the agent (the parent call's tool by default).
    #: ``parent_call_id`` is then the call whose sub-agent this run is.
    agent: str | None = None
    #: A sub-agent's run: the run of its parent call (what a subscription to that run
    #: follows into this one).
    parent_run_id: str | None = None


@attrs.frozen(kw_only=True)
class RunFinished(Event):
    """A run ended; every call it opened was closed before this event."""

    type: ClassVar[str] = "run.finished"
    outcome: RunOutcome = "completed"
    error: ErrorInfo | None = None
    #: Why the run ended when nobody finished it: its parent call ended first
    #: (``"parent call cancelled: ..."``), or its tracker closed.
    reason: str | None = None


@attrs.frozen(kw_only=True)
class ToolCreated(Event):
    """The model named a tool; its input may still be streaming."""

    type: ClassVar[str] = "tool.created"
    batch_id: str | None = None
    #: The assistant message the call belongs to.
    parent_id: str | None = None
    title: str | None = None


@attrs.frozen(kw_only=True)
class ToolArgsDelta(Event):
    """A fragment of the call's JSON input text, after streaming redaction."""

    type: ClassVar[str] = "tool.args.delta"
    delta: str = ""


@attrs.frozen(kw_only=True)
class ToolReady(Event):
    """The call's whole input is known (parsed, or flagged invalid)."""

    type: ClassVar[str] = "tool.ready"
    args: JSONValue = None
    #: False when the input text was not valid JSON; ``args`` then holds the text.
    args_valid: bool = True
    summary: str | None = None
    #: The call's title, when this is the call's first event.
    title: str | None = None


@attrs.frozen(kw_only=True)
class ToolQueued(Event):
    """The call waits for a concurrency slot in a batch."""

    type: ClassVar[str] = "tool.queued"
    batch_id: str | None = None
    position: int | None = None
    #: The call's title, when this is the call's first event.
    title: str | None = None


@attrs.frozen(kw_only=True)
class ToolStarted(Event):
    """The call's execution began."""

    type: ClassVar[str] = "tool.started"
    #: The input, when no earlier event of the call carried it.
    args: JSONValue = None
    summary: str | None = None
    #: The call's title, when this is the call's first event.
    title: str | None = None


@attrs.frozen(kw_only=True)
class ToolProgress(Event):
    """Progress reported from inside a running call."""

    type: ClassVar[str] = "tool.progress"
    fraction: float | None = None
    current: float | None = None
    total: float | None = None
    message: str | None = None
    data: JSONValue = None


@attrs.frozen(kw_only=True)
class ToolOutputDelta(Event):
    """Text appended to the call's output so far."""

    type: ClassVar[str] = "tool.output.delta"
    text: str = ""


@attrs.frozen(kw_only=True)
class ToolOutputPartial(Event):
    """A JSON value that replaces the call's partial output so far."""

    type: ClassVar[str] = "tool.output.partial"
    value: JSONValue = None


@attrs.frozen(kw_only=True)
class ToolCompleted(Event):
    """The call returned; terminal."""

    type: ClassVar[str] = "tool.completed"
    result: JSONValue = None
    summary: str | None = None
    duration_s: float | None = None


@attrs.frozen(kw_only=True)
class ToolFailed(Event):
    """The call raised or was reported failed; terminal."""

    type: ClassVar[str] = "tool.failed"
    error: ErrorInfo = attrs.field(factory=lambda: ErrorInfo(type="Error", message=""))
    summary: str | None = None
    duration_s: float | None = None


@attrs.frozen(kw_only=True)
class ToolCancelled(Event):
    """The call was cancelled, or closed by its run's end or its tracker's close; terminal."""

    type: ClassVar[str] = "tool.cancelled"
    reason: str | None = None
    summary: str | None = None
    duration_s: float | None = None


@attrs.frozen(kw_only=True)
class ApprovalRequested(Event):
    """A person must approve the call: before it runs (the call is then
    ``awaiting_approval``), or from inside the running call (``running``)."""

    type: ClassVar[str] = "tool.approval.requested"
    #: Unguessable (128 bits); the decision names it.
    approval_id: str = ""
    #: The input to approve (after the payload policy).
    args: JSONValue = None
    #: Why a person must decide, as a sentence.
    reason: str | None = None
    summary: str | None = None
    #: When the approval expires (seconds since the epoch); ``None``: never.
    expires_at: float | None = None
    #: True when asked from inside the running call: the call goes on whatever the
    #: decision (the tool decides); False when the call waits to run.
    running: bool = False


@attrs.frozen(kw_only=True)
class ApprovalResolved(Event):
    """The one decision on an approval: by a person, ``"timeout"`` (it expired) or
    ``"cancelled"`` (the call ended while waiting)."""

    type: ClassVar[str] = "tool.approval.resolved"
    approval_id: str = ""
    approved: bool = False
    #: Who decided: the deciding principal's id, ``"timeout"``, ``"cancelled"``.
    by: str | None = None
    reason: str | None = None
    #: The edited input (after the payload policy); absent when unchanged.
    args: JSONValue = None


@attrs.frozen(kw_only=True)
class ToolDenied(Event):
    """The call's approval was refused or expired: it never ran; terminal."""

    type: ClassVar[str] = "tool.denied"
    reason: str | None = None
    by: str | None = None
    summary: str | None = None
    duration_s: float | None = None


@attrs.frozen(kw_only=True)
class BatchPhase(Event):
    """A batch of parallel calls changed phase."""

    type: ClassVar[str] = "batch.phase"
    batch_id: str = ""
    phase: BatchPhaseName = "queued"
    call_ids: tuple[str, ...] = ()
    #: How many of the batch's calls are in each state (state name -> count).
    counts: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class MessageStarted(Event):
    """The agent began a message (assistant text between, before or after its calls)."""

    type: ClassVar[str] = "message.started"
    message_id: str = ""
    role: str = "assistant"


@attrs.frozen(kw_only=True)
class MessageDelta(Event):
    """Text appended to a message, after streaming redaction: its answer (``kind``
    ``"text"``) or its reasoning (``"reasoning"``)."""

    type: ClassVar[str] = "message.delta"
    message_id: str = ""
    text: str = ""
    kind: MessageKind = "text"


@attrs.frozen(kw_only=True)
class MessageFinished(Event):
    """The message is complete; nothing more is appended to it."""

    type: ClassVar[str] = "message.finished"
    message_id: str = ""


@attrs.frozen(kw_only=True)
class PendingApproval:
    """An approval waiting for a decision, as a call's snapshot carries it."""

    approval_id: str
    reason: str | None = None
    expires_at: float | None = None
    #: True when asked from inside the running call.
    running: bool = False


@attrs.frozen(kw_only=True)
class DecidedApproval:
    """A call's approval once decided, as the call's snapshot carries it while the call
    is open: approved and not yet run (a framework that suspended the run adopts the
    call later), or decided from inside the running call. A client that joins then sees
    the request and its decision, as one that watched saw them."""

    approval_id: str
    approved: bool
    #: Who decided: a principal's id, ``"timeout"``, ``"cancelled"``.
    by: str | None = None
    #: The decider's reason.
    reason: str | None = None
    #: Why a person was asked (the request's reason).
    request_reason: str | None = None
    #: True when asked from inside the running call.
    running: bool = False


@attrs.frozen(kw_only=True)
class CallSnapshot:
    """Everything a client knows about one call at one point in the stream."""

    call_id: str
    tool: str
    state: CallState
    run_id: str | None = None
    parent_call_id: str | None = None
    batch_id: str | None = None
    parent_id: str | None = None
    title: str | None = None
    #: The streamed input text so far (until the call is ready).
    args_text: str = ""
    args: JSONValue = None
    args_valid: bool | None = None
    summary: str | None = None
    fraction: float | None = None
    current: float | None = None
    total: float | None = None
    message: str | None = None
    #: Text output accumulated from ``tool.output.delta``.
    output_text: str = ""
    #: The newest ``tool.output.partial`` value.
    output: JSONValue = None
    result: JSONValue = None
    error: ErrorInfo | None = None
    reason: str | None = None
    #: The approval waiting for a decision, if any: a page opened mid-wait can decide.
    approval: PendingApproval | None = None
    #: The call's newest approval once decided, while the call is open (an approved
    #: call not yet adopted by the run that goes on with it shows it here).
    decided: DecidedApproval | None = None
    #: Who decided the call's last approval (a principal's id, ``"timeout"``...).
    decided_by: str | None = None
    created_ts: float | None = None
    started_ts: float | None = None
    ended_ts: float | None = None
    duration_s: float | None = None
    #: Id of the first event of this call the view saw.
    first_event_id: str | None = None
    #: Id of the newest event applied to this call.
    last_event_id: str | None = None
    #: The runs of the call's sub-agents (a call whose tool is itself an agent), oldest
    #: first: ``runs`` of the snapshot has them, with their own calls.
    subruns: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class RunSnapshot:
    """A run as a client knows it."""

    run_id: str
    #: ``"running"`` while open, else the outcome.
    state: Literal["running", "completed", "failed", "cancelled", "interrupted"]
    title: str | None = None
    started_ts: float | None = None
    ended_ts: float | None = None
    error: ErrorInfo | None = None
    #: Id of the run's ``run.started`` (a replay of the whole run starts at it).
    first_event_id: str | None = None
    #: A sub-agent's run: the call whose sub-agent it is.
    parent_call_id: str | None = None
    #: A sub-agent's run: the run of that call.
    parent_run_id: str | None = None
    #: A sub-agent's run: the agent's name.
    agent: str | None = None
    #: Why it ended when nobody finished it (``RunFinished.reason``).
    reason: str | None = None


@attrs.frozen(kw_only=True)
class BatchSnapshot:
    """A batch of parallel calls as a client knows it."""

    batch_id: str
    phase: BatchPhaseName
    call_ids: tuple[str, ...] = ()
    counts: Mapping[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class MessageSnapshot:
    """A message as a client knows it: its whole text so far."""

    message_id: str
    role: str = "assistant"
    run_id: str | None = None
    #: The answer text so far.
    text: str = ""
    #: The reasoning text so far.
    reasoning: str = ""
    #: True after ``message.finished``.
    finished: bool = False
    #: Id of the message's first event the view saw (its place among the calls).
    first_event_id: str | None = None
    #: Id of the newest event applied to this message.
    last_event_id: str | None = None


@attrs.frozen(kw_only=True)
class Snapshot:
    """A session's calls, runs, batches and messages at one point: what a
    ``stream.reset`` carries."""

    calls: tuple[CallSnapshot, ...] = ()
    runs: tuple[RunSnapshot, ...] = ()
    batches: tuple[BatchSnapshot, ...] = ()
    messages: tuple[MessageSnapshot, ...] = ()

    @property
    def open_runs(self) -> tuple[RunSnapshot, ...]:
        """The runs still running."""
        return tuple(r for r in self.runs if r.state == "running")


@attrs.frozen(kw_only=True)
class StreamReset(Event):
    """Replaces the client's state: sent to clients without a cursor and instead of an
    impossible replay. Its id is the bus position at the snapshot."""

    type: ClassVar[str] = "stream.reset"
    snapshot: Snapshot = attrs.field(factory=Snapshot)


ToolEvent: TypeAlias = (
    RunStarted
    | RunFinished
    | ToolCreated
    | ToolArgsDelta
    | ToolReady
    | ToolQueued
    | ToolStarted
    | ToolProgress
    | ToolOutputDelta
    | ToolOutputPartial
    | ToolCompleted
    | ToolFailed
    | ToolCancelled
    | ApprovalRequested
    | ApprovalResolved
    | ToolDenied
    | BatchPhase
    | MessageStarted
    | MessageDelta
    | MessageFinished
    | StreamReset
)
"""Any concrete lifecycle event."""

#: Every concrete event class, in the order of the design's table.
EVENT_TYPES: tuple[type[Event], ...] = (
    RunStarted,
    RunFinished,
    ToolCreated,
    ToolArgsDelta,
    ToolReady,
    ToolQueued,
    ToolStarted,
    ToolProgress,
    ToolOutputDelta,
    ToolOutputPartial,
    ToolCompleted,
    ToolFailed,
    ToolCancelled,
    ApprovalRequested,
    ApprovalResolved,
    ToolDenied,
    BatchPhase,
    MessageStarted,
    MessageDelta,
    MessageFinished,
    StreamReset,
)

#: Wire name -> class.
EVENT_CLASSES: Mapping[str, type[Event]] = {cls.type: cls for cls in EVENT_TYPES}

TERMINAL_EVENTS: tuple[type[Event], ...] = (ToolCompleted, ToolFailed, ToolCancelled, ToolDenied)

#: The identifier fields of the envelope (besides ``id`` and ``ts``, which the bus
#: assigns), in the order the classes declare them.
ENVELOPE: tuple[str, ...] = ("session", "run_id", "call_id", "tool", "parent_call_id")

#: The events that only add to a call or a message in progress (text, progress, partial
#: output): a slow subscriber may have them merged (coalescing), and a broker's outbox
#: may drop them during an outage. Run and lifecycle events are never merged or dropped.
DELTA_EVENTS: frozenset[type[Event]] = frozenset(
    {ToolArgsDelta, ToolOutputDelta, ToolProgress, ToolOutputPartial, MessageDelta}
)

#: The message events (``call_id`` and ``tool`` are ``""`` on them).
MESSAGE_EVENTS: tuple[type[Event], ...] = (MessageStarted, MessageDelta, MessageFinished)
