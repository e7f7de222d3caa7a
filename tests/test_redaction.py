"""Redaction: streamed and whole-text redaction agree for every split; invalid input is
redacted at least as much as its streamed deltas were; the default patterns."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolstream as ts

POLICY = ts.PayloadPolicy()

# Passwords with each character that ends a token for the streaming redactor.
PUNCTUATION = list(";,()[]{}|<>`")
DSNS = [f"postgres://admin:pa{c}ss{c}w0rd@db.internal:5432/app" for c in PUNCTUATION]


def streamed(text: str, cuts: list[int]) -> str:
    """``text`` through a TextRedactor, fed in the pieces ``cuts`` make."""
    redactor = POLICY.text_redactor()
    bounds = [0, *sorted(set(cuts)), len(text)]
    out = [redactor.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    return "".join(out) + redactor.flush()


@pytest.mark.parametrize("dsn", DSNS, ids=PUNCTUATION)
def test_url_credentials_with_punctuation_never_stream_out(dsn: str) -> None:
    text = f"connecting to {dsn} now"
    whole = POLICY.redact_text(text)
    assert whole == "connecting to postgres://admin:[redacted]@db.internal:5432/app now"
    for k in range(len(text) + 1):
        assert streamed(text, [k]) == whole, f"cut at {k}"
    rng = random.Random(len(dsn))
    for _ in range(50):
        cuts = [rng.randrange(1, len(text)) for _ in range(rng.randrange(1, 12))]
        assert streamed(text, cuts) == whole, cuts


@pytest.mark.parametrize("dsn", DSNS, ids=PUNCTUATION)
def test_url_credentials_with_punctuation_never_reach_args_deltas(dsn: str) -> None:
    args = json.dumps({"dsn": dsn, "q": "x"})
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    for k in range(1, len(args)):
        call = ts.Tracker(bus, "s").create("connect")
        call.args_delta(args[:k])
        call.args_delta(args[k:])
        call.ready()
    deltas = [e for e in sub.take_nowait() if isinstance(e, ts.ToolArgsDelta)]
    assert deltas
    assert not any("pa" + dsn.split("pa", 1)[1].split("@")[0] in e.delta for e in deltas)
    for event in bus.subscribe(session="s", after=f"{bus.epoch}-0").take_nowait():
        assert "ss" + dsn.split("ss", 1)[1].split("@")[0] not in json.dumps(ts.to_dict(event))


SECRET = "sk-live-0123456789abcdefghij"
INVALID = [
    # cut off by max_tokens inside the secret
    ('{"query": "weather", "api_key": "sk-live-01234', "sk-live-01234"),
    # a second string in the secret's value
    ('{"token": "abc" "hunter2-second", "q": 1}', "hunter2-second"),
    # an array's later elements
    ('{"secrets": ["first", "second-hunter2",], "q": 1', "second-hunter2"),
    # a key with a space
    ('{"api key": "hunter2-spaced", "q": 1,}', "hunter2-spaced"),
    # a nested object under a secret key, cut off
    ('{"credentials": {"user": "a", "pass": "hunter2-nested"', "hunter2-nested"),
    # single quotes, bare words
    ("{'password': 'hunter2-single', q: 1}", "hunter2-single"),
    ("password=hunter2-plain user=bob", "hunter2-plain"),
    # escapes that hide a value pattern from a naive scan
    ('{"note": "sk-live-\\u0030123456789abcdefghij", ', SECRET),
]


@pytest.mark.parametrize(("text", "secret"), INVALID)
def test_invalid_json_input_is_redacted_at_least_as_much_as_its_deltas(
    text: str, secret: str
) -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    call = ts.Tracker(bus, "s").create("write")
    for i in range(0, len(text), 3):
        call.args_delta(text[i : i + 3])
    call.ready()
    assert call.args_valid is False
    assert call.args == text, "the tool still gets the raw text"
    events = sub.take_nowait()
    ready = next(e for e in events if isinstance(e, ts.ToolReady))
    assert ready.args_valid is False
    wire = json.dumps([ts.to_dict(e) for e in events])
    assert secret not in wire, ready.args
    assert isinstance(ready.args, str) and "[redacted]" in ready.args


def test_invalid_input_keeps_what_is_not_secret() -> None:
    out = POLICY.invalid_args('{"query": "weather in Paris", "limit": 5, "api_key": "sk-x')
    assert out.startswith('{"query": "weather in Paris", "limit": 5, "api_key":')
    assert "sk-x" not in out


# Each default pattern, in the shapes users paste.
PATTERN_CASES = [
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("hook https://hooks.slack.com/services/T0001/B0002/AbCdEfGhIjKlMnOpQrStUvWx ok", "AbCdEfGh"),
    (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGXyz\n-----END PGP PRIVATE KEY BLOCK-----",
        "lQOYBGXyz",
    ),
    ("curl -H 'X-Api-Key: 9f8e7d6c5b4a' https://api.example.com", "9f8e7d6c5b4a"),
    ("GET https://api.example.com/v1/x?api_key=abc123def456&q=1", "abc123def456"),
    ("GET https://api.example.com/v1/x?token=tok_987654321&q=1", "tok_987654321"),
    ("Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=Hunter2!Odbc;Encrypt=yes", "Hunter2!Odbc"),
    ("jdbc:mysql://db:3306/app?user=app&password=Hunter2Jdbc&ssl=true", "Hunter2Jdbc"),
    ("jdbc:sqlserver://db;databaseName=app;user=sa;password=Hunter2Mssql;", "Hunter2Mssql"),
    ('config {"password": "hunter2-json-text"}', "hunter2-json-text"),
    ("Authorization: Bearer abcdef0123456789abcdef", "abcdef0123456789"),
    ("token: Bearer abcdef0123456789abcdef", "abcdef0123456789"),
]


@pytest.mark.parametrize(("text", "secret"), PATTERN_CASES)
def test_default_patterns_whole_and_streamed(text: str, secret: str) -> None:
    whole = POLICY.redact_text(text)
    assert secret not in whole, whole
    assert "[redacted]" in whole
    rng = random.Random(text)
    for _ in range(40):
        cuts = [rng.randrange(1, len(text)) for _ in range(rng.randrange(1, 8))]
        assert streamed(text, cuts) == whole, cuts


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens=512 and tokenizer: gpt2",
        "the secretary said hello",
        "password: [redacted]",
        "see https://example.com/a?q=1&page=2",
        "Running call_api (url='https://a', api_key='[redacted]')",
    ],
)
def test_what_is_not_a_secret_is_left_alone(text: str) -> None:
    assert POLICY.redact_text(text) == text


_ALPHABET = st.sampled_from(
    [*"abcXYZ019 _-:/@=;,(){}[]|<>`'\"\n", "://", "Bearer ", "password=", "sk-"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ALPHABET, min_size=1, max_size=60).map("".join), st.data())
def test_streamed_redaction_equals_whole_redaction_for_every_split(
    text: str, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=10))
    assert streamed(text, cuts) == POLICY.redact_text(text)


@pytest.mark.parametrize("text", ["://;:a@://", "x://u:p;w@h f://g", "a://b:c;d@e f://g:h;i@j"])
def test_credentials_of_an_earlier_url_are_held_across_a_later_scheme(text: str) -> None:
    """Found by the property above: the cut after ";" fell inside the first URL's
    credentials while only the last "://" was looked at."""
    whole = POLICY.redact_text(text)
    assert "[redacted]" in whole
    for k in range(len(text) + 1):
        assert streamed(text, [k]) == whole, k


@pytest.mark.parametrize(
    "text",
    [
        "BEARER abcdef0123456789abcdef",
        "bEaReR\u2003abcdef0123456789abcdef",
        "x PassWord = 'Hunter2Hunter2x'",
        'Api_Key:\t"Hunter2Hunter2x"',
        "the ToKeN: Hunter2Hunter2x went",
        "Basic dXNlcjpwYXNzd29yZA== ok",
        "sk-abcdefghijklmnopqrstuvwx, done; t0 t1 ",
    ],
)
def test_introducers_in_any_case_hold_what_follows_at_every_cut(text: str) -> None:
    """The streamed redactor rules an introducer out by the letter it would end with,
    and takes a text that ends with a separator whole, before any costlier look: every
    pair of cuts still gives the whole text's redaction."""
    whole = POLICY.redact_text(text)
    for k in range(len(text) + 1):
        for j in range(k, len(text) + 1):
            assert streamed(text, [k, j]) == whole, (k, j)


