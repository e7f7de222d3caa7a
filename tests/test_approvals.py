"""Human approval of calls on the core: tracker, EventBus, LiveView (asyncio and trio)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import toolstream as ts
from tests.servers import eventually
from toolstream.testing import assert_lifecycle

pytestmark = pytest.mark.anyio


def events_of(bus: ts.EventBus, session: str = "s") -> list[ts.Event]:
    return bus.subscribe(session=session, after=f"{bus.epoch}-0").take_nowait()


def types_of(bus: ts.EventBus, call_id: str | None = None) -> list[str]:
    return [e.type for e in events_of(bus) if call_id is None or e.call_id == call_id]


async def pending_id(bus: ts.EventBus, session: str = "s") -> str:
    """The id of the approval the session waits for (as a page would read it)."""
    found: list[str] = []

    def check() -> bool:
        found[:] = [
            c.approval.approval_id for c in bus.snapshot(session).calls if c.approval is not None
        ]
        return bool(found)

    await eventually(check)
    return found[0]


async def decide_soon(bus: ts.EventBus, **decision: Any) -> ts.ApprovalResolved:
    return await bus.resolve_approval("s", await pending_id(bus), **decision)


async def test_approved_call_runs_with_the_edited_args_redacted_on_the_wire() -> None:
    bus = ts.EventBus()
    ran: list[Any] = []
    async with ts.Tracker(bus, "s") as tracker, anyio.create_task_group() as tg:
        edited = {"to": "carol@example.com", "api_key": "sk-live-abcdefabcdefabcdefabcdef"}
        tg.start_soon(lambda: decide_soon(bus, approved=True, by="alice", args=edited))
        async with tracker.call(
            "send_email", {"to": "bob@example.com"}, approval="Sends mail", call_id="c1"
        ) as call:
            ran.append(call.args)
    assert ran == [edited], "the tool gets the real edited args"
    assert types_of(bus, "c1") == [
        "tool.ready",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.started",
        "tool.completed",
    ]
    events = {e.type: e for e in events_of(bus)}
    requested = events["tool.approval.requested"]
    assert isinstance(requested, ts.ApprovalRequested)
    assert requested.reason == "Sends mail" and not requested.running
    assert len(requested.approval_id) >= 36, "128 random bits"
    resolved = events["tool.approval.resolved"]
    assert isinstance(resolved, ts.ApprovalResolved)
    assert resolved.approved and resolved.by == "alice"
    assert resolved.args == {"to": "carol@example.com", "api_key": "[redacted]"}
    started = events["tool.started"]
    assert isinstance(started, ts.ToolStarted)
    assert started.args == {"to": "carol@example.com", "api_key": "[redacted]"}, (
        "tool.started shows what actually runs"
    )


async def test_denied_call_never_runs_and_ends_denied_once() -> None:
    bus = ts.EventBus()
    async with ts.Tracker(bus, "s") as tracker, anyio.create_task_group() as tg:
        tg.start_soon(lambda: decide_soon(bus, approved=False, by="alice", reason="not today"))
        with pytest.raises(ts.ApprovalDenied) as caught:
            async with tracker.call("rm", {"path": "/"}, approval=True, call_id="c1"):
                pytest.fail("the block ran without an approval")
    decision = caught.value.decision
    assert decision.approved is False and decision.by == "alice"
    assert decision.reason == "not today"
    assert types_of(bus, "c1") == [
        "tool.ready",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.denied",
    ]
    denied = events_of(bus)[-1]
    assert isinstance(denied, ts.ToolDenied)
    assert denied.by == "alice" and denied.summary == "rm was denied by alice: not today"
    assert tracker.violations == 0


async def test_an_approval_left_alone_expires_once() -> None:
    bus = ts.EventBus()
    async with ts.Tracker(bus, "s") as tracker:
        with pytest.raises(ts.ApprovalDenied) as caught:
            async with tracker.call("send", {}, approval=True, approval_timeout=0.05):
                pytest.fail("ran")
    assert caught.value.decision.by == "timeout"
    resolved = [e for e in events_of(bus) if isinstance(e, ts.ApprovalResolved)]
    assert [(e.approved, e.by) for e in resolved] == [(False, "timeout")]
    assert types_of(bus).count("tool.denied") == 1
    requested = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalRequested))
    assert requested.expires_at is not None


async def test_a_late_decision_gets_expired_and_the_call_ends_denied_without_the_agent() -> None:
    now = [1000.0]
    bus = ts.EventBus(clock=lambda: now[0])
    tracker = ts.Tracker(bus, "s")
    handle = tracker.create("send", call_id="c1")
    approval_id = handle.await_approval("please", timeout=60)
    now[0] += 61
    with pytest.raises(ts.ApprovalExpired) as caught:
        await bus.resolve_approval("s", approval_id, approved=True, by="alice")
    assert caught.value.resolution.by == "timeout"
    assert types_of(bus, "c1")[-2:] == ["tool.approval.resolved", "tool.denied"]
    with pytest.raises(ts.ApprovalAlreadyResolved):
        await bus.resolve_approval("s", approval_id, approved=True, by="bob")
    # The agent learns it too, and the call is over for it.
    decision = await tracker.decision(approval_id)
    assert decision.by == "timeout" and handle.state is ts.CallState.DENIED
    tracker.close()
    assert types_of(bus, "c1").count("tool.denied") == 1
    assert [e.type for e in events_of(bus)].count("tool.cancelled") == 0


async def test_a_snapshot_touch_expires_an_overdue_approval() -> None:
    now = [1000.0]
    bus = ts.EventBus(clock=lambda: now[0])
    tracker = ts.Tracker(bus, "s")
    tracker.create("send", call_id="c1").await_approval(timeout=5)
    now[0] += 6
    call = bus.snapshot("s").calls[0]
    assert call.state is ts.CallState.DENIED and call.decided_by == "timeout"


async def test_a_replayed_decision_learns_the_winner_for_the_newest_max_resolved() -> None:
    """EventBus keeps the newest ``max_resolved`` resolutions: a replay on one of them
    gets ApprovalAlreadyResolved (409) with the winner; on an older one ApprovalNotFound
    (404), never a second decision."""
    bus = ts.EventBus(max_resolved=3)
    tracker = ts.Tracker(bus, "s")
    ids = [tracker.create("send", call_id=f"c{i}").await_approval() for i in range(5)]
    for approval_id in ids:
        await bus.resolve_approval("s", approval_id, approved=False, by="alice")
    for approval_id in ids[:2]:
        with pytest.raises(ts.ApprovalNotFound):
            await bus.resolve_approval("s", approval_id, approved=True, by="mallory")
    for approval_id in ids[2:]:
        with pytest.raises(ts.ApprovalAlreadyResolved) as late:
            await bus.resolve_approval("s", approval_id, approved=True, by="mallory")
        assert late.value.resolution.by == "alice"
    assert types_of(bus).count("tool.approval.resolved") == 5
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="max_resolved"):
            ts.EventBus(max_resolved=bad)  # type: ignore[arg-type]
    tracker.close()


async def test_exactly_one_of_many_concurrent_decisions_wins() -> None:
    bus = ts.EventBus()
    for _ in range(20):
        tracker = ts.Tracker(bus, "s")
        approval_id = tracker.create("send").await_approval()
        outcomes: list[object] = []

        async def decide(
            i: int, approval_id: str = approval_id, outcomes: list[object] = outcomes
        ) -> None:
            try:
                outcomes.append(
                    await bus.resolve_approval("s", approval_id, approved=i % 2 == 0, by=f"u{i}")
                )
            except ts.ApprovalAlreadyResolved as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(decide, i)
        winners = [o for o in outcomes if isinstance(o, ts.ApprovalResolved)]
        assert len(winners) == 1
        for lost in outcomes:
            if isinstance(lost, ts.ApprovalAlreadyResolved):
                assert lost.resolution == winners[0]
        tracker.close()


def test_decisions_from_many_threads_have_one_winner() -> None:
    import concurrent.futures

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    for _ in range(20):
        approval_id = tracker.create("send").await_approval()

        def decide(i: int, approval_id: str = approval_id) -> str:
            try:
                bus.resolve_approval_now("s", approval_id, approved=True, by=f"u{i}")
                return "won"
            except ts.ApprovalAlreadyResolved:
                return "lost"

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(decide, range(16)))
        assert results.count("won") == 1
    resolved = [e for e in events_of(bus) if isinstance(e, ts.ApprovalResolved)]
    assert len(resolved) == 20


async def test_unknown_and_foreign_ids_get_the_same_error() -> None:
    bus = ts.EventBus()
    other = ts.Tracker(bus, "other-session")
    foreign = other.create("send").await_approval()
    with pytest.raises(ts.ApprovalNotFound) as unknown_error:
        await bus.resolve_approval("s", "apr_" + "0" * 32, approved=True)
    with pytest.raises(ts.ApprovalNotFound) as foreign_error:
        await bus.resolve_approval("s", foreign, approved=True)
    assert str(unknown_error.value).replace("0" * 32, "X") == str(foreign_error.value).replace(
        foreign[4:], "X"
    )
    assert other.open_calls()[0].state is ts.CallState.AWAITING_APPROVAL, "untouched"


@pytest.mark.parametrize(
    ("decision", "too_large"),
    [
        ({"approved": "yes"}, False),
        ({"approved": True, "args": ["not", "an", "object"]}, False),
        ({"approved": True, "args": {"big": "x" * 40_000}}, True),
        ({"approved": True, "args": {"bad": float("nan")}}, False),
        ({"approved": False, "args": {"a": 1}}, False),
        ({"approved": True, "reason": 7}, False),
    ],
)
async def test_bad_decisions_are_refused_and_leave_the_approval_pending(
    decision: dict[str, Any], too_large: bool
) -> None:
    bus = ts.EventBus()
    approval_id = ts.Tracker(bus, "s").create("send").await_approval()
    with pytest.raises(ts.ApprovalInvalid) as caught:
        await bus.resolve_approval("s", approval_id, **decision)
    assert caught.value.too_large is too_large
    assert await bus.decision("s", approval_id) is None
    await bus.resolve_approval("s", approval_id, approved=True)


async def test_cancelled_while_waiting_resolves_by_cancelled_and_ends_cancelled() -> None:
    bus = ts.EventBus()
    async with ts.Tracker(bus, "s") as tracker:
        with anyio.move_on_after(0.05):
            async with tracker.call("send", {}, approval=True, call_id="c1"):
                pytest.fail("ran")
        assert tracker.open_calls() == []
    assert types_of(bus, "c1") == [
        "tool.ready",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.cancelled",
    ]
    resolved = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalResolved))
    assert (resolved.approved, resolved.by) == (False, "cancelled")


async def test_tracker_closed_while_waiting() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    failures: list[BaseException] = []

    async def wait() -> None:
        try:
            async with tracker.call("send", {}, approval=True, call_id="c1"):
                pytest.fail("ran")
        except ts.ApprovalDenied as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await pending_id(bus)
        tracker.close()
    assert [type(f) for f in failures] == [ts.ApprovalDenied]
    assert types_of(bus, "c1")[-2:] == ["tool.approval.resolved", "tool.cancelled"]
    requested = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalRequested))
    with pytest.raises(ts.ApprovalAlreadyResolved):
        await bus.resolve_approval("s", requested.approval_id, approved=True)


async def test_request_approval_inside_a_running_tool_returns_the_decision() -> None:
    bus = ts.EventBus()
    async with (
        ts.Tracker(bus, "s") as tracker,
        anyio.create_task_group() as tg,
        tracker.call("deploy", {"env": "prod"}, call_id="c1") as call,
    ):
        tg.start_soon(lambda: decide_soon(bus, approved=False, by="ops", reason="freeze"))
        decision = await call.request_approval("Deploys to production", timeout=30)
        assert call.state is ts.CallState.RUNNING
        call.complete({"skipped": decision.reason})
    assert decision.approved is False and decision.by == "ops"
    assert types_of(bus, "c1") == [
        "tool.started",
        "tool.approval.requested",
        "tool.approval.resolved",
        "tool.completed",
    ]
    requested = next(e for e in events_of(bus) if isinstance(e, ts.ApprovalRequested))
    assert requested.running


async def test_a_run_interrupted_for_approval_is_resumed_by_the_next_run() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = tracker.run(run_id="r1").start()
    handle = tracker.create("send", call_id="c1", run_id="r1")
    handle.ready({"to": "bob"})
    approval_id = handle.await_approval("Sends mail")
    run.finish("interrupted")
    assert handle.state is ts.CallState.AWAITING_APPROVAL, "kept open across the interrupt"
    assert bus.snapshot("s").calls[0].approval is not None
    # ... later, maybe from another request: a decision, then the run that resumes it.
    await bus.resolve_approval("s", approval_id, approved=True, by="alice", args={"to": "carol"})
    async with tracker.run(run_id="r2"), tracker.call("send", {"to": "bob"}, call_id="c1") as call:
        assert call.args == {"to": "carol"}
        call.complete("sent")
    kinds = [(e.type, e.run_id) for e in events_of(bus)]
    assert ("run.finished", "r1") in kinds
    finished = next(e for e in events_of(bus) if isinstance(e, ts.RunFinished))
    assert finished.outcome == "interrupted"
    assert ("tool.started", "r2") in kinds and ("tool.completed", "r2") in kinds
    tracker.close()


async def test_a_call_decided_before_the_interrupt_stays_open_for_the_next_run() -> None:
    """Decided, never started, then the run is interrupted: the call stays open (the
    run that resumes it adopts it), and the stream is well formed for it (found by the
    randomized lifecycles)."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = tracker.run(run_id="r1").start()
    handle = tracker.create("send", call_id="c1", run_id="r1")
    handle.ready({"to": "bob"})
    approval_id = handle.await_approval("Sends mail")
    await bus.resolve_approval("s", approval_id, approved=True, by="alice")
    run.finish("interrupted")
    assert handle.state is ts.CallState.AWAITING_APPROVAL
    assert_lifecycle(events_of(bus), allow_open=True)
    async with tracker.run(run_id="r2"), tracker.call("send", call_id="c1") as call:
        call.complete("sent")
    tracker.close()
    assert_lifecycle(events_of(bus))


