"""Every dialect against the peers' own validators, on fixed and generated sessions."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from ag_ui.core import Event as AGUIEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

import toolstream as ts
from toolstream import dialects
from toolstream.dialects import EncodedFrame

from .sessions import (
    OPS,
    Op,
    Session,
    drain,
    full_stream,
    random_ops,
    run_node_checks,
    stream_frames,
    wire,
)

AGUI = TypeAdapter(AGUIEvent)


def obj(frame: EncodedFrame) -> dict[str, Any]:
    """A frame's payload, which every built-in dialect makes a JSON object."""
    payload = frame.message.payload
    assert isinstance(payload, dict), frame
    return payload


ops_strategy = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 4), st.integers(0, 19)), min_size=1, max_size=60
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def strict_agui(payload: Any) -> None:
    """Validate like the AG-UI client: camelCase only, no unknown keys, no nulls."""
    assert isinstance(payload, dict), payload
    assert None not in payload.values(), payload
    model = AGUI.validate_python(payload, by_alias=True, by_name=False)
    assert not model.model_extra, f"unknown keys {model.model_extra} in {payload}"
    dumped = json.loads(model.model_dump_json(by_alias=True, exclude_none=True))
    assert dumped == payload, (dumped, payload)


_ATTRIBUTABLE = ("TEXT_MESSAGE_", "TOOL_CALL_", "REASONING_", "CUSTOM")


def check_agui_tags(messages: list[Any]) -> None:
    """What the AG-UI verifier does not check of the sub-agents' tags: a message carries
    the ``subagentRunId`` of a sub-agent running in its AG-UI run, a call keeps the tag
    of its ``TOOL_CALL_START``, a sub-agent starts under a call of the stream (and under
    that call's own sub-agent), and ends before its parent sub-agent and before its
    parent call's result; interrupts carry their call's tag."""
    active: dict[str, tuple[str | None, str]] = {}  # sub-agent -> (parent sub-agent, call)
    tags: dict[str, str | None] = {}  # toolCallId -> its tag
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "type" not in m:
            continue
        kind: str = m["type"]
        tag: Any = m.get("subagentRunId")
        where = f"message {i} {m}"
        if kind == "RUN_STARTED":
            active.clear()
        elif kind == "SUBAGENT_STARTED":
            assert tag not in active, where
            parent_call = m.get("parentToolCallId")
            assert parent_call in tags, where
            assert m.get("parentSubagentRunId") == tags[parent_call], where
            parent = m.get("parentSubagentRunId")
            assert parent is None or parent in active, where
            active[tag] = (parent, parent_call)
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            assert tag in active, where
            assert not [k for k, (up, _) in active.items() if up == tag], where
            del active[tag]
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            assert not active, where
            outcome = m.get("outcome") or {}
            for interrupt in outcome.get("interrupts", ()):
                assert interrupt.get("subagentRunId") == tags.get(interrupt["toolCallId"]), where
        elif kind.startswith(_ATTRIBUTABLE):
            assert tag is None or tag in active, where
            call_id: Any = m.get("toolCallId")
            if kind == "TOOL_CALL_START":
                tags[call_id] = tag
            elif call_id in tags and kind != "CUSTOM":
                assert tags[call_id] == tag, where
            if kind == "TOOL_CALL_RESULT":
                assert not [k for k, (_, c) in active.items() if c == call_id], where


def scenario() -> Session:
    """A fixed session that touches every mapping."""
    session = Session()
    t = session.tracker
    with t.run(run_id="r1"):
        c = t.create("web_search", call_id="c1", parent_id="msg_1", title="Search")
        c.args_delta('{"q": "an')
        c.args_delta('yio"}')
        c.ready()
        c.start()
        c.progress(0.5, message="half")
        c.output_delta("line one\n")
        c.output_partial({"rows": 1})
        c.complete(["x"])
        with t.call("shell", {"cmd": "ls"}, call_id="c2") as h:
            h.fail(RuntimeError("exit 2"))
        t.create("left_open", call_id="c3")
        q = t.create("queued_tool", call_id="c4", announce=False)
        q.queue(batch_id="b1", position=1)
    loose = t.create("loose", call_id="c5")
    loose.start({"a": 1})
    loose.cancel("user")
    bad = t.create("bad_input", call_id="c6")
    bad.args_delta('{"text": "cut off')
    bad.ready()
    bad.complete()
    try:
        with t.run(run_id="r2"):
            raise ValueError("model blew up")
    except ValueError:
        pass
    session.tracker.close()
    return session


