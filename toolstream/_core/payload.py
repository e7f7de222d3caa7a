"""PayloadPolicy: what a published event may contain.

Applied once, at publish: any Python value becomes JSON-safe, secrets become
``"[redacted]"`` and payloads larger than the byte cap become a marked preview.
The tool itself keeps the real values; only what is published is shaped.
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

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_SECRET_PATTERNS",
    "ArgsRedactor",
    "PayloadPolicy",
    "TextRedactor",
]

#: Key names (normalized: lower-case, letters and digits only) whose values are secret.
#: A key matches when it, or any run of its words, equals or ends with one of these:
#: ``x-api-key``, ``AWS_SECRET_ACCESS_KEY``, ``refreshToken`` and ``csrftoken`` match;
#: ``max_tokens`` and ``tokenizer`` do not.
DEFAULT_SECRET_KEYS: frozenset[str] = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "clientsecret",
        "authorization",
        "auth",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "sessionid",
        "signingkey",
        "encryptionkey",
        "connectionstring",
    }
)

_W = "A-Za-z0-9_"  # a character that would make a token prefix part of a longer word

#: Patterns of secret-looking values, redacted in every payload string and mapping key.
#: Each begins with a literal character, so the regex engine can skip the positions
#: where no secret can start; the word-boundary check comes after that literal.
DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    # HTTP auth schemes: the scheme word stays, the credential goes.
    r"(?:Bearer|bearer|BEARER)\s+[A-Za-z0-9\-._~+/]{6,}=*",
    r"(?:Basic|basic|BASIC)\s+(?=[A-Za-z+/]*[0-9=])[A-Za-z0-9+/]{8,}={0,2}",
    # OpenAI, Anthropic and others' "sk-..." keys.
    rf"sk-(?<![{_W}]sk-)[A-Za-z0-9_\-]{{16,}}",
    # GitHub tokens.
    rf"gh[pousr]_(?<![{_W}]gh._)[A-Za-z0-9]{{20,}}",
    rf"github_pat_(?<![{_W}]github_pat_)[A-Za-z0-9_]{{20,}}",
    # GitLab, Hugging Face, npm, Slack.
    rf"glpat-(?<![{_W}]glpat-)[A-Za-z0-9_\-]{{20,}}",
    rf"hf_(?<![{_W}]hf_)[A-Za-z0-9]{{30,}}",
    rf"npm_(?<![{_W}]npm_)[A-Za-z0-9]{{36}}",
    rf"xox[abposr]-(?<![{_W}]xox.-)[A-Za-z0-9\-]{{10,}}",
    # AWS access key ids, Google API keys.
    rf"A(?:KIA|SIA|BIA|CCA|ROA|IDA)(?<![{_W}]A...)[A-Z0-9]{{16}}\b",
    rf"AIza(?<![{_W}]AIza)[0-9A-Za-z_\-]{{35}}",
    # Stripe keys.
    rf"[sr]k_(?:live|test)_(?<![{_W}].k_live_)(?<![{_W}].k_test_)[0-9A-Za-z]{{16,}}",
    # JSON Web Tokens.
    rf"eyJ(?<![{_W}]eyJ)[A-Za-z0-9_\-]{{8,}}\.eyJ[A-Za-z0-9_\-]{{8,}}\.[A-Za-z0-9_\-]{{8,}}",
    # PEM private keys, terminated or cut off.
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)",
    # Credentials in URLs: scheme://user:password@host (the "://" and "@" stay).
    r"://[^/\s:@\"']+:[^/\s@\"']+@",
)


def _default_hint(text: str) -> bool:
    """False when ``text`` cannot hold a match of any default pattern: each contains
    one of these markers. Saves the regex on most prose."""
    return (
        "-" in text
        or "_" in text
        or "://" in text
        or "eyJ" in text
        or "A" in text
        or "earer" in text
        or "EARER" in text
        or "asic" in text
        or "ASIC" in text
    )


_SCHEME_PREFIX = re.compile(r"(?i)(bearer|basic)(\s+)")
_URL_CREDENTIALS = "://"
_WORD_SPLIT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
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


def _compile(patterns: Iterable[str | re.Pattern[str]]) -> re.Pattern[str] | None:
    parts = [p.pattern if isinstance(p, re.Pattern) else p for p in patterns]
    if not parts:
        return None
    return re.compile("|".join(f"(?:{p})" for p in parts))


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

    _pattern: re.Pattern[str] | None = attrs.field(init=False, eq=False, repr=False)
    _key_cache: dict[str, bool] = attrs.field(init=False, eq=False, repr=False, factory=dict)
    _defaults_only: bool = attrs.field(init=False, eq=False, repr=False, default=False)
    _text_cache: dict[str, str] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 256:
            raise ValueError(f"max_bytes must be at least 256 (or None), got {self.max_bytes}")
        if self.preview_chars < 0:
            raise ValueError("preview_chars must be >= 0")
        normalized = frozenset(re.sub(r"[^a-z0-9]", "", k.lower()) for k in self.secret_keys)
        object.__setattr__(self, "secret_keys", normalized)
        object.__setattr__(
            self, "_pattern", _compile(self.secret_patterns) if self.redact else None
        )
        defaults = tuple(self.secret_patterns) == DEFAULT_SECRET_PATTERNS
        object.__setattr__(self, "_defaults_only", defaults)

    # -- keys and text -----------------------------------------------------------------

    def is_secret_key(self, key: str) -> bool:
        """True when values under ``key`` are redacted (case and separators ignored)."""
        if not self.redact:
            return False
        cached = self._key_cache.get(key)
        if cached is not None:
            return cached
        words = [w.lower() for w in _WORD_SPLIT.findall(key)]
        secret_keys = self.secret_keys
        found = False
        for i in range(len(words)):
            joined = ""
            for j in range(i, len(words)):
                joined += words[j]
                if joined in secret_keys or any(joined.endswith(s) for s in _SUFFIX_KEYS):
                    found = True
                    break
            if found:
                break
        if not found:
            whole = "".join(words)
            found = whole in secret_keys
        if len(self._key_cache) >= _KEY_CACHE_LIMIT:
            self._key_cache.clear()
        self._key_cache[key] = found
        return found

    def redact_text(self, text: str) -> str:
        """``text`` with every secret-looking value replaced (no size cap)."""
        pattern = self._pattern
        if pattern is None or not text:
            return text
        if self._defaults_only and not _default_hint(text):
            return text
        if pattern.search(text) is None:
            return text
        placeholder = self.placeholder

        def replace(m: re.Match[str]) -> str:
            found = m.group(0)
            if found.startswith(_URL_CREDENTIALS):
                return f"://{placeholder}@"
            scheme = _SCHEME_PREFIX.match(found)
            return scheme.group(0) + placeholder if scheme else placeholder

        return pattern.sub(replace, text)

    def text(self, text: object) -> str | None:
        """A published text field (summary, message, reason...): redacted and capped.

        ``None`` stays ``None``; anything that is not a string becomes its bounded repr.
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
        text = self.redact_text(text)
        cap = self.max_bytes
        if cap is not None and len(text) * 4 > cap:
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > cap:
                keep = _cut_utf8(text, cap - 64)
                return f"{keep}… [truncated {size} bytes]"
        return text

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


