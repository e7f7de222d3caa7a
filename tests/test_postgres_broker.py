"""PostgresBroker, the driver of PostgresBus, against a real PostgreSQL server the tests
start: each operation of the driver protocol on its own (tests/test_postgres_bus.py runs
the bus over it)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import toolstream as ts
from tests.postgres_server import PostgresServer
from tests.servers import eventually
from toolstream._core.codec import from_dict
from toolstream._core.driver import Broker, BrokerReader, Decide, Record, RecordKind, Variant
from toolstream._core.outbox import Refused
from toolstream.postgres import PostgresBroker

pytestmark = pytest.mark.timeout(60)

SCALE = 1_000_000


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async connections run on asyncio; the bus is asyncio-only.
    return "asyncio"


def make_broker(server: PostgresServer, **options: Any) -> PostgresBroker:
    options.setdefault("prefix", f"t{uuid.uuid4().hex[:10]}")
    broker = PostgresBroker(server.dsn, **options)
    broker.open(5.0)
    return broker


@pytest.fixture
async def broker(postgres_server: PostgresServer) -> AsyncIterator[PostgresBroker]:
    made = make_broker(postgres_server)
    await made.start()
    yield made
    await made.aclose()


def rec(
    kind: RecordKind,
    seq: int,
    *,
    call_id: str = "",
    run_id: str = "",
    tool: str = "",
    approval_id: str = "",
    meta: dict[str, Any] | None = None,
    blob: str | None = None,
) -> Record:
    event = ts.ToolProgress(id=f"e-{seq}", session="s", ts=1.0, call_id=call_id, tool=tool)
    return Record(
        kind=kind,
        seq=seq,
        event=event,
        blob=blob if blob is not None else json.dumps({"n": seq, "call_id": call_id}),
        call_id=call_id,
        run_id=run_id,
        tool=tool,
        approval_id=approval_id,
        meta=meta,
    )


def types_of(events: list[tuple[int, str | bytes]]) -> list[str]:
    return [json.loads(blob).get("type", "") for _, blob in events]


def test_the_broker_implements_the_protocol(postgres_server: PostgresServer) -> None:
    broker = PostgresBroker(postgres_server.dsn)
    assert isinstance(broker, Broker)
    assert isinstance(broker.reader("s"), BrokerReader)
    assert broker.name == "PostgresBus"
    assert broker.where == f"PostgreSQL at 127.0.0.1:{postgres_server.port}/postgres"


def test_bad_arguments_are_clear(postgres_server: PostgresServer) -> None:
    for prefix in ("", "1abc", "a-b", "a b", "x" * 33, 'a"b', None):
        with pytest.raises(ValueError, match="prefix"):
            PostgresBroker(postgres_server.dsn, prefix=prefix)  # type: ignore[arg-type]
    PostgresBroker(postgres_server.dsn, prefix="A" + "b_9" * 10 + "c")  # 32: fine
    with pytest.raises(ValueError, match="retention"):
        PostgresBroker(postgres_server.dsn, retention=0)
    with pytest.raises(ValueError, match="connection string"):
        PostgresBroker("host=x port")


def test_the_password_is_never_shown() -> None:
    broker = PostgresBroker("postgresql://me:hunter2@db.example:6543/app")
    assert broker.where == "PostgreSQL at db.example:6543/app"
    assert "hunter2" not in repr(broker)


def test_unreachable_is_retryable() -> None:
    from tests.redis_server import free_port

    broker = PostgresBroker(f"postgresql://me:hunter2@127.0.0.1:{free_port()}/x")
    with pytest.raises(broker.retryable) as info:
        broker.open(0.5)
    assert "hunter2" not in str(info.value)


def test_open_twice_keeps_the_epoch_and_two_processes_create_once(
    postgres_server: PostgresServer,
) -> None:
    """Several processes starting at once on an empty database: the tables are created
    once (an advisory lock), and every one learns the same epoch."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    brokers = [PostgresBroker(postgres_server.dsn, prefix=prefix) for _ in range(6)]
    barrier = threading.Barrier(len(brokers))

    def start(b: PostgresBroker) -> str:
        barrier.wait()
        return b.open(5.0)

    with ThreadPoolExecutor(len(brokers)) as pool:
        epochs = list(pool.map(start, brokers))
    assert len(set(epochs)) == 1
    assert brokers[0].open(5.0) == epochs[0]


