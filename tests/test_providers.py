"""Provider stream ingestion, on fixtures in the exact shapes the providers stream."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

import toolstream as ts
from tests.strategies import json_values
from toolstream.providers import AnthropicIngest, OpenAIChatIngest, OpenAIResponsesIngest
from toolstream.testing import assert_lifecycle

# -- OpenAI Chat Completions ---------------------------------------------------------------

ENV = {
    "id": "chatcmpl-Abc123",
    "object": "chat.completion.chunk",
    "created": 1732000000,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_abc",
}


def chat_chunk(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choices = (
        []
        if delta is None and finish is None
        else [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
    )
    return {**ENV, "choices": choices, **extra}


def tool_fragment(
    index: int, arguments: str, *, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    if call_id is not None:
        return {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
    return {"index": index, "function": {"arguments": arguments}}


def chat_fixture(args_a: list[str], args_b: list[str]) -> list[dict[str, Any]]:
    chunks = [
        chat_chunk({"role": "assistant", "content": None, "refusal": None}),
        chat_chunk({"content": "Let me check "}),
        chat_chunk({"content": "both."}),
        chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="call_A", name="get_weather")]}),
    ]
    chunks += [chat_chunk({"tool_calls": [tool_fragment(0, piece)]}) for piece in args_a]
    chunks.append(
        chat_chunk({"tool_calls": [tool_fragment(1, "", call_id="call_B", name="get_time")]})
    )
    chunks += [chat_chunk({"tool_calls": [tool_fragment(1, piece)]}) for piece in args_b]
    chunks.append(chat_chunk({}, "tool_calls"))
    chunks.append(
        chat_chunk(usage={"prompt_tokens": 80, "completion_tokens": 40, "total_tokens": 120})
    )
    return chunks


ARGS_A = ['{"city"', ': "Pa', 'ris", "unit": "c"}']
ARGS_B = ['{"tz": ', '"Europe/Paris"}']


def as_sdk_chat(chunk: dict[str, Any]) -> Any:
    from openai.types.chat import ChatCompletionChunk

    return ChatCompletionChunk.model_validate(chunk)


class Recording:
    def __init__(self, coalesce: float = 0.0) -> None:
        self.bus = ts.EventBus()
        self.sub = self.bus.subscribe(session="s1", buffer=100_000)
        self.tracker = ts.Tracker(self.bus, "s1", coalesce=coalesce)
        self.events: list[ts.Event] = []

    def take(self) -> list[ts.Event]:
        self.events += self.sub.take_nowait()
        return self.events

    def types(self, call_id: str) -> list[str]:
        return [e.type for e in self.take() if e.call_id == call_id]


@pytest.mark.parametrize("convert", [lambda c: c, as_sdk_chat], ids=["dicts", "sdk"])
def test_openai_chat_parallel_calls(convert: Callable[[dict[str, Any]], Any]) -> None:
    rec = Recording()
    text: list[str] = []
    ingest = OpenAIChatIngest(rec.tracker, on_text=text.append)
    order: list[tuple[str, str]] = []
    for chunk in chat_fixture(ARGS_A, ARGS_B):
        ingest.feed(convert(chunk))
        before = len(rec.events)
        order += [(e.call_id, e.type) for e in rec.take()[before:]]
    ready = ingest.finish()
    assert "".join(text) == "Let me check both."
    assert [(h.call_id, h.tool, h.args) for h in ready] == [
        ("call_A", "get_weather", {"city": "Paris", "unit": "c"}),
        ("call_B", "get_time", {"tz": "Europe/Paris"}),
    ]
    # call_A is ready the moment call_B begins, not when the turn ends
    assert order.index(("call_A", "tool.ready")) < order.index(("call_B", "tool.created"))
    assert [t for c, t in order if c == "call_A"] == ["tool.created"] + ["tool.args.delta"] * 3 + [
        "tool.ready"
    ]
    created = next(e for e in rec.events if isinstance(e, ts.ToolCreated))
    assert created.parent_id == "chatcmpl-Abc123"


def test_openai_chat_then_the_loop_runs_the_calls_on_the_same_cards() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    for chunk in chat_fixture(ARGS_A, ARGS_B):
        ingest.feed(chunk)
    for h in ingest.finish():
        with rec.tracker.call(h.tool, h.args, call_id=h.call_id) as call:
            call.complete({"ok": h.call_id})
    rec.tracker.close()
    events = rec.take()
    assert_lifecycle(events)
    assert sorted({e.call_id for e in events if e.call_id}) == ["call_A", "call_B"], (
        "no second card"
    )
    assert rec.types("call_B")[-2:] == ["tool.started", "tool.completed"]


def test_openai_chat_cut_off_input_is_flagged_not_guessed() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    for chunk in [
        chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="call_A", name="write_file")]}),
        chat_chunk({"tool_calls": [tool_fragment(0, '{"path": "a.txt", "content": "hel')]}),
        chat_chunk({}, "length"),
    ]:
        ingest.feed(chunk)
    (handle,) = ingest.finish()
    assert handle.args_valid is False
    assert handle.args == '{"path": "a.txt", "content": "hel'
    ready = rec.take()[-1]
    assert isinstance(ready, ts.ToolReady) and ready.args_valid is False


def test_openai_chat_error_mid_call_fails_only_what_is_not_ready() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    chunks = chat_fixture(ARGS_A, ARGS_B)
    for chunk in chunks[
        : chunks.index(
            next(
                c
                for c in chunks
                if c["choices"]
                and c["choices"][0]["delta"].get("tool_calls", [{}])[0].get("id") == "call_B"
            )
        )
        + 2
    ]:
        ingest.feed(chunk)
    ready = ingest.finish(error=ConnectionResetError("stream dropped"))
    assert [h.call_id for h in ready] == ["call_A"]
    assert rec.types("call_B")[-1] == "tool.failed"
    assert ingest.finish() == ready, "finishing twice changes nothing"
    rec.tracker.close()
    assert_lifecycle(rec.take())


def test_leaving_the_ingest_with_an_exception_fails_pending_calls() -> None:
    rec = Recording()

    def agent_loop() -> None:
        with OpenAIChatIngest(rec.tracker) as ingest:
            ingest.feed(
                chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="call_A", name="slow")]})
            )
            raise TimeoutError("the provider hung")

    with pytest.raises(TimeoutError):
        agent_loop()
    assert rec.types("call_A") == ["tool.created", "tool.failed"]


def test_openai_chat_custom_tools_and_unknown_fields() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    ingest.feed(
        chat_chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_C",
                        "type": "custom",
                        "custom": {"name": "shell", "input": "ls -"},
                    }
                ],
                "brand_new_field": 1,
            }
        )
    )
    ingest.feed(chat_chunk({"tool_calls": [{"index": 0, "custom": {"input": "la"}}]}))
    ingest.feed(chat_chunk({}, "tool_calls"))
    (handle,) = ingest.finish()
    assert handle.args == "ls -la" and handle.args_valid


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ({**ENV, "choices": "nope"}, "field 'choices' should be list"),
        (
            chat_chunk({"tool_calls": [{"id": "x", "function": {"name": "f"}}]}),
            "missing field 'index'",
        ),
        (
            chat_chunk({"tool_calls": [{"index": 0, "id": "x", "function": {"arguments": "{}"}}]}),
            "missing field 'name'",
        ),
        (chat_chunk({"tool_calls": "x"}), "field 'tool_calls' should be list"),
        ("not json", "not JSON"),
        (42, "expected an object"),
    ],
)
def test_openai_chat_malformed_chunks_name_the_field_and_the_ingest_survives(
    chunk: Any, message: str
) -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    with pytest.raises(ts.ProviderStreamError, match=message):
        ingest.feed(chunk)
    for good in chat_fixture(ARGS_A, ARGS_B):
        ingest.feed(good)
    assert len(ingest.finish()) == 2


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_openai_chat_any_split_reassembles_the_same_input(data: st.DataObject) -> None:
    text = json.dumps(
        {
            "query": 'anyio vs trio \u00e9\u00e8 \\ "quoted"',
            "limit": 5,
            "nested": {"a": [1, 2.5, None]},
        }
    )
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(text) - 1), max_size=12))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    ingest.feed(chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="call_A", name="search")]}))
    for piece in pieces:
        ingest.feed(chat_chunk({"tool_calls": [tool_fragment(0, piece)]}))
    (handle,) = ingest.finish()
    assert handle.args_text == text
    assert handle.args == json.loads(text)
    published = "".join(e.delta for e in rec.take() if isinstance(e, ts.ToolArgsDelta))
    assert json.loads(published) == json.loads(text)


def test_source_side_coalescing_batches_deltas_and_never_delays_lifecycle() -> None:
    rec = Recording(coalesce=10.0)  # nothing would leave before 10 s but lifecycle events
    ingest = OpenAIChatIngest(rec.tracker)
    ingest.feed(chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="call_A", name="search")]}))
    for piece in ['{"q"', ": ", '"x', '"}']:
        ingest.feed(chat_chunk({"tool_calls": [tool_fragment(0, piece)]}))
    assert rec.types("call_A") == ["tool.created"], "deltas wait for the interval"
    ingest.feed(chat_chunk({}, "tool_calls"))
    assert rec.types("call_A") == ["tool.created", "tool.args.delta", "tool.ready"], (
        "flushed, at once"
    )


# -- OpenAI Responses ------------------------------------------------------------------------

RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1732000000,
    "model": "gpt-4.1-2025-04-14",
    "status": "in_progress",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def responses_fixture(args_a: list[str]) -> list[dict[str, Any]]:
    seq = iter(range(1000))
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": next(seq), "response": RESPONSE},
        {
            "type": "response.output_item.added",
            "sequence_number": next(seq),
            "output_index": 0,
            "item": {
                "type": "message",
                "id": "msg_1",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": next(seq),
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Checking.",
            "logprobs": [],
            "obfuscation": "Zx9",
        },
        {
            "type": "response.output_item.added",
            "sequence_number": next(seq),
            "output_index": 1,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_A",
                "name": "get_weather",
                "arguments": "",
                "status": "in_progress",
            },
        },
    ]
    events += [
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": next(seq),
            "item_id": "fc_1",
            "output_index": 1,
            "delta": piece,
            "obfuscation": "q1",
        }
        for piece in args_a
    ]
    full = "".join(args_a)
    events += [
        {
            "type": "response.function_call_arguments.done",
            "sequence_number": next(seq),
            "item_id": "fc_1",
            "output_index": 1,
            "arguments": full,
            "name": "get_weather",
        },
        {
            "type": "response.output_item.done",
            "sequence_number": next(seq),
            "output_index": 1,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_A",
                "name": "get_weather",
                "arguments": full,
                "status": "completed",
            },
        },
        {
            "type": "response.output_item.added",
            "sequence_number": next(seq),
            "output_index": 2,
            "item": {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_B",
                "name": "get_time",
                "arguments": "",
                "status": "in_progress",
            },
        },
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": next(seq),
            "item_id": "fc_2",
            "output_index": 2,
            "delta": '{"tz": "CET"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "sequence_number": next(seq),
            "item_id": "fc_2",
            "output_index": 2,
            "arguments": '{"tz": "CET"}',
        },
        {
            "type": "response.completed",
            "sequence_number": next(seq),
            "response": {**RESPONSE, "status": "completed"},
        },
    ]
    return events


def as_sdk_response(event: dict[str, Any]) -> Any:
    from openai.types.responses import ResponseStreamEvent

    return TypeAdapter(ResponseStreamEvent).validate_python(event)


@pytest.mark.parametrize("convert", [lambda c: c, as_sdk_response], ids=["dicts", "sdk"])
def test_openai_responses_calls(convert: Callable[[dict[str, Any]], Any]) -> None:
    rec = Recording()
    text: list[str] = []
    ingest = OpenAIResponsesIngest(rec.tracker, on_text=text.append)
    order: list[tuple[str, str]] = []
    for event in responses_fixture(ARGS_A):
        ingest.feed(convert(event))
        before = len(rec.events)
        order += [(e.call_id, e.type) for e in rec.take()[before:]]
    ready = ingest.finish()
    assert text == ["Checking."]
    assert [(h.call_id, h.args) for h in ready] == [
        ("call_A", {"city": "Paris", "unit": "c"}),
        ("call_B", {"tz": "CET"}),
    ], "the call_… id, not the fc_… item id"
    assert order.index(("call_A", "tool.ready")) < order.index(("call_B", "tool.created"))
    assert ingest.status == "completed"


def test_openai_responses_failure_and_unknown_events() -> None:
    rec = Recording()
    ingest = OpenAIResponsesIngest(rec.tracker)
    events = responses_fixture(ARGS_A)[:10]  # call_A done, call_B announced
    events.insert(
        2, {"type": "response.some_future_event", "sequence_number": 99, "whatever": True}
    )
    for event in events:
        ingest.feed(event)
    ingest.feed(
        {
            "type": "response.failed",
            "sequence_number": 100,
            "response": {
                **RESPONSE,
                "status": "failed",
                "error": {"code": "server_error", "message": "boom"},
            },
        }
    )
    ready = ingest.finish()
    assert [h.call_id for h in ready] == ["call_A"]
    failed = [e for e in rec.take() if isinstance(e, ts.ToolFailed)]
    assert [(e.call_id, e.error.message) for e in failed] == [("call_B", "server_error: boom")]


def test_openai_responses_unknown_item_is_a_specific_error() -> None:
    ingest = OpenAIResponsesIngest(Recording().tracker)
    with pytest.raises(ts.ProviderStreamError, match="item_id 'fc_9' was never announced"):
        ingest.feed(
            {
                "type": "response.function_call_arguments.delta",
                "sequence_number": 1,
                "item_id": "fc_9",
                "output_index": 0,
                "delta": "{",
            }
        )


# -- Anthropic Messages ----------------------------------------------------------------------


def anthropic_fixture(args_a: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_01XYZ",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 472, "output_tokens": 2},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "The user wants weather."},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Let me check."},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "get_weather",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        },
    ]
    events += [
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": p},
        }
        for p in args_a
    ]
    events += [
        {"type": "content_block_stop", "index": 2},
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01B",
                "name": "get_time",
                "input": {},
            },
        },
        {"type": "content_block_stop", "index": 3},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
        {"type": "message_stop"},
    ]
    return events


def as_sdk_anthropic(event: dict[str, Any]) -> Any:
    from anthropic.types import RawMessageStreamEvent

    if event["type"] == "ping":
        return event  # not part of the SDK's union: SDK streams skip it
    return TypeAdapter(RawMessageStreamEvent).validate_python(event)


@pytest.mark.parametrize("convert", [lambda c: c, as_sdk_anthropic], ids=["dicts", "sdk"])
def test_anthropic_calls(convert: Callable[[dict[str, Any]], Any]) -> None:
    rec = Recording()
    text: list[str] = []
    ingest = AnthropicIngest(rec.tracker, on_text=text.append)
    order: list[tuple[str, str]] = []
    for event in anthropic_fixture(ARGS_A):
        ingest.feed(convert(event))
        before = len(rec.events)
        order += [(e.call_id, e.type) for e in rec.take()[before:]]
    ready = ingest.finish()
    assert text == ["Let me check."], "thinking is not the assistant's text"
    assert [(h.call_id, h.tool, h.args) for h in ready] == [
        ("toolu_01A", "get_weather", {"city": "Paris", "unit": "c"}),
        ("toolu_01B", "get_time", {}),
    ]
    assert order.index(("toolu_01A", "tool.ready")) < order.index(("toolu_01B", "tool.created"))
    assert ingest.stop_reason == "tool_use"
    created = next(e for e in rec.events if isinstance(e, ts.ToolCreated))
    assert created.parent_id == "msg_01XYZ"


def test_anthropic_max_tokens_cuts_input_off() -> None:
    rec = Recording()
    ingest = AnthropicIngest(rec.tracker)
    events = anthropic_fixture(['{"city": "Pa'])[:11]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 4096},
        },
        {"type": "message_stop"},
    ]
    for event in events:
        ingest.feed(event)
    (handle,) = ingest.finish()
    assert handle.args_valid is False and handle.args == '{"city": "Pa'
    assert ingest.stop_reason == "max_tokens"


def test_anthropic_error_event_fails_the_open_call() -> None:
    rec = Recording()
    ingest = AnthropicIngest(rec.tracker)
    for event in anthropic_fixture(ARGS_A)[:11]:
        ingest.feed(event)
    ingest.feed({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert ingest.finish() == []
    failed = [e for e in rec.take() if e.call_id][-1]
    assert (
        isinstance(failed, ts.ToolFailed) and failed.error.message == "overloaded_error: Overloaded"
    )


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"index": 0}, "missing field 'type'"),
        (
            {"type": "content_block_start", "index": "0", "content_block": {"type": "text"}},
            "field 'index' should be int",
        ),
        (
            {
                "type": "content_block_start",
                "index": 5,
                "content_block": {"type": "tool_use", "name": "f"},
            },
            "missing field 'id'",
        ),
        (
            {
                "type": "content_block_delta",
                "index": 7,
                "delta": {"type": "input_json_delta", "partial_json": "{"},
            },
            "not a tool_use block",
        ),
    ],
)
def test_anthropic_malformed_events(event: dict[str, Any], message: str) -> None:
    rec = Recording()
    ingest = AnthropicIngest(rec.tracker)
    with pytest.raises(ts.ProviderStreamError, match=message):
        ingest.feed(event)
    for good in anthropic_fixture(ARGS_A):
        ingest.feed(copy.deepcopy(good))
    assert len(ingest.finish()) == 2


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_every_provider_reassembles_any_split(data: st.DataObject) -> None:
    text = json.dumps({"path": "/tmp/x", "content": "line 1\nline 2 \u2603", "mode": 420})
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(text) - 1), max_size=10))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    for make, fixture in (
        (OpenAIResponsesIngest, responses_fixture),
        (AnthropicIngest, anthropic_fixture),
    ):
        rec = Recording()
        ingest = make(rec.tracker)
        for event in fixture(pieces):
            ingest.feed(event)
        first = ingest.finish()[0]
        assert first.args_text == text
        assert first.args == json.loads(text)


# -- hostile and repeated streams -----------------------------------------------------------


def _repeat(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The stream with every event of ``kind`` sent twice (a provider or proxy that
    repeats a start event)."""
    out: list[dict[str, Any]] = []
    for event in events:
        out.append(event)
        if event.get("type") == kind:
            out.append(copy.deepcopy(event))
    return out