_SUFFIX_KEYS = ("token", "password", "passwd", "secret", "apikey", "privatekey")


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


# -- streaming redaction ----------------------------------------------------------------

# Characters that never occur inside a secret token: a token ends at one of them.
_SEPARATOR_CLASS = r"[\s\"'`,;<>()\[\]{}|]"
_ANY_SEPARATOR = re.compile(_SEPARATOR_CLASS)
_WORD_BEFORE = re.compile(r"(\S+)" + _SEPARATOR_CLASS + r"+\Z")
_SCHEME_WINDOW = 64  # "Bearer" / "Basic" and the separators after them fit in this
_PEM_BEGIN = "-----BEGIN"
_PEM_END = re.compile(r"-----END[A-Z ]*-----")
_HOLD_LIMIT = 16384  # a token this long is published (redacted) rather than held forever
_HOLD_KEEP = 4096  # ...except its last characters, which a secret could still extend into
_BLOCK_LIMIT = 65536  # a "-----BEGIN" block longer than this is dropped whole


class TextRedactor:
    """Streaming redaction of free text: holds back only what could still be a secret.

    ``feed(text)`` returns the text that is safe to publish now: everything up to
    the last character that can never be part of a secret (white space, quotes,
    brackets...), redacted. An auth scheme word ("Bearer") is held with what
    follows it, a ``-----BEGIN`` block until its ``-----END``. ``flush()`` returns
    the rest once the text is complete. Whatever the split of a secret across
    calls, it never comes out unredacted.
    """

    __slots__ = ("_block", "_pending", "_policy", "_swallow")

    def __init__(self, policy: PayloadPolicy) -> None:
        self._policy = policy
        self._pending = ""
        self._block = False  # inside a "-----BEGIN ..." block: hold until its end
        self._swallow = False  # dropping the rest of an over-long secret token

    @property
    def held(self) -> int:
        """How many characters are held back."""
        return len(self._pending)

    def feed(self, text: str) -> str:
        """Take more text; return what can be published now."""
        policy = self._policy
        if policy._pattern is None:
            return text
        if self._swallow:
            m = _ANY_SEPARATOR.search(text)
            if m is None:
                return ""
            self._swallow = False
            text = text[m.start() :]
        pending = self._pending + text
        out: list[str] = []
        while pending:
            if self._block:
                end = _PEM_END.search(pending)
                if end is not None:
                    out.append(policy.redact_text(pending[: end.end()]))
                    pending = pending[end.end() :]
                    self._block = False
                    continue
                if len(pending) > _BLOCK_LIMIT:
                    out.append(policy.placeholder)  # far too long to be anything but a key
                    pending = ""
                    self._block = False
                    self._swallow = True
                break
            begin = pending.find(_PEM_BEGIN)
            if begin >= 0:
                out.append(policy.redact_text(pending[:begin]))
                pending = pending[begin:]
                self._block = True
                continue
            cut = _safe_cut(pending)
            if cut > 0:
                out.append(policy.redact_text(pending[:cut]))
                pending = pending[cut:]
            if len(pending) > _HOLD_LIMIT:
                emitted, pending, swallow = _force_cut(policy, pending)
                out.append(emitted)
                self._swallow = swallow
            break
        self._pending = pending
        return "".join(out)

    def boundary(self, raw: str) -> str:
        """A hard token boundary (a JSON escape sequence) that is published as ``raw``."""
        if self._block:
            self._pending += raw
            return ""
        return self.flush() + raw

    def flush(self) -> str:
        """The text is complete: return what is still held, redacted."""
        pending, self._pending = self._pending, ""
        self._swallow = False
        if self._block:
            self._block = False
            if "PRIVATE" in pending:
                return self._policy.placeholder
        return self._policy.redact_text(pending)


