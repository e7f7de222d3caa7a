"""MemoryBroker, driver by driver operation: the semantics of RedisBus's Lua scripts
(append codes, renumbering, high-water marks, fencing, checkpoints, approvals, leases and
reaping), its waiters across threads and loops, and its test hooks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

import toolstream as ts
from toolstream._core.codec import from_dict
from toolstream._core.driver import Broker, BrokerReader, Decide, Record, RecordKind, Variant
from toolstream.testing import BrokerDown, MemoryBroker

pytestmark = pytest.mark.timeout(30)

SCALE = 1_000_000


@pytest.fixture
def anyio_backend() -> str:
    # BrokerBus, MemoryBroker's user, runs on asyncio only.
    return "asyncio"


class Clock:
    """A monotonic clock a test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rec(
    kind: RecordKind,
    seq: int,
    *,
    call_id: str = "",
    run_id: str = "",
    tool: str = "t",
    approval_id: str = "",
    meta: dict[str, Any] | None = None,
    session: str = "s",
) -> Record:
    """A record whose blob names its seq (in the writer's numbering)."""
    event = ts.ToolProgress(id=f"e-{seq}", session=session, ts=1.0, call_id=call_id, tool=tool)
    return Record(
        kind=kind,
        seq=seq,
        event=event,
        blob=json.dumps({"n": seq}),
        call_id=call_id,
        run_id=run_id,
        tool=tool,
        approval_id=approval_id,
        meta=meta,
    )


def meta(
    session: str = "s", *, writer: str = "w1", call_id: str = "c", exp: float | None = None
) -> dict[str, Any]:
    return {
        "s": session,
        "exp": exp,
        "running": False,
        "cid": call_id,
        "env": ["", call_id, "t", None],
        "w": writer,
    }


def variants(tag: str = "") -> list[Variant]:
    """A decision (approved: no denial), an expiry and a cancellation (each a denial)."""
    return [
        (f'{{"res":"decision{tag}"}}', '{"approved":true,"by":"ops"}', None),
        (f'{{"res":"expiry{tag}"}}', '{"approved":false,"by":"timeout"}', '{"den":"expiry"}'),
        (f'{{"res":"cancel{tag}"}}', '{"approved":false,"by":"cancelled"}', '{"den":"cancel"}'),
    ]


def blobs(events: list[tuple[int, str | bytes]]) -> list[Any]:
    return [json.loads(blob) for _, blob in events]


# -- the protocol ----------------------------------------------------------------------------


def test_it_is_a_broker_and_its_reader_a_broker_reader() -> None:
    broker: Broker = MemoryBroker()
    assert isinstance(broker, Broker)
    reader: BrokerReader = broker.reader("s")
    assert isinstance(reader, BrokerReader)
    assert (broker.where, broker.name) == ("memory broker", "BrokerBus")
    assert broker.retryable == (BrokerDown,)
    assert issubclass(BrokerDown, ConnectionError)
    epoch = broker.open(1.0)
    assert epoch and "-" not in epoch


def test_next_seq_is_the_redis_numbering() -> None:
    broker = MemoryBroker()
    assert broker.next_seq(0, 1.5) == 1500 * SCALE
    assert broker.next_seq(1500 * SCALE, 1.5) == 1500 * SCALE + 1
    assert broker.next_seq(2000 * SCALE + 7, 1.5) == 2000 * SCALE + 8
    with pytest.raises(ValueError, match="session_ttl"):
        MemoryBroker(session_ttl=0)


async def test_every_async_operation_yields_to_the_loop() -> None:
    broker = MemoryBroker()
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    for step in (
        broker.epoch(),
        broker.read_state("s"),
        broker.append("s", "w", [rec("-", 5)]),
        broker.reader("s").read(0, 10),
        broker.lost("w"),
        broker.trim_due(0.0),
        broker.approval("s", "a"),
        broker.start(),
    ):
        ran.clear()
        task = asyncio.get_running_loop().create_task(other())
        await step
        assert ran == ["other"]
        await task


# -- append ----------------------------------------------------------------------------------


