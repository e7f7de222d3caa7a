"""Redaction: what counts as a secret, and how text is cleaned of secrets, whole or streamed.

Three redactors share one set of patterns, so that the same text comes out the same
whichever way it was published:

- :class:`Patterns` redacts a whole text at once (payload strings, summaries, messages);
- :class:`TextRedactor` redacts free text that arrives in pieces (output deltas): it holds
  back only what could still turn out to be a secret;
- :class:`ArgsRedactor` redacts JSON that arrives in pieces (a tool's streamed input):
  a small JSON tokenizer that hides every value under a secret-looking key and runs
  string contents through a :class:`TextRedactor`;
- :func:`redact_loose` redacts text that is not valid JSON (input cut off by
  ``max_tokens``, or JSON-like text a model got wrong) leniently, hiding at least what
  the streamed deltas hid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Protocol

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "DEFAULT_SECRET_PATTERNS",
    "ArgsRedactor",
    "Patterns",
    "RedactionPolicy",
    "TextRedactor",
    "is_secret_key_name",
    "json_string_body",
    "redact_loose",
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

#: Keys that end with one of these words are secret whatever comes before (``mytoken``).
_SUFFIX_KEYS = ("token", "password", "passwd", "secret", "apikey", "privatekey")

_W = "A-Za-z0-9_"  # a character that would make a token prefix part of a longer word

#: The key words of ``key=value`` / ``key: value`` secrets in free text (the key ends
#: with one of them: ``AWS_SECRET_ACCESS_KEY=``, ``X-Api-Key:``, ``?access_token=``).
_KV_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "api[_.\\- ]?key",
    "access[_.\\-]?key",
    "private[_.\\-]?key",
    "client[_.\\-]?secret",
    "signature",
)
_KV_KEYS = "(?i:" + "|".join(_KV_WORDS) + ")"
#: A value in free text: up to the next character that cannot be part of one. An auth
#: scheme word is not the value (``token: Bearer abc``: the Bearer pattern takes it).
_KV_VALUE = r"(?!(?i:bearer|basic)\s)[^\s\"'`,;<>()\[\]{}|&]+"
#: What may separate a key from its value: a closing quote, blanks, "=" or ":", blanks,
#: an opening quote. Bounded, so that a streaming redactor always sees the key.
_KV_SEP = r"[\"']?[ \t]{0,8}[=:][ \t]{0,8}[\"']?"

#: Patterns of secret-looking values, redacted in every payload string and mapping key.
#: Most begin with a literal character, so the regex engine can skip the positions where
#: no secret can start; a word-boundary check, where needed, comes after that literal.
DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    # HTTP auth schemes: the scheme word stays, the credential goes.
    r"(?:Bearer|bearer|BEARER)\s{1,16}[A-Za-z0-9\-._~+/]{6,}=*",
    r"(?:Basic|basic|BASIC)\s{1,16}(?=[A-Za-z+/]*[0-9=])[A-Za-z0-9+/]{8,}={0,2}",
    # OpenAI, Anthropic and others' "sk-..." keys.
    rf"sk-(?<![{_W}]sk-)[A-Za-z0-9_\-]{{16,}}",
    # GitHub tokens.
    rf"gh[pousr]_(?<![{_W}]gh._)[A-Za-z0-9]{{20,}}",
    rf"github_pat_(?<![{_W}]github_pat_)[A-Za-z0-9_]{{20,}}",
    # GitLab, Hugging Face, npm, Slack tokens.
    rf"glpat-(?<![{_W}]glpat-)[A-Za-z0-9_\-]{{20,}}",
    rf"hf_(?<![{_W}]hf_)[A-Za-z0-9]{{30,}}",
    rf"npm_(?<![{_W}]npm_)[A-Za-z0-9]{{36}}",
    rf"xox[abposr]-(?<![{_W}]xox.-)[A-Za-z0-9\-]{{10,}}",
    # Slack webhook URLs: the path after hooks.slack.com/services/ is the credential.
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{8,}",
    # AWS access key ids, Google API keys.
    rf"A(?:KIA|SIA|BIA|CCA|ROA|IDA)(?<![{_W}]A...)[A-Z0-9]{{16}}\b",
    rf"AIza(?<![{_W}]AIza)[0-9A-Za-z_\-]{{35}}",
    # Stripe keys.
    rf"[sr]k_(?:live|test)_(?<![{_W}].k_live_)(?<![{_W}].k_test_)[0-9A-Za-z]{{16,}}",
    # JSON Web Tokens.
    rf"eyJ(?<![{_W}]eyJ)[A-Za-z0-9_\-]{{8,}}\.eyJ[A-Za-z0-9_\-]{{8,}}\.[A-Za-z0-9_\-]{{8,}}",
    # PEM and PGP private keys, terminated or cut off.
    r"-----BEGIN[A-Z ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
    r"(?:-----END[A-Z ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    # Credentials in URLs: scheme://user:password@host (the user name and "@" stay).
    r"://[^/\s:@\"']+:[^/\s@\"']+@",
    # key=value and key: value in free text: query parameters (?api_key=..., &token=),
    # connection strings (ODBC Pwd=...;, JDBC password=...), headers (X-Api-Key: ...),
    # environment files (AWS_SECRET_ACCESS_KEY=...), JSON text ("password": "...").
    # The key stays, the value goes.
    rf"{_KV_KEYS}{_KV_SEP}{_KV_VALUE}",
)

# What stays of a match (the rest becomes the placeholder): an auth scheme word, a URL's
# scheme separator and user name, a webhook's host and path kind, a key and its "=".
_KEEP = re.compile(
    r"(?i:bearer|basic)\s{1,16}"
    r"|://[^/\s:@\"']+:"
    r"|hooks\.slack\.com/\w+/"
    rf"|{_KV_KEYS}{_KV_SEP}"
)

# Characters that never occur inside a secret token: a token ends at one of them.
_SEPARATOR_CLASS = r"[\s\"'`,;<>()\[\]{}|]"
_ANY_SEPARATOR = re.compile(_SEPARATOR_CLASS)


def _reversed_word(word: str) -> str:
    """A key word pattern read backwards (``api[_.\\-]?key`` -> ``yek[_.\\-]?ipa``)."""
    parts = re.findall(r"\[[^\]]*\]\??|.", word)
    return "".join(reversed(parts))


# What may come right before a secret that separators split from it: an auth scheme
# word, or the key of a key=value secret (with its quotes, "=" or ":", and blanks). It is
# matched at the start of the reversed text before a cut (cost: the introducer's length,
# not a window's), so it is written backwards: what ends the introducer comes first.
#: The first words of the key words that a blank may split ("api key"): a text that ends
#: with one and its blank may be an introducer still being written ("API " then "KEY:").
_SPLIT_FIRST_WORDS = ("api",)
_INTRODUCER_REVERSED = re.compile(
    r"(?:\s{0,16}(?i:reraeb|cisab)"
    r"|(?:[\"']?[ \t]{0,8}[=:])?[ \t]{0,8}[\"']?(?i:"
    + "|".join(_reversed_word(w) for w in _KV_WORDS)
    + ")"
    + "".join(f"| (?i:{w[::-1]})" for w in _SPLIT_FIRST_WORDS)
    + ")"
)
_INTRODUCER_WINDOW = 96  # the longest introducer, with its blanks, fits in this
# What every introducer, reversed, starts with: blanks, quotes, "=" or ":", then the last
# letter of its word (matched in any case, as the introducers are). Where this does not
# match, no introducer does.
_LAST_LETTERS = "".join(
    sorted({word[-1] for word in (*_KV_WORDS, *_SPLIT_FIRST_WORDS, "bearer", "basic")})
)
if not _LAST_LETTERS.isalpha():  # pragma: no cover - a word ending in a pattern
    raise ImportError("every introducer word must end with a letter")
_MAY_INTRODUCE = re.compile(rf"[\s\"'=:]*(?i:[{_LAST_LETTERS}])")
# A URL's credentials may contain separators ("postgres://u:p;w(d@host"): from "://",
# while the text after it may still become "user:password@", nothing is published.
_OPEN_URL_CREDENTIALS = re.compile(r"://[^/\s:@\"']*(?::[^/\s@\"']*)?\Z")
_URL_CREDENTIALS = re.compile(r"://[^/\s:@\"']+:[^/\s@\"']+@")
_PEM_BEGIN = "-----BEGIN"
_PEM_END = re.compile(r"-----END[A-Z ]*-----")
_HOLD_LIMIT = 16384  # a token this long is published (redacted) rather than held forever
_HOLD_KEEP = 4096  # ...except its last characters, which a secret could still extend into
_BLOCK_LIMIT = 65536  # a "-----BEGIN" block longer than this is dropped whole

_WORD_SPLIT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_secret_key_name(key: str, secret_keys: frozenset[str]) -> bool:
    """True when a mapping key names a secret: the key, or any run of its words, equals
    or ends with one of ``secret_keys`` (normalized names)."""
    words = [w.lower() for w in _WORD_SPLIT.findall(key)]
    for i in range(len(words)):
        joined = ""
        for j in range(i, len(words)):
            joined += words[j]
            if joined in secret_keys or joined.endswith(_SUFFIX_KEYS):
                return True
    return "".join(words) in secret_keys


# What every match of a default pattern contains, literally (each pattern's fixed part;
# none of them is case-insensitive)...
_HINT_LITERALS = (
    "earer",  # Bearer, bearer
    "EARER",
    "asic",  # Basic, basic
    "ASIC",
    "sk-",
    "gh",  # ghp_, gho_, ghu_, ghs_, ghr_
    "github_pat_",
    "glpat-",
    "hf_",
    "npm_",
    "xox",
    "hooks.slack.com/",
    "AKIA",
    "ASIA",
    "ABIA",
    "ACCA",
    "AROA",
    "AIDA",
    "AIza",
    "k_live_",
    "k_test_",
    "eyJ",
    "-----BEGIN",
    "://",
)
_HINT_LITERAL = re.compile("|".join(re.escape(literal) for literal in _HINT_LITERALS))
# ...except key=value secrets, whose key word is matched in any case: casefolded, it
# contains one of these. (Python's case-insensitive matching also takes U+017F, the long
# s, for "s" and U+212A, the Kelvin sign, for "k", which casefold() maps the same way,
# and U+0130 / U+0131, the dotted and dotless I, for "i", which it does not: so no anchor
# has an "i" — "gnature" stands for "signature".)
_KV_ANCHORS = ("pass", "pwd", "secret", "token", "key", "gnature")
_KV_ANCHOR = re.compile("|".join(_KV_ANCHORS))
_HINT_SHORT = 256  # longer texts: the secret patterns' one pass is as cheap


def _default_hint(text: str) -> bool:
    """False when ``text`` cannot hold a match of any default pattern. Saves the regex
    (~2.5 µs on a short text) on most prose: first a few characters every match but a
    key=value one holds, then, on a short text, each pattern's literal part."""
    if not (
        "-" in text
        or "_" in text
        or "/" in text
        or "=" in text
        or ":" in text
        or "eyJ" in text
        or "A" in text
        or "earer" in text
        or "EARER" in text
        or "asic" in text
        or "ASIC" in text
    ):
        return False
    if len(text) > _HINT_SHORT or _HINT_LITERAL.search(text) is not None:
        return True
    # Only a key=value secret is left to look for.
    return ("=" in text or ":" in text) and _KV_ANCHOR.search(text.casefold()) is not None