@pytest.mark.parametrize(
    "text",
    [
        'API KEY:\t"Hunter2Hunter2x"',
        "my api key=Hunter2Hunter2x then more",
        "Api Key: Hunter2Hunter2x",
    ],
)
def test_a_two_word_key_cut_between_its_words_still_holds_its_value(text: str) -> None:
    """A key of two words ("api key") cut between them: "API " must be held until what
    follows says whether it was a key — "KEY" alone introduces nothing, so publishing
    "API " let the value stream out (found while testing the introducers' pre-screen).
    Every cut, and every pair of cuts."""
    whole = POLICY.redact_text(text)
    assert "Hunter2" not in whole
    for k in range(1, len(text)):
        assert streamed(text, [k]) == whole, k
        for j in range(k + 1, len(text)):
            assert streamed(text, [k, j]) == whole, (k, j)


# -- the end-to-end property: planted secrets never reach the wire ------------------------

_SECRET_KEYS = ["password", "api_key", "X-Api-Key", "refreshToken", "client_secret", "api key"]
_TOKEN = st.text(
    "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=20, max_size=24
)


def _shaped(token: str) -> list[str]:
    """Secrets the value patterns know, built around ``token``."""
    return [
        f"sk-{token}",
        f"ghp_{token}{token}",
        f"Bearer {token}",
        f"AKIA{token.upper()[:16]}",
        f"postgres://u:{token}@db/x",
    ]


