"""Publishing on an ``EventBus``: one template, compiled per way of building an event.

What publishing does once the event is built (next id, append to the session's log,
trim, wake the waiting consumers) is written once, here, and compiled into each
publisher: the generic one (:data:`publish_built`), which calls a builder of the
event's plan, and one per class on the trackers' hot paths (:func:`hot_publisher`:
progress, output text, message text), which stores the fields itself with the
builder's own lines (``EventPlan.stores``) — one frame, no tuple of values, no
``(event, size)`` pair: ~0.2 µs less per tracked event. The generated functions are
compiled like the builders, so tracebacks show their lines. They take the bus as
``self`` and read its private state: they are its methods, written out per class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from .build import EVENT_OVERHEAD, deep_size, plan_of
from .codegen import compile_functions
from .errors import BusClosed
from .events import ApprovalRequested, ApprovalResolved, Event
from .subscription import wake_all

__all__ = ["APPROVAL_EVENTS", "hot_publisher", "publish_built"]

#: Events the bus's approval book observes as they are published.
APPROVAL_EVENTS = frozenset({ApprovalRequested, ApprovalResolved})

# acquire/release rather than ``with``: half the interpreter work on this path.
_PUBLISHER = """\
def {name}(self, {params}):
    lock = self._lock
    lock.acquire()
    try:
{guard}
        feeder = self._feeder
        if feeder.closed:
            raise BusClosed("the bus is closed")
        seq = self._seq + 1
        ts = self._clock()
        id = f"{{self._prefix}}{{seq}}"
{build}
        self._seq = seq
        log = self._logs.get(session)
        if log is None:
            log = self._new_log(session)
        log.events.append(event)
        log.sizes.append(size)
        nbytes = log.nbytes = log.nbytes + size
        if nbytes >= log.tier_top:  # it outgrew its size class
            self._file(log)
        log.last_ts = ts
        self._bytes += size
{observe}
        wakes = log.waiters
        if wakes:
            wakes = log.take_waiters()
        everything = self._all
        if everything is not None:
            self._append(everything, event, size)
            if everything.waiters:
                wakes = wakes + everything.take_waiters()
            if len(everything.events) > self._high:
                self._trim_to(everything, everything.end - self.replay)
        if len(log.events) > self._high:
            self._trim_to(log, log.end - self.replay)
        if self._bytes > self.replay_bytes:
            self._trim_bytes()
        if ts > self._next_sweep:
            self._sweep(ts)
        if feeder.wakes:
            wakes = wakes + feeder.take_wakes()
    finally:
        lock.release()
    if wakes:
        wake_all(wakes)
    return event
"""
_OBSERVE = """\
        if type(event) in APPROVAL_EVENTS:
            self._arbiter.book.observe(event)"""
# A guarded publisher's first step, in the bus's lock: a call that is no longer hot (its
# end is being published) publishes nothing and returns None; its caller reports the
# progress as coming after the call's end. See CallHandle.progress.
_GUARD = """\
        if not handle._hot:
            return None"""
# Names the template uses: a class whose fields take one of them gets no publisher.
_TEMPLATE_NAMES = frozenset(
    {
        "self",
        "lock",
        "feeder",
        "seq",
        "log",
        "nbytes",
        "wakes",
        "everything",
        "event",
        "size",
        "v",
        "handle",
    }
)


def _compile_publisher(
    name: str,
    params: str,
    build: str,
    observe: str,
    namespace: dict[str, Any],
    guard: str = "",
) -> Callable[..., Event]:
    source = _PUBLISHER.format(name=name, params=params, build=build, observe=observe, guard=guard)
    namespace.update(BusClosed=BusClosed, APPROVAL_EVENTS=APPROVAL_EVENTS, wake_all=wake_all)
    (publisher,) = compile_functions(source, namespace, what=name, names=(name,))
    return cast("Callable[..., Event]", publisher)


#: ``publish_built(bus, build, session, values, extra)``: the event made by ``build``
#: (a builder of its plan) from ``values``, published; ``extra`` is added to its size.
publish_built = _compile_publisher(
    "publish_built",
    "build, session, values, extra",
    "        event, size = build(values, id, ts)\n        size += extra",
    _OBSERVE,
    {},
)

_PUBLISHERS: dict[tuple[type[Event], bool], Callable[..., Event]] = {}


def hot_publisher(cls: type[Event], *, guarded: bool = False) -> Callable[..., Event]:
    """``publish(bus, *values)``: publish an event of ``cls`` on an ``EventBus`` from its
    fields in ``plan_of(cls).fields`` order (``session`` first), the fields stored in
    the same frame as the append; trackers call it on their hot paths, with values
    they checked already. Only for the lifecycle classes the generated code builds
    (``TypeError`` otherwise).

    ``guarded``: ``publish(bus, handle, *values)`` first checks, in the bus's lock,
    that ``handle._hot`` is still true, and publishes nothing (returns None) otherwise:
    a call's lock-free path, whose state changes are ordered by that same lock."""
    made = _PUBLISHERS.get((cls, guarded))
    if made is not None:
        return made
    found = plan_of(cls)
    if found.twin is None or not _TEMPLATE_NAMES.isdisjoint(found.fields):
        raise TypeError(f"no hot-path publisher for {cls.__qualname__}")
    build = "\n".join(
        [
            "        event = _twin()",
            f"        size = {EVENT_OVERHEAD}",
            *("    " + line for line in found.stores),
            "        event.__class__ = _cls",
        ]
    )
    observe = _OBSERVE if cls in APPROVAL_EVENTS else ""
    namespace = {"_twin": found.twin, "_cls": cls, "_deep": deep_size}
    params = ", ".join(("handle", *found.fields) if guarded else found.fields)
    name = f"publish_{cls.__name__}{'_guarded' if guarded else ''}"
    made = _PUBLISHERS[(cls, guarded)] = _compile_publisher(
        name, params, build, observe, namespace, _GUARD if guarded else ""
    )
    return made
