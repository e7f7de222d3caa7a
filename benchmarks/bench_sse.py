"""SSE: toolstream's SSEApp against sse-starlette serving the same events under uvicorn.

- throughput: events/s to 1 client and to 100 clients reading raw bytes;
- server CPU per delivered event (the server process's user + system time);
- latency: p50 / p99 from publish (the event's ``ts``) to receipt, at a steady 1,000
  events/s, to 1 client and to 100.

Each server runs in its own process; rounds alternate toolstream, sse-starlette. The
100 clients are spread over 4 client processes (perf_counter is system-wide, so their
timings compare).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Any

import anyio
import httpx

from benchmarks._common import ratio_of
from benchmarks._processes import cpu_seconds, start_server

KINDS = ("toolstream", "sse_starlette")
#: toolstream with the standard library's JSON (what orjson, the ``fast`` extra, buys)
STDLIB = "toolstream_stdlib"


async def _client(url: str, events: int, latencies: list[float] | None) -> tuple[int, float, float]:
    """Read raw bytes until ``events`` data lines arrived. Returns the count and when the
    first and the last of them arrived."""
    got = 0
    first = last = 0.0
    tail = b""
    async with httpx.AsyncClient(timeout=None) as client, client.stream("GET", url) as response:
        async for chunk in response.aiter_raw():
            now = time.perf_counter()
            data = tail + chunk
            cut = data.rfind(b"\n")
            complete, tail = data[: cut + 1], data[cut + 1 :]
            n = complete.count(b"\ndata: ") + complete.startswith(b"data: ")
            if n and not first:
                first = now
            if latencies is not None:
                wall = time.time()
                for line in complete.split(b"\n"):
                    if line.startswith(b"data: ") and b'"ts":' in line:
                        ts = float(line.split(b'"ts":', 1)[1].split(b",", 1)[0])
                        latencies.append(wall - ts)
            got += n
            last = now
            if got >= events:
                break
    return got, first, last


#: Client processes for the many-client scenarios (the 100 streams are split over them).
CLIENT_PROCESSES = 4


def _clients(
    url: str, clients: int, wanted: int, measure: bool
) -> tuple[list[tuple[int, float, float]], list[float]]:
    """``clients`` concurrent readers in this process: their reads and latencies."""
    reads: list[tuple[int, float, float]] = []
    latencies: list[float] = []

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(clients):

                async def one() -> None:
                    reads.append(await _client(url, wanted, latencies if measure else None))

                tg.start_soon(one)

    anyio.run(go)
    return reads, latencies


def run_once(kind: str, clients: int, events: int, rate: float) -> dict[str, float]:
    """Start a server, connect ``clients``, read ``events`` each; measure."""
    module = "benchmarks.sse_server"
    if kind == STDLIB:
        module, kind = "benchmarks.sse_server_stdlib", "toolstream"
    server, port = start_server(module, kind, str(clients), str(events), str(rate))
    try:
        url = f"http://127.0.0.1:{port}/?session=bench"
        # The reset (toolstream) or nothing (sse-starlette) comes first, then the events:
        # count the tracked events only.
        expected = events + 2  # + tool.created and tool.started of the benchmark call
        latencies: list[float] = []
        measure = rate > 0
        reads: list[tuple[int, float, float]] = []
        cpu_before = cpu_seconds(server.pid)
        # toolstream sends the session's reset first: one more data line to read.
        wanted = expected + (1 if kind == "toolstream" else 0)

        # Many clients are spread over several processes: one Python process parsing
        # 100 streams is the bottleneck and its own queueing shows up as latency.
        procs = min(CLIENT_PROCESSES, clients)
        shares = [clients // procs + (1 if k < clients % procs else 0) for k in range(procs)]
        if procs == 1:
            reads, latencies = _clients(url, clients, wanted, measure)
        else:
            context = multiprocessing.get_context("spawn")
            with context.Pool(procs) as pool:
                parts = pool.starmap(_clients, [(url, n, wanted, measure) for n in shares])
            for part_reads, part_latencies in parts:
                reads += part_reads
                latencies += part_latencies
        cpu = cpu_seconds(server.pid) - cpu_before
        elapsed = max(r[2] for r in reads) - min(r[1] for r in reads)
        delivered = sum(min(r[0], expected) for r in reads)
        result = {
            "events_per_s": delivered / elapsed,
            "cpu_us_per_event": cpu / delivered * 1e6,
        }
        if measure and latencies:
            latencies.sort()
            result["p50_ms"] = latencies[len(latencies) // 2] * 1000
            result["p99_ms"] = latencies[int(len(latencies) * 0.99)] * 1000
        return result
    finally:
        server.kill()
        server.wait()


def run(*, quick: bool = False) -> dict[str, Any]:
    """Every SSE figure, interleaved rounds, medians."""
    rounds = 1 if quick else 3
    scenarios = [
        ("throughput_1_client", 1, 2_000 if quick else 100_000, 0.0),
        ("throughput_100_clients", 100 if not quick else 5, 500 if quick else 5_000, 0.0),
        ("latency_1_client", 1, 200 if quick else 5_000, 1000.0),
        ("latency_100_clients", 100 if not quick else 5, 200 if quick else 3_000, 1000.0),
    ]
    results: dict[str, Any] = {}
    for name, clients, events, rate in scenarios:
        kinds = (*KINDS, STDLIB) if rate == 0 else KINDS
        samples: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for _ in range(rounds):
            for kind in kinds:
                samples[kind].append(run_once(kind, clients, events, rate))
        row: dict[str, Any] = {"clients": clients, "events": events, "rate": rate}
        for kind in kinds:
            for key in samples[kind][0]:
                row[f"{kind}_{key}"] = statistics.median(s[key] for s in samples[kind])
        if rate == 0:
            row["orjson_gain"] = row["toolstream_events_per_s"] / row[f"{STDLIB}_events_per_s"]
        row["throughput_ratio"] = row["toolstream_events_per_s"] / row["sse_starlette_events_per_s"]
        row["cpu_ratio"] = ratio_of(
            row["toolstream_cpu_us_per_event"], row["sse_starlette_cpu_us_per_event"]
        )
        results[name] = row
    return results


def report(results: dict[str, Any]) -> str:
    """Markdown tables."""
    lines = [
        "### SSE: toolstream's SSEApp vs sse-starlette, both under uvicorn",
        "",
        "Each server in its own process; the same tracked events (one call's progress),",
        "native format; 100 clients are spread over 4 client processes. Throughput ratio > 1:",
        "toolstream faster; CPU ratio < 1: toolstream uses less server CPU per delivered event.",
        "",
        "| scenario | toolstream ev/s | sse-starlette ev/s | **throughput** "
        "| toolstream CPU µs/ev | sse-starlette CPU µs/ev | **CPU** |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        lines.append(
            f"| {name.replace('_', ' ')} | {row['toolstream_events_per_s']:,.0f} "
            f"| {row['sse_starlette_events_per_s']:,.0f} | **{row['throughput_ratio']:.2f}×** "
            f"| {row['toolstream_cpu_us_per_event']:.1f} "
            f"| {row['sse_starlette_cpu_us_per_event']:.1f} "
            f"| **{row['cpu_ratio']:.2f}×** |"
        )
    lines += [
        "",
        "The JSON encoder: toolstream above uses orjson when it is installed (the `fast`",
        "extra; the benchmarks install it); the same server with the standard library's",
        "`json`:",
        "",
        "| scenario | with `json` ev/s | CPU µs/ev | with orjson ev/s | CPU µs/ev | **gain** |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        if "orjson_gain" in row:
            lines.append(
                f"| {name.replace('_', ' ')} | {row[f'{STDLIB}_events_per_s']:,.0f} "
                f"| {row[f'{STDLIB}_cpu_us_per_event']:.1f} "
                f"| {row['toolstream_events_per_s']:,.0f} "
                f"| {row['toolstream_cpu_us_per_event']:.1f} | **{row['orjson_gain']:.2f}×** |"
            )
    lines += [
        "",
        "Latency from publish to receipt at a steady 1,000 events/s (ms):",
        "",
        "| scenario | toolstream p50 | toolstream p99 | sse-starlette p50 | sse-starlette p99 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        if "toolstream_p50_ms" in row:
            lines.append(
                f"| {name.replace('_', ' ')} | {row['toolstream_p50_ms']:.2f} "
                f"| {row['toolstream_p99_ms']:.2f} "
                f"| {row['sse_starlette_p50_ms']:.2f} | {row['sse_starlette_p99_ms']:.2f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(report(run()))