async def test_append_codes_renumbering_and_high_water_marks() -> None:
    broker = MemoryBroker(wall=lambda: 0.0)  # its clock behind every seq: last + 1
    first = await broker.append("s", "w1", [rec("-", 100), rec("-", 110)])
    assert first.codes == [0, 0] and first.renumbered == []
    assert len(first.incarnation) == 12  # a token set by the first write
    again = await broker.append("s", "w1", [rec("-", 100), rec("-", 110), rec("-", 120)])
    assert again.codes == [1, 1, 0], "a retried batch is recognised"
    assert again.incarnation == first.incarnation
    # Another writer is ahead of w1's clock: w1's events go after it, renumbered.
    assert (await broker.append("s", "w2", [rec("-", 500)])).codes == [0]
    moved = await broker.append("s", "w1", [rec("-", 130), rec("-", 140), rec("-", 600)])
    assert moved.codes == [3, 3, 0] and moved.renumbered == [501, 502]
    # The high-water mark is in w1's own numbering: 140 is not a duplicate of 502...
    assert (await broker.append("s", "w1", [rec("-", 135), rec("-", 600)])).codes == [1, 1]
    assert (await broker.append("s", "w1", [rec("-", 601)])).codes == [0]
    state = await broker.read_state("s")
    assert [seq for seq, _ in state.events] == [100, 110, 120, 500, 501, 502, 600, 601]
    assert [b["n"] for b in blobs(state.events)] == [100, 110, 120, 500, 130, 140, 600, 601]
    assert (state.last, state.floor, state.checkpoint) == (601, 0, None)
    assert state.incarnation == first.incarnation


async def test_what_the_broker_writes_itself_follows_its_clock() -> None:
    """A renumbered event, a reaper's and a resolution take ``next_seq(last, wall())``
    (as Redis's ``XADD *`` takes the server's clock), not ``last + 1``: a subscription
    that starts live at ``next_seq(...) - 1`` on a quiet session does not start after
    them. A reaper's events are stamped with it; the ``now`` a bus passes decides an
    expiry only."""
    wall = Clock()  # 100.0
    broker = MemoryBroker(wall=wall)
    await broker.append("s", "w2", [rec("-", 5_000)])
    moved = await broker.append("s", "w1", [rec("o", 10, call_id="c"), rec("o", 20, call_id="d")])
    assert moved.codes == [3, 3]
    assert moved.renumbered == [100_000 * SCALE, 100_000 * SCALE + 1]
    wall.now = 101.0
    await broker.claim("w1", force=True)
    assert await broker.reap("s", "w1", "worker lost", 7.0) == 2
    state = await broker.read_state("s")
    assert [seq for seq, _ in state.events][-2:] == [101_000 * SCALE, 101_000 * SCALE + 1]
    assert {b["ts"] for b in blobs(state.events)[-2:]} == {101.0}
    asked = rec("A", 5_001, approval_id="a", meta=meta(writer="w2", exp=50.0))
    await broker.append("s", "w2", [asked])
    wall.now = 102.0
    got = await broker.resolve("s", Decide("a", 60.0, False, variants()))  # the bus's now: expired
    assert (got.outcome, got.seq) == ("expired", 102_000 * SCALE)
    denial = (await broker.read_state("s")).events[-1]
    assert denial == (102_000 * SCALE + 1, '{"den":"expiry"}')


async def test_a_session_never_written_reads_empty() -> None:
    broker = MemoryBroker()
    state = await broker.read_state("nobody")
    assert (state.incarnation, state.last, state.floor, state.checkpoint) == ("", 0, 0, None)
    assert state.events == []
    chunk = await broker.reader("nobody").read(0, 10)
    assert (chunk.incarnation, chunk.checkpoint, chunk.events) == ("", 0, [])