def _run_returned(rec: Recording, ingest: Any) -> list[str]:
    ready = ingest.finish()
    for handle in ready:  # what the docs tell the agent loop to do
        with rec.tracker.call(handle.tool, handle.args, call_id=handle.call_id) as call:
            call.complete("done")
    assert_lifecycle(rec.take())
    return [h.call_id for h in ready]


@pytest.mark.parametrize(
    ("make", "events"),
    [
        (AnthropicIngest, lambda: _repeat(anthropic_fixture(ARGS_A), "content_block_start")),
        (
            OpenAIResponsesIngest,
            lambda: _repeat(responses_fixture(ARGS_A), "response.output_item.added"),
        ),
    ],
    ids=["anthropic", "responses"],
)
def test_a_repeated_start_event_returns_each_call_once(make: Any, events: Any) -> None:
    rec = Recording()
    ingest = make(rec.tracker)
    for event in events():
        ingest.feed(event)
    ids = _run_returned(rec, ingest)
    assert len(ids) == len(set(ids)), ids
    assert ingest.calls[0].args == json.loads("".join(ARGS_A)), "the input is not doubled"


def test_one_chat_call_id_at_two_indexes_is_one_call() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    ingest.feed(
        chat_chunk({"tool_calls": [tool_fragment(0, '{"a": 1}', call_id="call_X", name="f")]})
    )
    ingest.feed(chat_chunk({"tool_calls": [tool_fragment(1, "", call_id="call_X", name="f")]}))
    ingest.feed(chat_chunk({}, "tool_calls"))
    assert _run_returned(rec, ingest) == ["call_X"]


