"""PayloadPolicy: what a published event may contain.

Applied once, at publish: any Python value becomes JSON-safe, secrets become
``"[redacted]"`` (see :mod:`toolstream._core.redaction` for what counts as one) and
payloads larger than the byte cap become a marked preview. Text that could not be
encoded for the wire (lone surrogates) is made safe here too. The tool itself keeps the
real values; only what is published is shaped.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any, cast

import attrs

from .events import ErrorInfo, JSONValue
from .jsonenc import safe_text
from .redaction import (
    DEFAULT_SECRET_KEYS,
    DEFAULT_SECRET_PATTERNS,
    ArgsRedactor,
    Patterns,
    TextRedactor,
    is_secret_key_name,
    redact_loose,
)

__all__ = ["PayloadPolicy", "default_policy"]

_KEY_CACHE_LIMIT = 4096
_TEXT_CACHE_CHARS = 200  # texts up to this long have their published form remembered


def _key_set(keys: Iterable[str]) -> frozenset[str]:
    if isinstance(keys, str):
        raise TypeError("secret_keys is a collection of key names, not one string")
    return frozenset(keys)


def _pattern_tuple(
    patterns: Iterable[str | re.Pattern[str]],
) -> tuple[str | re.Pattern[str], ...]:
    if isinstance(patterns, str):
        raise TypeError("secret_patterns is a collection of patterns, not one string")
    return tuple(patterns)


@attrs.frozen(kw_only=True)
class PayloadPolicy:
    """What published events may contain: JSON-safe values, no secrets, bounded size.

    On by default in every :class:`~toolstream.Tracker`. ``redact=False`` turns
    redaction off and ``max_bytes=None`` the size cap; JSON-safe conversion always
    applies. Extend the defaults rather than replace them::

        PayloadPolicy(secret_keys=DEFAULT_SECRET_KEYS | {"pin"},
                      secret_patterns=(*DEFAULT_SECRET_PATTERNS, r"\\bacme_[0-9a-f]{32}"))
    """

    #: Redact secrets (keys and values). Off only for trusted, local use.
    redact: bool = True
    #: Normalized key names whose values are secret (see ``DEFAULT_SECRET_KEYS``).
    secret_keys: frozenset[str] = attrs.field(default=DEFAULT_SECRET_KEYS, converter=_key_set)
    #: Regular expressions of secret-looking values.
    secret_patterns: tuple[str | re.Pattern[str], ...] = attrs.field(
        default=DEFAULT_SECRET_PATTERNS, converter=_pattern_tuple
    )
    #: What a secret becomes.
    placeholder: str = "[redacted]"
    #: Largest serialized payload, in UTF-8 bytes; ``None``: unlimited.
    max_bytes: int | None = 32 * 1024
    #: Characters of preview kept in a truncated payload.
    preview_chars: int = 1024
    #: Nesting deeper than this is replaced by ``"[max depth]"``.
    max_depth: int = 32
    #: Characters kept of the ``repr`` of an object JSON cannot encode.
    max_repr: int = 200

    _patterns: Patterns = attrs.field(init=False, eq=False, repr=False)
    _key_cache: dict[str, bool] = attrs.field(init=False, eq=False, repr=False, factory=dict)
    _text_cache: dict[str, str] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 256:
            raise ValueError(f"max_bytes must be at least 256 (or None), got {self.max_bytes}")
        if self.preview_chars < 0:
            raise ValueError("preview_chars must be >= 0")
        normalized = frozenset(re.sub(r"[^a-z0-9]", "", k.lower()) for k in self.secret_keys)
        object.__setattr__(self, "secret_keys", normalized)
        patterns = self.secret_patterns if self.redact else ()
        object.__setattr__(self, "_patterns", Patterns(patterns, self.placeholder))

    @property
    def patterns(self) -> Patterns:
        """The compiled value patterns (what the streaming redactors use)."""
        return self._patterns

    # -- keys and text -----------------------------------------------------------------

    def is_secret_key(self, key: str) -> bool:
        """True when values under ``key`` are redacted (case and separators ignored)."""
        if not self.redact:
            return False
        cached = self._key_cache.get(key)
        if cached is not None:
            return cached
        found = is_secret_key_name(key, self.secret_keys)
        if len(self._key_cache) >= _KEY_CACHE_LIMIT:
            self._key_cache.clear()
        self._key_cache[key] = found
        return found

    def redact_text(self, text: str) -> str:
        """``text`` with every secret-looking value replaced (no size cap)."""
        return self._patterns.redact(text)

    def text(self, text: object) -> str | None:
        """A published text field (summary, message, reason...): redacted, capped and
        encodable. ``None`` stays ``None``; anything that is not a string becomes its
        bounded repr.
        """
        if type(text) is str and len(text) <= _TEXT_CACHE_CHARS:
            # Progress messages and summaries repeat: remember short results.
            cache = self._text_cache
            hit = cache.get(text)
            if hit is None:
                hit = self._shape_text(text)
                if len(cache) >= _KEY_CACHE_LIMIT:
                    cache.clear()
                cache[text] = hit
            return hit
        if text is None:
            return None
        if not isinstance(text, str):
            text = self._repr(text)
        return self._shape_text(text)

    def _shape_text(self, text: str) -> str:
        text = self._patterns.redact(safe_text(text))
        cap = self.max_bytes
        if cap is not None and len(text) * 4 > cap:
            size = len(text.encode("utf-8"))
            if size > cap:
                keep = _cut_utf8(text, cap - 64)
                return f"{keep}… [truncated {size} bytes]"
        return text

    def invalid_args(self, text: str) -> str:
        """The published form of input text that is not valid JSON: redacted leniently
        (at least what its streamed deltas hid), capped and encodable."""
        return self.text(redact_loose(safe_text(text), self)) or ""

    def chunks(self, text: str) -> list[str]:
        """``text`` split into pieces of at most ``max_bytes`` (for delta events)."""
        cap = self.max_bytes
        if cap is None or len(text) * 4 <= cap:
            return [text] if text else []
        out: list[str] = []
        rest = text
        while rest:
            piece = _cut_utf8(rest, cap)
            if not piece:  # a single code point larger than the cap cannot happen; be safe
                piece = rest[:1]
            out.append(piece)
            rest = rest[len(piece) :]
        return out

    def error(self, error: BaseException | str | ErrorInfo | Mapping[str, Any]) -> ErrorInfo:
        """An exception, message or mapping as a published :class:`ErrorInfo`."""
        if isinstance(error, ErrorInfo):
            return ErrorInfo(
                type=self.text(error.type) or "Error",
                message=self.text(error.message) or "",
                retryable=error.retryable,
            )
        if isinstance(error, BaseException):
            try:
                message = str(error)
            except Exception:
                message = f"<unprintable {type(error).__name__}>"
            if not message and isinstance(error, TimeoutError):
                message = "timed out"
            retryable = getattr(error, "retryable", None)
            return ErrorInfo(
                type=type(error).__name__,
                message=self.text(message) or "",
                retryable=retryable if isinstance(retryable, bool) else None,
            )
        if isinstance(error, Mapping):
            retryable = error.get("retryable")
            return ErrorInfo(
                type=self.text(str(error.get("type") or "Error")) or "Error",
                message=self.text(str(error.get("message") or "")) or "",
                retryable=retryable if isinstance(retryable, bool) else None,
            )
        return ErrorInfo(type="Error", message=self.text(str(error)) or "")

    # -- values ---------------------------------------------------------------------

    def value(self, value: object) -> JSONValue:
        """Any Python value as a JSON-safe, redacted, size-capped payload."""
        walker = _Walker(self)
        out = walker.walk(value, 0)
        cap = self.max_bytes
        if cap is None:
            return out
        if walker.complete and walker.size * 6 <= cap:
            return out  # even fully \u-escaped it fits: no need to serialize
        text = json.dumps(out, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode("utf-8", "surrogatepass"))
        if walker.complete and size <= cap:
            return out
        if not walker.complete:
            size = max(size, _serialized_size(value, walker.size))
        preview = (out if isinstance(out, str) else text)[: self._preview_limit]
        return {"truncated": True, "bytes": size, "preview": preview}

    @property
    def _preview_limit(self) -> int:
        """Preview characters that keep the marker itself under the cap (even escaped)."""
        cap = self.max_bytes
        return self.preview_chars if cap is None else min(self.preview_chars, (cap - 64) // 6)

    def args_redactor(self) -> ArgsRedactor:
        """A streaming redactor for one call's JSON input text."""
        return ArgsRedactor(self)

    def text_redactor(self) -> TextRedactor:
        """A streaming redactor for one call's output text."""
        return TextRedactor(self)

    def _repr(self, obj: object) -> str:
        try:
            text = repr(obj)
        except Exception:
            text = f"<unrepresentable {type(obj).__name__}>"
        if len(text) > self.max_repr:
            text = text[: self.max_repr] + "…"
        return text


