"""Summaries: per-tool templates, a generic fallback, never a broken call."""

from __future__ import annotations

import logging

import pytest

import toolstream as ts


def info(
    tool: str = "web_search", args: ts.JSONValue = None, duration: float | None = 1.44
) -> ts.CallInfo:
    return ts.CallInfo(
        call_id="c",
        tool=tool,
        args=args if args is not None else {"q": "anyio trio"},
        duration_s=duration,
    )


def test_generic_sentences() -> None:
    s = ts.Summaries()
    assert s.start(info()) == "Running web_search (q='anyio trio')"
    assert s.start(info(args={})) == "Running web_search"
    assert (
        s.start(info(args={"a": 1, "b": 2, "c": 3, "d": 4}))
        == "Running web_search (a=1, b=2, c=3, …)"
    )
    assert s.result(info(), [1] * 12) == "web_search finished in 1.4 s — 12 items"
    assert s.result(info(duration=0.32), None) == "web_search finished in 320 ms"
    assert s.error(info(), ts.ErrorInfo(type="TimeoutError", message="timed out")) == (
        "web_search failed: TimeoutError: timed out"
    )
    assert s.cancelled(info(), "run finished") == "web_search cancelled: run finished"


def test_generic_results_in_plain_words() -> None:
    s = ts.Summaries()
    fetched = {"url": "https://example.com/a/very/long/path/to/a/page", "status": 200, "n": 1.5}
    assert s.result(info(duration=0.08), fetched) == (
        "web_search finished in 80 ms — url 'https://example.com/a/very/long…', status 200, n 1.5"
    )
    assert s.result(info(), {"hits": [1, 2], "done": True, "extra": None, "more": 1}) == (
        "web_search finished in 1.4 s — hits 2 items, done yes, extra none, …"
    )
    # The payload policy's marker for a result too big to publish says so, with the size.
    marker = {"truncated": True, "bytes": 1_153_433, "preview": "[{"}
    assert s.result(info(), marker) == "web_search finished in 1.4 s — a 1.1 MB result, truncated"
    assert s.result(info(), {"a": {"b": 1}}) == "web_search finished in 1.4 s — key a"
    assert s.result(info(), {}) == "web_search finished in 1.4 s — an empty result"
    assert s.result(info(), "ok") == "web_search finished in 1.4 s — 'ok'"
    assert s.result(info(duration=None), 3) == "web_search finished — 3"
    # "cancelled: cancelled" said nothing twice.
    assert s.cancelled(info(), "cancelled") == "web_search was cancelled"
    assert s.cancelled(info(), None) == "web_search was cancelled"


def test_templates_by_tool() -> None:
    s = ts.Summaries()
    s.register(
        "web_search",
        start="Searching the web for {q!r}",
        result=lambda call, result: (
            f"Found {len(result)} results in {ts.format_duration(call.duration_s)}"
        ),
        error="Search failed: {error.message}",
        cancelled="Search stopped ({reason})",
    )
    assert s.start(info()) == "Searching the web for 'anyio trio'"
    assert s.result(info(), list(range(12))) == "Found 12 results in 1.4 s"
    assert s.error(info(), ts.ErrorInfo(type="E", message="503")) == "Search failed: 503"
    assert s.cancelled(info(), "user") == "Search stopped (user)"
    assert s.start(info(tool="other")) == "Running other (q='anyio trio')"


def test_a_failing_template_falls_back_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    s = ts.Summaries()

    def broken(call: ts.CallInfo, result: object) -> str:
        raise ZeroDivisionError

    s.register("web_search", start="Searching {missing_field}", result=broken)
    with caplog.at_level(logging.WARNING, logger="toolstream.summaries"):
        assert s.start(info()) == "Running web_search (q='anyio trio')"
        assert s.result(info(), []) == "web_search finished in 1.4 s — 0 items"
    assert caplog.text.count("failed; using the generic text") == 2