def _safe_cut(text: str) -> int:
    """Where ``text`` may be cut: after its last separator, unless the word before it
    is an auth scheme ("Bearer ") whose credential may still be coming.

    Linear in the text: the last separator is the first one of the reversed text (a
    forward search with a look-ahead to the end was quadratic in long deltas), and the
    scheme word is looked for just before it."""
    m = _ANY_SEPARATOR.search(text[::-1])
    if m is None:
        return 0
    cut = len(text) - m.start()
    word = _WORD_BEFORE.search(text, max(0, cut - _SCHEME_WINDOW), cut)
    if word is not None and word.group(1).lower() in ("bearer", "basic"):
        return word.start(1)
    return cut


def _force_cut(policy: PayloadPolicy, pending: str) -> tuple[str, str, bool]:
    """Publish most of an over-long token, never cutting inside a secret.

    Returns what to publish, what stays held, and whether the rest of the token must
    be dropped (a secret reaches the end of what is held and may continue)."""
    cut = len(pending) - _HOLD_KEEP
    pattern = policy._pattern
    assert pattern is not None
    for m in pattern.finditer(pending):
        if m.end() == len(pending):
            return policy.redact_text(pending), "", True
        if m.start() < cut < m.end():
            return policy.redact_text(pending[: m.end()]), pending[m.end() :], False
    return policy.redact_text(pending[:cut]), pending[cut:], False


# What the JSON tokenizer of ArgsRedactor expects next.
_VALUE, _ARRAY_START, _OBJECT_START, _KEY, _COLON, _AFTER_VALUE, _DONE = range(7)
_WHITESPACE = frozenset(" \t\r\n")
_LITERAL_CHARS = frozenset("0123456789+-.eEtruefalsn")
_HEX = frozenset("0123456789abcdefABCDEF")
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')