def _cut_utf8(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes."""
    if limit <= 0:
        return ""
    if len(text) * 4 <= limit:
        return text
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")


def _serialized_size(value: object, fallback: int) -> int:
    try:
        return len(
            json.dumps(value, ensure_ascii=False, default=repr, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        )
    except Exception:
        return fallback


class _Walker:
    """One conversion of a value: JSON-safe, redacted, and stopped early when huge."""

    __slots__ = ("complete", "limit", "path", "policy", "size")

    def __init__(self, policy: PayloadPolicy) -> None:
        self.policy = policy
        self.size = 0
        self.complete = True
        cap = policy.max_bytes
        # Past this many characters the payload is certainly truncated: stop converting.
        self.limit = None if cap is None else cap * 2 + policy.preview_chars * 4
        self.path: set[int] = set()

    def over(self) -> bool:
        if self.limit is not None and self.size > self.limit:
            self.complete = False
            return True
        return False

    def string(self, text: str) -> str:
        policy = self.policy
        text = safe_text(text)
        if self.limit is not None and len(text) > self.limit:
            # Only the preview of a huge string can be published: redact what can be seen
            # (plus a margin, so a secret crossing the cut is still recognised whole).
            self.complete = False
            head = text[: policy.preview_chars + 16384]
            self.size += len(text)
            return policy.redact_text(head)[: policy.preview_chars + 1]
        self.size += len(text) + 2
        return policy.redact_text(text)

    def walk(self, value: object, depth: int) -> JSONValue:
        # The common JSON types first, in order of frequency.
        if isinstance(value, str):
            return self.string(value)
        if value is None or isinstance(value, bool):
            self.size += 5
            return value
        if isinstance(value, int):
            self.size += 8
            return int(value)
        if isinstance(value, float):
            self.size += 8
            if math.isfinite(value):
                return value
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        policy = self.policy
        if depth >= policy.max_depth:
            return "[max depth]"
        if isinstance(value, Mapping):
            return self.mapping(value.items(), depth)
        if isinstance(value, (list, tuple, set, frozenset)):
            return self.sequence(value, depth)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self.binary(bytes(value))
        if isinstance(value, enum.Enum):
            return self.walk(value.value, depth)
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return self.string(value.isoformat())
        if isinstance(value, datetime.timedelta):
            self.size += 8
            return value.total_seconds()
        if isinstance(value, (decimal.Decimal, uuid.UUID, PurePath)):
            return self.string(str(value))
        if isinstance(value, BaseException):
            info = policy.error(value)
            self.size += len(info.type) + len(info.message) + 24
            return {"type": info.type, "message": info.message}
        if attrs.has(type(value)):
            fields = attrs.fields(cast(Any, type(value)))
            return self.mapping(((f.name, getattr(value, f.name)) for f in fields), depth, value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.mapping(
                ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value)), depth, value
            )
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):  # pydantic v2
            try:
                return self.walk(dump(mode="json"), depth + 1)
            except Exception:
                pass
        return self.string(policy._repr(value))

    def mapping(
        self, items: Iterable[tuple[object, object]], depth: int, owner: object = None
    ) -> JSONValue:
        marker = id(owner) if owner is not None else None
        if marker is not None:
            if marker in self.path:
                return "[cycle]"
            self.path.add(marker)
        out: dict[str, JSONValue] = {}
        policy = self.policy
        try:
            for key, item in items:
                if self.over():
                    break
                if isinstance(key, str):
                    name = key
                elif key is None or isinstance(key, (bool, int, float)):
                    name = json.dumps(key)
                else:
                    name = policy._repr(key)
                name = safe_text(name)
                self.size += len(name) + 4
                published = policy.redact_text(name)
                if policy.is_secret_key(name):
                    self.size += 12
                    out[published] = policy.placeholder
                else:
                    out[published] = self.walk(item, depth + 1)
        finally:
            if marker is not None:
                self.path.discard(marker)
        return out

    def sequence(self, value: Iterable[object], depth: int) -> JSONValue:
        marker = id(value)
        if marker in self.path:
            return "[cycle]"
        self.path.add(marker)
        try:
            if isinstance(value, (set, frozenset)):
                try:
                    value = sorted(value)
                except TypeError:
                    value = list(value)
            out: list[JSONValue] = []
            for item in value:
                if self.over():
                    break
                self.size += 1
                out.append(self.walk(item, depth + 1))
            return out
        finally:
            self.path.discard(marker)

    def binary(self, data: bytes) -> JSONValue:
        try:
            return self.string(data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
        keep = data[:3072]
        self.size += len(data) * 4 // 3 + 40
        out: dict[str, JSONValue] = {
            "bytes": len(data),
            "base64": base64.b64encode(keep).decode("ascii"),
        }
        if len(keep) < len(data):
            out["truncated"] = True
        return out


_DEFAULT_POLICY: list[PayloadPolicy] = []


def default_policy() -> PayloadPolicy:
    """The policy of every tracker and bus made without one: a single shared instance,
    so its compiled patterns and caches exist once, not once per session (they were
    ~3.5 KB of every tracked session, and a cache per session stayed cold)."""
    if not _DEFAULT_POLICY:
        _DEFAULT_POLICY.append(PayloadPolicy())
    return _DEFAULT_POLICY[0]
