"""What every integration keeps about the calls of one tracker (one seam, shared)."""

from __future__ import annotations

import contextlib
import json
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from toolstream._core.scopes import is_cancellation

if TYPE_CHECKING:
    from toolstream import CallHandle, Decision, MessageHandle, Tracker

__all__ = [
    "Bounded",
    "Calls",
    "Outcome",
    "Words",
    "calls_of",
    "every_calls",
    "follower_of",
    "framework_run",
    "parse_args",
    "refusal",
]

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A map that keeps its newest ``limit`` entries (correlation ids a framework may
    never close)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._limit = limit

    def __setitem__(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)


class Words:
    """The model's text and reasoning as the run's messages (``tracker.message()``):
    one message per message of the model (``key``: the framework's id for it), ended
    before a call's card or an approval request, so a turn reads text, cards, text —
    in the order the model wrote them."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        #: False: publish no text (``messages=False``).
        self.enabled = True
        self._current: MessageHandle | None = None
        self._key: object = None

    def add(self, key: object, text: object, kind: str = "text") -> None:
        """Append ``text`` (answer text, or ``kind="reasoning"``) to the model's message
        ``key``; a new message when ``key`` changes or the last one ended."""
        if not self.enabled or not isinstance(text, str) or not text:
            return
        current = self._current
        if current is None or current.finished or key != self._key:
            self.end()
            current = self._current = self.calls.tracker.message(run_id=self.calls.run_id)
            self._key = key
        if kind == "reasoning":
            current.reasoning(text)
        else:
            current.delta(text)

    def end(self) -> None:
        """The model's message so far is complete (a call's card, a wait, the run's end
        comes next)."""
        current, self._current = self._current, None
        if current is not None and not current.finished:
            current.finish()


class Calls:
    """The calls a framework reported on one tracker, by the model's call id: a call
    ended and reported again (a retry with the same id) is a new call; a call waiting
    for approval that a later run resumes joins that run."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.handles: dict[str, CallHandle] = {}
        #: call id -> approval id, for approvals asked and not yet applied.
        self.approvals: dict[str, str] = {}
        #: The toolstream run the framework's run is now (calls join it).
        self.run_id: str | None = None
        #: Seconds an approval may wait for a person (None: no expiry).
        self.approval_timeout: float | None = None
        #: The model's text and reasoning, as the run's messages.
        self.words = Words(self)
        #: Why a call needs a person, when the framework gives no reason: ``(tool, args)
        #: -> reason`` (``chat_agent(approval_reason=...)``).
        self.reason_for: Callable[[str, Any], str | None] | None = None
        #: How the latest framework run ended (what a chat turn resumes).
        self.outcome = Outcome()

    def handle(self, call_id: str, tool: str) -> CallHandle:
        """The open call of this id, or a new one (the model's text so far ends first:
        the card comes after it)."""
        handle = self.handles.get(call_id)
        if handle is None or handle.done:
            self.words.end()
            handle = self.tracker.create(tool, call_id=call_id, run_id=self.run_id, announce=False)
            self.handles[call_id] = handle
        elif self.run_id is not None and handle.run_id != self.run_id:
            handle.run_id = self.run_id
        return handle

    def open(self, call_id: object) -> CallHandle | None:
        """The call of this id if it is still open."""
        handle = self.handles.get(call_id) if isinstance(call_id, str) else None
        return None if handle is None or handle.done else handle

    def state_of(self, handle: CallHandle) -> str | None:
        state = handle.state
        return None if state is None else state.value

    def ready(self, call_id: str, tool: str, args: Any) -> CallHandle:
        """The call's input is known (a no-op once it was)."""
        handle = self.handle(call_id, tool)
        if self.state_of(handle) in (None, "created"):
            handle.ready(args)
        return handle

    def start(self, call_id: str, tool: str, args: Any) -> CallHandle:
        """The call runs (a no-op once it does)."""
        handle = self.handle(call_id, tool)
        if self.state_of(handle) in (None, "created", "ready"):
            handle.start(args)
        return handle

    def ask(self, call_id: str, tool: str, args: Any, reason: str | None = None) -> str | None:
        """The call waits for a person; its approval id (None when it cannot wait)."""
        handle = self.ready(call_id, tool, args)
        if self.state_of(handle) == "ready":
            return self.ask_for(handle, reason)
        return handle.approval_id

    def ask_for(self, handle: CallHandle, reason: str | None) -> str:
        """Ask a person about ``handle`` (waiting to run, or running) unless an approval
        is pending already; its approval id, recorded for the decision."""
        approval_id = handle.approval_id
        if approval_id is None:
            self.words.end()  # the words before a wait are complete before it
            if reason is None and self.reason_for is not None:
                reason = self.reason_for(handle.tool, handle.args)
            approval_id = handle.await_approval(reason, timeout=self.approval_timeout)
        self.approvals[handle.call_id] = approval_id
        return approval_id


