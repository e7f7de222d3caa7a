"""The native wire format: events as plain JSON types, and back.

``to_dict`` gives snake_case keys, ``"v": 1`` and omits optional fields that are
``None``; ``from_dict`` validates at the boundary (``EventDecodeError`` names the
field) and ignores keys it does not know, so newer producers stay readable.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias, Union, cast

import attrs

from .codegen import compile_functions
from .errors import EventDecodeError
from .events import (
    EVENT_CLASSES,
    EVENT_TYPES,
    CallState,
    Event,
    JSONValue,
)

__all__ = ["SCHEMA_VERSION", "from_dict", "json_schema", "to_dict"]

SCHEMA_VERSION = 1

_Decoder = Callable[[object, "_Path"], object]


# -- type introspection shared by encoding, decoding and the schema -----------------------


def _members(tp: object) -> frozenset[object]:
    return frozenset(typing.get_origin(a) or a for a in typing.get_args(tp))


_JSON_MEMBERS = _members(JSONValue) - {type(None)}


def _is_json_value(tp: object) -> bool:
    """True for ``JSONValue`` (``get_type_hints`` returns an equal, not identical, union)."""
    if tp is JSONValue:
        return True
    if typing.get_origin(tp) not in (Union, types.UnionType):
        return False
    return _members(tp) - {type(None)} == _JSON_MEMBERS


def _split_optional(tp: object) -> tuple[object, bool]:
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return tp, False


_HINTS: dict[type, dict[str, object]] = {}


def _hints(cls: type) -> dict[str, object]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls, include_extras=False)
        _HINTS[cls] = hints
    return hints


def _fields(cls: type) -> list[tuple[str, object, bool]]:
    """(name, type, required) of an attrs class's init fields."""
    hints = _hints(cls)
    out = []
    for f in attrs.fields(cls):
        if not f.init:
            continue
        out.append((f.name, hints[f.name], f.default is attrs.NOTHING))
    return out


# -- encoding ---------------------------------------------------------------------------


def _plain(value: object) -> object:
    if isinstance(value, enum.Enum):
        return value.value
    if attrs.has(type(value)):
        return _encode_record(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping) and not isinstance(value, dict):
        return dict(value)
    return value