async def test_open_calls_and_runs_are_reaped_once_and_fenced() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock, wall=lambda: 0.0)
    await broker.hold("w1", ["s"], 1.0)
    await broker.hold("w2", ["s"], 100.0)
    written = await broker.append(
        "s",
        "w1",
        [
            rec("r", 10, run_id="r1"),
            rec("o", 11, call_id="a", run_id="r1", tool="search"),
            rec("o", 12, call_id="b", tool="fetch"),
            rec("o", 13, call_id="b", tool="other"),  # opened once: the first one stays
            rec("o", 14, call_id="done", tool="x"),
            rec("t", 15, call_id="done"),
            rec("r", 16, run_id="r2"),
            rec("f", 17, run_id="r2"),
        ],
    )
    assert written.codes == [0] * 8
    await broker.append("s", "w2", [rec("o", 20, call_id="a", tool="mine")])
    assert await broker.lost("w2") == []
    assert await broker.claim("w1", force=False) is None, "its lease is held"
    clock.now += 1.5
    assert await broker.lost("w2") == ["w1"]
    assert await broker.lost("w1") == [], "never itself"
    assert await broker.claim("w1", force=False) == ["s"]
    assert await broker.reap("s", "w1", "worker lost", 0.0) == 3
    state = await broker.read_state("s")
    assert [seq for seq, _ in state.events][-3:] == [21, 22, 23]
    assert blobs(state.events)[-3:] == [
        {
            "v": 1,
            "type": "tool.cancelled",
            "session": "s",
            "ts": 0.0,
            "call_id": "a",
            "tool": "search",
            "reason": "worker lost",
            "run_id": "r1",
        },
        {
            "v": 1,
            "type": "tool.cancelled",
            "session": "s",
            "ts": 0.0,
            "call_id": "b",
            "tool": "fetch",
            "reason": "worker lost",
        },
        {
            "v": 1,
            "type": "run.finished",
            "session": "s",
            "ts": 0.0,
            "call_id": "",
            "tool": "",
            "run_id": "r1",
            "outcome": "cancelled",
            "error": {"type": "WorkerLost", "message": "worker lost"},
        },
    ]
    for seq, blob in state.events[-3:]:  # what the bus decodes
        from_dict({**json.loads(blob), "id": f"e-{seq}"})
    assert await broker.reap("s", "w1", "worker lost", 0.0) == 0, "closed once"
    # A reaper that died half-way is continued: claimed, not released, still lost.
    assert await broker.lost("w2") == ["w1"]
    assert await broker.claim("w1", force=False) == ["s"]
    await broker.release("w1")
    assert await broker.claim("w1", force=False) is None, "reaped already"
    assert await broker.lost("w2") == []
    # What the lost writer sends for its closed calls and run afterwards is dropped; the
    # other writer's call of the same id is its own.
    late = await broker.append(
        "s",
        "w1",
        [
            rec("t", 30, call_id="a"),
            rec("-", 31, call_id="b"),
            rec("f", 32, run_id="r1"),
            rec("-", 33),
            rec("r", 34, run_id="r1"),
        ],
    )
    assert late.codes == [2, 2, 2, 0, 0]
    assert (await broker.append("s", "w2", [rec("t", 40, call_id="a")])).codes == [0]
    assert await broker.reap("s", "w2", "worker stopped", 5.0) == 0, "w2 closed its call"


async def test_claim_force_and_dropped_leases() -> None:
    broker = MemoryBroker()
    await broker.hold("w1", ["s", "t"], 60.0)
    await broker.hold("w1", ["t", "u"], 60.0)
    assert await broker.lost("w2") == []
    await broker.drop_lease("w1")  # it stops writing: others see it lost
    assert await broker.lost("w2") == ["w1"]
    await broker.hold("w3", [], 60.0)
    assert await broker.claim("w3", force=True) == [], "force: even if its lease is held"
    assert await broker.lost("w2") == ["w1", "w3"], "claimed, not released: still lost"
    await broker.release("w3")
    assert await broker.claim("w1", force=False) == ["s", "t", "u"]
    await broker.release("w1")
    assert await broker.claim("w1", force=True) is None
    # A reaped writer that comes back holds a lease again, and can be lost again.
    await broker.hold("w1", ["v"], 60.0)
    assert await broker.lost("w2") == []
    assert await broker.claim("w1", force=True) == ["v"]