class RedactionPolicy(Protocol):
    """What the redactors need of a :class:`~toolstream.PayloadPolicy`."""

    @property
    def patterns(self) -> Patterns:
        """The compiled value patterns."""
        ...

    def is_secret_key(self, key: str) -> bool:
        """True when values under ``key`` are secret."""
        ...


class Patterns:
    """The compiled secret patterns of a policy, and whole-text redaction with them."""

    __slots__ = ("hint", "pattern", "placeholder")

    def __init__(self, patterns: Iterable[str | re.Pattern[str]], placeholder: str) -> None:
        parts = [p.pattern if isinstance(p, re.Pattern) else p for p in patterns]
        self.placeholder = placeholder
        #: None when there are no patterns.
        self.pattern: re.Pattern[str] | None = (
            re.compile("|".join(f"(?:{p})" for p in parts)) if parts else None
        )
        #: A cheap test that rules out a match (the defaults only).
        self.hint: Callable[[str], bool] | None = (
            _default_hint if tuple(parts) == DEFAULT_SECRET_PATTERNS else None
        )

    def redact(self, text: str) -> str:
        """``text`` with every secret-looking value replaced by the placeholder."""
        pattern = self.pattern
        if pattern is None or not text:
            return text
        hint = self.hint
        if hint is not None and not hint(text):
            return text
        if pattern.search(text) is None:
            return text
        return pattern.sub(self._replace, text)

    def _replace(self, m: re.Match[str]) -> str:
        found = m.group(0)
        keep = _KEEP.match(found)
        head = keep.group(0) if keep is not None and keep.end() < len(found) else ""
        tail = "@" if found.startswith("://") and found.endswith("@") else ""
        return head + self.placeholder + tail