async def test_append_codes_duplicates_and_renumbering(broker: PostgresBroker) -> None:
    ahead = 4_000_000_000_000 * SCALE  # a writer whose clock is far ahead (2096)
    first = await broker.append("s", "w1", [rec("-", ahead + 10), rec("-", ahead + 11)])
    assert first.codes == [0, 0] and first.renumbered == []
    assert first.incarnation
    # A retried batch (its reply lost): recognised, not written twice.
    again = await broker.append(
        "s", "w1", [rec("-", ahead + 10), rec("-", ahead + 11), rec("-", ahead + 12)]
    )
    assert again.codes == [1, 1, 0]
    assert again.incarnation == first.incarnation
    # Another writer whose clock is behind: written after, renumbered, in order.
    behind = await broker.append("s", "w2", [rec("-", 5), rec("-", 20)])
    assert behind.codes == [3, 3] and behind.renumbered == [ahead + 13, ahead + 14]
    # Its high-water mark is in its own numbering: 20 is a duplicate now, 21 is not.
    more = await broker.append("s", "w2", [rec("-", 20), rec("-", 21)])
    assert more.codes == [1, 3] and more.renumbered == [ahead + 15]
    state = await broker.read_state("s")
    assert [seq - ahead for seq, _ in state.events] == [10, 11, 12, 13, 14, 15]
    assert state.last == ahead + 15 and state.floor == 0 and state.checkpoint is None
    assert state.incarnation == first.incarnation
    assert [json.loads(b)["n"] - ahead for _, b in state.events][:3] == [10, 11, 12]
    assert [json.loads(b)["n"] for _, b in state.events][3:] == [5, 20, 21]
    # Renumbered on a quiet session, a seq follows the database's clock (Redis's XADD *):
    # a subscription starting "live" now does not start after it.
    await broker.append("q", "w1", [rec("-", 10)])
    before = int(time.time() * 1000) * SCALE
    moved = await broker.append("q", "w2", [rec("-", 3)])
    assert moved.renumbered[0] >= before - 1000 * SCALE  # (one host: clocks agree)
    other = await broker.read_state("never-written")
    assert (other.incarnation, other.last, other.events) == ("", 0, [])


async def test_reads_after_a_cursor_and_up_to(broker: PostgresBroker) -> None:
    await broker.append("s", "w", [rec("-", n) for n in range(1, 8)])
    reader = broker.reader("s")
    try:
        chunk = await reader.read(2, 3)
        assert [seq for seq, _ in chunk.events] == [3, 4, 5]
        assert chunk.checkpoint == 0 and chunk.incarnation
        assert (await reader.read(7, 10)).events == []
    finally:
        await reader.aclose()
    upto = await broker.read_state("s", upto=4)
    assert [seq for seq, _ in upto.events] == [1, 2, 3, 4] and upto.last == 7
    empty = broker.reader("nothing")
    assert await empty.read(0, 10) == type(chunk)("", 0, [])
    await empty.aclose()


async def test_checkpoint_deletes_what_it_covers(broker: PostgresBroker) -> None:
    await broker.append("s", "w", [rec("-", n) for n in range(1, 11)])
    await broker.checkpoint("s", 4, '{"type":"stream.reset","at":4}')
    state = await broker.read_state("s")
    assert state.checkpoint == (4, '{"type":"stream.reset","at":4}')
    assert state.floor == 4 and state.last == 10
    assert [seq for seq, _ in state.events] == [5, 6, 7, 8, 9, 10]
    await broker.checkpoint("s", 3, "older")  # not newer than the stored one: ignored
    assert (await broker.read_state("s")).checkpoint == (4, '{"type":"stream.reset","at":4}')
    reader = broker.reader("s")
    chunk = await reader.read(0, 100)  # a cursor below the checkpoint: it missed some
    assert chunk.checkpoint == 4 and chunk.events[0][0] == 5
    await reader.aclose()
    await broker.checkpoint("s", 10, "all")
    state = broker.read_state_sync("s")
    assert state.events == [] and state.floor == 10 and state.last == 10
    # Deletion never lowers the last seq: the next write goes after it.
    assert (await broker.append("s", "w2", [rec("-", 3)])).renumbered[0] > 10
    await broker.checkpoint("unknown", 5, "x")  # no session: nothing is created
    assert (await broker.read_state("unknown")).checkpoint is None