C = TypeVar("C", bound=Calls)

_CALLS: weakref.WeakKeyDictionary[Any, dict[type[Calls], Calls]] = weakref.WeakKeyDictionary()


def follower_of(tracker: Tracker, kind: type[C]) -> C:
    """The record of ``kind`` (an integration's :class:`Calls`) of ``tracker``: one per
    tracker and kind, made on first use."""
    by_kind = _CALLS.get(tracker)
    if by_kind is None:
        by_kind = _CALLS[tracker] = {}
    calls = by_kind.get(kind)
    if not isinstance(calls, kind):
        calls = kind(tracker)
        by_kind[kind] = calls
    return calls


def calls_of(tracker: Tracker) -> Calls:
    """The plain :class:`Calls` record of ``tracker``."""
    return follower_of(tracker, Calls)


def every_calls(kind: type[C]) -> list[C]:
    """Every live record of ``kind`` (whatever the tracker)."""
    return [
        c
        for by_kind in list(_CALLS.values())
        for c in by_kind.values()
        if isinstance(c, kind) and type(c) is kind
    ]


class Outcome:
    """How a framework's run ended, as its integration learns it: ``waiting`` when it
    stopped for approvals (the toolstream run then finishes ``interrupted``);
    ``stopped`` when it stopped at any interrupt of the framework's (one toolstream
    knows nothing about too)."""

    def __init__(self) -> None:
        self.waiting = False
        self.stopped = False


@contextlib.contextmanager
def framework_run(
    calls: Calls,
    run_id: str | None,
    *,
    framework_id: bool = False,
    parent: CallHandle | None = None,
    agent: str | None = None,
) -> Iterator[Outcome]:
    """One toolstream run around one framework run: calls reported inside join it; it
    finishes ``cancelled`` or ``failed`` as the body ends, else ``interrupted`` when the
    body set ``outcome.waiting``, else ``completed``.

    Inside an open ``tracker.run()`` (a chat turn that drives the framework, perhaps
    several times across a wait for a person) the framework run joins that run instead:
    its calls and messages are the turn's, and the run's owner ends it. ``run_id``, if
    the caller chose it, must then be that run's (else the framework run is its own);
    ``framework_id``: ``run_id`` is the framework's own id, never a choice.

    ``parent``: the framework run is a sub-agent's, run by that call's tool: a run
    nested under the call (``agent``: its name, the call's tool by default), never
    joined to an enclosing one."""
    enclosing = None if parent is not None else calls.tracker._run_for(None)
    if enclosing is not None and (run_id is None or framework_id or run_id == enclosing):
        previous, calls.run_id = calls.run_id, enclosing
        calls.outcome = Outcome()
        try:
            yield calls.outcome
        finally:
            calls.words.end()
            calls.run_id = previous
        return
    if parent is None:
        run = calls.tracker.run(run_id=run_id).start()
    else:
        run = parent.subagent(agent, run_id=run_id).start()
    previous, calls.run_id = calls.run_id, run.run_id
    outcome = calls.outcome = Outcome()
    try:
        yield outcome
    except BaseException as exc:
        calls.words.end()
        if is_cancellation(exc):
            run.finish("cancelled")
        else:
            run.finish("failed", error=exc)
        raise
    finally:
        calls.run_id = previous
    calls.words.end()
    run.finish("interrupted" if outcome.waiting else "completed")


def parse_args(text: object) -> Any:
    """A call's arguments from the JSON text a framework gives (the text when invalid)."""
    if isinstance(text, str):
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            return text
    return {} if text is None else text


def refusal(decision: Decision, verb: str = "denied") -> str:
    """Why a call was not approved, as the model reads it: the person's reason, else who
    refused; an approval that expired was "not approved in time"."""
    if decision.by == "timeout":
        return "not approved in time"
    return decision.reason or f"{verb} by {decision.by or 'a person'}"