# -- free text, streamed ----------------------------------------------------------------


class TextRedactor:
    """Streaming redaction of free text: holds back only what could still be a secret.

    ``feed(text)`` returns the text that is safe to publish now: everything up to the
    last character that can never be part of a secret (white space, quotes, brackets...),
    redacted. What separators cannot split from a secret is held with it: an auth scheme
    word ("Bearer"), the key of a ``key=value`` secret, a URL whose ``user:password@``
    may still be coming, a ``-----BEGIN`` block until its ``-----END``. ``flush()``
    returns the rest once the text is complete. Whatever the split of a text across
    calls, the concatenated output equals :meth:`Patterns.redact` of the whole text.
    """

    __slots__ = ("_block", "_patterns", "_pending", "_swallow")

    def __init__(self, policy: RedactionPolicy) -> None:
        self._patterns = policy.patterns
        self._pending = ""
        self._block = False  # inside a "-----BEGIN ..." block: hold until its end
        self._swallow = False  # dropping the rest of an over-long secret token

    @property
    def held(self) -> int:
        """How many characters are held back."""
        return len(self._pending)

    def feed(self, text: str) -> str:
        """Take more text; return what can be published now."""
        patterns = self._patterns
        if patterns.pattern is None:
            return text
        if self._swallow:
            m = _ANY_SEPARATOR.search(text)
            if m is None:
                return ""
            self._swallow = False
            text = text[m.start() :]
        pending = self._pending + text
        out: list[str] = []
        redact = patterns.redact
        while pending:
            if self._block:
                end = _PEM_END.search(pending)
                if end is not None:
                    out.append(redact(pending[: end.end()]))
                    pending = pending[end.end() :]
                    self._block = False
                    continue
                if len(pending) > _BLOCK_LIMIT:
                    out.append(patterns.placeholder)  # far too long to be anything but a key
                    pending = ""
                    self._block = False
                    self._swallow = True
                break
            begin = pending.find(_PEM_BEGIN)
            if begin >= 0:
                out.append(redact(pending[:begin]))
                pending = pending[begin:]
                self._block = True
                continue
            cut = _safe_cut(pending)
            if cut > 0:
                out.append(redact(pending[:cut]))
                pending = pending[cut:]
            if len(pending) > _HOLD_LIMIT:
                emitted, pending, swallow = _force_cut(patterns, pending)
                out.append(emitted)
                self._swallow = swallow
            break
        self._pending = pending
        return "".join(out)

    def flush(self) -> str:
        """The text is complete: return what is still held, redacted."""
        pending, self._pending = self._pending, ""
        self._swallow = False
        if self._block:
            self._block = False
            if "PRIVATE" in pending:
                return self._patterns.placeholder
        return self._patterns.redact(pending)