def _encode_record(record: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in attrs.fields(cast(Any, type(record))):
        value = getattr(record, f.name)
        if value is None:
            continue
        out[f.name] = _plain(value)
    return out


_ENCODERS: dict[type, Callable[[Event], dict[str, Any]]] = {}
_PLAIN_TYPES = frozenset({str, float, int, bool, dict, list})


def _compile_encoder(cls: type[Event]) -> Callable[[Event], dict[str, Any]]:
    """A function written for ``cls``: one attribute read and one test per field,
    no loop (about twice as fast as a generic loop; names come from the attrs class)."""
    lines = [
        "def encode(e):",
        f"    out = {{'v': {SCHEMA_VERSION!r}, 'type': {cls.type!r}}}",
    ]
    for f in attrs.fields(cls):
        assert f.name.isidentifier()
        lines.append(f"    v = e.{f.name}")
        lines.append(
            f"    if v is not None: out[{f.name!r}] = v if type(v) in plain else convert(v)"
        )
    lines += ["    return out", ""]
    namespace: dict[str, Any] = {"plain": _PLAIN_TYPES, "convert": _plain}
    (encode,) = compile_functions(
        "\n".join(lines), namespace, what=f"to_dict for {cls.__qualname__}", names=("encode",)
    )
    return cast("Callable[[Event], dict[str, Any]]", encode)


def to_dict(event: Event) -> dict[str, Any]:
    """The event as plain JSON types: ``{"v": 1, "type": ..., "id": ..., ...}``.

    Optional fields that are ``None`` are omitted; ``call_id`` and ``tool`` are
    always present (``""`` on run, batch and reset events).
    """
    cls = type(event)
    encode = _ENCODERS.get(cls)
    if encode is None:
        if cls not in EVENT_TYPES:
            raise TypeError(f"to_dict() takes a toolstream event, not {cls.__name__}")
        encode = _ENCODERS[cls] = _compile_encoder(cls)
    return encode(event)


# -- decoding ---------------------------------------------------------------------------


#: Where a value sits in the event: a name, or (parent, key or index). Built as tuples
#: while decoding and rendered ("tool.started.error.message") only for an error.
_Path: TypeAlias = "str | tuple[_Path, str | int]"


def _render(path: _Path) -> str:
    parts: list[str] = []
    while isinstance(path, tuple):
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return path + "".join(reversed(parts))


def _fail(path: _Path, expected: str, value: object) -> EventDecodeError:
    path = _render(path)
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return EventDecodeError(f"{path}: expected {expected}, got {shown}")


class _Unsure(Exception):
    """A value the fast JSON check leaves to the exact one."""


_JSON_SCALARS = frozenset({str, int, bool, type(None)})


def _json_fast(value: object, depth: int) -> object:
    """A copy of ``value`` if it is plain JSON (exact built-in types, finite numbers,
    well within the depth limit); ``_Unsure`` otherwise (no paths are built here)."""
    t = type(value)
    if t in _JSON_SCALARS:
        return value
    if t is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return value
        raise _Unsure
    if depth >= 64:  # its items would be at the limit: the exact check decides
        raise _Unsure
    if t is list:
        scalars = _JSON_SCALARS
        return [
            v if type(v) in scalars else _json_fast(v, depth + 1)
            for v in value  # type: ignore[attr-defined]
        ]
    if t is dict:
        out = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                raise _Unsure
            out[k] = v if type(v) in _JSON_SCALARS else _json_fast(v, depth + 1)
        return out
    raise _Unsure


def _check_json(value: object, path: _Path, depth: int = 0) -> object:
    """``value`` (copied) if it is a JSON value nested at most 64 deep; an error naming
    where it is not. Plain values take the fast path; the rest the exact one."""
    try:
        return _json_fast(value, depth)
    except (_Unsure, RecursionError):
        return _check_json_exact(value, path, depth)


def _check_json_exact(value: object, path: _Path, depth: int = 0) -> object:
    if depth > 64:
        raise _fail(path, "JSON nested at most 64 deep", "...")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _fail(path, "a finite number", value)
        return value
    if isinstance(value, list):
        return [_check_json_exact(v, (path, i), depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _fail(path, "string keys", k)
            out[k] = _check_json_exact(v, (path, k), depth + 1)
        return out
    raise _fail(path, "a JSON value", value)


def _decoder(tp: object) -> _Decoder:
    if _is_json_value(tp):
        return _check_json
    inner, optional = _split_optional(tp)
    base = _base_decoder(inner)
    if not optional:
        return base

    def decode_optional(value: object, path: _Path) -> object:
        return None if value is None else base(value, path)

    return decode_optional


def _base_decoder(tp: object) -> _Decoder:
    if _is_json_value(tp):
        return _check_json
    if tp is str:

        def decode_str(value: object, path: _Path) -> object:
            if not isinstance(value, str):
                raise _fail(path, "a string", value)
            return value

        return decode_str
    if tp is bool:

        def decode_bool(value: object, path: _Path) -> object:
            if not isinstance(value, bool):
                raise _fail(path, "a boolean", value)
            return value

        return decode_bool
    if tp is int:

        def decode_int(value: object, path: _Path) -> object:
            if not isinstance(value, int) or isinstance(value, bool):
                raise _fail(path, "an integer", value)
            return value

        return decode_int
    if tp is float:

        def decode_float(value: object, path: _Path) -> object:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise _fail(path, "a number", value)
            if not math.isfinite(value):
                raise _fail(path, "a finite number", value)
            return value

        return decode_float
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        enum_cls = tp
        values = {m.value for m in enum_cls}

        def decode_enum(value: object, path: _Path) -> object:
            if not isinstance(value, str) or value not in values:
                raise _fail(path, f"one of {sorted(values)}", value)
            return enum_cls(value)

        return decode_enum
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)

        def decode_literal(value: object, path: _Path) -> object:
            if not isinstance(value, str) or value not in allowed:
                raise _fail(path, f"one of {list(allowed)}", value)
            return value

        return decode_literal
    if origin is tuple:
        item = _decoder(typing.get_args(tp)[0])

        def decode_tuple(value: object, path: _Path) -> object:
            if not isinstance(value, list):
                raise _fail(path, "a list", value)
            return tuple(item(v, (path, i)) for i, v in enumerate(value))

        return decode_tuple
    if origin is Mapping or origin is dict:
        value_decoder = _decoder(typing.get_args(tp)[1])

        def decode_mapping(value: object, path: _Path) -> object:
            if not isinstance(value, dict):
                raise _fail(path, "an object", value)
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise _fail(path, "string keys", k)
                out[k] = value_decoder(v, (path, k))
            return out

        return decode_mapping
    if isinstance(tp, type) and attrs.has(tp):
        return _record_decoder(tp)
    raise TypeError(f"no decoder for {tp!r}")  # pragma: no cover - a field type we forgot


_RECORD_DECODERS: dict[type, _Decoder] = {}
_MISSING = object()


def _fast_test(tp: object) -> str | None:
    """An expression true when ``v`` is already a valid value of ``tp`` (checked inline;
    anything else goes to the field's full decoder, which accepts or names the error)."""
    inner, optional = _split_optional(tp)
    if inner is str:
        test = "type(v) is str"
    elif inner is int:
        test = "type(v) is int"
    elif inner is bool:
        test = "(v is True or v is False)"
    elif inner is float:
        test = "((type(v) is float and isfinite(v)) or type(v) is int)"
    elif _is_json_value(inner):
        return "type(v) in scalar"
    else:
        return None
    return f"(v is None or {test})" if optional else test


def _record_decoder(cls: type) -> _Decoder:
    """A function written for ``cls`` (like :func:`_compile_encoder`): per field one
    lookup and, for the common types, one inline test; a value that fails the test goes
    to the field's full decoder, so errors name the field exactly as before."""
    cached = _RECORD_DECODERS.get(cls)
    if cached is not None:
        return cached
    namespace: dict[str, Any] = {
        "cls": cls,
        "MISSING": _MISSING,
        "isfinite": math.isfinite,
        "scalar": _JSON_SCALARS,
        "fail": _fail,
        "render": _render,
        "DecodeError": EventDecodeError,
    }
    lines = [
        "def decode_record(value, path):",
        "    if type(value) is not dict:",
        "        if not isinstance(value, dict):",
        f"            raise fail(path, {f'an object ({cls.__name__})'!r}, value)",
        "    get = value.get",
        "    kw = {}",
    ]
    # The decoders are made after this one is cached: a record may hold itself.
    pending: list[tuple[str, object]] = []
    for i, (name, tp, required) in enumerate(_fields(cls)):
        assert name.isidentifier()
        pending.append((f"d{i}", tp))
        fast = _fast_test(tp)
        lines.append(f"    v = get({name!r}, MISSING)")
        if required:
            lines.append("    if v is MISSING:")
            lines.append(
                f"        raise DecodeError(render(path) + {f': missing field {name!r}'!r})"
            )
            indent = "    "
        else:
            lines.append("    if v is not MISSING:")
            indent = "        "
        if fast is None:
            lines.append(f"{indent}v = d{i}(v, (path, {name!r}))")
        else:
            lines.append(f"{indent}if not {fast}:")
            lines.append(f"{indent}    v = d{i}(v, (path, {name!r}))")
        lines.append(f"{indent}kw[{name!r}] = v")
    lines += [
        "    try:",
        "        return cls(**kw)",
        "    except (TypeError, ValueError) as exc:  # pragma: no cover - validated above",
        "        raise DecodeError(f'{render(path)}: {exc}') from None",
        "",
    ]
    (decode_record,) = compile_functions(
        "\n".join(lines),
        namespace,
        what=f"from_dict for {cls.__qualname__}",
        names=("decode_record",),
    )
    _RECORD_DECODERS[cls] = decode_record
    for key, tp in pending:
        namespace[key] = _decoder(tp)
    return cast("_Decoder", decode_record)


def from_dict(data: Mapping[str, Any]) -> Event:
    """The event a :func:`to_dict` dict (or its JSON, parsed) describes.

    Raises :class:`~toolstream.EventDecodeError` naming the bad field; unknown keys
    are ignored.
    """
    if type(data) is not dict and not isinstance(data, Mapping):
        raise EventDecodeError(f"an event is a JSON object, got {type(data).__name__}")
    version = data.get("v")
    if version != SCHEMA_VERSION:
        raise EventDecodeError(f"v: expected {SCHEMA_VERSION}, got {version!r}")
    kind = data.get("type")
    cls = EVENT_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventDecodeError(f"type: unknown event type {kind!r}")
    try:
        decoded = _record_decoder(cls)(data if type(data) is dict else dict(data), cls.type)
    except RecursionError:
        raise EventDecodeError(f"{cls.type}: nested too deeply") from None
    assert isinstance(decoded, Event)
    return decoded


# -- JSON Schema ------------------------------------------------------------------------


def _schema_for(tp: object, defs: dict[str, Any]) -> dict[str, Any]:
    if _is_json_value(tp):
        return {"description": "any JSON value"}
    inner, optional = _split_optional(tp)
    schema = _base_schema(inner, defs)
    if optional and schema:
        return {"anyOf": [schema, {"type": "null"}]}
    return schema


def _base_schema(tp: object, defs: dict[str, Any]) -> dict[str, Any]:
    if _is_json_value(tp):
        return {"description": "any JSON value"}
    for kind, name in ((str, "string"), (bool, "boolean"), (int, "integer"), (float, "number")):
        if tp is kind:
            return {"type": name}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"type": "string", "enum": [m.value for m in tp]}
    origin = typing.get_origin(tp)
    if origin is Literal:
        return {"type": "string", "enum": list(typing.get_args(tp))}
    if origin is tuple:
        return {"type": "array", "items": _schema_for(typing.get_args(tp)[0], defs)}
    if origin is not None and typing.get_args(tp) and len(typing.get_args(tp)) == 2:
        return {
            "type": "object",
            "additionalProperties": _schema_for(typing.get_args(tp)[1], defs),
        }
    if isinstance(tp, type) and attrs.has(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            defs[name] = _record_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no schema for {tp!r}")  # pragma: no cover


def _record_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, tp, is_required in _fields(cls):
        props[name] = _schema_for(tp, defs)
        if is_required:
            required.append(name)
    doc = (cls.__doc__ or "").strip().splitlines()
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    if doc:
        schema["description"] = doc[0]
    return schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of the native format, generated from the event classes."""
    defs: dict[str, Any] = {}
    variants = []
    for cls in EVENT_TYPES:
        record = _record_schema(cls, defs)
        record["properties"] = {
            "v": {"const": SCHEMA_VERSION},
            "type": {"const": cls.type},
            **record["properties"],
        }
        record["required"] = ["v", "type", *record["required"], "call_id", "tool"]
        record["required"] = list(dict.fromkeys(record["required"]))
        defs[cls.__name__] = record
        variants.append({"$ref": f"#/$defs/{cls.__name__}"})
    _ = CallState  # the call state enum is reached through CallSnapshot
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://toolstream.dev/schema/native-v1.json",
        "title": "toolstream native event (v1)",
        "oneOf": variants,
        "$defs": dict(sorted(defs.items())),
    }
