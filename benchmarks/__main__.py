"""``python -m benchmarks`` (``make bench``): run every benchmark, write the report.

Writes ``benchmarks/results.json`` and the generated part of ``docs/benchmarks.md``
(between the ``<!-- results -->`` markers). ``--quick`` uses tiny sizes.
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
    bench_bus,
    bench_callbacks,
    bench_integrations,
    bench_memory,
    bench_nats,
    bench_otel,
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
    ("redis", bench_redis),
    ("nats", bench_nats),
    ("approvals", bench_approvals),
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
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": machine()}
    for key, suite in SUITES:
        results[key] = suite.run(quick=args.quick)
    env = results["machine"]
    text = (
        f"Measured {env['date']} on {env['platform']}, {env['cpus']} CPUs, "
        f"{env['implementation']} {env['python']}"
        + (" (quick smoke run: sizes too small to mean anything)." if args.quick else ".")
        + "\n\n"
        + "\n".join(suite.report(results[key]) for key, suite in SUITES)
    )
    print(text)
    if not args.no_write and not args.quick:
        bench_scaling.plot(results["scaling"], ROOT / "docs" / "images")
    if not args.no_write:
        (ROOT / "benchmarks" / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        doc = ROOT / "docs" / "benchmarks.md"
        current = doc.read_text()
        if START in current and END in current:
            head, rest = current.split(START, 1)
            _, tail = rest.split(END, 1)
            doc.write_text(f"{head}{START}\n{text}{END}{tail}")
        else:
            print(f"{doc} has no {START} / {END} markers; not updated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
