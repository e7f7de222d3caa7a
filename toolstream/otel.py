"""Every tool call as an OpenTelemetry span, from any bus, in any process.

::

    from toolstream.otel import ToolSpans

    async with ToolSpans(bus, session="chat-1"):      # or session=None: every session
        ...                                          # spans end as the calls do

A bus subscriber: each call becomes an ``execute_tool {tool}`` span following the
OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``error.type`` and an error status when the
call failed), with the call's progress, approvals and outcome as span events and
attributes; each run is an ``invoke_agent`` span that parents its calls, and a call made
by a sub-agent (``parent_call_id``) is parented by the call that ran it. Start and end
times are the events' own timestamps, so a gateway can export the spans of workers it
does not run. Arguments and results (as published: redacted and capped) are recorded only
with ``record_payloads=True``.

Install with ``pip install "toolstream[otel]"``.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import anyio

from toolstream import (
    ApprovalRequested,
    ApprovalResolved,
    Bus,
    Event,
    RunFinished,
    RunStarted,
    StreamReset,
    ToolCancelled,
    ToolCompleted,
    ToolDenied,
    ToolFailed,
    ToolProgress,
    ToolReady,
    ToolStarted,
)
from toolstream._extras import require

require("opentelemetry.trace", "otel", "toolstream.otel")

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import Span, SpanKind, Status, StatusCode  # noqa: E402

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self

__all__ = ["ToolSpans"]

logger = logging.getLogger("toolstream.otel")

_NS = 1_000_000_000
#: Open spans kept at most (calls that never end, e.g. their process vanished).
_MAX_OPEN = 10_000


def _ns(ts: float) -> int:
    return int(ts * _NS)


def _json(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ToolSpans:
    """Turns a bus's tool calls into OpenTelemetry spans (see the module's docs).

    ``bus``: any :class:`~toolstream.Bus`; ``session``: one session, or ``None`` for every
    session (an ``EventBus``; a ``RedisBus`` reads one session per subscription).
    ``tracer_provider``: where the spans go (the global one by default).
    ``record_payloads``: also record the published (redacted) arguments and results.
    Use as ``async with ToolSpans(...)``, or ``await spans.run()`` in a task of your own.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        session: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        record_payloads: bool = False,
    ) -> None:
        self.bus = bus
        self.session = session
        self.record_payloads = record_payloads
        self._tracer = trace.get_tracer("toolstream", tracer_provider=tracer_provider)
        self._calls: OrderedDict[tuple[str, str], Span] = OrderedDict()
        self._runs: OrderedDict[tuple[str, str], Span] = OrderedDict()
        self._sub: Any = None
        self._tg: Any = None

    # -- running -----------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the bus until cancelled (or the bus closes); spans of calls still open
        then are ended, marked ``toolstream.outcome = "unfinished"``."""
        async with self.bus.subscribe(session=self.session, snapshot=True) as sub:
            await self._follow(sub)

    async def _follow(self, sub: Any) -> None:
        try:
            async for event in sub:
                self._apply_safely(event)
        finally:
            self.close()

    def _apply_safely(self, event: Event) -> None:
        try:
            self.apply(event)
        except Exception:  # a span that cannot be made never stops the stream
            logger.exception("could not record a span for %s", event.type)

    async def __aenter__(self) -> Self:
        self._sub = self.bus.subscribe(session=self.session, snapshot=True)  # nothing missed
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._follow, self._sub)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for event in self._sub.take_nowait():  # what was published before leaving
            self._apply_safely(event)
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._sub.close()

    def close(self) -> None:
        """End every open span (calls and runs whose end never came)."""
        for span in [*self._calls.values(), *self._runs.values()]:
            span.set_attribute("toolstream.outcome", "unfinished")
            span.end()
        self._calls.clear()
        self._runs.clear()

    # -- mapping -------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Record one event."""
        if isinstance(event, StreamReset):
            self._reset(event)
        elif isinstance(event, RunStarted):
            self._run_started(event)
        elif isinstance(event, RunFinished):
            self._run_finished(event)
        elif event.call_id:
            self._call_event(event)

    def _run_started(self, event: RunStarted) -> None:
        key = (event.session, event.run_id or "")
        if key in self._runs:
            return
        span = self._tracer.start_span(
            "invoke_agent" + (f" {event.title}" if event.title else ""),
            kind=SpanKind.INTERNAL,
            start_time=_ns(event.ts),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.conversation.id": event.session,
                "toolstream.run_id": event.run_id or "",
            },
        )
        self._remember(self._runs, key, span)

    def _run_finished(self, event: RunFinished) -> None:
        span = self._runs.pop((event.session, event.run_id or ""), None)
        if span is None:
            return
        span.set_attribute("toolstream.outcome", event.outcome)
        if event.outcome == "failed":
            error = event.error
            span.set_attribute("error.type", error.type if error else "failed")
            span.set_status(Status(StatusCode.ERROR, error.message if error else None))
        span.end(end_time=_ns(event.ts))

    def _span_for(self, event: Event) -> Span:
        key = (event.session, event.call_id)
        span = self._calls.get(key)
        if span is not None:
            return span
        parent = None
        if event.parent_call_id:
            parent = self._calls.get((event.session, event.parent_call_id))
        if parent is None and event.run_id:
            parent = self._runs.get((event.session, event.run_id))
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(
            f"execute_tool {event.tool}",
            context=context,
            kind=SpanKind.INTERNAL,
            start_time=_ns(event.ts),
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": event.tool,
                "gen_ai.tool.call.id": event.call_id,
                "gen_ai.conversation.id": event.session,
                **({"toolstream.run_id": event.run_id} if event.run_id else {}),
            },
        )
        self._remember(self._calls, key, span)
        return span

    def _call_event(self, event: Event) -> None:
        span = self._span_for(event)
        if isinstance(event, (ToolReady, ToolStarted)):
            if isinstance(event, ToolStarted):
                span.add_event("tool.started", timestamp=_ns(event.ts))
            if self.record_payloads and event.args is not None:
                span.set_attribute("gen_ai.tool.call.arguments", _json(event.args))
        elif isinstance(event, ToolProgress):
            attributes: dict[str, Any] = {}
            for name in ("fraction", "current", "total", "message"):
                value = getattr(event, name)
                if value is not None:
                    attributes[f"toolstream.{name}"] = value
            span.add_event("tool.progress", attributes=attributes, timestamp=_ns(event.ts))
        elif isinstance(event, ApprovalRequested):
            span.add_event(
                "tool.approval.requested",
                attributes={"toolstream.approval_id": event.approval_id},
                timestamp=_ns(event.ts),
            )
        elif isinstance(event, ApprovalResolved):
            span.add_event(
                "tool.approval.resolved",
                attributes={
                    "toolstream.approval_id": event.approval_id,
                    "toolstream.approved": event.approved,
                    "toolstream.by": event.by or "",
                },
                timestamp=_ns(event.ts),
            )
        elif isinstance(event, (ToolCompleted, ToolFailed, ToolCancelled, ToolDenied)):
            self._end_call(span, event)

    def _end_call(self, span: Span, event: Event) -> None:
        self._calls.pop((event.session, event.call_id), None)
        if isinstance(event, ToolCompleted):
            span.set_attribute("toolstream.outcome", "completed")
            if self.record_payloads:
                span.set_attribute("gen_ai.tool.call.result", _json(event.result))
            span.set_status(Status(StatusCode.OK))
        elif isinstance(event, ToolFailed):
            span.set_attribute("toolstream.outcome", "failed")
            span.set_attribute("error.type", event.error.type)
            span.set_status(Status(StatusCode.ERROR, event.error.message or None))
        elif isinstance(event, ToolCancelled):
            span.set_attribute("toolstream.outcome", "cancelled")
            if event.reason:
                span.set_attribute("toolstream.reason", event.reason)
        elif isinstance(event, ToolDenied):
            span.set_attribute("toolstream.outcome", "denied")
            if event.by:
                span.set_attribute("toolstream.by", event.by)
        span.end(end_time=_ns(event.ts))

    def _reset(self, event: StreamReset) -> None:
        """A reset replaces what the subscriber knew: open calls it no longer shows are
        ended ``lost``; open calls and runs it shows get spans from their own times."""
        present = {(event.session, c.call_id) for c in event.snapshot.calls}
        for key in [k for k in self._calls if k[0] == event.session and k not in present]:
            span = self._calls.pop(key)
            span.set_attribute("toolstream.outcome", "lost")
            span.end(end_time=_ns(event.ts))
        for run in event.snapshot.open_runs:
            if (event.session, run.run_id) not in self._runs:
                self._run_started(
                    RunStarted(
                        id=event.id,
                        session=event.session,
                        ts=run.started_ts or event.ts,
                        run_id=run.run_id,
                        title=run.title,
                    )
                )
        for call in event.snapshot.calls:
            if call.state.terminal or (event.session, call.call_id) in self._calls:
                continue
            stub = ToolReady(
                id=event.id,
                session=event.session,
                ts=call.created_ts or event.ts,
                run_id=call.run_id,
                call_id=call.call_id,
                tool=call.tool,
                parent_call_id=call.parent_call_id,
                args=call.args,
            )
            self._call_event(stub)

    @staticmethod
    def _remember(
        spans: OrderedDict[tuple[str, str], Span], key: tuple[str, str], span: Span
    ) -> None:
        spans[key] = span
        while len(spans) > _MAX_OPEN:
            _, oldest = spans.popitem(last=False)
            oldest.set_attribute("toolstream.outcome", "unfinished")
            oldest.end()
