"""LiveView: events in, per-call snapshots out — the reducer every client needs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from .codegen import compile_functions
from .events import (
    EVENT_TYPES,
    MESSAGE_EVENTS,
    ApprovalRequested,
    ApprovalResolved,
    BatchPhase,
    BatchSnapshot,
    CallSnapshot,
    CallState,
    DecidedApproval,
    ErrorInfo,
    Event,
    JSONValue,
    MessageDelta,
    MessageFinished,
    MessageSnapshot,
    MessageStarted,
    PendingApproval,
    RunFinished,
    RunSnapshot,
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
from .folding import fold_in_order
from .ids import compare_ids

__all__ = ["LiveView", "run_tree"]

#: A call's events: every class but the runs, batches, resets and messages (which have
#: no ``call_id``), which ``apply`` tells apart one isinstance at a time. Most events are
#: a call's, so ``apply`` looks for these first, by exact class.
_CALL_EVENTS = frozenset(EVENT_TYPES) - {
    RunStarted,
    RunFinished,
    BatchPhase,
    StreamReset,
    *MESSAGE_EVENTS,
}

_ORDER = {
    CallState.CREATED: 0,
    CallState.READY: 1,
    CallState.AWAITING_APPROVAL: 1.5,
    CallState.QUEUED: 2,
    CallState.RUNNING: 3,
    CallState.COMPLETED: 4,
    CallState.FAILED: 4,
    CallState.CANCELLED: 4,
    CallState.DENIED: 4,
    CallState.LOST: 4,
}

_FIELDS = tuple(a.name for a in CallSnapshot.__attrs_attrs__)


class _Call:
    """The mutable record behind one call; published as a frozen CallSnapshot."""

    __slots__ = (*_FIELDS, "_snap", "args_parts", "output_parts", "output_len")

    # __init__ and copy are generated below, one assignment per field (a loop over the
    # fields cost ~3 us per call: a measurable part of tracking one).
    def __init__(self, call_id: str, tool: str) -> None:
        raise NotImplementedError  # replaced by _call_methods()

    # attribute names come from _FIELDS; declare the ones used here for mypy
    call_id: str
    tool: str
    state: CallState
    run_id: str | None
    parent_call_id: str | None
    batch_id: str | None
    parent_id: str | None
    title: str | None
    args_text: str
    args: JSONValue
    args_valid: bool | None
    summary: str | None
    fraction: float | None
    current: float | None
    total: float | None
    message: str | None
    output_text: str
    output: JSONValue
    result: JSONValue
    error: ErrorInfo | None
    reason: str | None
    approval: PendingApproval | None
    decided: DecidedApproval | None
    decided_by: str | None
    created_ts: float | None
    started_ts: float | None
    ended_ts: float | None
    duration_s: float | None
    first_event_id: str | None
    last_event_id: str | None
    subruns: tuple[str, ...]
    _snap: CallSnapshot | None
    args_parts: list[str]
    output_parts: list[str]
    output_len: int

    @classmethod
    def from_snapshot(cls, snap: CallSnapshot) -> _Call:
        rec = cls(snap.call_id, snap.tool)
        for name in _FIELDS:
            object.__setattr__(rec, name, getattr(snap, name))
        rec.args_parts = [snap.args_text] if snap.args_text else []
        rec.output_parts = [snap.output_text] if snap.output_text else []
        rec.output_len = len(snap.output_text)
        rec._snap = snap
        return rec

    def copy(self) -> _Call:
        raise NotImplementedError  # replaced by _call_methods()

    def snapshot(self, max_text: int) -> CallSnapshot:
        snap = self._snap
        if snap is None:
            if len(self.args_parts) > 1:
                self.args_parts = ["".join(self.args_parts)]
            if len(self.output_parts) > 1:
                self.output_parts = ["".join(self.output_parts)]
            args = self.args_parts[0] if self.args_parts else ""
            if len(args) > max_text:  # keep the start of the input
                args = args[:max_text]
                self.args_parts = [args]
            self.args_text = args
            out = self.output_parts[0] if self.output_parts else ""
            if len(out) > max_text:  # keep the newest output
                out = out[-max_text:]
                self.output_parts = [out]
                self.output_len = len(out)
            self.output_text = out
            snap = CallSnapshot(**{name: getattr(self, name) for name in _FIELDS})
            self._snap = snap
        return snap


def _call_methods() -> tuple[Callable[..., Any], ...]:
    """``_Call.__init__`` (every field None but the ones a new call sets) and
    ``_Call.copy`` (a shallow copy with lists of its own), one line per field."""
    given = {
        "call_id": "call_id",
        "tool": "tool",
        "state": "CREATED",
        "args_text": '""',
        "output_text": '""',
        "subruns": "()",
        "args_parts": "[]",
        "output_parts": "[]",
        "output_len": "0",
    }
    init = ["def __init__(self, call_id, tool):"]
    init += [f"    self.{name} = {given.get(name, 'None')}" for name in _Call.__slots__]
    copy = ["def copy(self):", "    rec = new(_Call)"]
    for name in _Call.__slots__:
        value = f"list(self.{name})" if name.endswith("_parts") else f"self.{name}"
        copy.append(f"    rec.{name} = {value}")
    copy.append("    return rec")
    source = "\n".join(init + copy) + "\n"
    namespace: dict[str, Any] = {
        "CREATED": CallState.CREATED,
        "new": object.__new__,
        "_Call": _Call,
    }
    return compile_functions(source, namespace, what="_Call methods", names=("__init__", "copy"))


_Call.__init__, _Call.copy = _call_methods()  # type: ignore[method-assign]


class _Message:
    """The mutable record behind one message; published as a frozen MessageSnapshot."""

    __slots__ = (
        "finished",
        "first_event_id",
        "held",
        "last_event_id",
        "message_id",
        "reasoning",
        "role",
        "run_id",
        "snap",
        "text",
    )

    def __init__(self, message_id: str, run_id: str | None, first_event_id: str | None) -> None:
        self.message_id = message_id
        self.run_id = run_id
        self.role = "assistant"
        self.text: list[str] = []
        self.held = 0  # characters in text and reasoning
        self.reasoning: list[str] = []
        self.finished = False
        self.first_event_id = first_event_id
        self.last_event_id = first_event_id or ""
        self.snap: MessageSnapshot | None = None

    @classmethod
    def from_snapshot(cls, snap: MessageSnapshot) -> _Message:
        rec = cls(snap.message_id, snap.run_id, snap.first_event_id)
        rec.role = snap.role
        rec.text = [snap.text] if snap.text else []
        rec.held = len(snap.text) + len(snap.reasoning)
        rec.reasoning = [snap.reasoning] if snap.reasoning else []
        rec.finished = snap.finished
        rec.last_event_id = snap.last_event_id or rec.last_event_id
        rec.snap = snap
        return rec

    def copy(self) -> _Message:
        rec = _Message.__new__(_Message)
        for name in _Message.__slots__:
            setattr(rec, name, getattr(self, name))
        rec.text = list(self.text)
        rec.reasoning = list(self.reasoning)
        return rec

    def snapshot(self, max_text: int) -> MessageSnapshot:
        snap = self.snap
        if snap is None:
            # Past max_text, the newest text is kept (as for a call's output).
            text = "".join(self.text)[-max_text:] if max_text else ""
            self.text = [text] if text else []
            reasoning = "".join(self.reasoning)[-max_text:] if max_text else ""
            self.reasoning = [reasoning] if reasoning else []
            self.held = len(text) + len(reasoning)
            snap = self.snap = MessageSnapshot(
                message_id=self.message_id,
                role=self.role,
                run_id=self.run_id,
                text=text,
                reasoning=reasoning,
                finished=self.finished,
                first_event_id=self.first_event_id,
                last_event_id=self.last_event_id,
            )
        return snap


class _SnapshotMapping(Mapping[str, CallSnapshot]):
    """Read-only ``call_id -> CallSnapshot`` view of a LiveView's calls."""

    __slots__ = ("_max_text", "_records")

    def __init__(self, records: dict[str, _Call], max_text: int) -> None:
        self._records = records
        self._max_text = max_text

    def __getitem__(self, call_id: str) -> CallSnapshot:
        return self._records[call_id].snapshot(self._max_text)

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __repr__(self) -> str:
        return f"<calls {list(self._records)!r}>"