async def test_open_calls_are_reaped_once_and_fenced(broker: PostgresBroker) -> None:
    await broker.append(
        "s",
        "w",
        [
            rec("r", 1, run_id="r1"),
            rec("o", 2, call_id="a", tool="search", run_id="r1"),
            rec("o", 3, call_id="b", tool="fetch", run_id="r1"),
            rec("t", 4, call_id="b", tool="fetch"),
            rec("o", 5, call_id="c", tool="x"),
            rec("t", 6, call_id="c"),
            rec("o", 7, call_id="c", tool="again"),  # reopened after its end: open
        ],
    )
    await broker.append("s", "other", [rec("o", 8, call_id="z", tool="t")])
    now = time.time()
    assert await broker.reap("s", "w", "worker lost", now) == 3
    assert await broker.reap("s", "w", "worker lost", now) == 0, "once"
    state = await broker.read_state("s")
    written = [json.loads(b) for seq, b in state.events if seq > 8]
    assert [(e["type"], e.get("call_id")) for e in written] == [
        ("tool.cancelled", "a"),
        ("tool.cancelled", "c"),
        ("run.finished", ""),
    ]
    assert written[0]["tool"] == "search" and written[0]["run_id"] == "r1"
    assert written[0]["reason"] == "worker lost" and written[0]["ts"] == now
    assert written[1]["tool"] == "again" and "run_id" not in written[1]
    assert written[2]["outcome"] == "cancelled" and written[2]["run_id"] == "r1"
    assert written[2]["error"] == {"type": "WorkerLost", "message": "worker lost"}
    from_dict({**written[2], "id": "e-1"})  # a valid event
    seqs = [seq for seq, _ in state.events]
    assert seqs == sorted(seqs) and seqs[-3] >= int(now * 1000) * SCALE
    # What the lost writer sends later for its fenced calls and run is dropped; the
    # other writer's call and new calls are not.
    late = await broker.append(
        "s",
        "w",
        [
            rec("-", 20, call_id="a"),
            rec("t", 21, call_id="c"),
            rec("f", 22, run_id="r1"),
            rec("o", 23, call_id="new", tool="t"),
        ],
    )
    assert late.codes == [2, 2, 2, 3]
    assert await broker.reap("s", "other", "worker lost", now) == 1
    assert await broker.reap("nowhere", "w", "worker lost", now) == 0


async def test_leases_claims_and_release(
    broker: PostgresBroker, postgres_server: PostgresServer
) -> None:
    other = PostgresBroker(postgres_server.dsn, prefix=broker.prefix)
    try:
        await broker.hold("w1", ["s1", "s2"], 0.5)
        await broker.hold("w2", ["s3"], 30)
        assert await broker.lost("me") == []
        assert await broker.claim("w1", force=False) is None, "its lease is held"
        await asyncio.sleep(0.7)
        assert await broker.lost("me") == ["w1"]
        assert await broker.lost("w1") == [], "never itself"
        # Two reapers at once: both may go on (a reaper dying half-way is continued
        # by another); each session's reaping closes what is open once.
        await broker.append("s1", "w1", [rec("o", 1, call_id="c", tool="t")])
        claims = await asyncio.gather(
            broker.claim("w1", force=False), other.claim("w1", force=False)
        )
        assert list(claims) == [["s1", "s2"], ["s1", "s2"]]
        assert await broker.lost("me") == ["w1"], "claimed, not finished: still listed"
        reaped = await asyncio.gather(
            *(
                b.reap(s, "w1", "worker lost", time.time())
                for b in (broker, other)
                for s in ("s1", "s2")
            )
        )
        assert sum(reaped) == 1
        await broker.release("w1")
        assert await broker.lost("me") == []
        assert await broker.claim("w1", force=True) is None, "reaped already"
        # A writer stopping: its lease dropped, then claimed by force.
        await broker.drop_lease("w2")
        assert await broker.lost("me") == ["w2"]
        assert await broker.claim("w2", force=True) == ["s3"]
        await broker.release("w2")
        assert await broker.claim("never", force=True) is None
        # A writer filed again after its reaping (it came back) is reaped again.
        await broker.hold("w1", ["s9"], 30)
        assert await broker.claim("w1", force=True) == ["s9"]
    finally:
        await other.aclose()