def test_agui_mapping() -> None:
    frames = full_stream(scenario().bus, "agui")
    messages = [obj(f) for f in frames]
    for m in messages:
        strict_agui(m)
    kinds = [m["type"] for m in messages if isinstance(m, dict)]
    assert kinds[:8] == [
        "RUN_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "CUSTOM",
        "CUSTOM",
        "CUSTOM",
    ]
    start = messages[1]
    assert start == {
        "type": "TOOL_CALL_START",
        "toolCallId": "c1",
        "toolCallName": "web_search",
        "parentMessageId": "msg_1",
    }
    failed = [m for m in messages if m.get("name") == "toolstream.tool.failed"]
    assert failed[0]["value"]["error"] == {"type": "RuntimeError", "message": "exit 2"}
    results = {m["toolCallId"]: m["content"] for m in messages if m["type"] == "TOOL_CALL_RESULT"}
    assert results["c1"] == '["x"]'
    assert results["c2"] == "Error: RuntimeError: exit 2"
    assert results["c3"] == "Cancelled: run finished"
    assert results["c5"] == "Cancelled: user"
    assert messages[-1] == {
        "type": "RUN_ERROR",
        "message": "ValueError: model blew up",
        "code": "ValueError",
    }
    implicit = [
        m for m in messages if m["type"] == "RUN_STARTED" and m["runId"].startswith("implicit-")
    ]
    assert len(implicit) == 2, "calls outside runs are framed in implicit runs"


def test_ai_sdk_mapping() -> None:
    frames = full_stream(scenario().bus, "ai_sdk")
    chunks = [obj(f) for f in frames if f.message.raw is None]
    assert frames[-1].message.raw == "[DONE]"
    types = [c["type"] for c in chunks]
    assert types[:7] == [
        "start",
        "start-step",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "tool-input-available",
        "data-tool-progress",
    ]
    preliminary = [
        c for c in chunks if c["type"] == "tool-output-available" and c.get("preliminary")
    ]
    assert [p["output"] for p in preliminary] == ["line one\n", {"rows": 1}]
    assert {
        "type": "tool-input-error",
        "toolCallId": "c6",
        "toolName": "bad_input",
        "input": '{"text": "cut off',
        "errorText": "the tool input is not valid JSON",
    } in chunks
    assert {"type": "error", "errorText": "ValueError: model blew up"} in chunks
    progress = next(c for c in chunks if c["type"] == "data-tool-progress")
    assert progress["transient"] is True and progress["data"]["fraction"] == 0.5


def test_hermes_mapping() -> None:
    frames = full_stream(scenario().bus, "hermes")
    assert {f.message.event for f in frames} == {"hermes.tool.progress"}
    by_call: dict[str, list[str]] = {}
    for f in frames:
        payload = obj(f)
        by_call.setdefault(payload["toolCallId"], []).append(payload["status"])
    assert by_call == {
        "c1": ["running", "completed"],
        "c2": ["running", "failed"],
        "c3": ["running", "cancelled"],
        "c4": ["running", "cancelled"],
        "c5": ["running", "cancelled"],
        "c6": ["running", "completed"],
    }
    first: dict[str, Any] = {}
    last: dict[str, Any] = {}
    for f in frames:
        payload = obj(f)
        first.setdefault(payload["toolCallId"], payload)
        last[payload["toolCallId"]] = payload
    assert first["c1"]["input"] == {"q": "anyio"} and last["c1"]["output"] == '["x"]'
    assert last["c2"]["output"] == "RuntimeError: exit 2"