async def test_a_lost_writer_is_reaped_exactly_once_among_concurrent_reapers() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock)
    await broker.hold("w1", ["s1", "s2"], 1.0)
    for session in ("s1", "s2"):
        await broker.append(session, "w1", [rec("o", 1, call_id="c", session=session)])
    clock.now += 2

    async def reaper(name: str) -> int:
        n = 0
        for writer in await broker.lost(name):
            sessions = await broker.claim(writer, force=False)
            if sessions is None:
                continue
            for session in sessions:
                n += await broker.reap(session, writer, "worker lost", 0.0)
            await broker.release(writer)
        return n

    counts = await asyncio.gather(*(reaper(f"g{i}") for i in range(5)))
    assert sum(counts) == 2, counts
    for session in ("s1", "s2"):
        types = [b.get("type") for b in blobs((await broker.read_state(session)).events)]
        assert types.count("tool.cancelled") == 1


# -- checkpoints -----------------------------------------------------------------------------


async def test_a_checkpoint_deletes_what_it_covers_and_sets_the_floor() -> None:
    broker = MemoryBroker(wall=lambda: 0.0)
    await broker.append("s", "w", [rec("-", seq) for seq in (100, 200, 300, 400)])
    await broker.checkpoint("s", 250, '{"ck":250}')
    state = await broker.read_state("s")
    assert state.checkpoint == (250, '{"ck":250}')
    assert state.floor == 250 and state.last == 400
    assert [seq for seq, _ in state.events] == [300, 400]
    await broker.checkpoint("s", 200, '{"ck":200}')  # older: ignored, nothing deleted
    assert (await broker.read_state("s")).checkpoint == (250, '{"ck":250}')
    await broker.checkpoint("s", 400, '{"ck":400}')
    state = await broker.read_state("s")
    assert (state.floor, state.last, state.events) == (400, 400, []), "last is never lowered"
    # The deleted floor counts when above the checkpoint (never, from the bus; exact all
    # the same) and the next write goes on after ``last``.
    assert (await broker.append("s", "w2", [rec("-", 50)])).renumbered == [401]
    chunk = await broker.reader("s").read(0, 10)
    assert (chunk.checkpoint, [seq for seq, _ in chunk.events]) == (400, [401])


async def test_read_state_up_to_a_seq_and_reads_after_a_cursor() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w", [rec("-", seq) for seq in range(10, 101, 10)])
    await broker.checkpoint("s", 30, "{}")
    assert [seq for seq, _ in (await broker.read_state("s", upto=60)).events] == [40, 50, 60]
    assert (await broker.read_state("s", upto=30)).events == []
    assert (await broker.read_state("s", upto=20)).events == []
    assert [seq for seq, _ in broker.read_state_sync("s").events] == list(range(40, 101, 10))
    reader = broker.reader("s")
    chunk = await reader.read(55, 3)
    assert [seq for seq, _ in chunk.events] == [60, 70, 80] and chunk.checkpoint == 30
    assert [seq for seq, _ in (await reader.read(0, 2)).events] == [40, 50]
    assert (await reader.read(100, 10)).events == []
    await reader.aclose()


async def test_trim_due_keeps_history_by_count() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w", [rec("-", 1)])
    assert await broker.trim_due(time.time() + 10**6) == []


async def test_idle_sessions_expire_and_come_back_with_a_new_incarnation() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock, session_ttl=10.0)
    old = await broker.append("old", "w", [rec("-", 5)])
    clock.now += 6
    await broker.append("busy", "w", [rec("-", 6, session="busy")])
    await broker.checkpoint("ck", 3, "{}")
    clock.now += 6
    assert await broker.expire(0.0) == 1, "only 'old' was idle 10 seconds"
    assert (await broker.read_state("old")).incarnation == ""
    again = await broker.append("old", "w", [rec("-", 5)])
    assert again.codes == [0], "its high-water marks went with it"
    assert again.incarnation != old.incarnation
    clock.now += 5  # "busy" and "ck" idle 11 seconds, "old" written 5 seconds ago
    assert await broker.expire(0.0) == 2
    assert (await broker.read_state("old")).incarnation == again.incarnation


# -- approvals -------------------------------------------------------------------------------


