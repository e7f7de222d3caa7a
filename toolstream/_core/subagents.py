"""Sub-agents: the runs nested under a call, and what the call's end does to them.

A sub-agent's run (:meth:`CallHandle.subagent`, or a ``tracker.run()`` started inside a
call's block) is a :class:`~toolstream.RunScope` whose parent is the call. The call
keeps the sub-runs not yet over in its ``_subruns`` slot (``None`` for a call that never
had one: what nearly every call pays for nesting is that slot, read once at its end).
Every function here runs with the tracker's lock held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import LifecycleError
from .events import CallState, ErrorInfo

if TYPE_CHECKING:
    from .handle import CallHandle
    from .scopes import RunScope

__all__ = ["adopt", "end_subruns", "may_nest", "release", "waits"]


def may_nest(call: CallHandle, run: RunScope) -> bool:
    """Whether ``run`` may start as a sub-agent of ``call``: the call runs (started now
    if need be), is not hidden and is not too deep. False after a violation (the call
    ended, or waits for a person), and for a hidden call (nobody sees it: its sub-agent's
    run is a run of its own). ``LifecycleError`` past the tracker's
    ``max_subagent_depth``, strict or not."""
    t = call._tracker
    if call.hidden:
        return False
    if not call._report("subagent", not call.done, runs=True):
        return False
    depth = t._depth_of(call) + 1
    if depth > t.max_subagent_depth:
        raise LifecycleError(
            f"call {call.call_id!r} ({call.tool}): a sub-agent at depth {depth} is past "
            f"max_subagent_depth={t.max_subagent_depth} (run {run.run_id!r})",
            call_id=call.call_id,
            state=str(call.state),
            attempted="subagent",
        )
    run.depth = depth
    return True


def adopt(call: CallHandle, run: RunScope) -> None:
    """``run`` started as a sub-agent of ``call``."""
    if call._subruns is None:
        call._subruns = [run]
    else:
        call._subruns.append(run)


def release(call: CallHandle, run: RunScope) -> None:
    """``run`` finished: forgotten, unless it stopped to wait for a person (its waiting
    calls still end with ``call``)."""
    subs = call._subruns
    if subs is not None and not run._interrupted:
        try:
            subs.remove(run)
        except ValueError:
            pass


def waits(call: CallHandle) -> bool:
    """True while ``call``, or a call of one of its sub-agents (at any depth), waits for
    a person: a run finished ``"interrupted"`` keeps such calls open."""
    if call._approval is not None:
        return True
    subs = call._subruns
    if not subs:
        return False
    runs = {run.run_id for run in subs}
    return any(h.run_id in runs and waits(h) for h in list(call._tracker._open.values()))


def end_subruns(call: CallHandle, state: CallState, fields: dict[str, Any]) -> None:
    """``call`` ends with ``state`` (its terminal's ``fields``): its sub-runs still open
    end first, newest first (cancelled, ``RunFinished.reason`` saying why), each with its
    open calls and their own sub-runs; the calls left waiting by a sub-run that stopped
    for a person end too. Children before their parent, one terminal each."""
    subs = call._subruns
    call._subruns = None
    if not subs:
        return
    detail = fields.get("reason")
    error = fields.get("error")
    if isinstance(error, ErrorInfo):
        detail = f"{error.type}: {error.message}" if error.message else error.type
    reason = f"parent call {state.value}" + (f": {detail}" if detail else "")
    t = call._tracker
    for run in reversed(subs):
        if not run._finished:
            run._finish_locked("cancelled", None, reason)
        else:
            t._close_calls([h for h in t._open.values() if h.run_id == run.run_id], reason)
