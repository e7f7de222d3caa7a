"""What every broker-backed bus (BrokerBus over MemoryBroker, RedisBus, NatsBus,
PostgresBus) must also do, beyond the conformance suite: checks that need several
processes' buses on one broker, or a broker that misbehaves on purpose. Each takes
``make(**options)``, a bus on the test's broker (a fresh namespace unless ``prefix`` is
given: buses made with one ``prefix`` share a broker, as processes do), and the outage
checks a :class:`Server` the check stops and starts; the bus's own test module runs
them.

The checks use the public API only. Where a broker must misbehave they use its driver's
test hooks (:func:`hooks`): a ``BrokerBus`` over ``MemoryBroker`` has them, and over a
real broker's driver they come from ``StallingBroker(driver)``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import pytest

import toolstream as ts
from tests.servers import asgi_get, take
from toolstream.broker import BrokerBus
from toolstream.testing import assert_lifecycle

MakeBus = Callable[..., Any]


class Server(Protocol):
    """A broker server of the test's own, which the check stops and starts again (for a
    ``MemoryBroker``: ``down()`` and ``up()``)."""

    def stop(self) -> None: ...

    def start(self) -> None: ...


class Hooks(Protocol):
    """A driver's test hooks (``MemoryBroker``'s, ``StallingBroker``'s)."""

    def stall(self, op: str, token: str | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold operation ``op`` (for writer ``token``, or every call) for the block."""
        ...

    def after(
        self, op: str, callback: Callable[[Any], Awaitable[None] | None]
    ) -> contextlib.AbstractContextManager[None]:
        """Run ``callback(result)`` after each call of ``op``, before its caller
        continues, for the block."""
        ...


def hooks(bus: Any) -> Hooks:
    """The test hooks of ``bus``'s broker: its driver's (``bus.broker``), which must be a
    ``MemoryBroker`` or a ``StallingBroker``."""
    broker: Any = bus.broker if isinstance(bus, BrokerBus) else None
    if not (callable(getattr(broker, "stall", None)) and callable(getattr(broker, "after", None))):
        raise TypeError(
            f"this check needs a driver with test hooks, got {broker!r}: build the bus as "
            "BrokerBus(MemoryBroker()) or BrokerBus(StallingBroker(driver))"
        )
    hooked: Hooks = broker
    return hooked


def _prefix() -> str:
    """A fresh namespace on the test's broker, for the buses of one check."""
    return f"t{uuid.uuid4().hex[:10]}"


async def lost_worker_calls_closed_exactly_once(make: MakeBus) -> None:
    """A writer that stops renewing its lease has its open calls closed as cancelled,
    reason "worker lost", once, by whichever surviving process gets there; whatever the
    lost writer sends for those calls afterwards is dropped (one terminal per call)."""
    prefix = _prefix()
    worker = make(prefix=prefix, lease=0.6, reap=False)
    gateways = [make(prefix=prefix, lease=0.6) for _ in range(2)]
    try:
        async with gateways[0].subscribe(session="s", snapshot=True) as sub:
            tracker = ts.Tracker(worker, session="s")
            run = tracker.run(run_id="r1")
            await run.__aenter__()
            a = tracker.create("search", call_id="a")
            a.ready(args={"q": 1})
            a.start()
            b = tracker.create("fetch", call_id="b")
            b.ready(args={})
            b.start()
            b.complete("done")
            await worker.flush(timeout=5)
            got = []
            # The worker stops renewing its lease (it hangs).
            with hooks(worker).stall("hold", worker.token), anyio.fail_after(15):
                async for event in sub:
                    got.append(event)
                    if event.type == "run.finished":
                        break
                kinds = [(e.type, e.call_id) for e in got[1:]]
                assert kinds[-2:] == [("tool.cancelled", "a"), ("run.finished", "")], kinds
                cancel = got[-2]
                assert isinstance(cancel, ts.ToolCancelled) and cancel.reason == "worker lost"
                assert isinstance(got[-1], ts.RunFinished) and got[-1].outcome == "cancelled"
                for g in gateways:  # both try again, explicitly: the lost writer is reaped once
                    await g.reap_lost()
                assert sum(g.stats.reaped for g in gateways) == 2
            # The worker comes back and reports the call: dropped, not a second terminal.
            await worker.start()
            a.complete("late")
            await worker.flush(timeout=5)
            assert worker.stats.fenced == 1
            snap = gateways[1].snapshot("s")
            states = {c.call_id: c.state.value for c in snap.calls}
            assert states == {"a": "cancelled", "b": "completed"}
    finally:
        await worker.aclose()
        for g in gateways:
            await g.aclose()


async def a_reader_left_behind_by_trimming_is_cut_not_gapped(make: MakeBus) -> None:
    """A subscriber whose reader stalls while the writer runs further ahead than the
    replay window is cut with SlowConsumer (never silently handed a gap); resuming
    gives the reset it needs."""
    bus = make(replay=16)
    try:
        sub = bus.subscribe(session="s", buffer=10_000)
        await sub.prepare()
        with hooks(bus).stall("read"):  # the reader stalls while the writer runs ahead
            published = [
                bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                for i in range(600)
            ]
            await bus.flush(timeout=5)
        got: list[ts.Event] = []

        async def read_all() -> None:
            async for event in sub:
                got.append(event)

        with pytest.raises(ts.SlowConsumer) as info, anyio.fail_after(10):
            await read_all()
        ids = [e.id for e in got]
        assert ids == [e.id for e in published[: len(ids)]], "what it got has no gap"
        async with bus.subscribe(session="s", after=info.value.last_id or sub.start_after) as again:
            first = await take(again, 1)
            assert isinstance(first[0], ts.StreamReset)
        await sub.aclose()
    finally:
        await bus.aclose()


async def two_buses_deciding_at_once_have_one_winner(make: MakeBus, rounds: int = 30) -> None:
    """Two gateway processes' buses decide the same approval at once (three deciders
    each), ``rounds`` times over: exactly one decision wins each time, every loser
    learns the winner's resolution, and the stream holds one resolution and one
    terminal per call."""
    prefix = _prefix()
    async with (
        make(prefix=prefix) as agent_bus,
        make(prefix=prefix) as one,
        make(prefix=prefix) as two,
    ):
        session = "approvals"
        tracker = ts.Tracker(agent_bus, session)
        for round_ in range(rounds):
            approval_id = tracker.create("send", call_id=f"c{round_}").await_approval()
            await agent_bus.flush()
            results: list[object] = []

            async def decide(
                bus: Any, who: str, approval_id: str = approval_id, results: list[object] = results
            ) -> None:
                try:
                    results.append(
                        await bus.resolve_approval(
                            session, approval_id, approved=who == "one", by=who
                        )
                    )
                except ts.ApprovalAlreadyResolved as exc:
                    results.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(decide, one, "one")
                    tg.start_soon(decide, two, "two")
            winners = [r for r in results if isinstance(r, ts.ApprovalResolved)]
            assert len(winners) == 1, results
            losers = [r for r in results if isinstance(r, ts.ApprovalAlreadyResolved)]
            assert len(losers) == 5, results
            assert all(r.resolution == winners[0] for r in losers)
            decision = await agent_bus.decision(session, approval_id)
            assert decision is not None and decision.by == winners[0].by
        tracker.close()  # approved calls end cancelled here; denied ones ended on the bus
        await agent_bus.flush()
        # created, ready, requested, resolved, then denied or cancelled: 5 per call, and
        # nothing more (a second terminal, a second resolution)
        async with one.subscribe(session=session, after=f"{one.epoch}-0") as sub:
            events = await take(sub, 5 * rounds, within=30)
            with anyio.move_on_after(0.5):
                extra = await take(sub, 1)
                raise AssertionError(f"more events than expected: {extra}")
        assert_lifecycle(events, compare=one.compare)
        assert agent_bus.stats.fenced > 0, "the cancellations of denied calls were dropped"


@contextlib.asynccontextmanager
async def _stalled(
    make: MakeBus, release_after: float
) -> AsyncIterator[tuple[Any, ts.Tracker, Callable[[], None]]]:
    """A fresh bus whose writes stall (a slow broker, a first connection) until
    ``release_after`` seconds from now or the yielded ``release()`` is called, and a
    tracker of session "a" on it."""
    bus = make()
    held = contextlib.ExitStack()
    held.enter_context(hooks(bus).stall("append", bus.token))  # before the bus starts
    timer = asyncio.get_running_loop().call_later(release_after, held.close)
    tracker = ts.Tracker(bus, "a")
    try:
        yield bus, tracker, held.close
        tracker.close()
    finally:
        timer.cancel()
        held.close()
        await bus.aclose()


#: The events of a call that asked for an approval and got its resolution.
_ASKED = ["tool.ready", "tool.approval.requested", "tool.approval.resolved"]


async def _call_events(bus: Any, count: int) -> list[ts.Event]:
    """The ``count`` events of session "a", and nothing more."""
    await bus.flush(timeout=10)
    async with bus.subscribe(session="a", after=f"{bus.epoch}-0") as sub:
        events = await take(sub, count, within=10)
        with anyio.move_on_after(0.5):
            extra = await take(sub, 1)
            raise AssertionError(f"more events than expected: {extra}")
    return events


async def approval_before_its_request_is_written(make: MakeBus) -> None:
    """The bus has not written a call's approval request yet (its writer is stalled:
    a slow broker, a first connection) when the approval is touched. The bus reads its
    own writes: it waits for the request rather than answer ``ApprovalNotFound``.

    - cancelled: the approval ends once, by ``"cancelled"``, then ``tool.cancelled``;
      a late decision is refused;
    - expired: ``ApprovalDenied`` by ``"timeout"``, then ``tool.denied``;
    - decided on the same bus: the decision wins and the call runs."""
    async with _stalled(make, 0.5) as (bus, tracker, _):
        with anyio.move_on_after(0.2) as scope:
            async with tracker.call("send", {}, approval=True, call_id="c"):
                raise AssertionError("ran without an approval")
        assert scope.cancelled_caught
        events = await _call_events(bus, 4)
        assert [e.type for e in events] == [*_ASKED, "tool.cancelled"], events
        resolved = events[2]
        assert isinstance(resolved, ts.ApprovalResolved)
        assert (resolved.approved, resolved.by) == (False, "cancelled")
        with pytest.raises(ts.ApprovalAlreadyResolved) as late:
            await bus.resolve_approval("a", resolved.approval_id, approved=True, by="late")
        assert late.value.resolution.by == "cancelled"

    async with _stalled(make, 0.5) as (bus, tracker, _):
        with pytest.raises(ts.ApprovalDenied) as refused:
            async with tracker.call("send", {}, approval=True, approval_timeout=0.2):
                raise AssertionError("ran without an approval")
        assert refused.value.decision.by == "timeout", refused.value
        events = await _call_events(bus, 4)
        assert [e.type for e in events] == [*_ASKED, "tool.denied"], events

    async with _stalled(make, 0.3) as (bus, tracker, _):
        handle = tracker.create("send")
        approval_id = handle.await_approval()
        won = await bus.resolve_approval("a", approval_id, approved=True, by="ops")
        assert won.approved and won.by == "ops"
        assert (await tracker.decision(approval_id)).approved
        handle.start()
        handle.complete("sent")
        events = await _call_events(bus, 6)
        kinds = ["tool.created", *_ASKED, "tool.started", "tool.completed"]
        assert [e.type for e in events] == kinds, events


async def approval_request_written_during_a_read(make: MakeBus) -> None:
    """The bus's own request is written while the bus reads the approval (the driver's
    ``approval``): the read misses it, the write lands right after. The bus knew before
    reading that the request was its own, so it waits for the write and reads again. (It
    once looked at its outbox after the read instead, found the request gone, and
    answered ``ApprovalNotFound``.)"""
    async with _stalled(make, 60) as (bus, tracker, release):
        first: list[Any] = []

        async def write_after_the_read(got: Any) -> None:
            if not first:
                first.append(got)
                release()  # the stalled write lands after this read
                await bus.flush(timeout=10)

        with hooks(bus).after("approval", write_after_the_read):
            approval_id = tracker.create("send").await_approval()
            won = await bus.resolve_approval("a", approval_id, approved=True, by="ops")
        assert won.approved and won.by == "ops"
        assert first == [None], "the first read saw the request"


async def _goes_away(bus: Any, server: Server) -> None:
    """The bus has connected and written (another session's event), then the broker
    stops."""
    await bus.start()
    bus.publish(ts.ToolStarted, session="b", call_id="c0", tool="t")
    await bus.flush(timeout=5)
    server.stop()


async def approval_withdrawn_while_the_broker_is_down(make: MakeBus, server: Server) -> None:
    """The broker is unreachable when a call waiting for its approval is cancelled: the call
    still ends cancelled (not failed by the outage), and the withdrawal is written after
    the request once the broker is back, so the approval ends exactly once."""
    bus = make()
    try:
        await _goes_away(bus, server)
        tracker = ts.Tracker(bus, "a")
        with anyio.move_on_after(0.3) as scope:
            async with tracker.call("send", {}, approval=True, call_id="c"):
                raise AssertionError("ran without an approval")
        assert scope.cancelled_caught
        server.start()
        events = await _call_events(bus, 4)
        assert [e.type for e in events] == [*_ASKED, "tool.cancelled"], events
        resolved = events[2]
        assert isinstance(resolved, ts.ApprovalResolved) and resolved.by == "cancelled"
        assert bus.stats.dropped == 0
        tracker.close()
    finally:
        await bus.aclose()


async def approval_waited_for_through_an_outage(make: MakeBus, server: Server) -> None:
    """The broker goes away while a call waits for its approval, for longer than the bus's
    ``connect_timeout``: the call keeps waiting (nobody could decide meanwhile), and
    runs once the broker is back and a gateway approves it."""
    prefix = _prefix()
    bus = make(prefix=prefix, connect_timeout=0.3)
    gateway = make(prefix=prefix)
    ran = anyio.Event()
    try:
        await _goes_away(bus, server)
        tracker = ts.Tracker(bus, "a")

        async def agent() -> None:
            async with tracker.call("send", {}, approval=True, call_id="c") as call:
                call.complete("sent")
                ran.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await anyio.sleep(1.5)  # five connect timeouts with the broker away
            assert not ran.is_set()
            server.start()
            async with gateway.subscribe(session="a", after=f"{gateway.epoch}-0") as sub:
                events = await take(sub, 2, within=10)
            asked = events[1]
            assert isinstance(asked, ts.ApprovalRequested), events
            await gateway.resolve_approval("a", asked.approval_id, approved=True, by="ops")
            with anyio.fail_after(10):
                await ran.wait()
        tracker.close()
    finally:
        await bus.aclose()
        await gateway.aclose()


async def approval_expiring_during_an_outage(make: MakeBus, server: Server) -> None:
    """A call's approval expires while the broker is away: the expiry cannot be
    arbitrated yet (a decision may have won just before), so the call waits until the
    broker is back, then ends by the one resolution that won (here ``"timeout"``):
    ``ApprovalDenied``, not ``BusUnavailable``, and one resolution, one terminal."""
    bus = make(connect_timeout=0.3)
    outcome: list[BaseException] = []
    try:
        await bus.start()
        tracker = ts.Tracker(bus, "a")

        async def agent() -> None:
            try:
                async with tracker.call(
                    "send", {}, approval=True, approval_timeout=1.5, call_id="c"
                ):
                    raise AssertionError("ran without an approval")
            except Exception as exc:  # what ended the call is the result
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await anyio.sleep(0.05)
            await bus.flush(timeout=5)  # the request is written
            assert not outcome, "expired before the broker went away: a loaded machine?"
            server.stop()
            await anyio.sleep(2.0)  # past the expiry, the broker still away
            assert not outcome, outcome
            server.start()
        assert len(outcome) == 1 and isinstance(outcome[0], ts.ApprovalDenied), outcome
        assert outcome[0].decision.by == "timeout"
        events = await _call_events(bus, 4)
        assert [e.type for e in events] == [*_ASKED, "tool.denied"], events
        tracker.close()
    finally:
        await bus.aclose()


async def names_past_the_bound_never_reach_the_broker(make: MakeBus) -> None:
    """An identifier a client or an agent chooses works at any length or is refused
    where it enters: a session past ``MAX_ID_BYTES`` gets 400 from ``SSEApp`` and
    ``IdTooLong`` from the API; an approval id of any length is looked up (not found)
    and a snapshot of any name read (empty). The bus goes on serving every session: no
    long name reached the broker's subjects or keys (a NATS server closes the
    connection on a control line past 4,096 bytes)."""
    from toolstream.sse import SSEApp

    long = "x" * 5000
    bus = make()
    try:
        await bus.start()
        app = SSEApp(bus)
        status, body = await asgi_get(app, f"/?session={long}")
        assert status == 400, body
        with pytest.raises(ts.IdTooLong):
            ts.Tracker(bus, long)
        with pytest.raises(ts.IdTooLong):
            bus.subscribe(session=long, snapshot=True)
        with pytest.raises(ts.IdTooLong):
            bus.publish(ts.ToolStarted, session="ok", call_id=long, tool="t")
        for approval_id in (long, "é" * 3000):
            with pytest.raises(ts.ApprovalNotFound):
                await bus.resolve_approval("ok", approval_id, approved=True, by="mallory")
            with pytest.raises(ts.ApprovalNotFound):
                await bus.decision("ok", approval_id)
        assert (await bus.fetch_snapshot(long)).calls == ()
        assert bus.snapshot(long).calls == ()
        # Every other session is served as before, and what trackers publish is written.
        status, body = await asgi_get(app, "/?session=ok")
        assert status == 200, body
        assert b"stream.reset" in body
        async with bus.subscribe(session="ok", snapshot=True) as sub:
            tracker = ts.Tracker(bus, "ok")
            async with tracker.call("search", {}) as call:
                call.complete(1)
            await tracker.aclose()
            await bus.flush(timeout=10)
            got = await take(sub, 3)
        assert [e.type for e in got] == ["stream.reset", "tool.started", "tool.completed"]
        assert bus.stats.dropped == 0
    finally:
        await bus.aclose()


async def braces_and_hash_tags_in_names_stay_in_their_session(make: MakeBus) -> None:
    """Session names holding braces (what a Redis Cluster reads as a hash tag), colons
    and dots: each session's events, snapshot and approvals are its own, every script
    runs (no cross-slot error on a cluster)."""
    names = ["{x}", "a}b{c", "}", "{", "{}", "x}{y}", "{ok}:s", "p.q*>"]
    bus = make()
    try:
        await bus.start()
        for name in names:
            async with bus.subscribe(session=name, snapshot=True) as sub:
                tracker = ts.Tracker(bus, name)
                approval_id = tracker.create("send", call_id=f"c{name}").await_approval("ok?")
                await bus.flush(timeout=10)
                await bus.resolve_approval(name, approval_id, approved=False, by="alice")
                tracker.close()
                got = await take(sub, 6)
            assert [e.type for e in got] == [
                "stream.reset",
                "tool.created",
                "tool.ready",
                "tool.approval.requested",
                "tool.approval.resolved",
                "tool.denied",
            ], (name, got)
            assert {e.session for e in got} == {name}
        for name in names:
            snap = await bus.fetch_snapshot(name)
            assert [(c.call_id, c.state.value) for c in snap.calls] == [(f"c{name}", "denied")]
    finally:
        await bus.aclose()


# -- writing: outages, retries, other writers ------------------------------------------------


async def outage_keeps_the_agent_running_and_loses_nothing(make: MakeBus, server: Server) -> None:
    """The broker goes away mid-session: publishing never waits, events wait in the
    outbox, and once the broker is back every event is written exactly once, in order."""
    bus = make()
    try:
        await bus.start()
        async with bus.subscribe(session="s", snapshot=True) as sub:
            published = [bus.publish(ts.ToolStarted, session="s", call_id="c0", tool="t")]
            await bus.flush(timeout=5)
            server.stop()
            started = time.monotonic()
            for i in range(200):
                published.append(
                    bus.publish(ts.ToolProgress, session="s", call_id="c0", tool="t", current=i)
                )
            assert time.monotonic() - started < 1, "publishing never waits for the broker"
            with anyio.fail_after(10):
                while bus.stats.flush_errors == 0:  # noqa: ASYNC110 - a counter
                    await anyio.sleep(0.01)
            assert bus.stats.outbox >= 200, "nothing was written, nothing was dropped"
            server.start()
            await bus.flush(timeout=15)
            got = await take(sub, 202, within=20)
            assert isinstance(got[0], ts.StreamReset)
            assert [e.id for e in got[1:]] == [e.id for e in published], "exactly once, in order"
            assert bus.stats.dropped == 0
    finally:
        await bus.aclose()


async def a_batch_whose_reply_was_lost_is_not_written_twice(make: MakeBus) -> None:
    """The broker wrote a batch and its reply was lost (the connection dropped): the
    outbox writes the batch again, and the driver recognises every event of it."""
    bus = make()
    try:
        await bus.start()
        first = bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")
        await bus.flush(timeout=5)
        retryable = bus.broker.retryable
        lost: list[bool] = []

        def reply_lost(result: Any) -> None:
            if not lost:
                lost.append(True)
                raise retryable[0]("the reply was lost")

        with hooks(bus).after("append", reply_lost):
            events = [
                bus.publish(ts.ToolProgress, session="s", call_id="c", tool="t", current=i)
                for i in range(5)
            ]
            await bus.flush(timeout=10)
        assert lost and bus.stats.flush_errors >= 1
        assert bus.stats.duplicates == 5, bus.stats
        async with bus.resume(session="s", after=first.id) as sub:
            got = await take(sub, 5)
            assert [e.id for e in got] == [e.id for e in events]
            with anyio.move_on_after(0.3):
                raise AssertionError(f"written twice: {await take(sub, 1)}")
    finally:
        await bus.aclose()


async def a_writer_behind_another_is_renumbered_not_lost(make: MakeBus) -> None:
    """Another process wrote the session under later ids (a clock ahead, or a sequence
    ahead): this writer's events still get in, in order, under later ids, and what it
    publishes next comes after them."""
    prefix = _prefix()
    ahead = make(prefix=prefix, clock=lambda: 4_000_000_000.0)
    behind = make(prefix=prefix)
    try:
        async with behind.subscribe(session="s", snapshot=True) as sub:
            a = ahead.publish(ts.ToolStarted, session="s", call_id="a", tool="t")
            await ahead.flush(timeout=5)
            behind.publish(ts.ToolStarted, session="s", call_id="b", tool="t")
            await behind.flush(timeout=5)
            got = await take(sub, 3)
        assert [e.call_id for e in got[1:]] == ["a", "b"]
        assert got[1].id == a.id
        assert behind.compare(got[2].id, a.id) == 1
        assert behind.stats.renumbered == 1
        c = behind.publish(ts.ToolCompleted, session="s", call_id="b", tool="t")
        assert behind.compare(c.id, got[2].id) == 1, "later ids after a renumbering"
    finally:
        await ahead.aclose()
        await behind.aclose()


async def two_writers_on_one_session_lose_nothing(make: MakeBus) -> None:
    """Two processes write the same session at once: every event gets in, in each
    writer's order; a subscriber sees strictly increasing final ids."""
    prefix = _prefix()
    one = make(prefix=prefix)
    two = make(prefix=prefix)
    try:
        async with one.subscribe(session="s", snapshot=True) as sub:
            for i in range(100):
                one.publish(ts.ToolProgress, session="s", call_id="one", tool="t", current=i)
                two.publish(ts.ToolProgress, session="s", call_id="two", tool="t", current=i)
            await one.flush(timeout=10)
            await two.flush(timeout=10)
            got = (await take(sub, 201))[1:]
        for writer in ("one", "two"):
            assert [getattr(e, "current", None) for e in got if e.call_id == writer] == list(
                range(100)
            )
        ids = [e.id for e in got]
        assert all(one.compare(x, y) == -1 for x, y in itertools.pairwise(ids))
    finally:
        await one.aclose()
        await two.aclose()


async def trio_is_refused(make: MakeBus) -> None:
    """A broker bus runs on asyncio: used under trio (in a thread of its own) it says so,
    rather than failing somewhere inside its client."""
    import trio

    bus = make()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="asyncio only"):
            bus.subscribe(session="s")
        with pytest.raises(RuntimeError, match="asyncio only"):
            await bus.start()

    try:
        await anyio.to_thread.run_sync(trio.run, main)
    finally:
        await bus.aclose()