async def test_approvals_decided_once(broker: PostgresBroker) -> None:
    meta: dict[str, Any] = {
        "s": "s",
        "exp": None,
        "running": False,
        "cid": "c1",
        "env": [None, "c1", "t", None],
    }
    asked = await broker.append(
        "s",
        "w",
        [
            rec("o", 1, call_id="c1", tool="t"),
            rec("A", 2, call_id="c1", approval_id="ap1", meta={**meta, "w": "w"}),
            rec("A", 3, call_id="c1", approval_id="ap1", meta={"other": True}),  # known
        ],
    )
    assert asked.codes == [0, 0, 0]
    state = await broker.approval("s", "ap1")
    assert state is not None and state.status == "p" and state.decision is None
    assert state.meta == {**meta, "w": "w"}
    assert broker.approval_sync("s", "ap1") == state
    assert await broker.approval("other-session", "ap1") is None
    assert await broker.approval("s", "nope") is None

    decide: Variant = ('{"type":"tool.approval.resolved","by":"alice"}', '{"by":"alice"}', None)
    expire: Variant = ('{"type":"tool.approval.resolved","by":"timeout"}', '{"by":"t"}', None)
    cancel: Variant = ('{"type":"tool.approval.resolved","by":"cancelled"}', '{"by":"c"}', None)
    won = await broker.resolve("s", Decide("ap1", time.time(), False, [decide, expire, cancel]))
    assert won.outcome == "ok" and won.blob == decide[0] and won.seq > 3
    lost = await broker.resolve("s", Decide("ap1", time.time(), False, [cancel, expire, cancel]))
    assert (lost.outcome, lost.blob, lost.seq) == ("resolved", decide[0], won.seq)
    state = await broker.approval("s", "ap1")
    assert state is not None and state.status == "r" and state.decision == {"by": "alice"}
    # The tracker withdrawing it now: dropped (the first resolution won).
    late = await broker.append("s", "w", [rec("R", 10, call_id="c1", approval_id="ap1")])
    assert late.codes == [2]
    missing = await broker.resolve("s", Decide("zz", time.time(), False, [decide, expire, cancel]))
    assert (missing.outcome, missing.blob, missing.seq) == ("notfound", "", 0)
    assert (await broker.resolve("x", Decide("ap1", 0, False, [decide] * 3))).outcome == "notfound"


async def test_a_denial_ends_the_call_and_fences_it(broker: PostgresBroker) -> None:
    meta: dict[str, Any] = {
        "s": "s",
        "exp": None,
        "running": False,
        "cid": "c1",
        "env": [],
        "w": "w",
    }
    await broker.append(
        "s",
        "w",
        [
            rec("o", 1, call_id="c1", tool="t"),
            rec("A", 2, call_id="c1", approval_id="ap", meta=meta),
        ],
    )
    deny: Variant = ('{"type":"tool.approval.resolved"}', '{"approved":false}', '{"type":"d"}')
    res = await broker.resolve("s", Decide("ap", time.time(), False, [deny, deny, deny]))
    assert res.outcome == "ok"
    state = await broker.read_state("s")
    assert [seq for seq, _ in state.events][-2:] == [res.seq, res.seq + 1]
    assert types_of(state.events)[-2:] == ["tool.approval.resolved", "d"]
    # The call is closed (nothing to reap) and fenced (its late events dropped).
    assert await broker.reap("s", "w", "worker lost", time.time()) == 0
    assert (await broker.append("s", "w", [rec("t", 3, call_id="c1")])).codes == [2]