def _token_start(text: str, end: int) -> int:
    """Where the token holding ``text[end - 1]`` begins (after the separator before it)."""
    m = _ANY_SEPARATOR.search(text[:end][::-1])
    return 0 if m is None else end - m.start()


def _safe_cut(text: str) -> int:
    """Where ``text`` may be cut so that no secret spans the cut: after its last
    separator, moved back to the start of the token of whatever is still open before it
    (an introducer whose secret may follow, a URL whose credentials may follow).

    Linear in the text: separators are looked for from the end (a forward search with a
    look-ahead to the end was quadratic in long deltas), introducers in a short window.
    """
    end = len(text)
    # Text that ends with a separator (most deltas) is cut at its end: no reversed copy.
    cut = end if _ANY_SEPARATOR.match(text, end - 1) else _token_start(text, end)
    if cut == 0:
        return 0
    # The last scheme before the cut (one after it is in the held token anyway): an
    # earlier URL's credentials may span the cut while a later "://" does not.
    scheme = text.rfind("://", 0, cut)
    if scheme >= 0:
        if _OPEN_URL_CREDENTIALS.match(text, scheme):
            cut = _token_start(text, scheme + 1)
        else:
            for found in _URL_CREDENTIALS.finditer(text):
                if found.start() < cut < found.end():
                    cut = _token_start(text, found.start() + 1)
                    break
    while cut > 0:
        before = text[max(0, cut - _INTRODUCER_WINDOW) : cut][::-1]
        if _MAY_INTRODUCE.match(before) is None:  # a quarter of the introducers' cost
            break
        introducer = _INTRODUCER_REVERSED.match(before)
        if introducer is None:
            break
        cut = _token_start(text, cut - introducer.end() + 1)
    return cut


