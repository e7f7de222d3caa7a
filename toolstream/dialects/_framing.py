"""Run framing shared by the per-run protocols (AG-UI, the AI SDK UI message stream).

Both protocols put every tool call inside a run (an AG-UI run, an AI SDK assistant
message). This keeps the bookkeeping in one place: the current run, implicit runs for
calls made outside any run (closed at the next ``run.started``, when none of their
calls is open any more, or at ``close()``), nested runs folded into the outer one,
and which calls the client already knows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

import attrs

from toolstream import (
    ApprovalResolved,
    BatchPhase,
    CallSnapshot,
    CallState,
    ErrorInfo,
    Event,
    JSONValue,
    MessageDelta,
    MessageFinished,
    MessageSnapshot,
    MessageStarted,
    RunFinished,
    RunSnapshot,
    RunStarted,
    Snapshot,
    StreamReset,
)
from toolstream._core.events import MESSAGE_EVENTS
from toolstream._core.ids import seq_key

from ._base import BaseDialect, WireMessage

__all__ = ["CallMemory", "MessageMemory", "RunFramedDialect", "RunFraming", "SubRun"]

_MAX_FINISHED = 10_000
#: The events the run framing itself handles (the rest are a call's or a message's).
_FRAMING_EVENTS: frozenset[type[Event]] = frozenset(
    {RunStarted, RunFinished, StreamReset, BatchPhase}
)


@attrs.define
class CallMemory:
    """What a client already received about one call."""

    call_id: str
    tool: str
    opened: bool = False  # the protocol's "start" message was sent
    input_done: bool = False  # the input is complete on the client's side
    input_streamed: bool = False  # some input text was sent as deltas
    output_text: str = ""  # text output accumulated (AI SDK preliminary output)
    approval: str | None = None  # the id of the approval the client was asked, undecided
    approval_running: bool = False  # ... asked from inside the running tool
    input: JSONValue = None  # the input the client holds (once complete)
    approval_reason: str | None = None
    approval_expires: float | None = None
    #: The sub-agent's run the call belongs to (None: the run's own agent's call).
    subrun: str | None = None


@attrs.define
class MessageMemory:
    """What a client already received about one message."""

    message_id: str
    #: The kinds ("text", "reasoning") whose part was started on the wire and not ended.
    open: set[str] = attrs.field(factory=set)
    #: The sub-agent's run the message belongs to, if any.
    subrun: str | None = None


@attrs.define
class SubRun:
    """A sub-agent's run the client was told of, nested under a call it knows."""

    run_id: str
    #: The call whose sub-agent it is.
    parent_call_id: str
    #: The agent's name.
    agent: str
    #: The sub-agent's run the parent call belongs to (nested deeper), if any.
    parent: str | None = None
    #: False once its ``run.finished`` was encoded.
    open: bool = True
    #: Open on the wire in the protocol's terms (AG-UI: started in the current AG-UI run).
    wire: bool = False


