"""Building events at publish: a plan per event class, with generated constructors.

``attrs``' frozen ``__init__`` sets each field through ``object.__setattr__`` by name,
and publishing through it also paid for packing the fields as keywords and for a
second pass over them to estimate the event's size. The builders generated here make
the event as an instance of a *building twin* of its class (a subclass that adds no
slot and keeps ``object``'s own ``__setattr__``, so each store is the interpreter's
plain slot store), size the payload as they go, then give the object its real class:
one pass, the same immutable event (checked against ``cls(**fields)`` in the tests),
about a third of the cost of a store through each slot's descriptor.

Each publishable class gets one :class:`EventPlan`, made once, with:

- ``build(fields, id, ts)``, called by the bus with the ``id`` and ``ts`` it assigns,
  the fields as a dict (``publish``, and trackers' rarer events);
- ``stores``, the same builder's lines storing fields from locals named like them,
  which the bus inlines in the publishers it makes for the trackers' hot paths
  (progress, streamed text: no dict, no tuple, no call; see ``publishers.hot_publisher``).

Classes the generated code cannot build exactly like ``attrs`` would (validators,
converters, ``__attrs_post_init__``, no slots, a default factory that takes ``self``)
get a plan that calls ``cls(**fields)`` plus a separate size estimate, and no twin.
"""

from __future__ import annotations

import keyword
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

from .codegen import compile_functions
from .events import ENVELOPE, EVENT_TYPES, Event, StreamReset
from .identifiers import MAX_ID_BYTES, check_identifier
from .jsonenc import is_utf8

__all__ = [
    "EVENT_OVERHEAD",
    "EventPlan",
    "approx_size",
    "deep_size",
    "plan",
    "plan_of",
    "prepare",
]

#: Approximate bytes of an event in a replay window before its text and JSON fields:
#: the object, its id string and its numbers.
EVENT_OVERHEAD = 256

Builder = Callable[[dict[str, Any], str, float], "tuple[Event, int]"]

_SCALARS = (float, int, bool)
_NUMERIC = frozenset(
    {"float", "float | None", "int", "int | None", "bool", "bool | None", float, int, bool}
)
_ASSIGNED = ("id", "ts")  # by the bus, never by the caller
# Identifiers: a tracker passes the same string objects for every event of a call, so
# they are not counted per event (``check`` counts what a caller of ``publish`` passes).
_UNSIZED = frozenset({*_ASSIGNED, *ENVELOPE})


