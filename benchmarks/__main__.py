"""``python -m benchmarks`` (``make bench``): run every benchmark, write the report.

Writes ``benchmarks/results.json``, the generated part of ``docs/benchmarks.md``
(between the ``<!-- results -->`` markers) and the scale sheet of ``docs/scaling.md``
(between the ``<!-- scale -->`` markers, from the gateway suite; its resume and failover
rows between the ``<!-- failover -->`` markers, from the failover suite; the broker rows
between the ``<!-- brokers -->`` markers, from the brokers suite). ``--quick`` uses tiny
sizes; ``--only bus,websocket`` runs those suites and keeps the others' last results
(each suite's date is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_approvals,
    bench_brokers,
    bench_bus,
    bench_callbacks,
    bench_chat,
    bench_chat_agents,
    bench_failover,
    bench_gateway,
    bench_integrations,
    bench_memory,
    bench_misbehaving,
    bench_nats,
    bench_otel,
    bench_postgres,
    bench_redis,
    bench_scaling,
    bench_sse,
    bench_stall,
    bench_ws,
)
from toolstream._core.jsonenc import ENCODER

ROOT = Path(__file__).resolve().parent.parent
#: Every benchmark, in the report's order: results.json key, module (run() and report()).
SUITES: list[tuple[str, Any]] = [
    ("bus", bench_bus),
    ("stall", bench_stall),
    ("callbacks", bench_callbacks),
    ("memory", bench_memory),
    ("scaling", bench_scaling),
    ("sse", bench_sse),
    ("websocket", bench_ws),
    ("misbehaving", bench_misbehaving),
    ("gateway", bench_gateway),
    ("failover", bench_failover),
    ("redis", bench_redis),
    ("nats", bench_nats),
    ("postgres", bench_postgres),
    ("brokers", bench_brokers),
    ("approvals", bench_approvals),
    ("chat", bench_chat),
    ("chat_agents", bench_chat_agents),
    ("integrations", bench_integrations),
    ("otel", bench_otel),
]
START = "<!-- results:start -->"
END = "<!-- results:end -->"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "json": ENCODER,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--only",
        help="comma-separated suites to run (the others keep their results): "
        + ",".join(key for key, _ in SUITES),
    )
    args = parser.parse_args(argv)
    chosen = [key for key, _ in SUITES]
    results: dict[str, Any] = {}
    saved = ROOT / "benchmarks" / "results.json"
    if args.only:
        chosen = [key.strip() for key in args.only.split(",") if key.strip()]
        unknown = sorted(set(chosen) - {key for key, _ in SUITES})
        if unknown:
            parser.error(f"unknown suites {unknown}")
        results = json.loads(saved.read_text()) if saved.exists() else {}
    before = results.get("machine", {}).get("date")
    env = results["machine"] = machine()
    dates = results.setdefault("measured", {})
    for key, _ in SUITES:
        if key in results and before:
            dates.setdefault(key, before)  # kept from the run that wrote them
    for key, suite in SUITES:
        if key in chosen:
            results[key] = suite.run(quick=args.quick)
            dates[key] = env["date"]
    missing = [key for key, _ in SUITES if key not in results]
    if missing:
        parser.error(f"no results yet for {missing}: run them (--only {','.join(missing)})")
    older = {key: day for key, day in dates.items() if day != env["date"]}
    text = (
        f"Measured {env['date']} on {env['platform']}, {env['cpus']} CPUs, "
        f"{env['implementation']} {env['python']}"
        + (" (quick smoke run: sizes too small to mean anything)." if args.quick else ".")
        + (
            " Suites not re-run since: "
            + ", ".join(f"{key} {day}" for key, day in sorted(older.items()))
            + "."
            if older
            else ""
        )
        + "\n\n"
        + "\n".join(suite.report(results[key]) for key, suite in SUITES)
    )
    print(text)
    if not args.no_write and not args.quick and "scaling" in chosen:
        bench_scaling.plot(results["scaling"], ROOT / "docs" / "images")
    if not args.no_write:
        saved.write_text(json.dumps(results, indent=2) + "\n")
        doc = ROOT / "docs" / "benchmarks.md"
        current = doc.read_text()
        if START in current and END in current:
            head, rest = current.split(START, 1)
            _, tail = rest.split(END, 1)
            doc.write_text(f"{head}{START}\n{text}{END}{tail}")
        else:
            print(f"{doc} has no {START} / {END} markers; not updated", file=sys.stderr)
        if not args.quick and "gateway" in chosen:
            scaling = ROOT / "docs" / "scaling.md"
            if not bench_gateway.write_sheet(results["gateway"], env, scaling):
                print(f"{scaling} has no scale markers; not updated", file=sys.stderr)
        if not args.quick and "brokers" in chosen:
            scaling = ROOT / "docs" / "scaling.md"
            if not bench_brokers.write_sheet(results["brokers"], scaling):
                print(f"{scaling} has no brokers markers; not updated", file=sys.stderr)
        if not args.quick and "failover" in chosen:
            scaling = ROOT / "docs" / "scaling.md"
            if not bench_failover.write_sheet(results["failover"], env, scaling):
                print(f"{scaling} has no failover markers; not updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
