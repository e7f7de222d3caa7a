"""Building events at publish: one generated constructor per event class.

``attrs``' frozen ``__init__`` sets each field through ``object.__setattr__`` by name,
and publishing through it also paid for unpacking the fields as keywords and for a
second pass over them to estimate the event's size. The builder generated here reads
each field from the dict the bus owns, stores it through the slot's own descriptor and
adds its size as it goes: one pass, the same immutable event (checked against
``cls(**fields)`` in the tests), about a third of the cost.

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

#: Approximate fixed bytes of an event object in a replay window, before its fields.
EVENT_OVERHEAD = 160

Builder = Callable[[dict[str, Any]], "tuple[Event, int]"]

_SCALARS = (float, int, bool)
_NUMERIC = frozenset(
    {"float", "float | None", "int", "int | None", "bool", "bool | None", float, int, bool}
)
#: The identifier fields every event carries; a tracker passes the same string objects
#: for every event of a call, so they are not counted per event.
ENVELOPE = ("session", "run_id", "call_id", "tool", "parent_call_id")

_KNOWN: dict[type, frozenset[str]] = {}
_COMPLETERS: dict[type, Callable[[dict[str, Any]], None]] = {}


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
    def build(fields: dict[str, Any]) -> tuple[Event, int]:
        size = approx_size(fields)
        return cls(**fields), size

    return build


def _generate(cls: type[Event]) -> Builder:
    """The straight-line builder for ``cls``, or the generic one when the class needs
    what only its own ``__init__`` does."""
    if (
        getattr(cls, "__dictoffset__", 0)
        or hasattr(cls, "__attrs_post_init__")
        or hasattr(cls, "__attrs_pre_init__")
    ):
        return _generic(cls)
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
            return _generic(cls)
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            factory = cast(Any, default)
            if factory.takes_self:
                return _generic(cls)
            factories[field.name] = factory.factory
        elif default is not attrs.NOTHING:
            defaults[field.name] = default
    names = tuple(field.name for field in fields)
    complete = functools.partial(_complete, cls, names, defaults, factories)
    _KNOWN[cls] = frozenset(names)
    _COMPLETERS[cls] = complete
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_deep": deep_size,
        "_scalars": frozenset(_SCALARS),
        "_complete": complete,
    }
    # A cheap count check here: the fields are the bus's own (a tracker's, or
    # ``publish``'s after ``check_fields``), so a wrong count means defaults to add.
    lines = [
        "def build(f):",
        f"    if len(f) != {len(names)}:",
        "        _complete(f)",
        "    self = _new(_cls)",
        f"    size = {EVENT_OVERHEAD}",
    ]
    for i, field in enumerate(fields):
        # Stored through the slot's own descriptor: what attrs' frozen __init__ does
        # by name through object.__setattr__, without the lookup.
        namespace[f"_set{i}"] = getattr(cls, field.name).__set__
        if field.name in ENVELOPE:
            # Identifiers: the same string objects in every event of a call.
            lines.append(f"    _set{i}(self, f[{field.name!r}])")
            continue
        lines += [f"    v = f[{field.name!r}]", f"    _set{i}(self, v)"]
        if field.type in _NUMERIC:
            lines.append("    if v is not None and v.__class__ not in _scalars: size += _deep(v)")
        else:
            lines += [
                "    if v.__class__ is str: size += len(v)",
                "    elif v is not None: size += _deep(v)",
            ]
    lines.append("    return self, size")
    exec("\n".join(lines), namespace)  # generated from the class's own field names
    return cast(Builder, namespace["build"])


def check_fields(event_type: type[Event], fields: dict[str, Any]) -> int:
    """Check the fields a caller of ``publish`` gave (unknown names raise
    ``TypeError``) and return the bytes of its identifier strings, which a caller
    other than a tracker may not share between events."""
    known = _KNOWN.get(event_type)
    if known is not None and not fields.keys() <= known:
        _COMPLETERS[event_type](fields)  # raises, naming the unknown fields
    size = 0
    for name in ENVELOPE:
        value = fields.get(name)
        if type(value) is str:
            size += len(value)
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


_BUILDERS: dict[type, Builder] = {
    cls: _generate(cls) for cls in EVENT_TYPES if cls is not StreamReset
}


def builder(event_type: object) -> Builder | None:
    """The builder of a publishable event class (subclasses of the lifecycle events
    too, generated once), or None when ``event_type`` cannot be published."""
    found = _BUILDERS.get(cast(type, event_type))
    if found is not None:
        return found
    if not (
        isinstance(event_type, type)
        and issubclass(event_type, Event)
        and not issubclass(event_type, StreamReset)
    ):
        return None
    made = _BUILDERS[event_type] = _generate(event_type)
    return made