def deep_size(value: object, depth: int = 0) -> int:
    """An estimate of the bytes ``value`` holds in memory (strings by length)."""
    kind = type(value)
    if kind is str:
        return len(cast(str, value)) + 8
    if value is None or kind in _SCALARS:
        return 16
    if depth > 40:
        return 16
    if isinstance(value, str):
        return len(value) + 8
    if isinstance(value, dict):
        return 32 + sum(len(str(k)) + 8 + deep_size(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 32 + sum(deep_size(v, depth + 1) for v in value)
    if attrs.has(type(value)):
        fields = attrs.fields(cast(Any, type(value)))
        return 64 + sum(deep_size(getattr(value, f.name), depth + 1) for f in fields)
    return 16


def approx_size(fields: dict[str, Any]) -> int:
    """The estimate of an event built from ``fields`` (for the generic path)."""
    size = EVENT_OVERHEAD
    for value in fields.values():
        if type(value) is str:
            size += len(value)
        elif value is not None and type(value) not in _SCALARS:
            size += deep_size(value)
    return size


@attrs.frozen(eq=False)
class EventPlan:
    """How the bus builds one event class."""

    cls: type[Event]
    #: ``build(fields, id, ts) -> (event, size)``, fields as a dict.
    build: Builder
    #: The fields a caller gives (all but ``id`` and ``ts``), in declaration order.
    fields: tuple[str, ...]
    #: Fields of a numeric type (sized only when a caller puts something else in them).
    numbers: tuple[str, ...] = ()
    defaults: dict[str, Any] = attrs.field(factory=dict)
    factories: dict[str, Callable[[], Any]] = attrs.field(factory=dict)
    #: The building twin (None for classes built by their own ``__init__``).
    twin: type | None = None
    #: Source lines (indented once) storing every field into a twin instance ``event``
    #: from locals named like the fields, sizing the payload into ``size``: what a
    #: bus inlines in a publisher made for this class.
    stores: tuple[str, ...] = ()

    def complete(self, fields: dict[str, Any]) -> None:
        """Check ``fields`` against the class (the errors ``cls(**fields)`` would raise,
        in words) and add the defaults of the fields it leaves out."""
        unknown = fields.keys() - set(self.fields)
        if unknown:
            listed = ", ".join(sorted(map(repr, unknown)))
            raise TypeError(f"{self.cls.__name__} has no field {listed}")
        for name in self.fields:
            if name in fields:
                continue
            if name in self.defaults:
                fields[name] = self.defaults[name]
            elif name in self.factories:
                fields[name] = self.factories[name]()
            else:
                raise TypeError(f"{self.cls.__name__} needs the field {name!r}")

    def check(self, fields: dict[str, Any]) -> int:
        """Check the fields a caller of ``publish`` gave (unknown names raise
        ``TypeError``; ``id`` and ``ts`` are dropped: the bus assigns them) and return the
        size of what the generated builder leaves to the fixed overhead: identifier
        strings (a caller other than a tracker may not share them between events) and
        anything but a number in a numeric field."""
        for name in _ASSIGNED:
            fields.pop(name, None)
        if self.twin is None:
            return 0  # built by the class's own __init__, sized field by field
        if not fields.keys() <= set(self.fields):
            self.complete(fields)  # raises, naming the unknown fields
        size = 0
        for name in ENVELOPE:
            value = fields.get(name)
            if type(value) is str:
                size += len(value)
        for name in self.numbers:
            value = fields.get(name)
            if value is not None and type(value) not in _SCALARS:
                size += deep_size(value)
        return size


def _generic(cls: type[Event]) -> EventPlan:
    def build(fields: dict[str, Any], id: str, ts: float) -> tuple[Event, int]:
        size = approx_size(fields)
        return cls(**fields, id=id, ts=ts), size

    names = tuple(f.name for f in attrs.fields(cast(Any, cls)) if f.name not in _ASSIGNED)
    return EventPlan(cls=cls, build=build, fields=names)


def _needs_own_init(cls: type[Event]) -> bool:
    if (
        getattr(cls, "__dictoffset__", 0)
        or hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
    ):
        return True
    for field in attrs.fields(cast(Any, cls)):
        if (
            field.validator is not None
            or field.converter is not None
            or not field.init
            or (field.alias or field.name) != field.name
            or not field.name.isidentifier()
            or keyword.iskeyword(field.name)
            or not isinstance(getattr(cls, field.name, None), types.MemberDescriptorType)
        ):
            return True
        default = field.default
        if isinstance(default, attrs.Factory) and cast(Any, default).takes_self:  # type: ignore[arg-type]
            return True
    return False


def _building_twin(cls: type[Event]) -> type | None:
    """A subclass of ``cls`` with no slot of its own and ``object``'s attribute setters
    (``attrs``' frozen ones are what makes a store slow), whose instances can take
    ``cls`` as their class once built; None if this interpreter refuses that. It has
    ``object``'s ``__init__`` too: ``twin()`` makes an empty instance, a quarter cheaper
    than ``object.__new__(twin)`` (a call through a method wrapper)."""
    twin = type(
        f"{cls.__name__}Building",
        (cls,),
        {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__init__": object.__init__,
            "__module__": __name__,
            "__qualname__": f"_building_twin.<{cls.__qualname__}>",
            "__doc__": f"Instances of {cls.__qualname__} while the bus builds them.",
        },
    )
    try:
        probe: Any = twin()
        probe.__class__ = cls
    except TypeError:
        return None
    return twin


def _generate(cls: type[Event]) -> EventPlan:
    """The plan for ``cls``: straight-line builders, or the generic one when the class
    needs what only its own ``__init__`` does."""
    if _needs_own_init(cls):
        return _generic(cls)
    fields = attrs.fields(cast(Any, cls))
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for field in fields:
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            factories[field.name] = cast(Any, default).factory
        elif default is not attrs.NOTHING:
            defaults[field.name] = default
    given = tuple(field.name for field in fields if field.name not in _ASSIGNED)
    twin = _building_twin(cls)
    if twin is None:
        return _generic(cls)
    namespace: dict[str, Any] = {
        "_twin": twin,
        "_cls": cls,
        "_deep": deep_size,
    }
    by_name = _store_lines(fields, "self", lambda name: f"f[{name!r}]")
    start = ["    self = _twin()", f"    size = {EVENT_OVERHEAD}"]
    end = ["    self.__class__ = _cls", "    return self, size"]
    source = "\n".join(
        [
            "def build(f, id, ts):",
            # A cheap count check: the fields are a tracker's, or publish()'s after
            # check(), so a wrong count means defaults to add.
            f"    if len(f) != {len(given)}:",
            "        _plan.complete(f)",
            *start,
            *by_name,
            *end,
            "",
        ]
    )
    (build,) = compile_functions(
        source, namespace, what=f"builder for {cls.__qualname__}", names=("build",)
    )
    plan = EventPlan(
        cls=cls,
        build=build,
        fields=given,
        numbers=tuple(field.name for field in fields if field.type in _NUMERIC),
        defaults=defaults,
        factories=factories,
        twin=twin,
        stores=tuple(_store_lines(fields, "event", lambda name: name)),
    )
    namespace["_plan"] = plan
    return plan


def _store_lines(
    fields: Sequence[attrs.Attribute[Any]], target: str, source: Callable[[str], str]
) -> list[str]:
    """Source lines (indented once) storing every field of an event into ``target``
    (an instance of the class's building twin): ``id`` and ``ts`` from the locals of
    those names, the others from ``source(name)``, adding the payload fields' sizes to
    the local ``size``."""
    lines = []
    for field in fields:
        name = field.name
        if name in _ASSIGNED:
            lines.append(f"    {target}.{name} = {name}")
            continue
        value = source(name)
        if name in _UNSIZED or field.type in _NUMERIC:
            lines.append(f"    {target}.{name} = {value}")  # in the fixed overhead
        else:
            lines += [
                f"    v = {target}.{name} = {value}",
                "    if v.__class__ is str: size += len(v)",
                "    elif v is not None: size += _deep(v)",
            ]
    return lines


_PLANS: dict[type, EventPlan] = {}


def plan(event_type: object) -> EventPlan | None:
    """The plan of a publishable event class (subclasses of the lifecycle events too,
    made once), or None when ``event_type`` cannot be published."""
    found: EventPlan | None = _PLANS.get(event_type)  # type: ignore[call-overload]
    if found is not None:
        return found
    if not (
        isinstance(event_type, type)
        and issubclass(event_type, Event)
        and not issubclass(event_type, StreamReset)
    ):
        return None
    made = _PLANS[event_type] = _generate(event_type)
    return made


def plan_of(event_type: type[Event]) -> EventPlan:
    """The plan of a lifecycle event class (``TypeError`` for one that cannot be published)."""
    found = plan(event_type)
    if found is None:
        raise TypeError(f"cannot publish {event_type!r}: not a lifecycle event class")
    return found


_SHORT_ID = MAX_ID_BYTES // 4  # no identifier this short can be over the bound


def prepare(event_type: object, fields: dict[str, Any]) -> tuple[Builder, str, int]:
    """What every bus's ``publish`` checks before it takes an id: a publishable class
    (``TypeError``), a non-empty session of valid text (``ValueError``), the class's own
    fields (``TypeError`` naming the others; see :meth:`EventPlan.check`), identifiers
    that are text within ``MAX_ID_BYTES`` (``IdTooLong``). Returns the builder, the
    session and the size the builder does not count."""
    found = plan(event_type)
    if found is None:
        raise TypeError(f"cannot publish {event_type!r}: not a lifecycle event class")
    session = fields.get("session")
    if type(session) is not str or not session:
        raise ValueError(f"an event needs a non-empty session string, got {session!r}")
    for name in ENVELOPE:
        value = fields.get(name)
        if value is not None:
            if type(value) is not str or not is_utf8(value):
                raise ValueError(
                    f"{name} must be a string of valid Unicode text, got {value!r:.80}"
                )
            if len(value) > _SHORT_ID:
                check_identifier(name, value)
    return found.build, session, found.check(fields)


for _cls in EVENT_TYPES:
    if _cls is not StreamReset:
        plan(_cls)