async def test_a_waiting_call_cannot_be_started_by_mistake() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    handle = tracker.create("rm", call_id="c1")
    handle.await_approval()
    handle.start({"path": "/"})
    handle.progress(0.5)
    handle.complete("done")
    assert tracker.violations == 3
    assert "tool.started" not in types_of(bus, "c1")
    strict = ts.Tracker(bus, "s2", strict=True)
    other = strict.create("rm")
    other.await_approval()
    with pytest.raises(ts.LifecycleError):
        other.start()
    with pytest.raises(ts.LifecycleError, match="pending already"):
        other.await_approval()
    with pytest.raises(TypeError, match="async with"), strict.call("x", approval=True):
        pass
    tracker.close()
    strict.close()


async def test_the_view_and_a_reset_carry_the_pending_approval() -> None:
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    handle = tracker.create("send", call_id="c1")
    approval_id = handle.await_approval("Sends mail", timeout=300)
    view = ts.LiveView()
    for event in events_of(bus):
        view.apply(event)
    call = view.calls["c1"]
    assert call.state is ts.CallState.AWAITING_APPROVAL
    assert call.approval is not None and call.approval.approval_id == approval_id
    assert call.approval.reason == "Sends mail" and call.approval.expires_at is not None
    # a client that connects now gets it in its reset
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(reset, ts.StreamReset)
    fresh = ts.LiveView()
    fresh.apply(reset)
    assert fresh.calls["c1"].approval == call.approval
    # round trip through the wire format
    again = ts.from_dict(ts.to_dict(reset))
    assert again == reset
    await bus.resolve_approval("s", approval_id, approved=False, by="alice")
    for event in events_of(bus)[-2:]:
        view.apply(event)
    assert view.calls["c1"].state is ts.CallState.DENIED
    assert view.calls["c1"].approval is None and view.calls["c1"].decided_by == "alice"
    tracker.close()