class RunFraming:
    """Which run is open on the wire and which calls the client knows.

    The dialect asks it what to do (``enter_run``, ``leave_run``, ``ensure_run``...)
    and writes the protocol's messages itself.
    """

    def __init__(self) -> None:
        self.thread: str = ""
        self.run: str | None = None  # the run open on the wire
        self.implicit = False
        self.nested: set[str] = set()  # explicit runs started inside the open one
        self.calls: dict[str, CallMemory] = {}  # calls of the open run not yet ended
        self.messages: dict[str, MessageMemory] = {}  # messages of the open run, not ended
        #: Sub-agents' runs nested under the open run's calls, oldest first.
        self.subruns: dict[str, SubRun] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._finished_messages: OrderedDict[str, None] = OrderedDict()

    def saw(self, event: Event) -> None:
        """Learn the session (the AG-UI thread) from any event."""
        if event.session:
            self.thread = event.session

    def finished(self, call_id: str) -> bool:
        """True when the client already got this call's end."""
        return call_id in self._finished

    def finish(self, call_id: str) -> None:
        """Record a call's end (bounded memory of ended calls)."""
        self.calls.pop(call_id, None)
        self._finished[call_id] = None
        if len(self._finished) > _MAX_FINISHED:
            self._finished.popitem(last=False)

    def message_done(self, message_id: str) -> bool:
        """True when the client already got this message's end."""
        return message_id in self._finished_messages

    def finish_message(self, message_id: str) -> None:
        """Record a message's end (bounded memory of ended messages)."""
        self.messages.pop(message_id, None)
        self._finished_messages[message_id] = None
        if len(self._finished_messages) > _MAX_FINISHED:
            self._finished_messages.popitem(last=False)

    def message(self, message_id: str, run_id: str | None = None) -> MessageMemory:
        """The memory of a message of the open run (created on first sight)."""
        memory = self.messages.get(message_id)
        if memory is None:
            memory = self.messages[message_id] = MessageMemory(message_id)
            if self.subruns:
                memory.subrun = self.running_subrun(run_id)
        return memory

    def call(self, event: Event) -> CallMemory:
        """The memory of ``event``'s call (created on first sight)."""
        memory = self.calls.get(event.call_id)
        if memory is None:
            memory = self.calls[event.call_id] = CallMemory(event.call_id, event.tool)
            if self.subruns:
                memory.subrun = self.running_subrun(event.run_id)
        elif self.subruns and memory.subrun != event.run_id:
            # adopted by another sub-agent's run (a framework that resumed it)
            memory.subrun = self.running_subrun(event.run_id) or memory.subrun
        return memory

    def running_subrun(self, run_id: str | None) -> str | None:
        """``run_id`` when it is a sub-agent's run still running (what a call or message
        of it is attributed to); a straggler of a finished one is the run's own."""
        sub = self.subruns.get(run_id or "")
        return run_id if sub is not None and sub.open else None

    # -- sub-agents ---------------------------------------------------------------------

    def nest(self, run_id: str, parent_call_id: str | None, agent: str | None) -> SubRun | None:
        """A sub-agent's run starts: known to the client when its parent call is (the
        sub-run is then nested under it); None otherwise (it is folded like any run
        started inside another)."""
        if parent_call_id is None or run_id in self.subruns:
            return None
        parent = self.calls.get(parent_call_id)
        if parent is None:
            return None
        sub = SubRun(run_id, parent_call_id, agent or parent.tool, parent.subrun)
        self.subruns[run_id] = sub
        return sub

    def lineage(self, sub: SubRun) -> list[SubRun]:
        """``sub`` and the sub-runs it is nested in, outermost first."""
        chain = [sub]
        while chain[-1].parent is not None:
            up = self.subruns.get(chain[-1].parent or "")
            if up is None:
                break
            chain.append(up)
        chain.reverse()
        return chain

    def below(self, sub: SubRun) -> list[SubRun]:
        """The sub-runs nested in ``sub`` (at any depth), innermost last."""
        out: list[SubRun] = []
        ids = {sub.run_id}
        for other in self.subruns.values():
            if other.parent in ids:
                ids.add(other.run_id)
                out.append(other)
        return out

    # -- runs -------------------------------------------------------------------------

    def is_nested_start(self, event: RunStarted) -> bool:
        """A ``run.started`` inside an explicit open run: folded into it (no message)."""
        if self.run is not None and not self.implicit and event.run_id != self.run:
            self.nested.add(event.run_id or "")
            return True
        return False

    def is_nested_finish(self, event: RunFinished) -> bool:
        """The end of a folded nested run (no message)."""
        run = event.run_id or ""
        if run in self.nested:
            self.nested.discard(run)
            return True
        return False

    def implicit_id(self, event_id: str) -> str:
        """The id of an implicit run opened at event ``event_id``."""
        return f"implicit-{event_id}"

    def open_calls(self) -> list[CallMemory]:
        """The calls of the open run the client knows and that did not end."""
        return list(self.calls.values())

    def closing_calls(self, event: RunFinished | None) -> list[CallMemory]:
        """The calls a run's end closes on the wire: all of them, except, when the run
        was ``interrupted``, those waiting for a decision (they stay open across it), and
        the calls whose sub-agents have calls waiting."""
        if event is not None and event.outcome == "interrupted":
            waiting = self.waiting_ids()
            return [c for c in self.calls.values() if c.call_id not in waiting]
        return list(self.calls.values())

    def waiting_ids(self) -> set[str]:
        """The calls waiting for a decision, and the calls up the sub-agents' tree from
        them (a call whose sub-agent waits is suspended too)."""
        waiting = {c.call_id for c in self.calls.values() if c.approval is not None}
        for call in [c for c in self.calls.values() if c.approval is not None]:
            sub = self.subruns.get(call.subrun or "")
            while sub is not None and sub.parent_call_id not in waiting:
                waiting.add(sub.parent_call_id)
                sub = self.subruns.get(sub.parent or "")
        return waiting

    def end_run(self) -> None:
        """The open run ended on the wire: no run is open; of the sub-agents' runs only
        those still open under a call that stays open (waiting for a person) remain."""
        self.run = None
        self.implicit = False
        self.nested.clear()
        if self.subruns:
            busy = {c.subrun for c in self.calls.values()}
            self.subruns = {
                k: s
                for k, s in self.subruns.items()
                if (s.open and s.parent_call_id in self.calls) or k in busy
            }

    def awaiting(self) -> list[CallMemory]:
        """The calls whose approval the client was asked and that are undecided."""
        return [c for c in self.calls.values() if c.approval is not None]

    def implicit_may_close(self) -> bool:
        """An implicit run with no open call or message left closes."""
        return self.run is not None and self.implicit and not self.calls and not self.messages

    # -- resets -------------------------------------------------------------------------

    @staticmethod
    def target(
        snapshot: Snapshot,
    ) -> tuple[str | None, bool, list[CallSnapshot], list[RunSnapshot]]:
        """From a reset: the run to have open on the wire (its id, whether implicit), its
        open calls (those of its sub-agents' runs too), oldest first, and its sub-agents'
        runs still open, outermost first. Finished calls are never re-sent."""
        open_runs = [r for r in snapshot.runs if r.state == "running"]
        open_calls = [c for c in snapshot.calls if not c.state.terminal]
        subruns = [r for r in open_runs if r.parent_call_id is not None]
        tops = [r for r in open_runs if r.parent_call_id is None]
        open_ids = {c.call_id for c in open_calls}
        if tops:
            # The outermost open run (other runs started inside it are folded into it).
            run = min(tops, key=lambda r: r.started_ts or 0.0).run_id
            runs = {r.run_id for r in tops}
        else:
            loose = [c for c in open_calls if c.run_id is None]
            if not loose:
                return None, False, [], []
            first = min(loose, key=lambda c: seq_key(c.first_event_id))
            run = f"implicit-{first.first_event_id or first.call_id}"
            runs = {None}  # type: ignore[arg-type]
        # The sub-agents nested under the open calls, at any depth (outermost first).
        nested: list[RunSnapshot] = []
        for sub in sorted(subruns, key=lambda r: seq_key(r.first_event_id)):
            if sub.parent_call_id in open_ids and (
                sub.parent_run_id in runs or sub.parent_run_id in {n.run_id for n in nested}
            ):
                nested.append(sub)
        inside = runs | {n.run_id for n in nested}
        calls = [c for c in open_calls if c.run_id in inside]
        return run, not tops, _oldest_first(calls), nested

    def remember_finished(self, calls: Iterable[CallSnapshot]) -> None:
        """Calls a reset shows as ended: later events for them are ignored."""
        for call in calls:
            if call.state.terminal:
                self.finish(call.call_id)