class ArgsRedactor:
    """Streaming redaction of a call's JSON input text, as the model writes it.

    A small JSON tokenizer: the whole value under a secret-looking key becomes
    ``"[redacted]"`` (published as soon as that value begins), string contents go
    through the hold-back of :class:`TextRedactor`, keys are held until complete.
    Whenever the input is valid JSON, the concatenation of everything returned is
    valid JSON too. Input that stops being valid JSON stops producing output: the
    call's ``tool.ready`` then publishes the redacted text.
    """

    __slots__ = (
        "_escape",
        "_key",
        "_lexing",
        "_policy",
        "_secret_depth",
        "_secret_next",
        "_stack",
        "_state",
        "_text",
        "invalid",
    )

    def __init__(self, policy: PayloadPolicy) -> None:
        self._policy = policy
        self._stack: list[str] = []  # open containers: "{" or "["
        self._state = _VALUE
        self._lexing = ""  # "" | "string" | "literal"
        self._escape = ""  # the escape sequence being read: "\\", "\\u00"...
        self._key: list[str] | None = None  # raw text of the key being read
        self._secret_next = False  # the next value is under a secret key
        self._secret_depth = -1  # >= 0: inside a secret value that began at this depth
        self._text = TextRedactor(policy)
        #: True once the text stopped being valid JSON; nothing more is published.
        self.invalid = False

    def feed(self, text: str) -> str:
        """Take more input text; return the redacted text that can be published now."""
        if self.invalid:
            return ""
        out: list[str] = []
        i = 0
        n = len(text)
        while i < n:
            if self._lexing == "string":
                i = self._string(text, i, out)
                if i < 0:
                    self.invalid = True
                    break
                continue
            c = text[i]
            if self._lexing == "literal":
                if c in _LITERAL_CHARS:
                    if self._secret_depth < 0:
                        out.append(c)
                    i += 1
                    continue
                self._lexing = ""
                self._value_done()
            if c in _WHITESPACE:
                if self._secret_depth < 0:
                    out.append(c)
            elif not self._structural(c, out):
                self.invalid = True
                break
            i += 1
        return "".join(out)

    def _emit(self, out: list[str], text: str) -> None:
        if self._secret_depth < 0:
            out.append(text)

    def _structural(self, c: str, out: list[str]) -> bool:
        state = self._state
        if state in (_VALUE, _ARRAY_START):
            if c == "]" and state == _ARRAY_START:
                return self._close("[", out)
            if self._secret_next:
                # The value under a secret key begins: publish the placeholder now.
                self._secret_next = False
                out.append(json.dumps(self._policy.placeholder))
                self._secret_depth = len(self._stack)
            if c == "{" or c == "[":
                self._emit(out, c)
                self._stack.append(c)
                self._state = _OBJECT_START if c == "{" else _ARRAY_START
                return True
            if c == '"':
                self._emit(out, c)
                self._lexing = "string"
                return True
            if c in _LITERAL_CHARS:
                self._emit(out, c)
                self._lexing = "literal"
                return True
            return False
        if state in (_OBJECT_START, _KEY):
            if c == '"':
                self._lexing = "string"
                self._key = []
                return True
            return state == _OBJECT_START and c == "}" and self._close("{", out)
        if state == _COLON:
            if c != ":":
                return False
            self._emit(out, c)
            self._state = _VALUE
            return True
        if state == _AFTER_VALUE:
            if c == ",":
                self._emit(out, c)
                self._state = _KEY if self._stack[-1] == "{" else _VALUE
                return True
            if c == "}" or c == "]":
                return self._close("{" if c == "}" else "[", out)
        return False

    def _close(self, opener: str, out: list[str]) -> bool:
        if not self._stack or self._stack[-1] != opener:
            return False
        self._emit(out, "}" if opener == "{" else "]")
        self._stack.pop()
        self._value_done()
        return True

    def _value_done(self) -> None:
        self._state = _AFTER_VALUE if self._stack else _DONE
        if self._secret_depth == len(self._stack):
            self._secret_depth = -1

    def _string(self, text: str, i: int, out: list[str]) -> int:
        """Consume string content from ``text[i:]``; return the next index (-1: not JSON)."""
        n = len(text)
        key = self._key
        hidden = self._secret_depth >= 0
        while i < n:
            c = text[i]
            if self._escape:
                esc = self._escape + c
                i += 1
                if (len(esc) == 2 and c not in 'u"\\/bfnrt') or (len(esc) > 2 and c not in _HEX):
                    return -1
                if (len(esc) == 2 and c == "u") or 2 < len(esc) < 6:
                    self._escape = esc
                    continue
                self._escape = ""
                if key is not None:
                    key.append(esc)
                elif not hidden:
                    out.append(self._text.boundary(esc))
                continue
            if c == '"':
                self._lexing = ""
                if key is not None:
                    self._finish_key(key, out)
                else:
                    if not hidden:
                        out.append(self._text.flush())
                        out.append('"')
                    self._value_done()
                return i + 1
            if c == "\\":
                self._escape = "\\"
                i += 1
                continue
            m = _STRING_RUN.match(text, i)
            if m is None:  # a raw control character: not JSON
                return -1
            i = m.end()
            if key is not None:
                key.append(m.group(0))
            elif not hidden:
                out.append(self._text.feed(m.group(0)))
        return i

    def _finish_key(self, key: list[str], out: list[str]) -> None:
        raw = "".join(key)
        self._key = None
        self._state = _COLON
        if self._secret_depth >= 0:
            return
        try:
            name = json.loads(f'"{raw}"')
        except ValueError:
            name = raw
        out.append(f'"{self._policy.redact_text(raw)}"')
        self._secret_next = self._policy.is_secret_key(name)