async def session_is_required_and_types_checked(make: MakeBus) -> None:
    """Bad calls get a specific error before anything reaches the broker; a closed bus
    refuses to publish."""
    bus = make()
    try:
        with pytest.raises(ValueError, match="session="):
            bus.subscribe()
        with pytest.raises(TypeError, match="event classes"):
            bus.subscribe(dict, session="s")
        with pytest.raises(TypeError, match="not a lifecycle event class"):
            bus.publish(dict, session="s")
        with pytest.raises(ValueError, match="non-empty session"):
            bus.publish(ts.ToolStarted, session="", call_id="c", tool="t")
    finally:
        await bus.aclose()
    with pytest.raises(ts.BusClosed):
        bus.publish(ts.ToolStarted, session="s", call_id="c", tool="t")


async def a_tracker_publishes_and_another_process_reads(make: MakeBus) -> None:
    """A Tracker publishes through the bus; a second bus on the same broker (another
    process's view) sees the run's events in order, and its snapshot agrees, with the
    arguments redacted."""
    prefix = _prefix()
    writer = make(prefix=prefix)
    reader = make(prefix=prefix)
    try:
        async with reader.subscribe(session="s", snapshot=True) as sub:
            async with (
                ts.Tracker(writer, session="s") as tracker,
                tracker.run(run_id="r1"),
                tracker.call("search", {"q": "x", "api_key": "sk-123"}) as call,
            ):
                call.progress(0.5, message="half")
                call.complete(["a"])
            got = await take(sub, 6)
        assert isinstance(got[0], ts.StreamReset)
        assert [e.type for e in got[1:]] == [
            "run.started",
            "tool.started",
            "tool.progress",
            "tool.completed",
            "run.finished",
        ]
        snap = await reader.fetch_snapshot("s")
        assert [c.state.value for c in snap.calls] == ["completed"]
        assert snap.calls[0].args == {"q": "x", "api_key": "[redacted]"}
        assert reader.snapshot("s") == snap
    finally:
        await writer.aclose()
        await reader.aclose()