@pytest.mark.parametrize(
    ("make", "chunk", "message"),
    [
        (OpenAIChatIngest, b"\xff\xfe not utf-8", "not JSON"),
        (OpenAIResponsesIngest, {"type": "response.output_item.added", "item": {"type": []}}, ""),
        (
            OpenAIResponsesIngest,
            {
                "type": "response.output_item.added",
                "item": {"type": "function_call", "id": "fc_1", "name": ""},
            },
            "'name' is empty",
        ),
        (
            AnthropicIngest,
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": ""},
            },
            "'name' is empty",
        ),
        (
            OpenAIChatIngest,
            chat_chunk({"tool_calls": [tool_fragment(0, "", call_id="c", name="bad\ud800")]}),
            "cannot announce",
        ),
    ],
)
def test_malformed_chunks_raise_only_provider_stream_errors(
    make: Any, chunk: Any, message: str
) -> None:
    ingest = make(Recording().tracker)
    if message:
        with pytest.raises(ts.ProviderStreamError, match=message):
            ingest.feed(chunk)
    else:
        ingest.feed(chunk)  # a non-call item: ignored


_JSONISH = json_values(max_leaves=12, text=8)
_KEYS = st.sampled_from(
    [
        "type",
        "index",
        "id",
        "call_id",
        "name",
        "item",
        "item_id",
        "delta",
        "arguments",
        "content_block",
        "partial_json",
        "choices",
        "tool_calls",
        "function",
        "finish_reason",
        "message",
        "error",
        "response",
        "input",
        "custom",
        "output_index",
        "stop_reason",
    ]
)
_TYPES = st.sampled_from(
    [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.failed",
        "error",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_start",
        "message_stop",
        "tool_use",
        "function_call",
        "input_json_delta",
        "text_delta",
    ]
)
_CHUNK = st.one_of(
    _JSONISH,
    st.binary(max_size=20),
    st.dictionaries(
        _KEYS,
        st.one_of(_JSONISH, _TYPES, st.dictionaries(_KEYS, _JSONISH | _TYPES, max_size=4)),
        max_size=6,
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_CHUNK, max_size=12),
    st.sampled_from([OpenAIChatIngest, OpenAIResponsesIngest, AnthropicIngest]),
)
def test_fuzzed_chunks_raise_only_provider_stream_errors(chunks: list[Any], make: Any) -> None:
    rec = Recording()
    ingest = make(rec.tracker)
    for chunk in chunks:
        try:
            ingest.feed(chunk)
        except ts.ProviderStreamError:
            pass
    for handle in ingest.finish():
        handle.complete()
    rec.tracker.close()
    assert_lifecycle(rec.take())