@st.composite
def planted(draw: st.DrawFn) -> tuple[object, list[str]]:
    """A random JSON value with secrets planted in it, and the secrets."""
    secrets: list[str] = []

    def leaf() -> st.SearchStrategy[object]:
        return st.one_of(
            st.integers(),
            st.booleans(),
            st.text("abc xyz,:;()[]{}'\"", max_size=12),
            _TOKEN.map(lambda t: _shaped(t)[draw(st.integers(0, 4))]),
        )

    def plant(value: object) -> object:
        if isinstance(value, dict):
            out = {k: plant(v) for k, v in value.items()}
            if draw(st.booleans()):
                token = draw(_TOKEN)
                secrets.append(token)
                out[draw(st.sampled_from(_SECRET_KEYS))] = token
            return out
        if isinstance(value, list):
            return [plant(v) for v in value]
        if isinstance(value, str):
            for token in _TOKEN_RE.findall(value):
                secrets.append(token)
        return value

    value = draw(
        st.recursive(
            leaf(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text("abcdefgh", min_size=1, max_size=5), inner, max_size=3)
            ),
            max_leaves=10,
        )
    )
    return plant({"root": value}), secrets


_TOKEN_RE = __import__("re").compile(r"[A-Za-z2-9]{20,}")


@settings(max_examples=60, deadline=None)
@given(planted(), st.lists(st.integers(1, 400), max_size=8), _TOKEN)
def test_planted_secrets_never_reach_any_event_dialect_or_reset(
    plant: tuple[object, list[str]], cuts: list[int], token: str
) -> None:
    from toolstream import dialects
    from toolstream.dialects import Encoder

    value, secrets = plant
    free = f"log: {_shaped(token)[len(token) % 5]} and password={token}x done"
    secrets = [*secrets, token]
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    text = json.dumps(value)
    bounds = [0, *sorted({c for c in cuts if c < len(text)}), len(text)]
    with tracker.run(run_id="r"):
        call = tracker.create("tool")
        for a, b in itertools.pairwise(bounds):
            call.args_delta(text[a:b])
        call.ready()
        call.progress(0.5, message=free, data=value)
        pieces = [0, *sorted({c % len(free) for c in cuts}), len(free)]
        for a, b in itertools.pairwise(pieces):
            call.output_delta(free[a:b])
        call.output_partial(value)
        # The agent's words: text and reasoning, each holding the secrets, interleaved
        # piece by piece (each kind's text is one text for redaction).
        message = tracker.message()
        for a, b in itertools.pairwise(pieces):
            message.delta(free[a:b])
            message.reasoning(free[a:b])
        middle = bus.subscribe(session="s", snapshot=True).take_nowait()  # a page opened now
        message.finish()
        call.complete(value)
        with tracker.call("other", value) as other:
            other.fail(RuntimeError(free))
    events = bus.subscribe(session="s", after=f"{bus.epoch}-0").take_nowait()
    wires = [json.dumps([ts.to_dict(e) for e in [*events, *middle]])]
    for name in dialects.NAMES:
        encoder = Encoder(dialects.get(name))
        frames = [f for e in [*middle, *events] for f in encoder.encode(e)]
        wires.append(json.dumps([(f.id, f.message.payload, f.message.raw) for f in frames]))
    wires.append(json.dumps(ts.to_dict(bus.subscribe(session="s", snapshot=True).take_nowait()[0])))
    for wire in wires:
        for secret in secrets:
            assert secret not in wire, (secret, wire[:2000])