def _force_cut(patterns: Patterns, pending: str) -> tuple[str, str, bool]:
    """Publish most of an over-long token, never cutting inside a secret.

    Returns what to publish, what stays held, and whether the rest of the token must be
    dropped (a secret reaches the end of what is held and may continue)."""
    cut = len(pending) - _HOLD_KEEP
    pattern = patterns.pattern
    assert pattern is not None
    for m in pattern.finditer(pending):
        if m.end() == len(pending):
            return patterns.redact(pending), "", True
        if m.start() < cut < m.end():
            return patterns.redact(pending[: m.end()]), pending[m.end() :], False
    return patterns.redact(pending[:cut]), pending[cut:], False


# -- JSON strings --------------------------------------------------------------------------

_ESCAPED = re.compile('[\\\\"\x00-\x1f\ud800-\udfff]')
_SIMPLE_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    return _SIMPLE_ESCAPES.get(c) or f"\\u{ord(c):04x}"


def json_string_body(text: str) -> str:
    """``text`` as the inside of a JSON string literal: quotes, backslashes, control
    characters and lone surrogates escaped, everything else as it is."""
    return _ESCAPED.sub(_escape_char, text)


def _join_surrogates(text: str) -> str:
    """Pairs of surrogates decoded from separate ``\\u`` escapes, joined into one
    character (lone ones stay)."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


# -- JSON, streamed ---------------------------------------------------------------------

# What the JSON tokenizer of ArgsRedactor expects next.
_VALUE, _ARRAY_START, _OBJECT_START, _KEY, _COLON, _AFTER_VALUE, _DONE = range(7)
_WHITESPACE = frozenset(" \t\r\n")
_LITERAL_CHARS = frozenset("0123456789+-.eEtruefalsn")
_HEX = frozenset("0123456789abcdefABCDEF")
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')


class ArgsRedactor:
    """Streaming redaction of a call's JSON input text, as the model writes it.

    A small JSON tokenizer: the whole value under a secret-looking key becomes
    ``"[redacted]"`` (published as soon as that value begins); string contents are
    decoded, go through the hold-back of :class:`TextRedactor` and are re-encoded (so
    an escape such as ``\\u0041`` inside a secret cannot hide it); keys are held until
    complete. Whenever the input is valid JSON, the concatenation of everything returned
    is valid JSON too, and holds the same value with secrets redacted. Input that stops
    being valid JSON stops producing output: the call's ``tool.ready`` then publishes
    :func:`redact_loose` of the whole text.
    """

    __slots__ = (
        "_escape",
        "_high",
        "_is_secret_key",
        "_key",
        "_lexing",
        "_patterns",
        "_secret_depth",
        "_secret_next",
        "_stack",
        "_state",
        "_text",
        "invalid",
    )

    def __init__(self, policy: RedactionPolicy) -> None:
        self._patterns = policy.patterns
        self._is_secret_key = policy.is_secret_key
        self._stack: list[str] = []  # open containers: "{" or "["
        self._state = _VALUE
        self._lexing = ""  # "" | "string" | "literal"
        self._escape = ""  # the escape sequence being read: "\\", "\\u00"...
        self._high = ""  # a high surrogate waiting for its low half
        self._key: list[str] | None = None  # decoded text of the key being read
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
                out.append(json.dumps(self._patterns.placeholder))
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

    def _decoded(self, chars: str, out: list[str]) -> None:
        """Decoded string content: into the key being read, or through the redactor."""
        if self._high:
            chars, self._high = self._high + chars, ""
        if chars and "\ud800" <= chars[-1] <= "\udbff":
            chars, self._high = chars[:-1], chars[-1]  # its low half may follow
        chars = _join_surrogates(chars)
        if not chars:
            return
        if self._key is not None:
            self._key.append(chars)
        elif self._secret_depth < 0:
            safe = self._text.feed(chars)
            if safe:
                out.append(json_string_body(safe))

    def _string(self, text: str, i: int, out: list[str]) -> int:
        """Consume string content from ``text[i:]``; return the next index (-1: not JSON)."""
        n = len(text)
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
                self._decoded(chr(int(esc[2:], 16)) if len(esc) == 6 else _UNESCAPES[c], out)
                continue
            if c == '"':
                self._lexing = ""
                if self._high:  # a lone high surrogate ends the string
                    high, self._high = self._high, ""
                    if self._key is not None:
                        self._key.append(high)
                    elif self._secret_depth < 0:
                        out.append(json_string_body(self._text.feed(high)))
                if self._key is not None:
                    self._finish_key(self._key, out)
                else:
                    if self._secret_depth < 0:
                        out.append(json_string_body(self._text.flush()))
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
            self._decoded(m.group(0), out)
        return i

    def _finish_key(self, key: list[str], out: list[str]) -> None:
        name = "".join(key)
        self._key = None
        self._state = _COLON
        if self._secret_depth >= 0:
            return
        out.append(f'"{json_string_body(self._patterns.redact(name))}"')
        self._secret_next = self._is_secret_key(name)


# -- text that is not valid JSON ----------------------------------------------------------

_LOOSE_TOKEN = re.compile(
    r"""(?P<ws>\s+)"""
    r"""|(?P<str>"(?:[^"\\]|\\.)*(?:"|\\?\Z)|'(?:[^'\\]|\\.)*(?:'|\\?\Z))"""
    r"""|(?P<open>[{\[(])|(?P<close>[}\])])|(?P<comma>,)|(?P<assign>[:=])"""
    r"""|(?P<word>[^\s"'{}\[\](),:=]+)""",
    re.DOTALL,
)
_LOOSE_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt'])")


