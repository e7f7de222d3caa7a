"""Sub-agents in the integrations: a framework's agent run inside a tool call, reported
as a run nested under that call (:meth:`~toolstream.CallHandle.subagent`).

An integration keeps one :class:`Nest` next to its :class:`~._calls.Calls` record. When
it learns that something it reports belongs to an agent running inside call ``c`` (a
LangGraph namespace, a LangChain ``parent_run_id`` chain, an ADK invocation started in
the call's context, a smolagents managed agent), ``nest.sub(c)`` is the record to report
it on: a :class:`SubCalls` whose run is ``c``'s sub-agent, started on first use. Before
``c`` ends, ``nest.end(c, ...)`` finishes that run with the call's outcome. A call that
never ran an agent costs one dictionary look-up at its end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolstream.integrations._calls import Calls

if TYPE_CHECKING:
    from toolstream import CallHandle, RunScope
    from toolstream._core.events import RunOutcome

__all__ = ["Nest", "SubCalls"]


class SubCalls(Calls):
    """The record of a sub-agent's run: its calls and its model's words join the run
    nested under ``parent`` (a call reported on ``outer``). The calls themselves are
    shared with ``outer`` (a call id is one call, whichever agent reports it), and so
    are the approvals and their settings."""

    def __init__(self, outer: Calls, parent: CallHandle, agent: str | None = None) -> None:
        super().__init__(outer.tracker)
        self.outer = outer
        self.parent = parent
        self.handles = outer.handles
        self.approvals = outer.approvals
        self.approval_timeout = outer.approval_timeout
        self.reason_for = outer.reason_for
        self.words.enabled = outer.words.enabled
        outer.words.end()  # the outer agent's words so far come before the sub-agent's
        self.run: RunScope = parent.subagent(agent).start()
        self.run_id = self.run.run_id

    @property
    def open_run(self) -> bool:
        return self.run.started and not self.run.finished

    def finish(self, outcome: RunOutcome = "completed", error: Any = None) -> None:
        """The sub-agent's run ends (a no-op once it did)."""
        self.words.end()
        if self.open_run:
            self.run.finish(outcome, error=error)


class Nest:
    """The sub-agents' records of one integration, by the call they run in (at any
    depth: a sub-agent's own calls are in the same shared handles)."""

    def __init__(self, outer: Calls, kind: type[SubCalls] = SubCalls) -> None:
        self.outer = outer
        self._kind = kind
        self._subs: dict[str, SubCalls] = {}

    def sub(self, call_id: object, agent: str | None = None) -> Calls:
        """The record for what an agent running inside call ``call_id`` reports: that
        call's sub-agent (started now if need be). The outer record when the call is
        not open (unknown, or ended: its stragglers are the outer agent's)."""
        if not isinstance(call_id, str):
            return self.outer
        sub = self._subs.get(call_id)
        if sub is not None and sub.open_run:
            return sub
        parent = self.outer.open(call_id)
        if parent is None:
            return self.outer
        sub = self._kind(self.outer, parent, _agent_name(agent))
        if not sub.open_run:  # refused (a lenient tracker's violation): report flat
            return self.outer
        self._subs[call_id] = sub
        return sub

    def get(self, call_id: object) -> SubCalls | None:
        """Call ``call_id``'s sub-agent record, if it has one open."""
        sub = self._subs.get(call_id) if isinstance(call_id, str) else None
        return sub if sub is not None and sub.open_run else None

    def end(self, call_id: object, outcome: RunOutcome = "completed", error: Any = None) -> None:
        """Call ``call_id`` is about to end: its sub-agent's run (if any) ends first, with
        ``outcome``. (A call that ends without this — cancelled by its run's end — ends
        its sub-agent itself: ``cancelled``, saying why.)"""
        if not self._subs or not isinstance(call_id, str):
            return
        sub = self._subs.pop(call_id, None)
        if sub is not None:
            sub.finish(outcome, error)


def _agent_name(name: str | None) -> str | None:
    """A usable agent name (``None``: the call's tool names the sub-agent)."""
    if not isinstance(name, str) or not name or len(name) > 128 or not name.isprintable():
        return None
    return name