def run_tree(runs: Iterable[RunSnapshot], run_id: str) -> set[str]:
    """``run_id`` and the runs of its sub-agents, at any depth (by ``parent_run_id``)."""
    children: dict[str, list[str]] = {}
    for run in runs:
        parent = run.parent_run_id
        if parent is not None:
            children.setdefault(parent, []).append(run.run_id)
    tree = {run_id}
    if not children:
        return tree
    todo = [run_id]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


class LiveView:
    """Applies events and keeps what each call, run, batch and message looks like now.

    Tolerant (a call first seen at any event is shown), idempotent (an event
    older than the call's newest applied one is ignored, so replays are
    harmless), and a :class:`~toolstream.StreamReset` replaces the state: calls
    that were open and are missing from the reset become ``lost``. Finished
    calls are kept up to ``max_finished`` (oldest dropped first); streamed text
    per call up to ``max_text`` characters (the start of the input, the end of the
    output).

    ``check_replays=False`` is for a view fed every event exactly once, in order (a
    bus's own): it skips the replay check, and :meth:`fold` takes its short path.
    """

    def __init__(
        self,
        *,
        max_finished: int = 500,
        max_runs: int = 100,
        max_text: int = 64 * 1024,
        compare: Callable[[str, str], int] | None = None,
        check_replays: bool = True,
    ) -> None:
        if max_finished < 0 or max_runs < 1 or max_text < 0:
            raise ValueError("max_finished, max_runs and max_text must be positive")
        self.max_finished = max_finished
        self.max_runs = max_runs
        self.max_text = max_text
        self._compare = compare or compare_ids
        self._check_replays = check_replays
        self._calls: dict[str, _Call] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._runs: OrderedDict[str, RunSnapshot] = OrderedDict()
        self._batches: OrderedDict[str, BatchSnapshot] = OrderedDict()
        self._messages: OrderedDict[str, _Message] = OrderedDict()
        #: Id of the newest event applied (a resume cursor), or None.
        self.last_id: str | None = None
        self.calls: Mapping[str, CallSnapshot] = _SnapshotMapping(self._calls, max_text)
        """``call_id -> CallSnapshot`` for every call the view holds."""

    # -- reading ---------------------------------------------------------------------

    @property
    def runs(self) -> Mapping[str, RunSnapshot]:
        """``run_id -> RunSnapshot``: open runs and the newest finished ones."""
        return self._runs

    @property
    def batches(self) -> Mapping[str, BatchSnapshot]:
        """``batch_id -> BatchSnapshot``."""
        return self._batches

    @property
    def messages(self) -> Mapping[str, MessageSnapshot]:
        """``message_id -> MessageSnapshot``: the messages of the open runs and the
        newest others (as many as ``max_runs``), oldest first."""
        return {k: m.snapshot(self.max_text) for k, m in self._messages.items()}

    def open_calls(self) -> list[CallSnapshot]:
        """The calls not yet in a terminal state, oldest first."""
        return [
            rec.snapshot(self.max_text) for rec in self._calls.values() if not rec.state.terminal
        ]

    def snapshot(self, *, run_id: str | None = None) -> Snapshot:
        """Everything the view holds (or only one run's part: the run and its sub-agents'
        runs, at any depth) as an immutable Snapshot."""
        if run_id is None:
            return Snapshot(
                calls=tuple(rec.snapshot(self.max_text) for rec in self._calls.values()),
                runs=tuple(self._runs.values()),
                batches=tuple(self._batches.values()),
                messages=tuple(m.snapshot(self.max_text) for m in self._messages.values()),
            )
        tree = run_tree(self._runs.values(), run_id)
        calls = tuple(
            rec.snapshot(self.max_text) for rec in self._calls.values() if rec.run_id in tree
        )
        runs = tuple(r for r in self._runs.values() if r.run_id in tree)
        ids = {c.call_id for c in calls}
        batches = tuple(b for b in self._batches.values() if ids.intersection(b.call_ids))
        messages = tuple(
            m.snapshot(self.max_text) for m in self._messages.values() if m.run_id in tree
        )
        return Snapshot(calls=calls, runs=runs, batches=batches, messages=messages)

    def copy(self) -> LiveView:
        """An independent copy (applying events to it leaves this view unchanged)."""
        new = LiveView(
            max_finished=self.max_finished,
            max_runs=self.max_runs,
            max_text=self.max_text,
            compare=self._compare,
            check_replays=self._check_replays,
        )
        new._calls.update((k, rec.copy()) for k, rec in self._calls.items())
        new._finished.update(self._finished)
        new._runs.update(self._runs)
        new._batches.update(self._batches)
        new._messages.update((k, m.copy()) for k, m in self._messages.items())
        new.last_id = self.last_id
        return new

    # -- applying ----------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """Apply one event; False when it was ignored (a replay, or nothing to change)."""
        if type(event) in _CALL_EVENTS and event.call_id:
            self.last_id = event.id
            return self._apply_call(event)
        if isinstance(event, StreamReset):
            self.reset(event.snapshot, event_id=event.id, ts=event.ts)
            return True
        self.last_id = event.id
        if isinstance(event, RunStarted):
            run_id = event.run_id or ""
            parent = event.parent_call_id
            self._set_run(
                RunSnapshot(
                    run_id=run_id,
                    state="running",
                    title=event.title,
                    started_ts=event.ts,
                    first_event_id=event.id,
                    parent_call_id=parent,
                    parent_run_id=event.parent_run_id,
                    agent=event.agent,
                )
            )
            if parent is not None:
                self._add_subrun(parent, run_id)
            return True
        if isinstance(event, RunFinished):
            old = self._runs.get(event.run_id or "")
            self._set_run(
                RunSnapshot(
                    run_id=event.run_id or "",
                    state=event.outcome,
                    title=old.title if old else None,
                    started_ts=old.started_ts if old else None,
                    ended_ts=event.ts,
                    error=event.error,
                    first_event_id=old.first_event_id if old else None,
                    parent_call_id=old.parent_call_id if old else event.parent_call_id,
                    parent_run_id=old.parent_run_id if old else None,
                    agent=old.agent if old else None,
                    reason=event.reason,
                )
            )
            return True
        if isinstance(event, BatchPhase):
            self._batches[event.batch_id] = BatchSnapshot(
                batch_id=event.batch_id,
                phase=event.phase,
                call_ids=event.call_ids,
                counts=event.counts,
            )
            self._batches.move_to_end(event.batch_id)
            while len(self._batches) > self.max_runs:
                self._batches.popitem(last=False)
            return True
        if not event.call_id:
            if type(event) in MESSAGE_EVENTS:
                return self._apply_message(event)  # type: ignore[arg-type]
            return False
        return self._apply_call(event)

    def fold(self, events: list[Event]) -> None:
        """Apply ``events`` in order, as :meth:`apply` would one by one.

        A bus folds the events it trims from its window with this: they are new to the
        view and in order, so progress and output text of running calls (the bulk of
        any stream) take a shorter path with the same result (``folding.py``). A view
        that checks for replays (the default for client-side views) applies each event.
        """
        if self._check_replays:
            # A view fed from the wire may see replays: each event is checked.
            for event in events:
                self.apply(event)
            return
        fold_in_order(self, events)

    def reset(
        self, snapshot: Snapshot, *, event_id: str | None = None, ts: float | None = None
    ) -> None:
        """Replace the state with ``snapshot``; open calls missing from it become lost."""
        present = {c.call_id for c in snapshot.calls}
        for call_id, rec in self._calls.items():
            if call_id not in present and not rec.state.terminal:
                rec.state = CallState.LOST
                rec.ended_ts = ts
                rec.reason = "lost in a stream reset"
                rec._snap = None
                self._finished[call_id] = None
        for snap in snapshot.calls:
            self._calls[snap.call_id] = _Call.from_snapshot(snap)
            self._finished.pop(snap.call_id, None)
            if snap.state.terminal:
                self._finished[snap.call_id] = None
        present_runs = {r.run_id for r in snapshot.runs}
        for run_id, run in list(self._runs.items()):
            if run_id not in present_runs and run.state == "running":
                self._runs[run_id] = attrs.evolve(
                    run,
                    state="cancelled",
                    ended_ts=ts,
                    error=ErrorInfo(type="Lost", message="lost in a stream reset"),
                )
        for run in snapshot.runs:
            self._set_run(run)
        for batch in snapshot.batches:
            self._batches[batch.batch_id] = batch
        for message in snapshot.messages:
            self._messages[message.message_id] = _Message.from_snapshot(message)
            self._messages.move_to_end(message.message_id)
        self._trim_messages()
        self._trim()
        if event_id is not None:
            self.last_id = event_id

    def _apply_message(self, event: MessageStarted | MessageDelta | MessageFinished) -> bool:
        message_id = event.message_id
        rec = self._messages.get(message_id)
        if rec is None:
            rec = self._messages[message_id] = _Message(message_id, event.run_id, event.id)
            self._trim_messages()
        elif self._check_replays and self._compare(event.id, rec.last_event_id) <= 0:
            return False  # a replay
        rec.last_event_id = event.id
        rec.snap = None
        if isinstance(event, MessageDelta):
            parts = rec.reasoning if event.kind == "reasoning" else rec.text
            parts.append(event.text)
            rec.held += len(event.text)
            if rec.held > 2 * self.max_text:  # bounded, as a call's output is
                for kept in (rec.text, rec.reasoning):
                    kept[:] = ["".join(kept)[-self.max_text :]] if kept else []
                rec.held = sum(len(p) for p in (*rec.text, *rec.reasoning))
        elif isinstance(event, MessageStarted):
            rec.role = event.role
        else:
            rec.finished = True
        return True

    def _trim_messages(self) -> None:
        """Keep the messages of open runs, and at most ``max_runs`` others."""
        messages = self._messages
        if len(messages) <= self.max_runs:
            return
        for message_id, rec in list(messages.items()):
            if len(messages) <= self.max_runs:
                break
            run = self._runs.get(rec.run_id or "")
            if rec.finished or run is None or run.state != "running":
                del messages[message_id]

    def _add_subrun(self, call_id: str, run_id: str) -> None:
        """A sub-agent's run started under call ``call_id``: listed on the call (the
        newest ``max_runs`` of them)."""
        rec = self._calls.get(call_id)
        if rec is None or run_id in rec.subruns:
            return
        subruns = (*rec.subruns, run_id)
        if len(subruns) > self.max_runs:
            subruns = subruns[-self.max_runs :]
        rec.subruns = subruns
        rec._snap = None

    def _set_run(self, run: RunSnapshot) -> None:
        self._runs[run.run_id] = run
        self._runs.move_to_end(run.run_id)
        if len(self._runs) > self.max_runs:
            for run_id, r in list(self._runs.items()):
                if len(self._runs) <= self.max_runs:
                    break
                if r.state != "running":
                    del self._runs[run_id]

    def _apply_call(self, event: Event) -> bool:
        rec = self._calls.get(event.call_id)
        if rec is None:
            rec = _Call(event.call_id, event.tool)
            rec.run_id = event.run_id
            rec.parent_call_id = event.parent_call_id
            rec.created_ts = event.ts
            rec.first_event_id = event.id
            self._calls[event.call_id] = rec
        else:
            last = rec.last_event_id
            if last is not None and self._check_replays:
                try:
                    if self._compare(event.id, last) <= 0:
                        return False  # already applied (a replay)
                except ValueError:
                    pass  # another epoch: a new stream, apply
            if rec.state.terminal:
                return False
        rec.last_event_id = event.id
        rec._snap = None
        if event.run_id is not None:
            rec.run_id = event.run_id
        if event.tool and not rec.tool:
            rec.tool = event.tool
        cls = type(event)
        if cls is ToolArgsDelta:
            assert isinstance(event, ToolArgsDelta)
            if rec.state is CallState.CREATED:
                rec.args_parts.append(event.delta)
        elif cls is ToolOutputDelta:
            assert isinstance(event, ToolOutputDelta)
            self._advance(rec, CallState.RUNNING, event.ts)
            self._append_output(rec, event.text)
        elif cls is ToolProgress:
            assert isinstance(event, ToolProgress)
            self._advance(rec, CallState.RUNNING, event.ts)
            rec.fraction = event.fraction
            rec.current = event.current
            rec.total = event.total
            if event.message is not None:
                rec.message = event.message
        elif cls is ToolOutputPartial:
            assert isinstance(event, ToolOutputPartial)
            self._advance(rec, CallState.RUNNING, event.ts)
            rec.output = event.value
        elif cls is ToolCreated:
            assert isinstance(event, ToolCreated)
            rec.batch_id = event.batch_id or rec.batch_id
            rec.parent_id = event.parent_id or rec.parent_id
            rec.title = event.title or rec.title
        elif cls is ToolReady:
            assert isinstance(event, ToolReady)
            rec.title = event.title or rec.title
            if self._advance(rec, CallState.READY, event.ts):
                rec.args = event.args
                rec.args_valid = event.args_valid
                rec.args_parts = []
                if event.summary is not None:
                    rec.summary = event.summary
        elif cls is ToolQueued:
            assert isinstance(event, ToolQueued)
            rec.batch_id = event.batch_id or rec.batch_id
            rec.title = event.title or rec.title
            self._advance(rec, CallState.QUEUED, event.ts)
        elif cls is ToolStarted:
            assert isinstance(event, ToolStarted)
            rec.title = event.title or rec.title
            if self._advance(rec, CallState.RUNNING, event.ts):
                if event.args is not None:
                    rec.args = event.args
                    rec.args_valid = True if rec.args_valid is None else rec.args_valid
                    rec.args_parts = []
                if event.summary is not None:
                    rec.summary = event.summary
        elif cls is ApprovalRequested:
            assert isinstance(event, ApprovalRequested)
            rec.approval = PendingApproval(
                approval_id=event.approval_id,
                reason=event.reason,
                expires_at=event.expires_at,
                running=event.running,
            )
            rec.decided = None
            if event.args is not None:
                rec.args = event.args
                rec.args_parts = []
                rec.args_valid = True if rec.args_valid is None else rec.args_valid
            if not event.running:
                self._advance(rec, CallState.AWAITING_APPROVAL, event.ts)
                if event.summary is not None:
                    rec.summary = event.summary
        elif cls is ApprovalResolved:
            assert isinstance(event, ApprovalResolved)
            pending = rec.approval
            if pending is None or pending.approval_id == event.approval_id:
                rec.approval = None
                rec.decided = DecidedApproval(
                    approval_id=event.approval_id,
                    approved=event.approved,
                    by=event.by,
                    reason=event.reason,
                    request_reason=None if pending is None else pending.reason,
                    running=False if pending is None else pending.running,
                )
                rec.decided_by = event.by
                if event.approved and event.args is not None:
                    rec.args = event.args
        elif cls is ToolCompleted or cls is ToolFailed or cls is ToolCancelled or cls is ToolDenied:
            self._finish(rec, event)
        return True

    def _append_output(self, rec: _Call, text: str) -> None:
        rec.output_parts.append(text)
        rec.output_len += len(text)
        if rec.output_len > 2 * self.max_text:
            kept = "".join(rec.output_parts)[-self.max_text :]
            rec.output_parts = [kept]
            rec.output_len = len(kept)

    def _advance(self, rec: _Call, state: CallState, ts: float) -> bool:
        """Move ``rec`` forward to ``state``; False when it is there or beyond already."""
        if _ORDER[rec.state] >= _ORDER[state]:
            return False
        rec.state = state
        if state is CallState.RUNNING and rec.started_ts is None:
            rec.started_ts = ts
        return True

    def _finish(self, rec: _Call, event: Any) -> None:
        if isinstance(event, ToolCompleted):
            rec.state = CallState.COMPLETED
            rec.result = event.result
        elif isinstance(event, ToolFailed):
            rec.state = CallState.FAILED
            rec.error = event.error
        elif isinstance(event, ToolDenied):
            rec.state = CallState.DENIED
            rec.reason = event.reason
            if event.by is not None:
                rec.decided_by = event.by
        else:
            rec.state = CallState.CANCELLED
            rec.reason = event.reason
        rec.approval = None
        rec.decided = None
        if event.summary is not None:
            rec.summary = event.summary
        rec.ended_ts = event.ts
        rec.duration_s = event.duration_s
        if rec.started_ts is None:
            rec.started_ts = event.ts
        self._finished[rec.call_id] = None
        self._trim()

    def _trim(self) -> None:
        while len(self._finished) > self.max_finished:
            call_id, _ = self._finished.popitem(last=False)
            self._calls.pop(call_id, None)