# -- the stream's text and reasoning become the assistant message -----------------------------


def _message_of(events: list[ts.Event]) -> tuple[str, str, str, list[str]]:
    """(message id, text, reasoning, event types) of the one message in ``events``."""
    messages = [e for e in events if isinstance(e, (ts.MessageStarted, ts.MessageDelta))]
    ids = {e.message_id for e in messages}
    assert len(ids) == 1, ids
    text = "".join(e.text for e in events if isinstance(e, ts.MessageDelta) and e.kind == "text")
    reasoning = "".join(
        e.text for e in events if isinstance(e, ts.MessageDelta) and e.kind == "reasoning"
    )
    types = [e.type for e in events if e.type.startswith("message.")]
    return ids.pop(), text, reasoning, types


@pytest.mark.parametrize(
    ("make", "fixture", "expected"),
    [
        (
            OpenAIChatIngest,
            lambda: chat_fixture(ARGS_A, ARGS_B),
            ("chatcmpl-Abc123", "Let me check both.", ""),
        ),
        (OpenAIResponsesIngest, lambda: responses_fixture(ARGS_A), ("msg_1", "Checking.", "")),
        (
            AnthropicIngest,
            lambda: anthropic_fixture(ARGS_A),
            ("msg_01XYZ", "Let me check.", "The user wants weather."),
        ),
    ],
    ids=["openai-chat", "openai-responses", "anthropic"],
)
def test_a_provider_stream_becomes_the_assistant_message(
    make: Callable[[ts.Tracker], Any],
    fixture: Callable[[], list[dict[str, Any]]],
    expected: tuple[str, str, str],
) -> None:
    rec = Recording()
    ingest = make(rec.tracker)
    for chunk in fixture():
        ingest.feed(chunk)
    ingest.finish()
    message_id, text, reasoning, types = _message_of(rec.take())
    assert (text, reasoning) == expected[1:]
    assert message_id == expected[0]
    assert types[0] == "message.started" and types[-1] == "message.finished"
    assert types.count("message.finished") == 1
    assert ingest.message is not None and ingest.message.finished
    assert rec.bus.snapshot("s1").messages[0].text == expected[1]