async def test_expiry_and_a_call_closed_elsewhere(broker: PostgresBroker) -> None:
    def meta(cid: str, exp: float | None) -> dict[str, Any]:
        return {"s": "s", "exp": exp, "running": False, "cid": cid, "env": [], "w": "w"}

    now = time.time()
    await broker.append(
        "s",
        "w",
        [
            rec("o", 1, call_id="c1", tool="t"),
            rec("A", 2, call_id="c1", approval_id="a1", meta=meta("c1", now - 1)),
            rec("o", 3, call_id="c2", tool="t"),
            rec("A", 4, call_id="c2", approval_id="a2", meta=meta("c2", now - 1)),
            rec("o", 5, call_id="c3", tool="t"),
            rec("A", 6, call_id="c3", approval_id="a3", meta=meta("c3", None)),
        ],
    )
    variants: list[Variant] = [
        ("decided", "{}", None),
        ("expired", "{}", None),
        ("gone", "{}", None),
    ]
    assert (await broker.resolve("s", Decide("a1", now, False, variants))).outcome == "expired"
    assert (await broker.resolve("s", Decide("a1", now, False, variants))).blob == "expired"
    by_timer = await broker.resolve("s", Decide("a2", now, True, variants))
    assert (by_timer.outcome, by_timer.blob) == ("ok", "decided"), "the timer's own decision"
    assert await broker.reap("s", "w", "worker lost", now) == 3  # c3 is closed elsewhere
    gone = await broker.resolve("s", Decide("a3", now, False, variants))
    assert (gone.outcome, gone.blob) == ("resolved", "gone")


async def test_a_tracker_withdraws_its_own_approval(broker: PostgresBroker) -> None:
    meta: dict[str, Any] = {
        "s": "s",
        "exp": None,
        "running": False,
        "cid": "c",
        "env": [],
        "w": "w",
    }
    got = await broker.append(
        "s",
        "w",
        [
            rec("A", 1, call_id="c", approval_id="a", meta=meta),
            rec("R", 2, call_id="c", approval_id="a", blob='{"by":"cancelled"}'),
            rec("R", 3, call_id="c", approval_id="a"),  # a second withdrawal: dropped
        ],
    )
    assert got.codes == [0, 0, 2]
    state = await broker.approval("s", "a")
    assert state is not None and state.status == "r"
    assert state.decision == {"approved": False, "by": "cancelled"}
    variants: list[Variant] = [("x", "{}", None)] * 3
    late = await broker.resolve("s", Decide("a", time.time(), False, variants))
    assert (late.outcome, late.blob, late.seq) == ("resolved", '{"by":"cancelled"}', 2)
    # Requested in one batch, withdrawn in the next.
    await broker.append("s", "w", [rec("A", 4, call_id="d", approval_id="b", meta=meta)])
    assert (await broker.append("s", "w", [rec("R", 5, approval_id="b")])).codes == [0]
    state = await broker.approval("s", "b")
    assert state is not None and state.status == "r"


