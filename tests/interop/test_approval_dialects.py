"""Approvals in every dialect, checked with the peers' own validators: the
``ag-ui-protocol`` models and ``@ag-ui/client``'s verifier, the ``ai`` package's
``uiMessageChunkSchema`` and ``readUIMessageStream``."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from ag_ui.core import RunAgentInput

import toolstream as ts
from tests.servers import eventually
from toolstream.dialects import agui, ai_sdk

from .sessions import Session, drain, full_stream, open_now, run_node_checks, wire
from .test_dialects import obj, strict_agui


def waiting_call(session: Session, run: ts.RunScope | None = None) -> tuple[ts.CallHandle, str]:
    handle = session.tracker.create(
        "send_email", call_id="c1", run_id=None if run is None else run.run_id
    )
    handle.ready({"to": "bob@example.com"})
    return handle, handle.await_approval("Sends mail", timeout=300)


async def in_process(approved: bool) -> Session:
    """A tool that waits in-process for a person, who decides."""
    session = Session()
    bus, tracker = session.bus, session.tracker

    async def person() -> None:
        await eventually(lambda: any(c.approval for c in bus.snapshot("s1").calls))
        pending = next(c.approval for c in bus.snapshot("s1").calls if c.approval)
        await bus.resolve_approval("s1", pending.approval_id, approved=approved, by="alice")

    async with tracker.run(run_id="r1"), anyio.create_task_group() as tg:
        tg.start_soon(person)
        try:
            async with tracker.call("send_email", {"to": "bob"}, approval=True, call_id="c1") as c:
                c.complete({"sent": True})
        except ts.ApprovalDenied:
            pass
    return session


def interrupted_then_resumed() -> Session:
    """A framework that suspends the run; the next run adopts the decided call."""
    session = Session()
    run = session.tracker.run(run_id="r1").start()
    _, approval_id = waiting_call(session, run)
    run.finish("interrupted")
    session.bus.resolve_approval_now("s1", approval_id, approved=True, by="alice")

    async def resume() -> None:
        async with (
            session.tracker.run(run_id="r2"),
            session.tracker.call("send_email", call_id="c1") as call,
        ):
            call.complete({"sent": True})

    anyio.run(resume)
    return session


def node_parts(session: Session, frames: Any = None) -> list[list[dict[str, Any]]]:
    """The AI SDK messages readUIMessageStream builds (with the ai package's schema)."""
    messages = wire(full_stream(session.bus, "ai_sdk") if frames is None else frames)
    results = run_node_checks([{"name": "x", "dialect": "ai_sdk", "messages": messages}])
    assert results[0]["ok"], results[0]
    return [m["parts"] for m in results[0]["messages"]]


def verify_agui(session: Session, frames: Any = None) -> list[dict[str, Any]]:
    frames = full_stream(session.bus, "agui") if frames is None else frames
    for frame in frames:
        strict_agui(frame.message.payload)
    messages = wire(frames)
    results = run_node_checks([{"name": "x", "dialect": "agui", "messages": messages}])
    assert results[0]["ok"], results[0]
    return messages


@pytest.mark.anyio
@pytest.mark.parametrize("approved", [True, False])
async def test_an_in_process_wait_in_every_dialect(approved: bool) -> None:
    session = await in_process(approved)
    # AI SDK: approval-requested, then output-available / output-denied
    [parts] = node_parts(session)
    assert [p["state"] for p in parts] == ["output-available" if approved else "output-denied"]
    # The decision is no chunk of its own (ai 6's schema has none): a client that did
    # not answer it sees the state it led to; the request stays on the part.
    assert parts[0]["approval"]["id"] and "approved" not in parts[0]["approval"]
    assert "tool-approval-response" not in str(wire(full_stream(session.bus, "ai_sdk")))
    # AG-UI: the run finished with the interrupt; a continuation run carries the rest
    messages = verify_agui(session)
    finished = [m for m in messages if m["type"] == "RUN_FINISHED"]
    assert finished[0]["outcome"]["type"] == "interrupt"
    interrupt = finished[0]["outcome"]["interrupts"][0]
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] == "c1"
    started = [m["runId"] for m in messages if m["type"] == "RUN_STARTED"]
    assert started == ["r1", "r1.1"]
    result = next(m for m in messages if m["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == ('{"sent": true}' if approved else "Denied")
    # hermes: the prompt, the decision, then the call's statuses
    hermes = [obj(f) for f in full_stream(session.bus, "hermes")]
    assert hermes[0]["type"] == "hermes.approval" and hermes[0]["description"]
    assert hermes[1]["type"] == "hermes.approval.resolved"
    assert hermes[-1]["status"] == ("completed" if approved else "cancelled")
    assert hermes[-1].get("denied", False) is not approved


def test_a_run_interrupted_then_resumed() -> None:
    session = interrupted_then_resumed()
    messages = verify_agui(session)
    outcomes = [m.get("outcome", {}).get("type") for m in messages if m["type"] == "RUN_FINISHED"]
    assert outcomes == ["interrupt", None]
    # the AI SDK message left waiting is continued by the next response, as useChat does
    parts = node_parts(session)
    assert [p["state"] for p in parts[0]] == ["approval-requested"]
    assert [p["state"] for p in parts[-1]] == ["output-available"]


def test_a_client_joining_mid_wait_can_decide() -> None:
    session = Session()
    run = session.tracker.run(run_id="r1").start()
    _, approval_id = waiting_call(session, run)
    joined = {name: open_now(session.bus, cursor=None, dialect=name) for name in ("agui", "ai_sdk")}
    session.bus.resolve_approval_now("s1", approval_id, approved=False, by="alice")
    run.finish()
    agui_frames = drain(joined["agui"])
    messages = verify_agui(session, agui_frames)
    finished = next(m for m in messages if m["type"] == "RUN_FINISHED")
    assert finished["outcome"]["interrupts"][0]["id"] == approval_id
    assert finished["outcome"]["interrupts"][0]["expiresAt"].endswith("Z")
    [parts] = node_parts(session, drain(joined["ai_sdk"]))
    assert [p["state"] for p in parts] == ["output-denied"]


def test_the_peers_decisions_come_back_as_decisions() -> None:
    """What useChat's addToolApprovalResponse and an AG-UI resume send, read back."""
    session = Session()
    run = session.tracker.run(run_id="r1").start()
    _, approval_id = waiting_call(session, run)
    run.finish("interrupted")
    # AI SDK: the message the client holds, answered as addToolApprovalResponse does
    [parts] = node_parts(session)
    parts[0]["state"] = "approval-responded"
    parts[0]["approval"] = {**parts[0]["approval"], "approved": False, "reason": "no"}
    decisions = ai_sdk.decisions([{"id": "m", "role": "assistant", "parts": parts}])
    assert decisions == [ts.Decision(approval_id=approval_id, approved=False, reason="no")]
    # AG-UI: a RunAgentInput whose resume answers the interrupt
    run_input = RunAgentInput.model_validate(
        {
            "threadId": "s1",
            "runId": "r2",
            "state": {},
            "messages": [],
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "resume": [
                {"interruptId": approval_id, "status": "resolved", "payload": {"args": {"a": 1}}},
                {"interruptId": "other", "status": "cancelled"},
            ],
        }
    )
    assert agui.decisions(run_input) == [
        ts.Decision(approval_id=approval_id, approved=True, args={"a": 1}),
        ts.Decision(approval_id="other", approved=False, reason="cancelled"),
    ]
    # junk is skipped, never a crash
    assert ai_sdk.decisions("nope") == [] and ai_sdk.decisions([{"parts": [1, {"state": 2}]}]) == []
    assert agui.decisions({"resume": [{"interruptId": 3}, "x", {"status": "resolved"}]}) == []
    decision = agui.decisions(run_input)[0]
    resolved = session.bus.resolve_approval_now(
        "s1", decision.approval_id, approved=decision.approved, by="alice", args=decision.args
    )
    assert resolved.approved and resolved.args == {"a": 1}
    session.tracker.close()


def test_hermes_and_native_clients_joining_mid_wait_see_the_approval() -> None:
    session = Session()
    run = session.tracker.run(run_id="r1").start()
    _, approval_id = waiting_call(session, run)
    hermes = [obj(f) for f in drain(open_now(session.bus, cursor=None, dialect="hermes"))]
    assert [p.get("type") for p in hermes] == ["hermes.approval"]
    assert hermes[0]["approvalId"] == approval_id and hermes[0]["expiresAt"] > 0
    native = drain(open_now(session.bus, cursor=None, dialect="native"))
    reset = ts.from_dict(obj(native[0]))
    assert isinstance(reset, ts.StreamReset)
    [call] = reset.snapshot.calls
    assert call.state is ts.CallState.AWAITING_APPROVAL
    assert call.approval is not None and call.approval.approval_id == approval_id
    session.tracker.close()