def test_reasoning_from_chat_completions_hosts_and_responses() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    ingest.feed(chat_chunk({"role": "assistant", "reasoning_content": "Think "}))
    ingest.feed(chat_chunk({"reasoning": "twice."}))
    ingest.feed(chat_chunk({"content": "Done."}))
    ingest.finish()
    _, text, reasoning, _ = _message_of(rec.take())
    assert (text, reasoning) == ("Done.", "Think twice.")
    rec = Recording()
    responses = OpenAIResponsesIngest(rec.tracker)
    responses.feed(
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Plan."}
    )
    responses.feed({"type": "response.output_text.delta", "item_id": "msg_9", "delta": "Hi"})
    responses.finish()
    _, text, reasoning, _ = _message_of(rec.take())
    assert (text, reasoning) == ("Hi", "Plan.")


def test_messages_false_publishes_calls_only_and_on_text_still_hears_the_text() -> None:
    rec = Recording()
    heard: list[str] = []
    ingest = AnthropicIngest(rec.tracker, on_text=heard.append, messages=False)
    for event in anthropic_fixture(ARGS_A):
        ingest.feed(event)
    ingest.finish()
    assert heard == ["Let me check."]
    assert not [e for e in rec.take() if e.type.startswith("message.")]
    assert ingest.message is None


def test_a_secret_in_the_streamed_text_is_redacted_across_chunks() -> None:
    rec = Recording()
    ingest = OpenAIChatIngest(rec.tracker)
    for piece in ("Your key: sk-", "abcdefghij", "klmnopqrstuvwx1234", " is set."):
        ingest.feed(chat_chunk({"content": piece}))
    ingest.finish()
    _, text, _, _ = _message_of(rec.take())
    assert "abcdefghij" not in text and text.endswith(" is set.")