def test_long_sentences_are_clipped() -> None:
    s = ts.Summaries(max_length=20)
    text = s.start(info(args={"q": "x" * 100}))
    assert text is not None and len(text) == 20 and text.endswith("…")


def test_format_duration() -> None:
    assert ts.format_duration(None) == "?"
    assert ts.format_duration(0.0004) == "0 ms"
    assert ts.format_duration(59.94) == "59.9 s"
    assert ts.format_duration(125) == "2 min 5 s"


def test_summaries_satisfy_the_protocol() -> None:
    assert isinstance(ts.Summaries(), ts.Summarizer)


def test_register_rejects_bad_tool_names() -> None:
    with pytest.raises(ValueError):
        ts.Summaries().register("")


def test_summaries_see_what_the_wire_sees() -> None:
    # A template over the result must not print what the result itself shows redacted.
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    summaries = ts.Summaries()
    summaries.register("login", result=lambda call, result: f"logged in as {result}")
    summaries.register("fetch", result="got {result}")
    tracker = ts.Tracker(bus, "s", summarizer=summaries)
    tracker.create("login").complete({"user": "ann", "password": "hunter2-prod"})
    tracker.create("fetch").complete({"token": "hunter2-prod", "rows": 3})
    done = [e for e in sub.take_nowait() if isinstance(e, ts.ToolCompleted)]
    assert [e.summary for e in done] == [
        "logged in as {'user': 'ann', 'password': '[redacted]'}",
        "got {'token': '[redacted]', 'rows': 3}",
    ]
    assert "hunter2" not in repr(done)


class Dispatching:
    """A summarizer with the optional ``cancelled`` and one method that raises."""

    def start(self, call: ts.CallInfo) -> str | None:
        return f"start {call.tool}"

    def result(self, call: ts.CallInfo, result: object) -> str | None:
        raise RuntimeError("broken template")

    def error(self, call: ts.CallInfo, error: ts.ErrorInfo) -> str | None:
        return None

    def cancelled(self, call: ts.CallInfo, reason: str | None) -> str | None:
        return f"stopped: {reason}"


def test_every_kind_of_summary_goes_through_one_dispatch(caplog: pytest.LogCaptureFixture) -> None:
    bus = ts.EventBus()
    sub = bus.subscribe(session="s")
    tracker = ts.Tracker(bus, "s", summarizer=Dispatching())
    tracker.create("a").start({"x": 1})
    tracker.create("b").complete(1)
    tracker.create("c").fail("no")
    tracker.create("d").cancel("user")
    by_type = {e.type: e.summary for e in sub.take_nowait() if hasattr(e, "summary")}
    assert by_type["tool.started"] == "start b"
    assert by_type["tool.completed"] == "b finished — 1", "never started: no duration"
    assert by_type["tool.failed"] is None, "None means no summary"
    assert by_type["tool.cancelled"] == "stopped: user"
    assert "summarizer" in caplog.text and "failed for result" in caplog.text


def test_templates_registered_on_a_trackers_default_summarizer_stay_its_own() -> None:
    # Trackers given no summarizer share an untouched default until theirs is read.
    bus = ts.EventBus()
    sub = bus.subscribe(session="a")
    mine, other = ts.Tracker(bus, "a"), ts.Tracker(bus, "b")
    assert isinstance(mine.summarizer, ts.Summaries)
    assert mine.summarizer is mine.summarizer
    assert mine.summarizer is not other.summarizer
    mine.summarizer.register("fetch", result="fetched {result}")
    mine.create("fetch").complete(3)
    other_sub = bus.subscribe(session="b")
    other.create("fetch").complete(3)
    ours = [e.summary for e in sub.take_nowait() if isinstance(e, ts.ToolCompleted)]
    theirs = [e.summary for e in other_sub.take_nowait() if isinstance(e, ts.ToolCompleted)]
    assert ours == ["fetched 3"]
    assert theirs and theirs != ["fetched 3"]
    fresh = ts.Tracker(bus, "c")
    fresh.summarizer = custom = ts.Summaries(max_length=20)
    assert fresh.summarizer is custom