def test_one_winner_among_processes_deciding_at_once(postgres_server: PostgresServer) -> None:
    """Six brokers (each its own connections: what six processes have) decide the same
    approval at once, twenty times over: exactly one wins each time, the others get
    the winner's resolution."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    brokers = [make_broker(postgres_server, prefix=prefix) for _ in range(6)]
    meta: dict[str, Any] = {"s": "s", "exp": None, "running": False, "cid": "", "env": [], "w": "w"}

    async def ask(n: int) -> None:
        broker = PostgresBroker(postgres_server.dsn, prefix=prefix)
        await broker.append(
            "s",
            "w",
            [rec("A", n + 1, call_id=f"c{n}", approval_id=f"a{n}", meta={**meta, "cid": f"c{n}"})],
        )
        await broker.aclose()

    try:
        for n in range(20):
            asyncio.run(ask(n))
            barrier = threading.Barrier(len(brokers))

            def decide(i: int, n: int = n, barrier: threading.Barrier = barrier) -> Any:
                variants: list[Variant] = [(f"by{i}", "{}", None)] * 3
                barrier.wait()
                return brokers[i].resolve_sync("s", Decide(f"a{n}", time.time(), False, variants))

            with ThreadPoolExecutor(len(brokers)) as pool:
                results = list(pool.map(decide, range(len(brokers))))
            winners = [r for r in results if r.outcome == "ok"]
            assert len(winners) == 1, results
            assert all(
                r.outcome == "resolved" and r.blob == winners[0].blob
                for r in results
                if r.outcome != "ok"
            )
    finally:
        for b in brokers:
            asyncio.run(b.aclose())


async def test_readers_are_woken_by_another_process(
    broker: PostgresBroker, postgres_server: PostgresServer
) -> None:
    writer = make_broker(postgres_server, prefix=broker.prefix)
    readers = [broker.reader("s") for _ in range(50)]
    quiet = broker.reader("quiet")
    try:
        for r in readers:
            assert (await r.read(0, 10)).events == []
        await quiet.read(0, 10)
        await eventually(lambda: broker.listening)  # read again after its wake-up
        for r in [*readers, quiet]:
            await r.wait(0, 0.01)
            await r.read(0, 10)
        started = time.monotonic()

        async def write() -> None:
            await asyncio.sleep(0.2)
            await writer.append("s", "w", [rec("-", 1)])

        task = asyncio.create_task(write())
        await asyncio.gather(*(r.wait(0, 10) for r in readers))
        assert 0.15 < time.monotonic() - started < 5
        await task
        assert [len((await r.read(0, 10)).events) for r in readers] == [1] * 50
        started = time.monotonic()
        await quiet.wait(0, 0.3)  # another session's write does not wake it
        assert time.monotonic() - started >= 0.25
        # Written after a read began and before the wait: the wait returns at once.
        reader = readers[0]
        await reader.read(1, 10)
        await writer.append("s", "w", [rec("-", 2)])
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await reader.wait(1, 10)
        assert time.monotonic() - started < 1
    finally:
        for r in [*readers, quiet]:
            await r.aclose()
        await writer.aclose()
    assert broker._watches == {}, "closed readers are forgotten"


async def test_reads_share_a_small_pool(postgres_server: PostgresServer) -> None:
    broker = make_broker(postgres_server, pool=3)
    await broker.append("s", "w", [rec("-", 1)])
    readers = [broker.reader("s") for _ in range(200)]
    try:
        chunks = await asyncio.gather(*(r.read(0, 10) for r in readers))
        assert all(len(c.events) == 1 for c in chunks)
        assert broker._pool is not None and broker._pool._open <= 3
        # A read cancelled mid-statement does not poison the connection it used.
        for _ in range(20):
            task = asyncio.create_task(readers[0].read(0, 10))
            await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        chunks = await asyncio.gather(*(r.read(0, 10) for r in readers[:10]))
        assert all(len(c.events) == 1 for c in chunks)
    finally:
        for r in readers:
            await r.aclose()
        await broker.aclose()


async def test_wait_approval_is_woken_by_a_decision_elsewhere(
    broker: PostgresBroker, postgres_server: PostgresServer
) -> None:
    other = make_broker(postgres_server, prefix=broker.prefix)
    meta: dict[str, Any] = {
        "s": "s",
        "exp": None,
        "running": False,
        "cid": "c",
        "env": [],
        "w": "w",
    }
    await broker.append("s", "w", [rec("A", 1, call_id="c", approval_id="a", meta=meta)])
    try:
        await broker.wait_approval("s", "a", 0.01)  # starts the listener
        await eventually(lambda: broker.listening)  # read again after its wake-up
        started = time.monotonic()
        await broker.wait_approval("s", "a", 0.3)  # pending: waits out its timeout
        assert time.monotonic() - started >= 0.25

        async def decide() -> None:
            await asyncio.sleep(0.3)
            await other.resolve("s", Decide("a", time.time(), False, [("x", "{}", None)] * 3))

        task = asyncio.create_task(decide())
        started = time.monotonic()
        await broker.wait_approval("s", "a", 10)
        assert time.monotonic() - started < 5
        await task
        started = time.monotonic()
        await broker.wait_approval("s", "a", 10)  # resolved already: at once
        assert time.monotonic() - started < 1
    finally:
        await other.aclose()
    assert broker._approval_watches == {}


async def test_history_is_trimmed_by_time(postgres_server: PostgresServer) -> None:
    broker = make_broker(postgres_server, retention=0.5)
    other = make_broker(postgres_server, prefix=broker.prefix, retention=0.5)
    try:
        await broker.append("old", "w", [rec("-", n) for n in (1, 2, 3)])
        await broker.append("both", "w", [rec("-", 1)])
        await asyncio.sleep(0.6)
        await broker.append("both", "w", [rec("-", 2)])
        await broker.append("new", "w", [rec("-", 1)])
        due = await broker.trim_due(time.time())
        assert due == [("both", 1), ("old", 3)]
        assert await other.trim_due(time.time()) == [], "one process looked just now"
        for session, seq in due:
            await broker.checkpoint(session, seq, f"state of {session}")
        state = await broker.read_state("both")
        assert [s for s, _ in state.events] == [2] and state.floor == 1
        assert (await broker.read_state("old")).events == []
        await asyncio.sleep(0.6)
        assert await other.trim_due(time.time()) == [("both", 2), ("new", 1)]
        # Sessions not written to for the retention are deleted entirely.
        assert await broker.expire(time.time()) == 3
        assert (await broker.read_state("old")).incarnation == ""
        assert await broker.expire(time.time()) == 0
    finally:
        await broker.aclose()
        await other.aclose()


def test_a_nul_character_is_refused_not_retried(postgres_server: PostgresServer) -> None:
    async def main() -> None:
        broker = make_broker(postgres_server)
        try:
            with pytest.raises(Refused):
                await broker.append("s", "w", [rec("-", 1, blob="a\x00b")])
            assert (await broker.append("s", "w", [rec("-", 1)])).codes == [0]
        finally:
            await broker.aclose()

    asyncio.run(main())


async def test_a_restart_keeps_the_epoch_and_the_data(own_postgres: PostgresServer) -> None:
    broker = make_broker(own_postgres)
    epoch = await broker.epoch()
    written = await broker.append("s", "w", [rec("-", 1), rec("-", 2)])
    reader = broker.reader("s")
    await reader.read(2, 10)
    try:
        own_postgres.restart(kill=True)
        try:  # the pooled connection is dead: one failure drops every idle one
            await broker.epoch()
        except broker.retryable:
            pass
        assert await broker.epoch() == epoch
        state = await broker.read_state("s")
        assert state.incarnation == written.incarnation and state.last == 2
        # The listener reconnected (waking its readers), and wakes them again.
        await eventually(lambda: broker.listening)  # read again after its wake-up
        await reader.wait(2, 0.01)
        await reader.read(2, 10)
        other = make_broker(own_postgres, prefix=broker.prefix)
        task = asyncio.create_task(reader.wait(2, 10))
        await asyncio.sleep(0.1)
        await other.append("s", "w2", [rec("-", 3)])
        started = time.monotonic()
        await task
        assert time.monotonic() - started < 5
        assert [s for s, _ in (await reader.read(2, 10)).events] == [3]
        await other.aclose()
        # Down: a retryable error; the synchronous side too.
        own_postgres.stop()
        with pytest.raises(broker.retryable):
            await broker.read_state("s")
        with pytest.raises(broker.retryable):
            broker.read_state_sync("s")
        own_postgres.start()
        assert broker.read_state_sync("s").last == 3
    finally:
        await reader.aclose()
        await broker.aclose()


async def test_lost_tables_are_created_again_with_a_new_epoch(
    postgres_server: PostgresServer,
) -> None:
    import psycopg

    broker = make_broker(postgres_server)
    epoch = await broker.epoch()
    await broker.append("s", "w", [rec("-", 1)])
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        for table in ("meta", "sessions", "events"):
            conn.execute(f'DROP TABLE "{broker.prefix}_{table}"')
    try:
        with pytest.raises(broker.retryable):
            await broker.append("s", "w", [rec("-", 2)])
        fresh = await broker.epoch()
        assert fresh != epoch
        assert (await broker.append("s", "w", [rec("-", 2)])).codes == [0]
    finally:
        await broker.aclose()