async def test_an_approval_is_requested_once_and_found_in_its_session_only() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w1", [rec("A", 1, call_id="c", approval_id="a", meta=meta())])
    # Another writer's request of the same approval does not replace its meta.
    await broker.append("s", "w2", [rec("A", 2, approval_id="a", meta=meta(writer="w2"))])
    state = await broker.approval("s", "a")
    assert state is not None and (state.status, state.decision) == ("p", None)
    assert state.meta == meta()
    assert broker.approval_sync("s", "a") == state
    assert await broker.approval("other", "a") is None
    assert await broker.approval("s", "nope") is None
    # Filed under a session its meta does not name: nobody's.
    await broker.append("x", "w1", [rec("A", 3, approval_id="b", meta=meta("y"), session="x")])
    assert await broker.approval("x", "b") is None
    assert (await broker.resolve("x", Decide("b", 0.0, False, variants()))).outcome == "notfound"
    assert (await broker.resolve("s", Decide("zz", 0.0, False, variants()))).outcome == "notfound"
    assert (await broker.resolve("q", Decide("a", 0.0, False, variants()))).outcome == "notfound"


async def test_resolve_outcomes() -> None:
    broker = MemoryBroker(wall=lambda: 10.0)
    ask = [
        rec("o", 1, call_id="c1"),
        rec("A", 2, call_id="c1", approval_id="a1", meta=meta(call_id="c1", exp=50.0)),
        rec("o", 3, call_id="c2"),
        rec("A", 4, call_id="c2", approval_id="a2", meta=meta(call_id="c2", exp=50.0)),
        rec("o", 5, call_id="c3"),
        rec("A", 6, call_id="c3", approval_id="a3", meta=meta(call_id="c3", exp=50.0)),
    ]
    await broker.append("s", "w1", ask)
    # A decision before the expiry wins: its resolution, no denial.
    ok = await broker.resolve("s", Decide("a1", 10.0, False, variants()))
    assert (ok.outcome, ok.blob, ok.seq) == ("ok", '{"res":"decision"}', 10_000 * SCALE)
    state = await broker.approval("s", "a1")
    assert state is not None and state.status == "r"
    assert state.decision == {"approved": True, "by": "ops"}
    # Decided before: the winner's resolution, nothing written.
    late = broker.resolve_sync("s", Decide("a1", 60.0, True, variants("-late")))
    assert (late.outcome, late.blob, late.seq) == ("resolved", ok.blob, ok.seq)
    # A decision at the expiry: the expiry is written, its denial ends the call.
    expired = await broker.resolve("s", Decide("a2", 50.0, False, variants()))
    assert (expired.outcome, expired.blob) == ("expired", '{"res":"expiry"}')
    decided = await broker.approval("s", "a2")
    assert decided is not None and decided.decision == {"approved": False, "by": "timeout"}
    # The expiry timer past the expiry is "ok" (it is the decision).
    timer = await broker.resolve("s", Decide("a3", 99.0, True, variants()))
    assert (timer.outcome, timer.blob) == ("ok", '{"res":"decision"}')
    assert blobs((await broker.read_state("s")).events)[6:] == [
        {"res": "decision"},
        {"res": "expiry"},
        {"den": "expiry"},
        {"res": "decision"},
    ]
    # The denial fenced c2 and closed it under w1: the writer's own terminal is
    # dropped, and a reaper has nothing of it to close.
    assert (await broker.append("s", "w1", [rec("t", 20, call_id="c2")])).codes == [2]
    assert await broker.reap("s", "w1", "worker lost", 0.0) == 2  # c1 and c3, not c2


async def test_a_call_closed_by_a_reaper_resolves_as_cancelled() -> None:
    broker = MemoryBroker()
    await broker.append(
        "s",
        "w1",
        [rec("o", 1, call_id="c"), rec("A", 2, call_id="c", approval_id="a", meta=meta())],
    )
    await broker.claim("w1", force=True)
    assert await broker.reap("s", "w1", "worker lost", 0.0) == 1
    got = await broker.resolve("s", Decide("a", 1.0, False, variants()))
    assert (got.outcome, got.blob) == ("resolved", '{"res":"cancel"}')
    state = await broker.approval("s", "a")
    assert state is not None and state.decision == {"approved": False, "by": "cancelled"}
    assert blobs((await broker.read_state("s")).events)[-2:] == [
        {"res": "cancel"},
        {"den": "cancel"},
    ]