def _loose_unescape(body: str) -> str:
    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code[0] == "u":
            return chr(int(code[1:], 16))
        return "'" if code == "'" else _UNESCAPES[code]

    return _join_surrogates(_LOOSE_ESCAPE.sub(one, body))


def redact_loose(text: str, policy: RedactionPolicy) -> str:
    """Redact text that is JSON-like but not valid JSON, erring on the side of hiding.

    Strings (single or double quoted, possibly unterminated) and bare words followed by
    ``:`` or ``=`` are keys; the value after a secret key is hidden up to the next ``,``
    or closing bracket at its own depth, whatever it holds (several strings, a nested
    object, a cut-off rest). String contents are decoded before the patterns see them.
    On a valid JSON prefix this hides at least what :class:`ArgsRedactor` hid.
    """
    patterns = policy.patterns
    is_secret_key = policy.is_secret_key
    placeholder = json.dumps(patterns.placeholder)
    out: list[str] = []
    depth = 0
    hiding = -1  # >= 0: hiding a secret value that began at this depth
    key: str | None = None  # the last string or word, while it may still be a key
    for m in _LOOSE_TOKEN.finditer(text):
        kind = m.lastgroup
        token = m.group(0)
        if hiding >= 0:
            if kind == "open":
                depth += 1
            elif kind == "close":
                if depth == hiding:
                    hiding = -1
                    depth = max(0, depth - 1)
                    out.append(token)
                else:
                    depth -= 1
            elif kind == "comma" and depth == hiding:
                hiding = -1
                out.append(token)
            continue
        if kind == "ws":
            out.append(token)
            continue
        if kind == "assign":
            out.append(token)
            if key is not None and is_secret_key(key):
                out.append(placeholder)
                hiding = depth
            key = None
            continue
        if kind == "str":
            quote = token[0]
            closed = len(token) >= 2 and token.endswith(quote) and not token.endswith("\\" + quote)
            body = _loose_unescape(token[1 : -1 if closed else None])
            key = body
            shown = json_string_body(patterns.redact(body))
            if quote == "'":
                shown = shown.replace('\\"', '"').replace("'", "\\'")
            out.append(quote + shown + (quote if closed else ""))
            continue
        if kind == "word":
            key = token
            out.append(patterns.redact(token))
            continue
        key = None
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth = max(0, depth - 1)
        out.append(token)
    # Patterns that span tokens (a URL whose password holds a comma) get one more pass.
    return patterns.redact("".join(out))