async def test_a_reset_shows_an_approval_as_it_stands_before_the_call_goes_on() -> None:
    """Approved through ``await_approval`` and not yet adopted: the snapshot, a reset and
    the run-framed dialects show the request and its decision (not a bare call awaiting
    an approval that is gone); once the call ends, nothing is left to show."""
    from toolstream.dialects import AGUI, AISDK, Encoder, Hermes

    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "s")
    run = tracker.run(run_id="turn-1").start()
    handle = tracker.create("send_email", call_id="c1", run_id="turn-1")
    handle.ready({"to": "team@example.com"})
    approval_id = handle.await_approval("Sends mail")
    await bus.resolve_approval("s", approval_id, approved=True, by="alice", reason="fine")
    (call,) = bus.snapshot("s").calls
    assert call.state is ts.CallState.AWAITING_APPROVAL and call.approval is None
    assert call.decided == ts.DecidedApproval(
        approval_id=approval_id,
        approved=True,
        by="alice",
        reason="fine",
        request_reason="Sends mail",
    )
    reset = bus.subscribe(session="s", snapshot=True).take_nowait()[0]
    assert isinstance(reset, ts.StreamReset) and ts.from_dict(ts.to_dict(reset)) == reset
    ai_sdk = [f.message.payload for f in Encoder(AISDK()).encode(reset)]
    assert [m["type"] for m in ai_sdk if isinstance(m, dict)][-4:] == [
        "tool-input-start",
        "tool-input-available",
        "tool-approval-request",
        "tool-input-available",
    ]
    assert ai_sdk[-2] == {
        "type": "tool-approval-request",
        "approvalId": approval_id,
        "toolCallId": "c1",
        "reason": "Sends mail",
    }
    # Approved: the card goes "running" with the input that runs (no
    # tool-approval-response, which ai 6 refuses).
    assert ai_sdk[-1] == {
        "type": "tool-input-available",
        "toolCallId": "c1",
        "toolName": "send_email",
        "input": {"to": "team@example.com"},
    }
    agui = [f.message.payload for f in Encoder(AGUI()).encode(reset)]
    resolved = [m for m in agui if isinstance(m, dict) and m["type"] == "CUSTOM"]
    assert [m["name"] for m in resolved] == ["toolstream.tool.approval.resolved"]
    assert resolved[0]["value"] == {
        "toolCallId": "c1",
        "approvalId": approval_id,
        "approved": True,
        "by": "alice",
        "reason": "fine",
    }
    assert not any(m["type"] == "RUN_FINISHED" for m in agui if isinstance(m, dict))
    hermes = [f.message.payload for f in Encoder(Hermes()).encode(reset)]
    assert [(m["type"], m.get("approved")) for m in hermes if isinstance(m, dict)] == [
        ("hermes.approval", None),
        ("hermes.approval.resolved", True),
    ]
    # The run that goes on adopts the call; it ends and nothing is pending or decided.
    async with tracker.call("send_email", call_id="c1") as adopted:
        assert bus.snapshot("s").calls[0].decided is not None  # still as it stands
        adopted.complete({"sent": True})
    run.finish()
    (call,) = bus.snapshot("s").calls
    assert call.state is ts.CallState.COMPLETED and call.decided is None
    assert call.decided_by == "alice"
    tracker.close()


async def test_a_session_with_a_pending_approval_is_not_forgotten() -> None:
    now = [1000.0]
    bus = ts.EventBus(clock=lambda: now[0], session_ttl=10)
    approval_id = ts.Tracker(bus, "s").create("send").await_approval()
    now[0] += 100
    ts.Tracker(bus, "other").create("x").start()  # a publish sweeps
    assert "s" in bus.sessions()
    await bus.resolve_approval("s", approval_id, approved=True)
