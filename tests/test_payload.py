"""PayloadPolicy: secrets never reach the wire, payloads stay bounded, anything publishes."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from pathlib import PurePosixPath
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolstream as ts

SK = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123"
GHP = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
AWS = "AKIAIOSFODNN7EXAMPLE"
BEARER_TOKEN = "abcDEF123456789xyzTOKEN"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PASSWORD = "hunter2-correct-horse"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx7pTq9Zr\n"
    "QWERTYzxcvb1234567890ab\n-----END RSA PRIVATE KEY-----"
)
URL_PASSWORD = "s3cretUrlPass"

#: Each secret, and pieces of it that must not appear either.
SECRETS = {
    SK: [SK, SK[8:20]],
    GHP: [GHP, GHP[4:16]],
    AWS: [AWS, AWS[4:]],
    BEARER_TOKEN: [BEARER_TOKEN, BEARER_TOKEN[:10]],
    JWT: [JWT[-20:]],
    PASSWORD: [PASSWORD, "correct-horse"],
    PEM: ["MIIEowIBAAKCAQEAx7pTq9Zr", "QWERTYzxcvb1234567890ab"],
    URL_PASSWORD: [URL_PASSWORD],
}
FORBIDDEN = [piece for pieces in SECRETS.values() for piece in pieces]


def assert_no_secret(published: object) -> None:
    text = published if isinstance(published, str) else json.dumps(published)
    for piece in FORBIDDEN:
        assert piece not in text, f"secret piece {piece!r} published in {text[:300]!r}"


def wire(events: list[ts.Event]) -> str:
    return json.dumps([ts.to_dict(e) for e in events])


NESTED_ARGS: dict[str, Any] = {
    "query": "weather in Paris",
    "password": PASSWORD,
    "headers": {"Authorization": f"Bearer {BEARER_TOKEN}", "X-Api-Key": "plain-looking-value"},
    "config": {"nested": [{"note": f"use {SK} for this"}, {"aws": AWS}]},
    "db_url": f"postgres://admin:{URL_PASSWORD}@db.internal:5432/app",
    "jwt": JWT,
    "key_file": PEM,
    GHP: "a secret as a mapping key",
    "max_tokens": 512,
}


def test_secrets_in_every_part_of_every_event_are_redacted() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s")
    with tracker.run(title=f"Deploy with {SK}"):
        with tracker.call("deploy", NESTED_ARGS, title=f"token {GHP}") as call:
            call.progress(
                0.5, message=f"Authorization: Bearer {BEARER_TOKEN}", data={"token": PASSWORD}
            )
            call.output_delta(f"logged in with {AWS} and {JWT}\n")
            call.output_partial({"env": {"API_KEY": "x", "DSN": f"https://u:{URL_PASSWORD}@h"}})
            call.complete({"secret": PASSWORD, "log": f"used {GHP}", "nested": [PEM]})
        with tracker.call("fetch", {"q": "x"}) as call:
            call.fail(RuntimeError(f"401 for Bearer {BEARER_TOKEN} ({SK})"))
        stream = tracker.create("write")
        stream.args_delta(json.dumps({"content": f"key={SK}", "password": PASSWORD}))
        stream.cancel(f"user pasted {GHP}")
    events = sub.take_nowait()
    assert len(events) > 10
    assert_no_secret(wire(events))
    started = next(e for e in events if isinstance(e, ts.ToolStarted))
    assert isinstance(started.args, dict)
    assert started.args["password"] == "[redacted]"
    assert started.args["headers"] == {"Authorization": "[redacted]", "X-Api-Key": "[redacted]"}
    assert started.args["query"] == "weather in Paris" and started.args["max_tokens"] == 512
    assert started.args["db_url"] == "postgres://admin:[redacted]@db.internal:5432/app"
    assert "[redacted]" in started.args  # the secret-looking mapping key itself


def test_envelope_identifiers_are_published_unchanged() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session=SK)
    tracker = ts.Tracker(bus, SK)
    tracker.create("sk-tool-name-abcdefghijklmnop", call_id=GHP).complete()
    event = sub.take_nowait()[0]
    assert event.session == SK and event.call_id == GHP
    assert event.tool == "sk-tool-name-abcdefghijklmnop"


ARGS_JSON = json.dumps(
    {
        "path": "notes.txt",
        "api_key": "plain123value",
        "password": {"nested": PASSWORD, "list": [1, 2]},
        "content": f"Authorization: Bearer {BEARER_TOKEN}\nkey {SK} and {AWS}.\n{PEM}",
        "url": f"https://bob:{URL_PASSWORD}@example.com/x",
        "n": 3.5e2,
        "ok": True,
        "none": None,
    }
)
EXPECTED = {
    "path": "notes.txt",
    "api_key": "[redacted]",
    "password": "[redacted]",
    "content": "Authorization: Bearer [redacted]\nkey [redacted] and [redacted].\n[redacted]",
    "url": "https://bob:[redacted]@example.com/x",
    "n": 350.0,
    "ok": True,
    "none": None,
}


def stream_args(pieces: list[str]) -> str:
    redactor = ts.PayloadPolicy().args_redactor()
    return "".join(redactor.feed(p) for p in pieces)


@pytest.mark.parametrize("k", range(len(ARGS_JSON) + 1))
def test_a_secret_split_at_any_position_never_appears_in_args_deltas(k: int) -> None:
    out = stream_args([ARGS_JSON[:k], ARGS_JSON[k:]])
    assert_no_secret(out)
    assert "plain123value" not in out
    assert json.loads(out) == EXPECTED


def test_args_fed_one_character_at_a_time() -> None:
    out = stream_args(list(ARGS_JSON))
    assert_no_secret(out)
    assert json.loads(out) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, len(ARGS_JSON)), max_size=12))
def test_args_split_at_random_points(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [ARGS_JSON[a:b] for a, b in zip([0, *points], [*points, len(ARGS_JSON)], strict=True)]
    out = stream_args(pieces)
    assert_no_secret(out)
    assert json.loads(out) == EXPECTED


def test_streamed_args_deltas_through_a_tracker_at_every_split() -> None:
    for k in range(0, len(ARGS_JSON) + 1, 7):
        bus = ts.EventBus()
        sub = bus.subscribe(session="s")
        call = ts.Tracker(bus, "s").create("write")
        call.args_delta(ARGS_JSON[:k])
        call.args_delta(ARGS_JSON[k:])
        call.ready()
        events = sub.take_nowait()
        assert_no_secret(wire(events))
        deltas = "".join(e.delta for e in events if isinstance(e, ts.ToolArgsDelta))
        assert json.loads(deltas) == EXPECTED
        ready = events[-1]
        assert isinstance(ready, ts.ToolReady) and ready.args == EXPECTED
        assert call.args == json.loads(ARGS_JSON), "the tool still gets the real values"


OUTPUT = (
    f"Connecting... Authorization: Bearer {BEARER_TOKEN}\n"
    f"found {SK}, {GHP} and {AWS}\n{PEM}\ndone {JWT} ok"
)


@pytest.mark.parametrize("k", range(0, len(OUTPUT) + 1, 3))
def test_output_deltas_split_anywhere_never_leak(k: int) -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    with ts.Tracker(bus, "s").call("shell") as call:
        call.output_delta(OUTPUT[:k])
        call.output_delta(OUTPUT[k:])
    events = sub.take_nowait()
    assert_no_secret(wire(events))
    text = "".join(e.text for e in events if isinstance(e, ts.ToolOutputDelta))
    assert text.startswith("Connecting... Authorization: Bearer [redacted]")
    assert text.endswith("done [redacted] ok"), "held text is flushed before the terminal"


def test_output_streams_live_holding_back_only_the_last_word() -> None:
    redactor = ts.PayloadPolicy().text_redactor()
    assert redactor.feed("hello wor") == "hello "
    assert redactor.feed("ld and more") == "world and "
    assert redactor.feed(" sk-AbCdEfGh") == "more "
    assert redactor.feed("IjKlMnOpQrSt done") == "[redacted] "
    assert redactor.flush() == "done"


def test_invalid_json_args_stop_streaming_and_ready_publishes_redacted_text() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    call = ts.Tracker(bus, "s").create("t")
    call.args_delta('{"password": hunter2-correct-horse, "token": \'' + SK)
    call.ready()
    events = sub.take_nowait()
    assert_no_secret(wire(events))
    ready = events[-1]
    assert isinstance(ready, ts.ToolReady) and ready.args_valid is False
    assert isinstance(ready.args, str) and "[redacted]" in ready.args


def test_a_2mb_result_is_published_as_a_marked_preview_under_the_cap() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    huge = {"rows": [{"id": i, "text": "x" * 100} for i in range(20_000)]}
    huge_text = "y" * 2_000_000
    with ts.Tracker(bus, "s").call("export") as call:
        call.output_partial(huge_text)
        call.complete(huge)
    partial, completed = sub.take_nowait()[1:]
    for event, size in (
        (completed, len(json.dumps(huge, separators=(",", ":")))),
        (partial, 2_000_002),
    ):
        value: Any = event.result if isinstance(event, ts.ToolCompleted) else event.value  # type: ignore[attr-defined]
        assert value["truncated"] is True
        assert value["bytes"] == size
        assert 0 < len(value["preview"]) <= 1024
        assert len(json.dumps(ts.to_dict(event)).encode()) < 32 * 1024


def test_the_cap_splits_huge_deltas_and_trims_texts() -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    with ts.Tracker(bus, "s").call("t") as call:
        call.output_delta("word " * 30_000 + "end")
        call.progress(message="m" * 100_000)
    events = sub.take_nowait()
    for event in events:
        assert len(json.dumps(ts.to_dict(event)).encode()) < 34 * 1024, event.type
    text = "".join(e.text for e in events if isinstance(e, ts.ToolOutputDelta))
    assert text == "word " * 30_000 + "end", "split, never lost"
    message = next(e for e in events if isinstance(e, ts.ToolProgress)).message
    assert message is not None and message.endswith("[truncated 100000 bytes]")


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    token: str


@attrs.define
class Record:
    name: str
    password: str


class PydanticLike:
    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {"mode": mode, "secret": "v"}


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("nope")


def test_values_json_cannot_encode_still_publish() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    value = {
        "set": {3, 1, 2},
        "mixed_set": {1, "a"},
        "tuple": (1, 2),
        "bytes": b"hello",
        "binary": b"\xff\x00\x01",
        "dt": datetime.datetime(2026, 11, 22, 3, 0, tzinfo=datetime.timezone.utc),
        "date": datetime.date(2026, 1, 2),
        "delta": datetime.timedelta(seconds=90),
        "decimal": decimal.Decimal("1.10"),
        "uuid": uuid.UUID(int=1),
        "path": PurePosixPath("/tmp/x"),
        "enum": Color.RED,
        "dataclass": Point(1, "tok"),
        "attrs": Record("n", "pw"),
        "pydantic": PydanticLike(),
        "exception": ValueError(f"bad {SK}"),
        "object": object(),
        "unprintable": Unprintable(),
        "nan": float("nan"),
        "inf": float("-inf"),
        "cyclic": cyclic,
        "deep": deep,
        1: "int key",
        None: "none key",
        ("t",): "tuple key",
        "func": len,
    }
    out = ts.PayloadPolicy().value(value)
    text = json.dumps(out, allow_nan=False)  # strict JSON: no NaN, no Infinity
    assert_no_secret(text)
    assert isinstance(out, dict)
    assert out["set"] == [1, 2, 3] and out["tuple"] == [1, 2]
    assert out["bytes"] == "hello"
    assert out["binary"] == {"bytes": 3, "base64": "/wAB"}
    assert out["dt"] == "2026-11-22T03:00:00+00:00" and out["delta"] == 90.0
    assert out["decimal"] == "1.10" and out["enum"] == "red"
    assert out["dataclass"] == {"x": 1, "token": "[redacted]"}
    assert out["attrs"] == {"name": "n", "password": "[redacted]"}
    assert out["pydantic"] == {"mode": "json", "secret": "[redacted]"}
    assert out["exception"] == {"type": "ValueError", "message": "bad [redacted]"}
    assert out["unprintable"] == "<unrepresentable Unprintable>"
    assert out["nan"] == "NaN" and out["inf"] == "-Infinity"
    assert out["cyclic"] == [1, "[cycle]"]
    assert out["1"] == "int key" and out["null"] == "none key"
    assert "[max depth]" in text


def test_policy_can_be_tuned() -> None:
    policy = ts.PayloadPolicy(
        secret_keys=ts.DEFAULT_SECRET_KEYS | {"pin"},
        secret_patterns=(*ts.DEFAULT_SECRET_PATTERNS, r"\bacme_[0-9a-f]{8}\b"),
        max_bytes=1024,
        placeholder="***",
    )
    assert policy.value({"pin": 1234, "note": "acme_deadbeef"}) == {"pin": "***", "note": "***"}
    marker = policy.value("z" * 5000)
    assert marker == {"truncated": True, "bytes": 5002, "preview": "z" * 160}
    assert len(json.dumps(marker)) <= 1024, "the marker itself respects the cap"
    off = ts.PayloadPolicy(redact=False, max_bytes=None)
    raw = off.value({"password": "x", "big": "z" * 100_000})
    assert isinstance(raw, dict)
    assert raw["password"] == "x"
    assert raw["big"] == "z" * 100_000
    assert off.args_redactor().feed('{"password": "x"}') == '{"password": "x"}'
    with pytest.raises(ValueError, match="max_bytes"):
        ts.PayloadPolicy(max_bytes=10)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("PASSWORD", True),
        ("x-api-key", True),
        ("apiKey", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("refreshToken", True),
        ("csrftoken", True),
        ("client_secret", True),
        ("Set-Cookie", True),
        ("private_key", True),
        ("authorization", True),
        ("max_tokens", False),
        ("tokenizer", False),
        ("query", False),
        ("keyword", False),
        ("session", False),
    ],
)
def test_secret_key_matching(key: str, secret: bool) -> None:
    assert ts.PayloadPolicy().is_secret_key(key) is secret


def test_short_texts_are_remembered_with_the_same_result() -> None:
    policy = ts.PayloadPolicy()
    secret = "token sk-abcdefghijklmnopqrstuvwx1234"
    first = policy.text(secret)
    assert first is not None and "sk-abcdefghijklmnop" not in first
    assert policy.text(secret) == first
    assert policy.text("plain words") == "plain words"
    assert policy.text(None) is None
    assert policy.text(12) == "12"
    for i in range(5000):  # bounded: the memory of short texts is cleared when full
        policy.text(f"message {i}")
    assert len(policy._text_cache) <= 4096
    long = "a" * 300 + " Bearer abcdefghijklmnopqrstuvwxyz012345"
    shaped = policy.text(long)
    assert shaped is not None and "abcdefghijklmnopqrstuvwxyz012345" not in shaped


def test_trackers_and_buses_without_a_policy_share_one() -> None:
    """The default policy (compiled patterns, caches) exists once, not once per session."""
    bus = ts.EventBus()
    one, two = ts.Tracker(bus, "a"), ts.Tracker(bus, "b")
    assert one.payload is two.payload is bus.payload
    own = ts.PayloadPolicy(max_bytes=1024)
    assert ts.Tracker(bus, "c", payload=own).payload is own