def test_native_is_to_dict() -> None:
    session = scenario()
    frames = full_stream(session.bus, "native")
    events = session.events()
    assert [f.message.payload for f in frames] == [ts.to_dict(e) for e in events]
    assert [f.message.event for f in frames] == [e.type for e in events]


def check_generated(session: Session) -> None:
    bus = session.bus
    # AG-UI messages validate strictly with the protocol's own models, and the
    # sub-agents' tags hold together (what no validator checks).
    agui_frames = full_stream(bus, "agui")
    for frame in agui_frames:
        strict_agui(frame.message.payload)
    check_agui_tags(wire(agui_frames))
    # hermes: per call, one running then one terminal status.
    statuses: dict[str, list[str]] = {}
    for frame in full_stream(bus, "hermes"):
        payload = obj(frame)
        if "type" in payload:  # an approval prompt or its decision, not a status
            assert payload["type"] in ("hermes.approval", "hermes.approval.resolved"), payload
            continue
        status = "denied" if payload.get("denied") else payload["status"]
        statuses.setdefault(payload["toolCallId"], []).append(status)
    for call_id, seq in statuses.items():
        if seq == ["denied"]:
            continue  # refused before it ran: its one status
        assert seq[0] == "running" and len(seq) == 2 and seq[1] != "running", (call_id, seq)
    # Resume: a client cut after any frame — between the messages of one event
    # included — and resumed from that frame's id receives exactly the rest, on the
    # session's stream and on each run's own stream (&run=).
    runs = [None, *(e.run_id for e in session.events() if isinstance(e, ts.RunStarted))]
    for name in dialects.NAMES:
        for run in runs:
            full = stream_frames(bus, name, f"{bus.epoch}-0", closing=False, run=run)
            for k in range(len(full)):
                rest = stream_frames(bus, name, full[k].id, closing=False, run=run)
                assert rest == full[k + 1 :], (
                    f"{name}, run {run}: resume after frame {k} ({full[k].id})"
                )


@SETTINGS
@given(ops_strategy)
def test_generated_sessions(ops: list[Op]) -> None:
    session = Session()
    session.play(ops)
    check_generated(session)


def test_peers_accept_generated_sessions() -> None:
    """The real @ag-ui/client verifier and ai's uiMessageChunkSchema + readUIMessageStream
    accept every stream: whole sessions, and clients that joined mid-session."""
    rng = random.Random(20261122)
    cases: list[dict[str, Any]] = []
    expectations: list[tuple[str, bool]] = []
    for i in range(120):
        ops = random_ops(rng, rng.randrange(5, 80))
        session = Session()
        session.play(ops)
        failed_runs = sum(
            1 for e in session.events() if isinstance(e, ts.RunFinished) and e.outcome == "failed"
        )
        for name in ("agui", "ai_sdk"):
            cases.append(
                {
                    "name": f"{i}-{name}",
                    "dialect": name,
                    "messages": wire(full_stream(session.bus, name)),
                }
            )
            expectations.append((f"{i}-{name}", failed_runs > 0))
            # clients that joined mid-session (a reset first), at each "join" op
            for j, join in enumerate(session.joins):
                frames = drain(join[name])
                cases.append(
                    {"name": f"{i}-{name}-join{j}", "dialect": name, "messages": wire(frames)}
                )
                if name == "agui":
                    check_agui_tags(wire(frames))
    results = run_node_checks(cases)
    bad = [r for r in results if not r["ok"]]
    assert not bad, bad[:3]
    for result in results:
        if not result["name"].endswith("ai_sdk") and "-ai_sdk-" not in result["name"]:
            continue
        messages = result["messages"]
        for k, message in enumerate(messages):
            continued = k + 1 < len(messages) and messages[k + 1]["id"] == message["id"]
            for part in message["parts"]:
                if part["type"] in ("text", "reasoning"):
                    assert part["state"] == "done", (result["name"], part)
                    continue
                ended = ("output-available", "output-error", "output-denied")
                # a message left waiting for a person ends with the part awaiting a decision
                waiting = ("approval-requested", "approval-responded")
                assert part["state"] in ended or (part["state"] in waiting and not continued), (
                    result["name"],
                    part,
                )


