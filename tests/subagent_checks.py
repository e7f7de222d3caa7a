"""What the integrations' sub-agent tests check on the events: the tree (each sub-run
names its call, each call of a sub-run names the run's call) and its order (everything
below a call ends before the call's terminal; exactly one terminal each)."""

from __future__ import annotations

import toolstream as ts
from toolstream._core.events import TERMINAL_EVENTS
from toolstream.testing import assert_lifecycle


def sub_runs(events: list[ts.Event], call_id: str) -> list[ts.RunStarted]:
    """The ``run.started`` of each sub-agent of call ``call_id``."""
    return [e for e in events if isinstance(e, ts.RunStarted) and e.parent_call_id == call_id]


def calls_in(events: list[ts.Event], run_id: str | None) -> list[str]:
    """The call ids announced in run ``run_id``, in order."""
    out: list[str] = []
    for e in events:
        if e.run_id == run_id and e.call_id and e.call_id not in out:
            out.append(e.call_id)
    return out


def terminal(events: list[ts.Event], call_id: str) -> ts.Event:
    """Call ``call_id``'s one terminal event."""
    ends = [e for e in events if isinstance(e, TERMINAL_EVENTS) and e.call_id == call_id]
    assert len(ends) == 1, f"{call_id}: {len(ends)} terminals"
    return ends[0]


def outcome(events: list[ts.Event], run_id: str | None) -> str:
    """How run ``run_id`` finished (it finished exactly once)."""
    ends = [e for e in events if isinstance(e, ts.RunFinished) and e.run_id == run_id]
    assert len(ends) == 1, f"{run_id}: {len(ends)} run.finished"
    return ends[0].outcome


def assert_tree(bus: ts.EventBus, session: str = "s") -> list[ts.Event]:
    """The session's events pass ``assert_lifecycle``; each sub-run's calls carry its
    parent call as ``parent_call_id``; each sub-run and its calls end before the parent
    call's terminal. Returns the events."""
    events = bus.subscribe(session=session, after=f"{bus.epoch}-0").take_nowait()
    assert_lifecycle(events, compare=bus.compare)
    index = {id(e): i for i, e in enumerate(events)}
    for started in (e for e in events if isinstance(e, ts.RunStarted) and e.parent_call_id):
        parent = started.parent_call_id
        assert parent is not None
        parent_end = index[id(terminal(events, parent))]
        finished = next(
            e for e in events if isinstance(e, ts.RunFinished) and e.run_id == started.run_id
        )
        assert finished.parent_call_id == parent
        assert index[id(finished)] < parent_end, f"{started.run_id} ended after {parent}"
        for call_id in calls_in(events, started.run_id):
            announced = next(e for e in events if e.call_id == call_id)
            assert announced.parent_call_id == parent, f"{call_id} not under {parent}"
            assert index[id(terminal(events, call_id))] < index[id(finished)]
    return events


def nesting_of(
    events: list[ts.Event], parent: str = "call_r", agent: str | None = None
) -> ts.RunStarted:
    """The one sub-agent's ``run.started``, checking the tree: it is under call
    ``parent`` of the top run, its events carry that call, and it ends before the call."""
    sub = next(e for e in events if isinstance(e, ts.RunStarted) and e.parent_call_id)
    outer = next(e for e in events if isinstance(e, ts.RunStarted) and not e.parent_call_id)
    assert sub.parent_call_id == parent and sub.parent_run_id == outer.run_id
    if agent is not None:
        assert sub.agent == agent
    for e in events:
        if e.run_id == sub.run_id:
            assert e.parent_call_id == parent, e
    order = [e.id for e in events]
    sub_end = next(e for e in events if isinstance(e, ts.RunFinished) and e.run_id == sub.run_id)
    assert order.index(sub_end.id) < order.index(terminal(events, parent).id), "children first"
    return sub


def cancelled_innermost_first(
    events: list[ts.Event], sub: ts.RunStarted, inner: str = "call_s", parent: str = "call_r"
) -> None:
    """The whole tree was cancelled: the inner call, the sub-run, the parent call and
    every run, the inner call before its sub-run."""
    assert terminal(events, inner).type == "tool.cancelled"
    assert terminal(events, parent).type == "tool.cancelled"
    assert {e.outcome for e in events if isinstance(e, ts.RunFinished)} == {"cancelled"}
    order = [e.id for e in events]
    sub_end = next(e for e in events if isinstance(e, ts.RunFinished) and e.run_id == sub.run_id)
    assert order.index(terminal(events, inner).id) < order.index(sub_end.id)
