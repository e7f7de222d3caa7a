"""Randomized lifecycles: whatever a framework reports, in whatever order, from whatever
thread, every announced call ends with exactly one terminal event, states only move
forward, and ids strictly increase."""

from __future__ import annotations

import threading
from typing import Any

import anyio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import toolstream as ts
from toolstream.testing import assert_lifecycle

OPS = (
    "args_delta",
    "ready",
    "queue",
    "start",
    "progress",
    "output_delta",
    "output_partial",
    "complete",
    "fail",
    "cancel",
    "deny",
    "await_approval",
    "request_approval",  # async: played by the scoped_call rule
    "subagent",
)


class Boom(Exception):
    pass


def apply_op(
    handle: ts.CallHandle, op: str, arg: int, runs: list[ts.RunScope] | None = None
) -> None:
    if op == "subagent":
        # a sub-agent's run under the call (started by hand: later creates may join it)
        try:
            run = handle.subagent(None if arg % 2 else f"agent {arg}").start()
        except ts.LifecycleError:
            return  # past max_subagent_depth: refused loudly, strict or not
        if runs is not None and run.started and run.parent_call_id is not None:
            runs.append(run)
    elif op == "args_delta":
        # the key is a token of its own, as keys are in the wild (see docs/decisions.md)
        handle.args_delta(['{"a": ', "1", "}", '"x', " sk-AbCdEfGhIjKlMnOpQr "][arg % 5])
    elif op == "ready":
        handle.ready()
    elif op == "queue":
        handle.queue(position=arg)
    elif op == "start":
        handle.start()
    elif op == "progress":
        handle.progress(arg / 10, message=f"step {arg}")
    elif op == "output_delta":
        handle.output_delta(f"line {arg}\n")
    elif op == "output_partial":
        handle.output_partial({"n": arg})
    elif op == "complete":
        handle.complete(arg)
    elif op == "fail":
        handle.fail(Boom(f"failure {arg}"))
    elif op == "await_approval":
        try:
            handle.await_approval(f"why {arg}", timeout=None if arg % 2 else 30)
        except ts.LifecycleError:
            pass  # asked where it cannot be: refused loudly, strict or not
    elif op == "cancel":
        handle.cancel(f"reason {arg}")
    elif op == "deny":
        handle.deny(f"reason {arg}", by=None if arg % 2 else "person")