async def test_a_tracker_resolving_its_own_approval_wins_only_while_pending() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w1", [rec("A", 1, call_id="c", approval_id="a", meta=meta())])
    withdrawn = await broker.append("s", "w1", [rec("R", 2, call_id="c", approval_id="a")])
    assert withdrawn.codes == [0]
    state = await broker.approval("s", "a")
    assert state is not None and state.status == "r"
    assert state.decision == {"approved": False, "by": "cancelled"}
    got = await broker.resolve("s", Decide("a", 0.0, False, variants()))
    assert (got.outcome, got.blob, got.seq) == ("resolved", '{"n": 2}', 2)
    # A second withdrawal, or one after a decision, is dropped.
    assert (await broker.append("s", "w1", [rec("R", 3, approval_id="a")])).codes == [2]
    await broker.append("s", "w1", [rec("A", 4, call_id="d", approval_id="b", meta=meta())])
    await broker.resolve("s", Decide("b", 0.0, False, variants()))
    assert (await broker.append("s", "w1", [rec("R", 9, approval_id="b")])).codes == [2]


async def test_concurrent_resolves_from_threads_and_tasks_have_one_winner() -> None:
    broker = MemoryBroker()
    lock = threading.Lock()
    for round_ in range(20):
        aid = f"a{round_}"
        await broker.append(
            "s", "w1", [rec("A", round_ + 1, call_id=f"c{round_}", approval_id=aid, meta=meta())]
        )
        results: list[str] = []

        def decide(tag: str, aid: str = aid, results: list[str] = results) -> None:
            got = broker.resolve_sync("s", Decide(aid, 0.0, False, variants(tag)))
            with lock:
                results.append(got.outcome + ":" + got.blob)

        async def decide_async(tag: str, aid: str = aid, results: list[str] = results) -> None:
            got = await broker.resolve("s", Decide(aid, 0.0, False, variants(tag)))
            with lock:
                results.append(got.outcome + ":" + got.blob)

        threads = [threading.Thread(target=decide, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        await asyncio.gather(*(decide_async(f"a{i}") for i in range(4)))
        for thread in threads:
            thread.join()
        winners = [r for r in results if r.startswith("ok:")]
        assert len(winners) == 1, results
        winner = winners[0].removeprefix("ok:")
        assert sorted(results) == sorted([f"ok:{winner}"] + [f"resolved:{winner}"] * 7)
    resolutions = [b for b in blobs((await broker.read_state("s")).events) if "res" in b]
    assert len(resolutions) == 20


async def test_wait_approval_returns_when_resolved_from_another_thread() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w1", [rec("A", 1, approval_id="a", meta=meta())])
    started = time.monotonic()
    await broker.wait_approval("s", "a", 0.05)  # pending: waits the timeout out
    assert time.monotonic() - started >= 0.04
    timer = threading.Timer(0.1, broker.resolve_sync, ("s", Decide("a", 0.0, False, variants())))
    timer.start()
    started = time.monotonic()
    await broker.wait_approval("s", "a", 10.0)
    assert time.monotonic() - started < 5
    timer.join()
    started = time.monotonic()
    await broker.wait_approval("s", "a", 10.0)  # resolved: at once
    assert time.monotonic() - started < 1


# -- readers, threads, loops -----------------------------------------------------------------


async def test_a_reader_waits_until_an_append_wakes_it() -> None:
    broker = MemoryBroker()
    reader = broker.reader("s")
    started = time.monotonic()
    await reader.wait(0, 0.05)  # nothing: the timeout
    assert time.monotonic() - started >= 0.04
    waiting = asyncio.get_running_loop().create_task(reader.wait(0, 10.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await broker.append("s", "w", [rec("-", 7)])
    await asyncio.wait_for(waiting, 5)
    started = time.monotonic()
    await reader.wait(0, 10.0)  # an event after 0 exists: at once
    await reader.wait(6, 10.0)
    assert time.monotonic() - started < 1
    # A reap and a resolution wake it too.
    waiting = asyncio.get_running_loop().create_task(reader.wait(7, 10.0))
    await asyncio.sleep(0.01)
    await broker.append("other", "w", [rec("-", 8, session="other")])  # not its session
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await broker.append("s", "w", [rec("o", 9, call_id="c")])
    await asyncio.wait_for(waiting, 5)
    waiting = asyncio.get_running_loop().create_task(reader.wait(9, 10.0))
    await asyncio.sleep(0.01)
    await broker.reap("s", "w", "worker lost", 0.0)
    await asyncio.wait_for(waiting, 5)


async def test_writers_in_two_threads_loops_and_a_reader_in_a_third() -> None:
    broker = MemoryBroker()
    per_writer = 300
    codes: dict[str, list[int]] = {}

    def writer(token: str, base: int) -> None:
        async def main() -> None:
            mine: list[int] = []
            for i in range(per_writer):
                got = await broker.append("s", token, [rec("-", base + i)])
                mine += got.codes
            codes[token] = mine

        asyncio.run(main())

    reader = broker.reader("s")
    seen: list[int] = []

    async def read_all() -> None:
        after = 0
        while len(seen) < 2 * per_writer:
            chunk = await reader.read(after, 50)
            if not chunk.events:
                await reader.wait(after, 5.0)
                continue
            seen.extend(seq for seq, _ in chunk.events)
            after = chunk.events[-1][0]

    threads = [
        threading.Thread(target=writer, args=("w1", 1000)),
        threading.Thread(target=writer, args=("w2", 1100)),
    ]
    for thread in threads:
        thread.start()
    await asyncio.wait_for(read_all(), 20)
    for thread in threads:
        thread.join()
    assert len(seen) == len(set(seen)) == 2 * per_writer
    assert seen == sorted(seen)
    assert set(codes["w1"] + codes["w2"]) <= {0, 3}
    assert len((await broker.read_state("s")).events) == 2 * per_writer


# -- the test hooks --------------------------------------------------------------------------


async def test_down_refuses_every_operation_until_up() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w", [rec("A", 1, approval_id="a", meta=meta())])
    reader = broker.reader("s")
    waiting = asyncio.get_running_loop().create_task(reader.wait(1, 10.0))
    approval = asyncio.get_running_loop().create_task(broker.wait_approval("s", "a", 10.0))
    await asyncio.sleep(0.01)
    broker.down()
    await asyncio.wait_for(asyncio.gather(waiting, approval), 5)  # woken: they read next
    refused = [
        broker.epoch(),
        broker.append("s", "w", [rec("-", 2)]),
        broker.read_state("s"),
        broker.checkpoint("s", 1, "{}"),
        reader.read(0, 10),
        reader.wait(0, 1.0),
        broker.hold("w", [], 1.0),
        broker.lost("w"),
        broker.claim("w", force=True),
        broker.reap("s", "w", "x", 0.0),
        broker.release("w"),
        broker.drop_lease("w"),
        broker.trim_due(0.0),
        broker.expire(0.0),
        broker.approval("s", "a"),
        broker.resolve("s", Decide("a", 0.0, False, variants())),
        broker.wait_approval("s", "a", 1.0),
    ]
    for step in refused:
        with pytest.raises(BrokerDown):
            await step
    for call in (
        lambda: broker.open(1.0),
        lambda: broker.read_state_sync("s"),
        lambda: broker.approval_sync("s", "a"),
        lambda: broker.resolve_sync("s", Decide("a", 0.0, False, variants())),
    ):
        with pytest.raises(BrokerDown):
            call()
    broker.up()
    assert [seq for seq, _ in (await reader.read(0, 10)).events] == [1], "its data intact"
    assert broker.open(1.0) == await broker.epoch()


async def test_lose_data_is_a_broker_restarted_empty() -> None:
    broker = MemoryBroker()
    epoch = broker.open(1.0)
    await broker.hold("w", ["s"], 60.0)
    first = await broker.append("s", "w", [rec("-", 1)])
    waiting = asyncio.get_running_loop().create_task(broker.reader("s").wait(5, 10.0))
    await asyncio.sleep(0.01)
    broker.lose_data()
    await asyncio.wait_for(waiting, 5)
    assert await broker.epoch() != epoch
    assert broker.open(1.0) == await broker.epoch()
    assert (await broker.read_state("s")).incarnation == ""
    assert await broker.claim("w", force=True) is None, "no writer is known"
    again = await broker.append("s", "w", [rec("-", 1)])
    assert again.codes == [0] and again.incarnation != first.incarnation


async def test_a_stalled_writer_waits_while_others_go_on() -> None:
    broker = MemoryBroker(wall=lambda: 0.0)
    with broker.stall("append", "w1"):
        stalled = asyncio.get_running_loop().create_task(broker.append("s", "w1", [rec("-", 1)]))
        assert (await broker.append("s", "w2", [rec("-", 5)])).codes == [0]
        await asyncio.sleep(0.05)
        assert not stalled.done()
    got = await asyncio.wait_for(stalled, 5)
    assert got.codes == [3] and got.renumbered == [6], "it landed after w2's"


async def test_a_stalled_lease_runs_out() -> None:
    clock = Clock()
    broker = MemoryBroker(clock=clock)
    await broker.hold("w1", ["s"], 1.0)
    with broker.stall("hold", "w1"):
        renewal = asyncio.get_running_loop().create_task(broker.hold("w1", ["s"], 1.0))
        await broker.hold("w2", ["s"], 1.0)
        clock.now += 1.5
        assert await broker.lost("w2") == ["w1"]
        assert not renewal.done()
    await asyncio.wait_for(renewal, 5)


async def test_stalled_reads_across_threads_and_stall_names() -> None:
    broker = MemoryBroker()
    await broker.append("s", "w", [rec("-", 1)])
    stall = broker.stall("read")
    stall.__enter__()
    try:
        reading = asyncio.get_running_loop().create_task(broker.reader("s").read(0, 10))
        done = threading.Event()

        def snapshot() -> None:
            with broker.stall("read_state_sync"):
                pass
            broker.read_state_sync("s")
            done.set()

        thread = threading.Thread(target=snapshot)
        thread.start()
        await asyncio.sleep(0.05)
        assert not reading.done()
        assert (await broker.read_state("s")).events, "other operations go on"
    finally:
        # Ended from another thread: the stalled read wakes in its own loop.
        ender = threading.Thread(target=stall.__exit__, args=(None, None, None))
        ender.start()
        ender.join()
    chunk = await asyncio.wait_for(reading, 5)
    assert [seq for seq, _ in chunk.events] == [1]
    thread.join()
    assert done.is_set()
    with pytest.raises(ValueError, match="no operation"):
        broker.stall("apend").__enter__()


def test_a_stalled_sync_operation_blocks_its_thread() -> None:
    broker = MemoryBroker()
    got: list[object] = []
    with broker.stall("approval_sync"):
        thread = threading.Thread(target=lambda: got.append(broker.approval_sync("s", "a")))
        thread.start()
        thread.join(0.1)
        assert thread.is_alive() and got == []
    thread.join(5)
    assert got == [None]


async def test_after_runs_between_an_operation_and_its_caller() -> None:
    """``after(op, callback)``: the callback gets the result of each call once its atomic
    step is done, and what it does happens before the caller sees that result (here, a
    request written right after a read that missed it)."""
    broker = MemoryBroker()
    seen: list[object] = []

    async def write_now(got: object) -> None:
        seen.append(got)
        if len(seen) == 1:
            await broker.append("s", "w", [rec("A", 1, approval_id="a", meta=meta())])

    with broker.after("approval", write_now):
        assert await broker.approval("s", "a") is None, "the read before the write"
        again = await broker.approval("s", "a")
    assert again is not None and again.status == "p"
    assert seen == [None, again]
    assert await broker.approval("s", "a") == again and len(seen) == 2, "the block ended"
    # A synchronous operation takes a synchronous callback only.
    got: list[object] = []
    with broker.after("approval_sync", got.append):
        assert broker.approval_sync("s", "a") == again
    assert got == [again]
    with broker.after("approval_sync", write_now), pytest.raises(TypeError, match="synchronous"):
        broker.approval_sync("s", "a")
    # Not run when the operation raises; unknown operations are refused.
    broker.down()
    with broker.after("epoch", got.append), pytest.raises(BrokerDown):
        await broker.epoch()
    broker.up()
    assert got == [again]
    with pytest.raises(ValueError, match="no operation"):
        broker.after("apend", got.append).__enter__()
