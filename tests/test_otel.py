"""Tool calls as OpenTelemetry spans: the real SDK, its in-memory exporter, asyncio and
trio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import toolstream as ts
from tests.integration_checks import events_of, import_error_names_the_extra
from toolstream.otel import ToolSpans

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def by_call(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {
        str(s.attributes["gen_ai.tool.call.id"]): s
        for s in spans
        if s.attributes and "gen_ai.tool.call.id" in s.attributes
    }


async def test_one_span_per_call_with_the_genai_attributes_and_status(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    bus = ts.EventBus()
    async with ToolSpans(bus, session="s", tracer_provider=provider):
        tracker = ts.Tracker(bus, "s")
        async with tracker.run(run_id="r1", title="Turn 1"):
            async with tracker.call("web_search", {"q": "anyio"}, call_id="c1") as call:
                call.progress(0.5, message="halfway")
                call.complete(["a"])
            try:
                async with tracker.call("shell", {"cmd": "make"}, call_id="c2"):
                    raise RuntimeError("exit code 2")
            except RuntimeError:
                pass
            with anyio.move_on_after(0.01):
                async with tracker.call("slow", {}, call_id="c3"):
                    await anyio.sleep(1)
        tracker.close()
    spans = by_call(memory.get_finished_spans())
    assert set(spans) == {"c1", "c2", "c3"}, "one span per call"
    ok, failed, cancelled = spans["c1"], spans["c2"], spans["c3"]
    assert ok.name == "execute_tool web_search"
    assert ok.attributes is not None
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.name"] == "web_search"
    assert ok.status.status_code is StatusCode.OK
    assert [e.name for e in ok.events] == ["tool.started", "tool.progress"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "RuntimeError"
    assert cancelled.status.status_code is StatusCode.UNSET
    assert cancelled.attributes is not None
    assert cancelled.attributes["toolstream.outcome"] == "cancelled"
    # timing within the lifecycle: the span is the call's first event to its terminal
    events = [e for e in events_of(bus) if e.call_id == "c1"]
    assert ok.start_time == int(events[0].ts * 1e9) and ok.end_time == int(events[-1].ts * 1e9)
    # the run parents its calls; no payloads unless asked for
    run = next(s for s in memory.get_finished_spans() if s.name == "invoke_agent Turn 1")
    assert all(
        s.parent is not None and s.parent.span_id == run.context.span_id for s in spans.values()
    )
    assert "gen_ai.tool.call.arguments" not in ok.attributes


async def test_payloads_on_request_and_redacted(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    bus = ts.EventBus()
    async with ToolSpans(bus, session="s", tracer_provider=provider, record_payloads=True):
        tracker = ts.Tracker(bus, "s")
        with tracker.call(
            "call_api", {"api_key": "sk-live-0123456789abcdef0123"}, call_id="c"
        ) as c:
            c.complete({"status": 200})
        tracker.close()
    span = by_call(memory.get_finished_spans())["c"]
    assert span.attributes is not None
    arguments = str(span.attributes["gen_ai.tool.call.arguments"])
    assert "[redacted]" in arguments and "0123456789" not in arguments
    assert span.attributes["gen_ai.tool.call.result"] == '{"status": 200}'


async def test_sub_agent_calls_approvals_and_denials(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    bus = ts.EventBus()
    async with ToolSpans(bus, session="s", tracer_provider=provider):
        tracker = ts.Tracker(bus, "s")
        with (
            tracker.call("research", {}, call_id="parent"),
            tracker.call("web_search", {}, call_id="child"),
        ):
            pass  # the inner call is made inside the outer one: a sub-agent's call
        handle = tracker.create("rm", call_id="risky")
        handle.ready({"path": "/"})
        approval_id = handle.await_approval("Deletes")
        await bus.resolve_approval("s", approval_id, approved=False, by="alice")
        tracker.close()
    spans = by_call(memory.get_finished_spans())
    assert spans["child"].parent is not None
    assert spans["child"].parent.span_id == spans["parent"].context.span_id
    risky = spans["risky"]
    assert [e.name for e in risky.events] == ["tool.approval.requested", "tool.approval.resolved"]
    assert risky.attributes is not None and risky.attributes["toolstream.outcome"] == "denied"


async def test_a_call_open_when_following_starts_and_one_never_ended(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    early = tracker.create("long_job", call_id="early")
    early.start({"n": 1})
    created = events_of(bus)[0].ts
    async with ToolSpans(bus, session="s", tracer_provider=provider):
        early.complete("done")
        tracker.create("forever", call_id="open").start()
    spans = by_call(memory.get_finished_spans())
    assert spans["early"].start_time == int(created * 1e9), "from the call's own start"
    assert spans["early"].status.status_code is StatusCode.OK
    assert spans["open"].attributes is not None
    assert spans["open"].attributes["toolstream.outcome"] == "unfinished"


async def test_every_session_of_an_event_bus(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    memory, provider = exporter
    bus = ts.EventBus()
    async with ToolSpans(bus, tracer_provider=provider):
        for session in ("a", "b"):
            with ts.Tracker(bus, session).call("t", {}, call_id=f"{session}1"):
                pass
    conversations: dict[str, Any] = {
        str(s.attributes["gen_ai.tool.call.id"]): s.attributes["gen_ai.conversation.id"]
        for s in memory.get_finished_spans()
        if s.attributes and "gen_ai.tool.call.id" in s.attributes
    }
    assert conversations == {"a1": "a", "b1": "b"}


def test_without_opentelemetry_the_import_error_names_the_extra() -> None:
    import_error_names_the_extra("toolstream.otel", "opentelemetry", "otel")
