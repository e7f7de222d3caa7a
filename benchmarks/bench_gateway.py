"""One gateway process, many clients: what holding them and streaming to them costs.

Each server runs in a process of its own under uvicorn (``benchmarks.gateway_server``):
toolstream's ``SSEApp`` / ``WebSocketApp`` on an ``EventBus``, or a hand-rolled
Starlette server doing the same (a queue per connected session, the same JSON). The
clients are raw sockets held by one process of their own
(``benchmarks.gateway_clients``), one session each. Per run: the time to open them
all, the server's memory per client and its CPU while they are idle, then one event a
second to each client (N events a second in all, spread evenly) — every client must get
every event, in order, or the run fails — with the latency from publish to receipt, how
many arrived on time, the server's CPU per delivered event, and how long a shutdown
takes to end every stream. Rounds alternate toolstream and hand-rolled; medians, and
ratios as the median of the rounds' ratios.

``make bench`` writes the report's part in docs/benchmarks.md and the scale sheet in
docs/scaling.md (between ``<!-- scale:start -->`` and ``<!-- scale:end -->``).
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import compare, write_between
from benchmarks._processes import ROOT, start_server

TRANSPORTS = ("sse", "ws", "chat")
NAMES = {"sse": "SSE", "ws": "WebSocket", "chat": "ChatApp resumes"}
#: Each row's two servers: toolstream's and the hand-rolled one it is measured beside
#: (a chat's resume streams the run's parts over SSE: beside the hand-rolled SSE server).
PAIRS = {
    "sse": ("toolstream_sse", "handrolled_sse"),
    "ws": ("toolstream_ws", "handrolled_ws"),
    "chat": ("toolstream_chat", "handrolled_sse"),
}
#: Figures a row takes from the hand-rolled side under another name: a chat's parts carry
#: no publish time, so its latency counts from when each event was due — and so does the
#: hand-rolled server's it is measured beside (its lateness), not from its publish time.
THEIRS = {"chat": {"p50_ms": "late_p50_ms", "p99_ms": "late_p99_ms"}}
#: The servers measured in alternation (a group's rounds interleave).
GROUPS = (
    ("toolstream_sse", "handrolled_sse", "toolstream_chat"),
    ("toolstream_ws", "handrolled_ws"),
)
#: The figures of a run whose ratio (toolstream / hand-rolled) is reported.
RATIOS = (
    "open_s",
    "open_cpu_us_per_client",
    "open_second_half_s",
    "memory_per_client_kib",
    "idle_cpu_pct",
    "cpu_us_per_event",
    "p50_ms",
    "p99_ms",
)
#: Rounds each client gets before the measured ones at 10,000 clients: enough to fill the
#: bus's replay byte budget (16 MiB, ~50,000 events here) once and give each session its
#: view, so that what is measured is a gateway's steady state rather than its first
#: seconds after 10,000 sessions appeared at once. Both servers get them.
WARMUP = 10
SHEET_START = "<!-- scale:start -->"
SHEET_END = "<!-- scale:end -->"


def run_once(
    kind: str,
    clients: int,
    rounds: int,
    idle: float,
    shutdown_wait: float = 10.0,
    warmup: int = 0,
) -> dict[str, Any]:
    """One server, one client process: the client's measurements of ``rounds`` events
    per client after ``warmup`` more (delivered and checked, not measured). Raises if a
    client missed an event (the client process says which)."""
    total = str(warmup + rounds)
    server, port = start_server("benchmarks.gateway_server", kind, str(clients), total)
    try:
        done = subprocess.run(
            [
                sys.executable,
                *("-m", "benchmarks.gateway_clients", kind, str(port), str(server.pid)),
                *(str(clients), total, str(idle), str(shutdown_wait), str(warmup)),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.kill()
        server.wait()
    if done.returncode != 0:
        raise RuntimeError(f"gateway benchmark, {kind} with {clients} clients: {done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run(*, quick: bool = False) -> dict[str, Any]:
    """Every size and transport, toolstream and hand-rolled alternating."""
    sizes = (200,) if quick else (1_000, 10_000)
    events = 2 if quick else 10  # per client, one a second
    repeats = 1 if quick else 3
    out: dict[str, Any] = {"events_per_client": events, "rounds": repeats, "rows": {}}
    for clients in sizes:
        idle = 0.5 if quick else (5.0 if clients < 10_000 else 10.0)
        wait = 1.0 if quick else 10.0  # for the shutdown to end every stream
        warmup = 1 if quick else (WARMUP if clients >= 10_000 else 0)
        samples: dict[str, list[dict[str, Any]]] = {}
        for group in GROUPS:
            for _ in range(repeats):
                for kind in group:
                    one = run_once(kind, clients, events, idle, wait, warmup)
                    samples.setdefault(kind, []).append(one)
        for transport in TRANSPORTS:
            pair = PAIRS[transport]
            row: dict[str, Any] = {
                "clients": clients,
                "transport": transport,
                "idle_s": idle,
                "warmup": warmup,
            }
            for kind in pair:
                side = "toolstream" if kind.startswith("toolstream") else "handrolled"
                runs = samples[kind]
                renamed = THEIRS.get(transport, {}) if side == "handrolled" else {}
                for key, value in runs[0].items():
                    if isinstance(value, (int, float)) and key != "shutdown_s":
                        source = renamed.get(key, key)
                        row[f"{side}_{key}"] = statistics.median(r[source] for r in runs)
                ended = [r["shutdown_s"] for r in runs if r["shutdown_s"] is not None]
                # None: some run's shutdown left streams open (uvicorn waits for them).
                row[f"{side}_shutdown_s"] = max(ended) if len(ended) == len(runs) else None
            for key in RATIOS:
                theirs = THEIRS.get(transport, {}).get(key, key)
                row.update(
                    compare(
                        [r[key] for r in samples[pair[0]]],
                        [r[theirs] for r in samples[pair[1]]],
                        f"{key}_ratio",
                    )
                )
            out["rows"][f"{transport}_{clients}"] = row
    return out


def _ratio(row: dict[str, Any], key: str) -> str:
    value = row[f"{key}_ratio"]
    return "n/a" if math.isnan(value) else f"**{value:.2f}×**"


def _shutdown(row: dict[str, Any], side: str) -> str:
    value = row[f"{side}_shutdown_s"]
    return "streams left open" if value is None else f"{value:.1f} s"


def report(results: dict[str, Any]) -> str:
    """The benchmarks page's part: every figure, both sides, the ratios."""
    lines = [
        "### One gateway process: 1,000 and 10,000 clients",
        "",
        "Each server in its own process under uvicorn: toolstream's `SSEApp` / "
        "`WebSocketApp` on an `EventBus`, or a hand-rolled Starlette server (a queue per "
        "session, the same JSON). One client process holds every connection (raw "
        "sockets), one session each; then one event a second to each client, "
        f"{results['events_per_client']} each, and every client must get every event."
        f"{_warmup_note(results['rows'])} "
        f"Medians of {results['rounds']} alternating rounds; ratios: toolstream / "
        "hand-rolled, the median of the rounds' ratios (< 1: toolstream is cheaper).",
        "",
        "| transport | clients | | open all | open the second half | memory / client "
        "| idle CPU | CPU / event | p50 | p99 | on time | shutdown |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["rows"].values():
        for side, name in (("toolstream", "toolstream"), ("handrolled", "hand-rolled")):
            lines.append(
                f"| {NAMES[row['transport']]} | {row['clients']:,} | {name} "
                f"| {row[f'{side}_open_s']:.2f} s | {row[f'{side}_open_second_half_s']:.2f} s "
                f"| {row[f'{side}_memory_per_client_kib']:.1f} KiB "
                f"| {row[f'{side}_idle_cpu_pct']:.2f}% "
                f"| {row[f'{side}_cpu_us_per_event']:.0f} µs "
                f"| {row[f'{side}_p50_ms']:.1f} ms | {row[f'{side}_p99_ms']:.1f} ms "
                f"| {row[f'{side}_on_time_pct']:.1f}% | {_shutdown(row, side)} |"
            )
        lines.append(
            f"| | | **ratio** | {_ratio(row, 'open_s')} | {_ratio(row, 'open_second_half_s')} "
            f"| {_ratio(row, 'memory_per_client_kib')} | {_ratio(row, 'idle_cpu_pct')} "
            f"| {_ratio(row, 'cpu_us_per_event')} | {_ratio(row, 'p50_ms')} "
            f"| {_ratio(row, 'p99_ms')} | | |"
        )
    lines += [
        "",
        "*On time*: received within 100 ms of when the event was due. *Idle CPU*: % of a "
        "core over the idle window (keepalives are every 60 s on both sides in this "
        "benchmark, outside the window). *Shutdown*: from SIGTERM until the server had "
        "ended every stream (uvicorn waits for streaming responses to end; a hand-rolled "
        "one never does).",
    ]
    return "\n".join(lines) + "\n"


def sheet(results: dict[str, Any], machine: dict[str, Any]) -> str:
    """The scale sheet of docs/scaling.md (its generated part)."""
    rows = results["rows"]
    lines = [
        f"Measured {machine['date']} by `make bench` on {machine['platform']}, "
        f"{machine['cpus']} CPUs, {machine['implementation']} {machine['python']}, "
        "uvicorn (h11, websockets-sansio): one server process, one client process, one "
        "session per client, every figure beside a hand-rolled Starlette server measured "
        f"in the same run (medians of {results['rounds']} alternating rounds; *ratio*: "
        "toolstream / hand-rolled, the median of the rounds' ratios). *ChatApp resumes*: "
        "each client resumes a chat whose turn is under way (`GET /<chat>/stream`, "
        "`useChat`'s `resume: true`) and gets its parts in the AI SDK's UI message "
        "stream, beside the hand-rolled SSE server (the same samples as the SSE "
        "columns but for latency); its latency counts from when each event was due, on "
        "both sides, as its parts carry no publish time." + _warmup_note(rows),
        "",
        "| per gateway process | "
        + " | ".join(
            f"{NAMES[t]} toolstream | {NAMES[t]} hand-rolled | {NAMES[t]} ratio" for t in TRANSPORTS
        )
        + " |",
        "|---|" + "---:|" * (3 * len(TRANSPORTS)),
    ]

    def cell(value: Any, fmt: str) -> str:
        if value is None:
            return "—"
        if isinstance(value, float) and math.isnan(value):
            return "n/a"
        return format(value, fmt)

    def line(label: str, key: str, fmt: str, clients: int) -> None:
        cells = []
        for transport in TRANSPORTS:
            row = rows.get(f"{transport}_{clients}")
            if row is None:
                cells += ["—"] * 3
                continue
            ours, theirs = row.get(f"toolstream_{key}"), row.get(f"handrolled_{key}")
            ratio = row.get(f"{key}_ratio")
            if ratio is None and isinstance(ours, (int, float)) and theirs:
                ratio = ours / theirs
            cells += [cell(ours, fmt), cell(theirs, fmt), cell(ratio, ".2f") + "×"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def shutdown(clients: int) -> None:
        cells = []
        for transport in TRANSPORTS:
            row = rows.get(f"{transport}_{clients}")
            for side in ("toolstream", "handrolled"):
                value = None if row is None else row.get(f"{side}_shutdown_s")
                cells.append("streams left open" if value is None else f"{value:.1f}")
            cells.append("")
        lines.append(
            f"| {clients:,} clients: SIGTERM until every stream ended (s) | "
            + " | ".join(cells)
            + " |"
        )

    sizes = sorted({row["clients"] for row in rows.values()})
    for clients in sizes:
        n = f"{clients:,} clients"
        at = f"{n} at 1 event/s each"
        line(f"{n} held: server memory (MiB)", "rss_held_mib", ",.0f", clients)
        line(f"{n}: memory per client (KiB)", "memory_per_client_kib", ".1f", clients)
        line(f"{n}: opening them all (s)", "open_s", ".2f", clients)
        line(
            f"{n}: server CPU per connection opened (µs)", "open_cpu_us_per_client", ".0f", clients
        )
        line(f"{n} idle: CPU (% of a core)", "idle_cpu_pct", ".2f", clients)
        line(f"{at}: events delivered per second", "events_per_s", ",.0f", clients)
        line(f"{at}: server CPU per event (µs)", "cpu_us_per_event", ".0f", clients)
        line(f"{at}: server CPU (% of a core)", "busy_cpu_pct", ".0f", clients)
        line(f"{at}: p50 latency (ms)", "p50_ms", ".1f", clients)
        line(f"{at}: p99 latency (ms)", "p99_ms", ".1f", clients)
        line(f"{at}: on time (% within 100 ms)", "on_time_pct", ".1f", clients)
        shutdown(clients)
    lines.append("")
    return "\n".join(lines)


def _warmup_note(rows: dict[str, Any]) -> str:
    """What the sheet says about the rounds delivered before the measured ones."""
    warm = sorted({(row["clients"], row.get("warmup", 0)) for row in rows.values()})
    said = [f"{w} at {c:,} clients" for c, w in warm if w]
    if not said:
        return ""
    return (
        " Before the measured events each client gets more, delivered and checked but "
        f"not measured ({', '.join(said)}): what is measured is the steady state — at "
        "10,000 clients, after the bus's replay byte budget (16 MiB) has filled once and "
        "each session has its state view, which a gateway does once, as its sessions "
        "first appear."
    )


def write_sheet(results: dict[str, Any], machine: dict[str, Any], doc: Path) -> bool:
    """Replace the generated part of ``doc`` (between the markers); False without them."""
    return write_between(doc, SHEET_START, SHEET_END, sheet(results, machine))


if __name__ == "__main__":
    print(report(run()))