# -- the cheap test that lets most text skip the secret patterns ---------------------------

_HINT_PIECES = st.sampled_from(
    [
        *"abcXYZ019 _-:/@=;.'\"\n",
        "0123456789abcdefghijKLMNOPQRSTUVWXYZ0123456789",  # long enough for any token
        "Bearer ",
        "basic ",
        "sk-",
        "ghp_",
        "github_pat_",
        "glpat-",
        "hf_",
        "npm_",
        "xoxb-",
        "hooks.slack.com/services/",
        "AKIA",
        "AIza",
        "sk_live_",
        "eyJ",
        ".eyJ",
        "-----BEGIN RSA PRIVATE KEY-----",
        "://",
        "password",
        "PassWord",
        "pa\u017f\u017fword",  # long s: matched as "s" without regard to case
        "api_key",
        "API-\u212aEY",  # Kelvin sign: matched as "k"
        "Token",
        "secret",
        "signature",
        "S\u0130GNATURE",  # dotted capital I: matched as "i"
        "s\u0131gnature",  # dotless i: matched as "i"
        "pwd",
        " = ",
        ": ",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_HINT_PIECES, min_size=1, max_size=24).map("".join))
def test_the_hint_never_rules_out_a_secret(text: str) -> None:
    """Text the default patterns would redact always passes the cheap test that lets
    the rest skip them."""
    patterns = POLICY.patterns
    assert patterns.pattern is not None and patterns.hint is not None
    if patterns.pattern.search(text) is not None:
        assert patterns.hint(text), text


@pytest.mark.parametrize(
    "text",
    [
        "pa\u017f\u017fword=hunter2",
        "API_\u212aEY: abc123def456",
        "s\u0131gnature=abcdef123456",
        "S\u0130GNATURE=abcdef123456",
        "url postgres://u:hunter2@db",
        "key eyJhbGciOiJIUzI1.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4",
    ],
)
def test_secrets_in_unusual_cases_are_still_redacted(text: str) -> None:
    assert POLICY.redact_text(text) != text


@pytest.mark.parametrize(
    "text",
    ["Running lookup (n=5)", "Running web_search (q='anyio', limit=3)", "/tmp/some/path.txt"],
)
def test_short_prose_with_markers_skips_the_patterns(text: str) -> None:
    """The summaries every call publishes: the hint rules them out (the patterns cost
    ~2.5 µs on a short text) and the text is unchanged."""
    assert POLICY.patterns.hint is not None and not POLICY.patterns.hint(text)
    assert POLICY.redact_text(text) == text