def test_peers_accept_a_stream_that_starts_with_a_reset() -> None:
    cases = []
    for name in ("agui", "ai_sdk"):
        session = Session()
        t = session.tracker
        run = t.run(run_id="r1").start()
        streaming = t.create("web_search", call_id="a")
        streaming.args_delta('{"q": "an')
        running = t.create("shell", call_id="b")
        running.start({"cmd": "ls"})
        running.output_delta("partial output\n")
        t.create("done", call_id="c").complete(1)
        # Approved through await_approval, not yet adopted by the run that goes on.
        approved = t.create("send_email", call_id="d", run_id="r1")
        approved.ready({"to": "team@example.com"})
        approval_id = approved.await_approval("Sends mail")
        session.bus.resolve_approval_now(t.session, approval_id, approved=True, by="alice")
        stream_from_reset = stream_frames(session.bus, name, None, closing=False)
        if name == "ai_sdk":  # the same reset, ended where the run waits (a GET resume)
            paused = dialects.get("ai_sdk")
            reset = session.bus.subscribe(session=t.session, snapshot=True).take_nowait()
            ended = paused.encode(reset[0]) + paused.pause()  # type: ignore[attr-defined]
            messages = [m.payload if m.raw is None else {"$raw": m.raw} for m in ended]
            cases.append({"name": "ai_sdk-paused", "dialect": name, "messages": messages})
        # ... and the rest of the run, live
        streaming.args_delta('yio"}')
        streaming.ready()
        streaming.complete(["r"])
        running.complete("ok")
        run.finish()
        cases.append({"name": name, "dialect": name, "messages": wire(stream_from_reset)})
    results = run_node_checks(cases)
    assert all(r["ok"] for r in results), results
    (waiting,) = [r for r in results if r["name"] == "ai_sdk-paused"]
    parts = [p for m in waiting["messages"] for p in m["parts"] if p.get("toolCallId") == "d"]
    # Approved and not yet run: "running" (input-available) with its request kept.
    assert [(p["state"], p["approval"]["id"]) for p in parts] == [
        ("input-available", approval_id)
    ], waiting


def test_get_and_resolve() -> None:
    assert isinstance(dialects.get("agui"), dialects.AGUI)
    assert dialects.get("agui") is not dialects.get("agui"), "fresh per connection"
    with pytest.raises(ts.DialectError, match="unknown dialect"):
        dialects.get("klingon")
    assert dialects.resolve(dialects.AISDK)[0] == "ai_sdk"
    assert dialects.resolve(lambda: dialects.AGUI(custom_prefix="acme"))[0] == "agui"
    with pytest.raises(ts.DialectError):
        dialects.resolve(42)  # type: ignore[arg-type]
    with pytest.raises(ts.DialectError):
        dialects.resolve(dict)  # type: ignore[arg-type]


def test_a_dialect_must_say_whether_it_is_stateless() -> None:
    class NoFlag:
        name = "noflag"

        def __init__(self) -> None:
            self.headers: dict[str, str] = {}

        def open(self) -> list[dialects.WireMessage]:
            return []

        def encode(self, event: ts.Event) -> list[dialects.WireMessage]:
            return []

        def close(self) -> list[dialects.WireMessage]:
            return []

        def prime(self, snapshot: ts.Snapshot) -> None:
            pass

    with pytest.raises(ts.DialectError, match="stateless"):
        dialects.resolve(NoFlag)  # type: ignore[arg-type]


def test_the_old_frame_name_still_works_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="EncodedFrame"):
        old = dialects.Frame
    assert old is dialects.EncodedFrame


def test_a_call_denied_before_it_ran_is_still_one_running_and_one_terminal_in_hermes() -> None:
    """What hypothesis found: created, asked, refused — hermes pairs a running status
    with the terminal one, as it does for a call cancelled before it started."""
    session = Session()
    session.play([("create", 0, 0), ("ask", 0, 0), ("decide", 0, 0)])
    check_generated(session)
