"""The benchmark scripts run (tiny sizes), so they cannot rot. Not a timing test."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_bus


def test_bus_benchmark_runs_and_reports() -> None:
    results = bench_bus.run(quick=True)
    report = bench_bus.report(results)
    assert len(results["fanout"]) == 8
    assert "Item by item" in report and "cost ratio" in report
    for row in results["fanout"]:
        assert row["vs_item"] > 0 and row["vs_drain"] > 0 and row["item_vs_drain"] > 0
        # the honest estimator: median of per-round ratios, ratio of medians, spread
        assert row["vs_item_min"] <= row["vs_item"] <= row["vs_item_max"]
        assert row["vs_item_of_medians"] > 0
    assert "item vs draining" in report


def test_one_suite_can_be_run_again_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """``--only`` runs the named suites and reports the others from results.json."""
    from benchmarks.__main__ import main

    assert main(["--quick", "--no-write", "--only", "callbacks"]) == 0
    out = capsys.readouterr().out
    assert "CallbackSink vs pyee" in out and "WebSocket" in out


def test_sse_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_sse

    results = bench_sse.run(quick=True)
    report = bench_sse.report(results)
    assert set(results) == {
        "throughput_1_client",
        "throughput_100_clients",
        "latency_1_client",
        "latency_100_clients",
    }
    assert "sse-starlette" in report
    assert results["latency_1_client"]["toolstream_p99_ms"] > 0


def test_websocket_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_ws

    results = bench_ws.run(quick=True)
    assert set(results) == {"1 client", "100 clients"}
    assert "broadcast" in bench_ws.report(results)
    for row in results.values():
        assert row["throughput_ratio"] > 0 and row["single_ratio"] > 0


def test_redis_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_redis
    from tests.redis_server import require_redis

    require_redis()
    results = bench_redis.run(quick=True)
    assert results["throughput_ratio"] > 0
    assert results["latency"]["p99_ms"] > 0
    assert "raw redis-py" in bench_redis.report(results)


def test_stall_callbacks_and_memory_benchmarks_run_and_report() -> None:
    from benchmarks import bench_callbacks, bench_memory, bench_stall

    stall = bench_stall.run(quick=True)
    assert stall["asyncio"]["toolstream_kept"] > 0 and "stalled" in bench_stall.report(stall)
    callbacks = bench_callbacks.run(quick=True)
    assert all(row["ratio"] > 0 for row in callbacks["rows"])
    assert "pyee" in bench_callbacks.report(callbacks)
    memory = bench_memory.run(quick=True)
    assert memory["idle_subscription"]["toolstream_bytes"] > 0
    assert "MiB" in bench_memory.report(memory)


def test_scaling_benchmark_runs_reports_and_plots(tmp_path: Path) -> None:
    from benchmarks import bench_scaling

    results = bench_scaling.run(quick=True)
    assert set(results["curves"]) == {"subscribers", "payload", "sessions"}
    assert "Scaling curves" in bench_scaling.report(results)
    paths = bench_scaling.plot(results, tmp_path)
    assert [p.name for p in paths] == [
        "bench-subscribers.png",
        "bench-payload.png",
        "bench-sessions.png",
    ]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_approval_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_approvals

    results = bench_approvals.run(quick=True)
    assert results["eventbus"]["rounds"] == 30 and results["eventbus"]["p99_ms"] > 0
    assert "Approval round trip" in bench_approvals.report(results)


def test_integration_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_integrations

    results = bench_integrations.run(quick=True)
    assert set(results) == {"pydantic-ai", "openai-agents", "langgraph"}
    assert all(r["ratio"] > 0 for r in results.values())
    assert "a run of 10 tool calls" in bench_integrations.report(results)


def test_otel_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_otel

    results = bench_otel.run(quick=True)
    assert results["us_per_call"]["spans"] > 0
    assert "OpenTelemetry spans" in bench_otel.report(results)


def test_nats_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_nats
    from tests.nats_server import require_nats

    require_nats()
    results = bench_nats.run(quick=True)
    assert results["throughput_ratio"] > 0
    assert results["cluster_latency"]["p50_ms"] > 0
    assert "raw nats-py" in bench_nats.report(results)


def test_postgres_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_postgres
    from tests.postgres_server import require_postgres

    require_postgres()
    results = bench_postgres.run(quick=True)
    assert results["throughput_ratio"] > 0
    assert results["latency"]["p99_ms"] > 0
    assert "raw psycopg" in bench_postgres.report(results)


def test_chat_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_chat

    results = bench_chat.run(quick=True)
    report = bench_chat.report(results)
    for figure in bench_chat.FIGURES:
        row = results[figure]
        assert row["toolstream"] > 0 and row["handwritten"] > 0
        assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert "hand-written" in report and "resume" in report


def test_chat_agent_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_chat_agents

    results = bench_chat_agents.run(quick=True)
    report = bench_chat_agents.report(results)
    for name, *_ in bench_chat_agents.PAIRS:
        row = results[name]["turn_ms"]
        assert row["toolstream"] > 0 and row["peer"] > 0
    assert "VercelAIAdapter" in report and "by hand" in report


def test_a_ratio_below_the_clocks_resolution_is_reported_not_divided() -> None:
    """A quick run can use less CPU than one clock tick (CPU time counts in ticks): the
    round gives no ratio instead of dividing by zero, and the report says so."""
    from benchmarks._common import compare, shown

    some = compare([2.0, 3.0, 4.0], [1.0, 0.0, 2.0], "cpu_ratio")
    assert (some["cpu_ratio_min"], some["cpu_ratio_max"]) == (2.0, 2.0)
    none = compare([2.0], [0.0], "cpu_ratio")
    assert shown(none, "cpu_ratio") == "n/a (too short to measure)"
    assert "2.00" in shown(some, "cpu_ratio")


def test_misbehaving_clients_benchmark_runs_and_reports() -> None:
    from benchmarks import bench_misbehaving

    results = bench_misbehaving.run(quick=True)
    assert set(results["memory"]) == {"sse", "websocket"}
    for row in results["memory"].values():
        assert row["stalled_kib"] > 0 and row["server_buffers_kib"] >= 0
    assert results["flood"]["none_event_p99_ms"] > 0
    report = bench_misbehaving.report(results)
    assert "Memory per stalled client" in report and "one flooder" in report


def test_gateway_benchmark_runs_reports_and_writes_the_sheet(tmp_path: Path) -> None:
    """Both servers hold 200 raw clients each, every client gets every event (the run
    fails otherwise), and the sheet is written between its markers."""
    from benchmarks import bench_gateway
    from benchmarks.__main__ import machine

    results = bench_gateway.run(quick=True)
    assert set(results["rows"]) == {"sse_200", "ws_200", "chat_200"}
    for row in results["rows"].values():
        for side in ("toolstream", "handrolled"):
            assert row[f"{side}_delivered"] == 200 * results["events_per_client"]
            assert row[f"{side}_p99_ms"] > 0 and row[f"{side}_open_s"] > 0
        assert row["toolstream_shutdown_s"] is not None  # shutdown ended every stream
    assert "hand-rolled" in bench_gateway.report(results)
    doc = tmp_path / "scaling.md"
    doc.write_text(f"before\n{bench_gateway.SHEET_START}\nold\n{bench_gateway.SHEET_END}\nafter\n")
    assert bench_gateway.write_sheet(results, machine(), doc)
    text = doc.read_text()
    assert "old" not in text and text.startswith("before") and text.endswith("after\n")
    assert "200 clients at 1 event/s each: p99 latency" in text


def test_the_counting_proxy_counts_bytes_each_way_and_round_trips() -> None:
    """Two requests answered one after the other: two round trips; a reply in two
    writes is still one."""
    import asyncio

    from benchmarks.bench_brokers import CountingProxy

    async def main() -> dict[str, int]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(100):
                writer.write(data[:2])
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.write(data[2:])
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with CountingProxy(port) as proxy:
            assert proxy.url(f"redis://127.0.0.1:{port}/0") == f"redis://127.0.0.1:{proxy.port}/0"
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            for request in (b"hello", b"world!"):
                writer.write(request)
                await writer.drain()
                assert await reader.readexactly(len(request)) == request
            writer.close()
            await asyncio.sleep(0.05)
            counts = proxy.snapshot()
        server.close()
        await server.wait_closed()
        return counts

    assert asyncio.run(main()) == {"round_trips": 2, "bytes_up": 11, "bytes_down": 11}


def test_brokers_benchmark_runs_and_writes_its_rows_in_the_sheet(tmp_path: Path) -> None:
    """Each broker bus and its raw peer, published and delivered, every event checked
    (the run fails otherwise); the rows go into the scale sheet between their markers."""
    from benchmarks import bench_brokers
    from tests.nats_server import require_nats
    from tests.postgres_server import require_postgres
    from tests.redis_server import require_redis

    require_redis()
    require_nats()
    require_postgres()
    results = bench_brokers.run(quick=True)
    for broker in bench_brokers.BROKERS:
        for mode in ("", "_trickle"):
            for side in ("toolstream", "raw"):  # at least the event's JSON
                assert results[broker][f"{side}_published{mode}"]["bytes_up"] > 100
                assert results[broker][f"{side}_delivered{mode}"]["bytes_down"] > 100
    doc = tmp_path / "scaling.md"
    doc.write_text(f"before\n{bench_brokers.SHEET_START}\nold\n{bench_brokers.SHEET_END}\nafter\n")
    assert bench_brokers.write_sheet(results, doc)
    text = doc.read_text()
    assert "old" not in text and text.startswith("before") and text.endswith("after\n")
    assert "| NatsBus (nats-py raw): delivered to one subscriber, one at a time |" in text
    assert "Broker round trips" in bench_brokers.report(results)


def test_failover_benchmark_runs_reports_and_writes_its_rows(tmp_path: Path) -> None:
    """On Redis: a resume after missed events and a gateway killed under its clients,
    every client getting every event exactly once (the run fails otherwise); the rows
    are written between their markers."""
    from benchmarks import bench_failover
    from benchmarks.__main__ import machine
    from tests.redis_server import require_redis

    require_redis()
    results = bench_failover.run(quick=True, brokers=("redis",))
    redis = results["redis"]
    assert redis["resume"]["200"]["resume_s_ms_per_1000"] > 0
    assert redis["failover"]["back_p99_ms"] >= redis["failover"]["back_p50_ms"] > 0
    assert "RedisBus" in bench_failover.report(results)
    doc = tmp_path / "scaling.md"
    doc.write_text(f"a\n{bench_failover.SHEET_START}\nold\n{bench_failover.SHEET_END}\nb\n")
    assert bench_failover.write_sheet(results, machine(), doc)
    text = doc.read_text()
    assert "old" not in text and "failover: kill → first event again, p99" in text