def _oldest_first(calls: list[CallSnapshot]) -> list[CallSnapshot]:
    return sorted(calls, key=lambda c: seq_key(c.first_event_id))


def input_done(call: CallSnapshot) -> bool:
    """Whether a client that saw this call up to now has its complete input."""
    return call.state in (
        CallState.READY,
        CallState.AWAITING_APPROVAL,
        CallState.QUEUED,
        CallState.RUNNING,
    )


def error_text(error: ErrorInfo | None, default: str = "failed") -> str:
    """``"TimeoutError: timed out"``."""
    if error is None:
        return default
    return f"{error.type}: {error.message}" if error.message else error.type


class RunFramedDialect(BaseDialect):
    """The skeleton every run-framed dialect shares: run events, resets and priming,
    implicit runs. A dialect supplies its messages through the hooks below."""

    def __init__(self) -> None:
        self._frame = RunFraming()

    # -- hooks ----------------------------------------------------------------------------

    def _open_run(self, run_id: str, implicit: bool) -> list[WireMessage]:  # pragma: no cover
        """Open a run on the wire (and record it in the framing)."""
        raise NotImplementedError

    def _close_run(self, event: RunFinished | None = None) -> list[WireMessage]:  # pragma: no cover
        """Close the open run (with its outcome when ``event`` says)."""
        raise NotImplementedError

    def _call_event(self, call: CallMemory, event: Event) -> list[WireMessage]:  # pragma: no cover
        """The messages for one event of a call, inside an open run."""
        raise NotImplementedError

    def _batch_phase(self, event: BatchPhase) -> list[WireMessage]:  # pragma: no cover
        """The messages for a batch's phase, inside an open run."""
        raise NotImplementedError

    def _reopen(
        self, call: CallMemory, snap: CallSnapshot
    ) -> list[WireMessage]:  # pragma: no cover
        """After a reset: what brings a client to an open call's current state."""
        raise NotImplementedError

    def _subrun_started(self, sub: SubRun) -> list[WireMessage]:
        """A sub-agent's run started under a call the client knows (recorded in the
        framing): what says so on the wire. Nothing by default."""
        return []

    def _subrun_finished(self, sub: SubRun, event: RunFinished) -> list[WireMessage]:
        """A sub-agent's run finished (its calls ended before): what says so on the wire.
        Its messages end; nothing else by default."""
        return self._end_messages(sub.run_id)

    def _part(
        self, kind: str, phase: str, message_id: str, text: str = "", subrun: str | None = None
    ) -> list[WireMessage]:  # pragma: no cover
        """The protocol's messages that ``phase`` (``"start"``, ``"delta"``, ``"end"``) a
        message's part of ``kind`` (``"text"``, ``"reasoning"``); ``subrun``: the
        sub-agent's run the message belongs to, if any."""
        raise NotImplementedError

    def _message_text(self, message: MessageMemory, kind: str, text: str) -> list[WireMessage]:
        """Text of ``kind`` appended to a message: the other kind's part ends (the model
        moved on), this kind's starts if need be."""
        out: list[WireMessage] = []
        sub = message.subrun
        for other in list(message.open):
            if other != kind:
                message.open.discard(other)
                out += self._part(other, "end", message.message_id, subrun=sub)
        if kind not in message.open:
            message.open.add(kind)
            out += self._part(kind, "start", message.message_id, subrun=sub)
        return out + self._part(kind, "delta", message.message_id, text, subrun=sub)

    def _end_message(self, message: MessageMemory) -> list[WireMessage]:
        """End what is open of a message on the wire."""
        out: list[WireMessage] = []
        for kind in ("reasoning", "text"):
            if kind in message.open:
                message.open.discard(kind)
                out += self._part(kind, "end", message.message_id, subrun=message.subrun)
        return out

    def fail(self, text: str, code: str) -> list[WireMessage]:  # pragma: no cover
        """The messages that end a response with an error of the transport's own (the
        run never started, the bus went away), as the protocol says an error."""
        raise NotImplementedError

    def pause(self) -> list[WireMessage]:  # pragma: no cover
        """The messages that end a response where the run waits for a person, leaving
        the calls that wait open; the dialect continues the run with what follows."""
        raise NotImplementedError

    def _end_messages(self, subrun: str | None = None) -> list[WireMessage]:
        """End every open message of the run (before the run's own end), or only those of
        the sub-agent's run ``subrun``."""
        frame = self._frame
        out: list[WireMessage] = []
        for message in list(frame.messages.values()):
            if subrun is not None and message.subrun != subrun:
                continue
            out += self._end_message(message)
            frame.finish_message(message.message_id)
        return out

    # -- the shared part ------------------------------------------------------------------

    def encode(self, event: Event) -> list[WireMessage]:
        """The dialect's messages for one lifecycle event."""
        frame = self._frame
        if event.session:
            frame.thread = event.session  # frame.saw(event), inline: every event passes
        kind = type(event)
        if kind not in _FRAMING_EVENTS:  # a call's or a message's event: the bulk
            if kind in MESSAGE_EVENTS:
                return self._message_event(event)
            return self._call_or_decision(event)
        if isinstance(event, RunStarted):
            if event.parent_call_id is not None:
                sub = frame.nest(event.run_id or "", event.parent_call_id, event.agent)
                if sub is not None:  # nested under a call the client knows
                    if frame.run is not None:
                        return self._subrun_started(sub)
                    # the call outlived its run on the wire (a loose call): framed anew
                    opened = self._open_run(frame.implicit_id(event.id), implicit=True)
                    return opened + self._subrun_started(sub)
            if frame.is_nested_start(event):
                return []
            closing = self._close_run() if frame.implicit else []
            if frame.run == event.run_id:
                return closing
            return closing + self._open_run(event.run_id or "", implicit=False)
        if isinstance(event, RunFinished):
            sub = frame.subruns.get(event.run_id or "") if frame.subruns else None
            if sub is not None:
                if not sub.open:
                    return []
                sub.open = False
                return self._subrun_finished(sub, event)
            if frame.is_nested_finish(event) or frame.run != event.run_id:
                return []
            return self._close_run(event)
        if isinstance(event, StreamReset):
            return self._reset(event.snapshot)
        if isinstance(event, BatchPhase):
            # Outside a run it has nothing to ride on (its calls already ended).
            return self._batch_phase(event) if frame.run is not None else []
        return self._call_or_decision(event)  # an event class of a subclass's own

    def _call_or_decision(self, event: Event) -> list[WireMessage]:
        """An event of a call, inside a run (implicit if need be)."""
        frame = self._frame
        if not event.call_id or frame.finished(event.call_id):
            return []
        if frame.run is None and isinstance(event, ApprovalResolved):
            # A decision made between runs (its run finished "interrupted"): the run that
            # resumes the call carries what follows; no run of its own for the decision.
            memory = frame.calls.get(event.call_id)
            if memory is not None and memory.approval == event.approval_id:
                memory.approval = None
            return []
        out: list[WireMessage] = []
        if frame.run is None:
            out += self._open_run(frame.implicit_id(event.id), implicit=True)
        out += self._call_event(frame.call(event), event)
        if frame.implicit_may_close():
            out += self._close_run()
        return out

    def _message_event(self, event: Event) -> list[WireMessage]:
        """``message.*``: text and reasoning parts, inside a run (implicit if need be)."""
        frame = self._frame
        message_id: str = event.message_id  # type: ignore[attr-defined]
        if frame.message_done(message_id):
            return []
        if type(event) is MessageDelta and event.text and frame.run is not None:
            # The bulk of a turn: more text of the part the message has open (and only
            # that one): nothing to start, end or close, the delta alone.
            memory = frame.messages.get(message_id)
            if memory is not None and len(memory.open) == 1 and event.kind in memory.open:
                return self._part(event.kind, "delta", message_id, event.text, memory.subrun)
        out: list[WireMessage] = []
        if isinstance(event, MessageStarted) and event.role != "assistant":
            # A person's words (a LangGraph client's message, kept on the bus): not the
            # agent's message these protocols frame.
            frame.finish_message(message_id)
            return []
        if isinstance(event, MessageFinished):
            memory = frame.messages.get(message_id)
            if memory is not None:
                out += self._end_message(memory)
            frame.finish_message(message_id)
        elif isinstance(event, MessageDelta):
            if not event.text:
                return []
            if frame.run is None:
                out += self._open_run(frame.implicit_id(event.id), implicit=True)
            memory = frame.message(message_id, event.run_id)
            out += self._message_text(memory, event.kind, event.text)
        if frame.implicit_may_close():
            out += self._close_run()
        return out

    def _replay_messages(self, snapshot: Snapshot, runs: set[str | None]) -> list[WireMessage]:
        """After a reset: the messages of the open run the client does not know, whole."""
        frame = self._frame
        out: list[WireMessage] = []
        ordered = sorted(snapshot.messages, key=lambda m: seq_key(m.first_event_id))
        for snap in ordered:
            if snap.run_id not in runs or frame.message_done(snap.message_id):
                continue
            if snap.role != "assistant":
                continue  # a person's words, not the agent's
            if snap.message_id in frame.messages:
                continue  # the client has it (what it missed is not known here)
            out += self._message_snapshot(snap)
        return out

    def _message_snapshot(self, snap: MessageSnapshot) -> list[WireMessage]:
        frame = self._frame
        memory = frame.message(snap.message_id, snap.run_id)
        out: list[WireMessage] = []
        if snap.reasoning:
            out += self._message_text(memory, "reasoning", snap.reasoning)
        if snap.text:
            out += self._message_text(memory, "text", snap.text)
        if snap.finished:
            out += self._end_message(memory)
            frame.finish_message(snap.message_id)
        return out

    def _reset(self, snapshot: Snapshot) -> list[WireMessage]:
        """Re-open only the current run's open calls (and its sub-agents' runs still open,
        each before its first call); never re-send finished ones."""
        frame = self._frame
        frame.remember_finished(snapshot.calls)
        run, implicit, calls, subruns = frame.target(snapshot)
        out: list[WireMessage] = []
        if frame.run is not None and frame.run != run:
            out += self._close_run()
        if run is not None and frame.run is None:
            out += self._open_run(run, implicit)
        pending = {r.run_id: r for r in subruns if r.run_id not in frame.subruns}
        for snap in calls:
            if frame.finished(snap.call_id):
                continue
            if snap.run_id in pending:
                out += self._reopen_subruns(pending, snap.run_id)
            call = frame.calls.get(snap.call_id)
            if call is None:
                call = frame.calls[snap.call_id] = CallMemory(snap.call_id, snap.tool)
                call.subrun = frame.running_subrun(snap.run_id)
            out += self._reopen(call, snap)
        for run_id in list(pending):  # open, with no open call of their own
            out += self._reopen_subruns(pending, run_id)
        if run is not None:
            runs: set[str | None] = {r.run_id for r in snapshot.runs if r.state == "running"}
            if implicit:
                runs = {None, *(r.run_id for r in subruns)}
            out += self._replay_messages(snapshot, runs)
        return out

    def _reopen_subruns(
        self, pending: dict[str, RunSnapshot], run_id: str | None
    ) -> list[WireMessage]:
        """Open on the wire the sub-agent's run ``run_id`` from a reset, after the ones it
        is nested in (each once: taken from ``pending``)."""
        snap = pending.pop(run_id or "", None)
        if snap is None:
            return []
        out = self._reopen_subruns(pending, self._run_of_call(snap.parent_call_id))
        sub = self._frame.nest(snap.run_id, snap.parent_call_id, snap.agent)
        return out + ([] if sub is None else self._subrun_started(sub))

    def _run_of_call(self, call_id: str | None) -> str | None:
        """The sub-agent's run a call the client knows belongs to, if any."""
        call = self._frame.calls.get(call_id or "")
        return None if call is None else call.subrun

    def prime(self, snapshot: Snapshot) -> None:
        """Take on the state of a client that saw everything up to the snapshot."""
        self._reset(snapshot)
