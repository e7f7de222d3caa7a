"""to_dict / from_dict round-trip every event; the committed JSON Schema matches the classes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolstream as ts
from tests.strategies import json_values
from toolstream.schema import render

SCHEMA_PATH = Path(__file__).parent.parent / "docs" / "schema" / "native-v1.json"

ENVELOPE: dict[str, Any] = {
    "id": "e1-7",
    "session": "s1",
    "ts": 1700000000.25,
    "run_id": "r1",
    "call_id": "call_1",
    "tool": "web_search",
}

SAMPLES: list[ts.Event] = [
    ts.RunStarted(**{**ENVELOPE, "call_id": "", "tool": ""}, title="Turn 7"),
    ts.RunFinished(
        **{**ENVELOPE, "call_id": "", "tool": ""},
        outcome="failed",
        error=ts.ErrorInfo(type="ValueError", message="bad", retryable=False),
    ),
    ts.ToolCreated(
        **ENVELOPE, batch_id="b1", parent_id="msg_1", title="Search", parent_call_id="p"
    ),
    ts.ToolArgsDelta(**ENVELOPE, delta='{"q": "an'),
    ts.ToolReady(**ENVELOPE, args={"q": "anyio", "n": [1, 2.5, None, True]}, summary="Searching"),
    ts.ToolReady(**ENVELOPE, args='{"q": "an', args_valid=False),
    ts.ToolQueued(**ENVELOPE, batch_id="b1", position=2),
    ts.ToolStarted(**ENVELOPE, args={"q": "x"}, summary="Running"),
    ts.ToolProgress(
        **ENVELOPE, fraction=0.5, current=6, total=12, message="6 of 12", data={"k": 1}
    ),
    ts.ToolOutputDelta(**ENVELOPE, text="partial\ntext"),
    ts.ToolOutputPartial(**ENVELOPE, value={"rows": [1, 2]}),
    ts.ToolCompleted(**ENVELOPE, result=["a", "b"], summary="Found 2", duration_s=1.5),
    ts.ToolFailed(**ENVELOPE, error=ts.ErrorInfo(type="TimeoutError", message="timed out")),
    ts.ToolCancelled(**ENVELOPE, reason="run finished", duration_s=0.1),
    ts.ApprovalRequested(
        **ENVELOPE,
        approval_id="apr_1",
        args={"to": "bob"},
        reason="Sends mail",
        summary="send needs approval",
        expires_at=1700000300.0,
    ),
    ts.ApprovalResolved(
        **ENVELOPE, approval_id="apr_1", approved=True, by="alice", args={"to": "carol"}
    ),
    ts.ToolDenied(**ENVELOPE, reason="not now", by="alice", summary="send was denied"),
    ts.BatchPhase(
        **{**ENVELOPE, "call_id": "", "tool": ""},
        batch_id="b1",
        phase="running",
        call_ids=("a", "b"),
        counts={"running": 1, "queued": 1},
    ),
    ts.MessageStarted(**{**ENVELOPE, "call_id": "", "tool": ""}, message_id="m1"),
    ts.MessageDelta(**{**ENVELOPE, "call_id": "", "tool": ""}, message_id="m1", text="Hé\n"),
    ts.MessageDelta(
        **{**ENVELOPE, "call_id": "", "tool": ""}, message_id="m1", text="so", kind="reasoning"
    ),
    ts.MessageFinished(**{**ENVELOPE, "call_id": "", "tool": ""}, message_id="m1"),
    ts.StreamReset(
        **{**ENVELOPE, "call_id": "", "tool": "", "run_id": None},
        snapshot=ts.Snapshot(
            calls=(
                ts.CallSnapshot(
                    call_id="a",
                    tool="t",
                    state=ts.CallState.RUNNING,
                    args={"q": 1},
                    args_valid=True,
                    fraction=0.25,
                    output_text="so far",
                    error=None,
                ),
                ts.CallSnapshot(
                    call_id="b",
                    tool="t",
                    state=ts.CallState.FAILED,
                    error=ts.ErrorInfo(type="E", message="m"),
                ),
                ts.CallSnapshot(
                    call_id="c",
                    tool="send",
                    state=ts.CallState.AWAITING_APPROVAL,
                    approval=ts.PendingApproval(approval_id="apr_2", reason="r", expires_at=9.0),
                ),
            ),
            runs=(
                ts.RunSnapshot(run_id="r1", state="running", started_ts=1.0, first_event_id="e1"),
            ),
            batches=(ts.BatchSnapshot(batch_id="b1", phase="done", call_ids=("a",), counts={}),),
            messages=(
                ts.MessageSnapshot(
                    message_id="m1", run_id="r1", text="Hello", reasoning="hm", first_event_id="e2"
                ),
            ),
        ),
    ),
]


def test_samples_cover_every_event_type() -> None:
    assert {type(e) for e in SAMPLES} == set(ts.EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_round_trip_through_json(event: ts.Event) -> None:
    data = ts.to_dict(event)
    assert data["v"] == 1 and data["type"] == event.type
    text = json.dumps(data)
    assert ts.from_dict(json.loads(text)) == event


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_encoded_events_match_the_committed_schema(event: ts.Event) -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.validate(ts.to_dict(event), schema)


def test_committed_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == render(), (
        "docs/schema/native-v1.json is stale: run `make schema`"
    )


def test_optional_none_fields_are_omitted() -> None:
    data = ts.to_dict(ts.ToolStarted(id="e-1", session="s", ts=1.0, call_id="c", tool="t"))
    assert data == {
        "v": 1,
        "type": "tool.started",
        "id": "e-1",
        "session": "s",
        "ts": 1.0,
        "call_id": "c",
        "tool": "t",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "JSON object"),
        ({"type": "tool.started"}, "v: expected 1"),
        ({"v": 2, "type": "tool.started"}, "v: expected 1"),
        ({"v": 1, "type": "tool.exploded"}, "unknown event type"),
        ({"v": 1, "type": "tool.started", "session": "s", "ts": 1.0}, "missing field 'id'"),
        (
            {"v": 1, "type": "tool.started", "id": 5, "session": "s", "ts": 1.0},
            "id: expected a string",
        ),
        (
            {
                "v": 1,
                "type": "tool.progress",
                "id": "e-1",
                "session": "s",
                "ts": 1.0,
                "fraction": "x",
            },
            "fraction: expected a number",
        ),
        (
            {"v": 1, "type": "tool.ready", "id": "e-1", "session": "s", "ts": 1.0, "args_valid": 1},
            "args_valid: expected a boolean",
        ),
        (
            {
                "v": 1,
                "type": "run.finished",
                "id": "e-1",
                "session": "s",
                "ts": 1.0,
                "outcome": "exploded",
            },
            "outcome: expected one of",
        ),
        (
            {
                "v": 1,
                "type": "tool.failed",
                "id": "e-1",
                "session": "s",
                "ts": 1.0,
                "error": {"type": "E"},
            },
            "missing field 'message'",
        ),
        (
            {"v": 1, "type": "tool.completed", "id": "e-1", "session": "s", "ts": float("nan")},
            "finite",
        ),
        (
            {
                "v": 1,
                "type": "tool.completed",
                "id": "e-1",
                "session": "s",
                "ts": 1.0,
                "result": {1: 2},
            },
            "string keys",
        ),
        (
            {
                "v": 1,
                "type": "stream.reset",
                "id": "e-1",
                "session": "s",
                "ts": 1.0,
                "snapshot": {"calls": [{"call_id": "a", "tool": "t", "state": "zombie"}]},
            },
            "state: expected one of",
        ),
    ],
)
def test_bad_input_names_the_field(data: Any, message: str) -> None:
    with pytest.raises(ts.EventDecodeError, match=message):
        ts.from_dict(data)


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    data = ts.to_dict(SAMPLES[7]) | {"added_in_v1_5": True}
    assert ts.from_dict(data) == SAMPLES[7]


def test_decode_error_is_a_value_error_and_a_toolstream_error() -> None:
    with pytest.raises(ValueError):
        ts.from_dict({"v": 1})
    assert issubclass(ts.EventDecodeError, ts.ToolstreamError)


def test_to_dict_rejects_non_events() -> None:
    with pytest.raises(TypeError):
        ts.to_dict(object())  # type: ignore[arg-type]


def test_a_list_in_an_enum_field_is_a_decode_error() -> None:
    snapshot = {"calls": [{"call_id": "c", "tool": "t", "state": ["running"]}]}
    data = {"v": 1, "type": "stream.reset", "id": "e-1", "session": "s", "ts": 0.0}
    with pytest.raises(ts.EventDecodeError, match="state"):
        ts.from_dict({**data, "snapshot": snapshot})
    with pytest.raises(ts.EventDecodeError, match="outcome"):
        ts.from_dict({**data, "type": "run.finished", "outcome": {"x": 1}})


_JSON = json_values(max_leaves=20, text=10)
_FIELDS = st.sampled_from(
    [
        "v",
        "type",
        "id",
        "session",
        "ts",
        "call_id",
        "tool",
        "snapshot",
        "calls",
        "state",
        "outcome",
        "error",
        "args",
        "counts",
        "call_ids",
        "phase",
        "fraction",
        "runs",
        "batches",
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([cls.type for cls in ts.EVENT_TYPES]),
    st.dictionaries(_FIELDS, _JSON | st.dictionaries(_FIELDS, _JSON, max_size=5), max_size=10),
)
def test_any_json_decodes_or_raises_event_decode_error(kind: str, data: dict[str, Any]) -> None:
    data = {"v": 1, "type": kind, "id": "e-1", "session": "s", "ts": 1.0, **data}
    try:
        event = ts.from_dict(data)
    except ts.EventDecodeError:
        return
    assert ts.from_dict(json.loads(json.dumps(ts.to_dict(event)))) == event


def _deep(levels: int, leaf: Any) -> Any:
    value = leaf
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


class _Str(str):
    pass


_EDGE_VALUES: list[Any] = [
    None,
    True,
    1,
    1.5,
    "s",
    _Str("subclass"),
    float("nan"),
    float("inf"),
    [1, [2, [float("-inf")]]],
    {"a": {"b": {1: "int key"}}},
    {"a": [object()]},
    _deep(63, 1),
    _deep(64, 1),
    _deep(65, 1),
    _deep(64, []),
    _deep(65, {}),
    _deep(200, None),
]


def _outcome(check: Any, value: Any) -> Any:
    try:
        return ("ok", check(value, "result"))
    except ts.EventDecodeError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("value", _EDGE_VALUES, ids=lambda v: type(v).__name__)
def test_the_fast_json_check_agrees_with_the_exact_one(value: Any) -> None:
    """JSON values are checked by a fast path for plain values and the exact path for
    the rest: both accept the same values and name the same errors."""
    from toolstream._core.codec import _check_json, _check_json_exact

    assert _outcome(_check_json, value) == _outcome(_check_json_exact, value)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_the_fast_json_check_agrees_on_any_json(value: Any) -> None:
    from toolstream._core.codec import _check_json, _check_json_exact

    assert _outcome(_check_json, value) == _outcome(_check_json_exact, value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fraction", True, "fraction: expected a number"),
        ("current", 3, None),
        ("current", float("inf"), "current: expected a finite number"),
        ("message", _Str("a str subclass"), None),
        ("message", 5, "message: expected a string"),
        ("session", None, "session: expected a string"),
    ],
)
def test_compiled_decoders_check_each_field(field: str, value: Any, message: str | None) -> None:
    data = {
        "v": 1,
        "type": "tool.progress",
        "id": "e-1",
        "session": "s",
        "ts": 1.0,
        "call_id": "c",
        "tool": "t",
        field: value,
    }
    if message is None:
        assert getattr(ts.from_dict(data), field) == value
    else:
        with pytest.raises(ts.EventDecodeError, match=message):
            ts.from_dict(data)


def test_decoded_events_share_nothing_with_their_input() -> None:
    data: dict[str, Any] = {
        "v": 1,
        "type": "tool.completed",
        "id": "e-1",
        "session": "s",
        "ts": 1.0,
        "call_id": "c",
        "tool": "t",
        "result": {"rows": [1, 2]},
    }
    event = ts.from_dict(data)
    data["result"]["rows"].append(3)
    data["session"] = "changed"
    assert isinstance(event, ts.ToolCompleted)
    assert event.result == {"rows": [1, 2]}
    assert event.session == "s"
