"""Building events at publish: generated constructors per event class.

``attrs``' frozen ``__init__`` sets each field through ``object.__setattr__`` by name,
and publishing through it also paid for packing the fields as keywords and for a
second pass over them to estimate the event's size. The builders generated here store
each field through the slot's own descriptor and size the payload as they go: one
pass, the same immutable event (checked against ``cls(**fields)`` in the tests).

Two forms per class, both called by the bus with the ``id`` and ``ts`` it assigns:

- ``build(fields, id, ts)`` takes the fields as a dict (``publish``, and trackers'
  rarer events);
- ``build(values, id, ts)`` takes them as a tuple in :func:`positional_fields` order:
  a tracker's hot paths (progress, streamed text) build no dict at all.

Classes the generated code cannot build exactly like ``attrs`` would (validators,
converters, ``__attrs_post_init__``, no slots, a default factory that takes ``self``)
fall back to ``cls(**fields)`` plus a separate size estimate.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, cast

import attrs

from toolstream._core.events import EVENT_TYPES, Event, StreamReset

#: Approximate bytes of an event in a replay window before its text and JSON fields:
#: the object, its id string and its numbers.
EVENT_OVERHEAD = 256

Builder = Callable[[dict[str, Any], str, float], "tuple[Event, int]"]
TupleBuilder = Callable[["tuple[Any, ...]", str, float], "tuple[Event, int]"]

_SCALARS = (float, int, bool)
_NUMERIC = frozenset(
    {"float", "float | None", "int", "int | None", "bool", "bool | None", float, int, bool}
)
#: The identifier fields every event carries; a tracker passes the same string objects
#: for every event of a call, so they are not counted per event.
ENVELOPE = ("session", "run_id", "call_id", "tool", "parent_call_id")
_ASSIGNED = ("id", "ts")  # by the bus, never by the caller
_UNSIZED = frozenset({*_ASSIGNED, *ENVELOPE})

_KNOWN: dict[type, frozenset[str]] = {}
_COMPLETERS: dict[type, Callable[[dict[str, Any]], None]] = {}
_NUMBERS: dict[type, tuple[str, ...]] = {}
_POSITIONAL: dict[type, tuple[str, ...]] = {}


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


def _generic(cls: type[Event]) -> Builder:
    def build(fields: dict[str, Any], id: str, ts: float) -> tuple[Event, int]:
        size = approx_size(fields)
        return cls(**fields, id=id, ts=ts), size

    return build


def _generate(cls: type[Event]) -> tuple[Builder, TupleBuilder | None]:
    """The straight-line builders for ``cls``, or the generic dict builder (and no
    tuple builder) when the class needs what only its own ``__init__`` does."""
    if (
        getattr(cls, "__dictoffset__", 0)
        or hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
    ):
        return _generic(cls), None
    fields = attrs.fields(cast(Any, cls))
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for field in fields:
        if (
            field.validator is not None
            or field.converter is not None
            or not field.init
            or (field.alias or field.name) != field.name
            or not isinstance(getattr(cls, field.name, None), types.MemberDescriptorType)
        ):
            return _generic(cls), None
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            factory = cast(Any, default)
            if factory.takes_self:
                return _generic(cls), None
            factories[field.name] = factory.factory
        elif default is not attrs.NOTHING:
            defaults[field.name] = default
    given = tuple(field.name for field in fields if field.name not in _ASSIGNED)
    complete = functools.partial(_complete, cls, given, defaults, factories)
    _KNOWN[cls] = frozenset(given)
    _NUMBERS[cls] = tuple(field.name for field in fields if field.type in _NUMERIC)
    _COMPLETERS[cls] = complete
    _POSITIONAL[cls] = given
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_deep": deep_size,
        "_complete": complete,
    }
    by_name, by_position = [], []
    k = 0
    for i, field in enumerate(fields):
        # Stored through the slot's own descriptor: what attrs' frozen __init__ does
        # by name through object.__setattr__, without the lookup.
        namespace[f"_set{i}"] = getattr(cls, field.name).__set__
        if field.name in _ASSIGNED:
            by_name.append(f"    _set{i}(self, {field.name})")
            by_position.append(f"    _set{i}(self, {field.name})")
            continue
        for lines, source in ((by_name, f"f[{field.name!r}]"), (by_position, f"f[{k}]")):
            if field.name in _UNSIZED or field.type in _NUMERIC:
                # In the fixed overhead: numbers, and identifiers (the same string
                # objects in every event of a call; ``check_fields`` counts what a
                # caller of ``publish`` passes in them).
                lines.append(f"    _set{i}(self, {source})")
            else:
                lines += [
                    f"    v = {source}",
                    f"    _set{i}(self, v)",
                    "    if v.__class__ is str: size += len(v)",
                    "    elif v is not None: size += _deep(v)",
                ]
        k += 1
    start = ["    self = _new(_cls)", f"    size = {EVENT_OVERHEAD}"]
    source = "\n".join(
        [
            "def build(f, id, ts):",
            # A cheap count check: the fields are a tracker's, or publish()'s after
            # check_fields, so a wrong count means defaults to add.
            f"    if len(f) != {len(given)}:",
            "        _complete(f)",
            *start,
            *by_name,
            "    return self, size",
            "def build_tuple(f, id, ts):",
            *start,
            *by_position,
            "    return self, size",
        ]
    )
    exec(source, namespace)  # generated from the class's own field names
    return cast(Builder, namespace["build"]), cast(TupleBuilder, namespace["build_tuple"])


def prepare(event_type: object, fields: dict[str, Any]) -> tuple[Builder, str, int]:
    """What every bus's ``publish`` checks before it takes an id: a publishable class
    (``TypeError``), a non-empty session (``ValueError``), the class's own fields
    (``TypeError`` naming the others; see :func:`check_fields`). Returns the builder,
    the session and the size the builder does not count."""
    build = builder(event_type)
    if build is None:
        raise TypeError(f"cannot publish {event_type!r}: not a lifecycle event class")
    session = fields.get("session")
    if type(session) is not str or not session:
        raise ValueError(f"an event needs a non-empty session string, got {session!r}")
    return build, session, check_fields(cast(type[Event], event_type), fields)


def check_fields(event_type: type[Event], fields: dict[str, Any]) -> int:
    """Check the fields a caller of ``publish`` gave (unknown names raise
    ``TypeError``; ``id`` and ``ts`` are dropped: the bus assigns them) and return the
    size of what the generated builder leaves to the fixed overhead: identifier
    strings (a caller other than a tracker may not share them between events) and
    anything but a number in a numeric field."""
    for name in _ASSIGNED:
        fields.pop(name, None)
    known = _KNOWN.get(event_type)
    if known is None:
        return 0  # built by the class's own __init__, sized field by field
    if not fields.keys() <= known:
        _COMPLETERS[event_type](fields)  # raises, naming the unknown fields
    size = 0
    for name in ENVELOPE:
        value = fields.get(name)
        if type(value) is str:
            size += len(value)
    for name in _NUMBERS[event_type]:
        value = fields.get(name)
        if value is not None and type(value) not in _SCALARS:
            size += deep_size(value)
    return size


def _complete(
    cls: type[Event],
    names: tuple[str, ...],
    defaults: dict[str, Any],
    factories: dict[str, Callable[[], Any]],
    fields: dict[str, Any],
) -> None:
    """Check ``fields`` against the class (the errors ``cls(**fields)`` would raise, in
    words) and add the defaults of the fields it leaves out."""
    unknown = fields.keys() - set(names)
    if unknown:
        listed = ", ".join(sorted(map(repr, unknown)))
        raise TypeError(f"{cls.__name__} has no field {listed}")
    for name in names:
        if name in fields:
            continue
        if name in defaults:
            fields[name] = defaults[name]
        elif name in factories:
            fields[name] = factories[name]()
        else:
            raise TypeError(f"{cls.__name__} needs the field {name!r}")


_BUILDERS: dict[type, Builder] = {}
_TUPLE_BUILDERS: dict[type, TupleBuilder] = {}


def builder(event_type: object) -> Builder | None:
    """The dict builder of a publishable event class (subclasses of the lifecycle
    events too, generated once), or None when ``event_type`` cannot be published."""
    found: Builder | None = _BUILDERS.get(event_type)  # type: ignore[call-overload]
    if found is not None:
        return found
    if not (
        isinstance(event_type, type)
        and issubclass(event_type, Event)
        and not issubclass(event_type, StreamReset)
    ):
        return None
    by_name, by_position = _generate(event_type)
    _BUILDERS[event_type] = by_name
    if by_position is not None:
        _TUPLE_BUILDERS[event_type] = by_position
    return by_name


def tuple_builder(event_type: type[Event]) -> TupleBuilder:
    """The tuple builder of one of the lifecycle event classes (what trackers use)."""
    builder(event_type)
    return _TUPLE_BUILDERS[event_type]


def positional_fields(event_type: type[Event]) -> tuple[str, ...]:
    """The order of the values a tuple builder takes: the class's fields but ``id``
    and ``ts``."""
    builder(event_type)
    return _POSITIONAL[event_type]


for _cls in EVENT_TYPES:
    if _cls is not StreamReset:
        builder(_cls)