class Lifecycles(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bus = ts.EventBus(replay=100_000)
        self.sub = self.bus.subscribe(session="s", buffer=1_000_000)
        self.tracker = ts.Tracker(self.bus, "s", coalesce=0.0, max_subagent_depth=2)
        self.handles: list[ts.CallHandle] = []
        self.runs: list[ts.RunScope] = []
        self.events: list[ts.Event] = []

    # -- reports --------------------------------------------------------------------

    @rule(announce=st.booleans(), in_run=st.booleans())
    def create(self, announce: bool, in_run: bool) -> None:
        run_id = self.runs[-1].run_id if in_run and self.runs else None
        self.handles.append(self.tracker.create("tool", run_id=run_id, announce=announce))

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000), op=st.sampled_from(OPS), arg=st.integers(0, 20))
    def report(self, index: int, op: str, arg: int) -> None:
        apply_op(self.handles[index % len(self.handles)], op, arg, self.runs)

    @rule()
    def start_run(self) -> None:
        self.runs.append(self.tracker.run().start())

    @precondition(lambda self: self.runs)
    @rule(outcome=st.sampled_from(["completed", "failed", "cancelled", "interrupted"]))
    def finish_run(self, outcome: str) -> None:
        run = self.runs.pop()
        if run.finished:
            return  # a sub-agent's run its parent call's end ended already
        run.finish(outcome, error="x" if outcome == "failed" else None)  # type: ignore[arg-type]

    @rule(index=st.integers(0, 1000), verdict=st.sampled_from(["approve", "deny", "edit"]))
    def decide(self, index: int, verdict: str) -> None:
        """A person decides one of the pending approvals (as a gateway would)."""
        pending = [c.approval for c in self.bus.snapshot("s").calls if c.approval is not None]
        if not pending:
            return
        approval = pending[index % len(pending)]
        try:
            self.bus.resolve_approval_now(
                "s",
                approval.approval_id,
                approved=verdict != "deny",
                by="person",
                args={"edited": index} if verdict == "edit" else None,
            )
        except (ts.ApprovalAlreadyResolved, ts.ApprovalExpired):
            pass

    @precondition(lambda self: self.handles)
    @rule(index=st.integers(0, 1000), backend=st.sampled_from(["asyncio", "trio"]))
    def resume(self, index: int, backend: str) -> None:
        """The run after an interrupt adopts a decided call by its id and runs it."""
        handle = self.handles[index % len(self.handles)]
        approval_id = handle.approval_id
        if handle.state is not ts.CallState.AWAITING_APPROVAL or approval_id is None:
            return
        if self.bus.decision_now("s", approval_id) is None:
            return  # nobody decided yet: adopting would wait for a person
        tracker = self.tracker

        async def body() -> None:
            try:
                async with tracker.run(), tracker.call(handle.tool, call_id=handle.given_id):
                    pass
            except ts.ApprovalDenied:
                pass

        anyio.run(body, backend=backend)

    @rule(
        ending=st.sampled_from(
            [
                "return",
                "complete",
                "raise",
                "cancel",
                "timeout",
                "approve",
                "deny",
                "expire",
                "request",
                "cancel_waiting",
                "subagent",
                "subagent_cancel",
                "subagent_left_open",
            ]
        ),
        backend=st.sampled_from(["asyncio", "trio"]),
        progress=st.integers(0, 3),
    )
    def scoped_call(self, ending: str, backend: str, progress: int) -> None:
        tracker = self.tracker
        bus = self.bus
        asks = ending in ("approve", "deny", "expire", "cancel_waiting")

        async def decider() -> None:
            while True:
                pending = [
                    c.approval
                    for c in bus.snapshot("s").calls
                    if c.approval is not None and c.tool == "scoped"
                ]
                if pending:
                    break
                await anyio.sleep(0.001)
            if ending == "cancel_waiting":
                return
            try:
                await bus.resolve_approval(
                    "s", pending[0].approval_id, approved=ending != "deny", by="p"
                )
            except (ts.ApprovalAlreadyResolved, ts.ApprovalExpired):
                pass

        async def body() -> None:
            with anyio.move_on_after(0.005) if ending == "cancel_waiting" else anyio.CancelScope():
                async with anyio.create_task_group() as tg:
                    if (asks and ending != "expire") or ending == "request":
                        tg.start_soon(decider)
                    try:
                        with (
                            anyio.fail_after(0.005) if ending == "timeout" else anyio.CancelScope()
                        ) as scope:
                            await scoped(scope)
                    except (Boom, TimeoutError, ts.ApprovalDenied):
                        pass
                    tg.cancel_scope.cancel()

        async def scoped(scope: anyio.CancelScope) -> None:
            async with (
                tracker.run(),
                tracker.call(
                    "scoped",
                    {"n": progress},
                    approval="please" if asks else None,
                    # a decider that never comes (another test's approval) cannot hang us
                    approval_timeout=0.002 if ending == "expire" else 2.0,
                ) as call,
            ):
                for i in range(progress):
                    call.progress(i / 4)
                if ending == "complete":
                    call.complete("done")
                elif ending == "raise":
                    raise Boom("in the tool")
                elif ending == "cancel":
                    scope.cancel()
                    await anyio.sleep(1)
                elif ending == "timeout":
                    await anyio.sleep(1)
                elif ending == "request":
                    decision = await call.request_approval("more", timeout=2)
                    call.complete(decision.approved)
                elif ending.startswith("subagent"):
                    await subagent(call, scope)

        async def subagent(call: ts.CallHandle, scope: anyio.CancelScope) -> None:
            if ending == "subagent_left_open":
                # started by hand and never finished: the call's end ends it first
                run = call.subagent("helper").start()
                tracker.create("inner", run_id=run.run_id).start()
                return
            async with call.subagent("helper"):
                inner = tracker.create("inner")
                inner.start()
                async with tracker.call("inner_scoped") as nested, tracker.run():
                    nested.progress(0.5)  # a run in a call's block: its sub-agent
                    tracker.create("deepest").start()
                    if ending == "subagent_cancel":  # the parent cancelled mid-sub-run
                        scope.cancel()
                        await anyio.sleep(1)
                inner.complete(1)

        anyio.run(body, backend=backend)

    @precondition(lambda self: self.handles)
    @rule(
        ops=st.lists(
            st.tuples(st.integers(0, 1000), st.sampled_from(OPS), st.integers(0, 20)), max_size=8
        ),
        own_loop=st.booleans(),
    )
    def from_a_thread(self, ops: list[tuple[int, str, int]], own_loop: bool) -> None:
        handles = list(self.handles)
        tracker = self.tracker

        def work() -> None:
            fresh = tracker.create("threaded")
            for index, op, arg in ops:
                apply_op(handles[index % len(handles)], op, arg, self.runs)
                apply_op(fresh, op, arg, self.runs)

        if own_loop:

            def target() -> None:
                async def main() -> None:
                    work()

                anyio.run(main)

        else:
            target = work
        thread = threading.Thread(target=target)
        thread.start()
        thread.join()

    @rule()
    def close_and_reopen_the_tracker(self) -> None:
        self.tracker.close()
        self.tracker = ts.Tracker(self.bus, "s")
        self.handles = []
        self.runs = []

    # -- what must always hold ---------------------------------------------------------

    @invariant()
    def stream_so_far_is_well_formed(self) -> None:
        self.events.extend(self.sub.take_nowait())
        assert_lifecycle(self.events, allow_open=True, compare=self.bus.compare)

    def teardown(self) -> None:
        self.tracker.close()
        self.events.extend(self.sub.take_nowait())
        assert_lifecycle(self.events, compare=self.bus.compare)
        terminals: dict[str, int] = {}
        for e in self.events:
            if isinstance(e, (ts.ToolCompleted, ts.ToolFailed, ts.ToolCancelled, ts.ToolDenied)):
                terminals[e.call_id] = terminals.get(e.call_id, 0) + 1
        announced = {e.call_id for e in self.events if e.call_id}
        assert terminals == dict.fromkeys(announced, 1)
        # every run, sub-agents' included, started once and finished once
        started = [e.run_id for e in self.events if isinstance(e, ts.RunStarted)]
        finished = [e.run_id for e in self.events if isinstance(e, ts.RunFinished)]
        assert sorted(map(str, started)) == sorted(map(str, finished))
        assert len(set(started)) == len(started)
        assert not any("AbCdEfGhIjKlMnOpQr" in repr(ts.to_dict(e)) for e in self.events)
        self.bus.close()


Lifecycles.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_random_lifecycles = Lifecycles.TestCase


def test_machine_covers_every_handle_method() -> None:
    public = {
        name
        for name in dir(ts.CallHandle)
        if not name.startswith("_") and callable(getattr(ts.CallHandle, name))
    }
    assert public == set(OPS), public


def _unused(*_: Any) -> None:  # keeps the imports honest for mypy
    pass