#: Every check, with what it needs of the test's broker: ``"plain"`` the bus users build,
#: ``"hooked"`` a bus whose driver has test hooks, ``"outage"`` the bus users build and a
#: server of the check's own to stop and start. tests/test_broker_suites.py runs each on
#: every driver.
CHECKS: list[tuple[Callable[..., Awaitable[None]], str]] = [
    (lost_worker_calls_closed_exactly_once, "hooked"),
    (a_reader_left_behind_by_trimming_is_cut_not_gapped, "hooked"),
    (two_buses_deciding_at_once_have_one_winner, "plain"),
    (approval_before_its_request_is_written, "hooked"),
    (approval_request_written_during_a_read, "hooked"),
    (approval_withdrawn_while_the_broker_is_down, "outage"),
    (approval_waited_for_through_an_outage, "outage"),
    (approval_expiring_during_an_outage, "outage"),
    (names_past_the_bound_never_reach_the_broker, "plain"),
    (braces_and_hash_tags_in_names_stay_in_their_session, "plain"),
    (outage_keeps_the_agent_running_and_loses_nothing, "outage"),
    (a_batch_whose_reply_was_lost_is_not_written_twice, "hooked"),
    (a_writer_behind_another_is_renumbered_not_lost, "plain"),
    (two_writers_on_one_session_lose_nothing, "plain"),
    (trio_is_refused, "plain"),
    (session_is_required_and_types_checked, "plain"),
    (a_tracker_publishes_and_another_process_reads, "plain"),
]
