"""The ``toolstream`` command: ``toolstream demo`` (the main job)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolstream",
        description="Stream the lifecycle of an AI agent's tool calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a simulated agent and watch its tool calls live",
        description="A simulated agent drives a Tracker; a live view shows every call.",
    )
    demo.add_argument(
        "--turns", type=int, default=None, help="stop after N turns (default: run until Ctrl-C)"
    )
    demo.add_argument("--speed", type=float, default=1.0, help="time factor (2 = twice as fast)")
    demo.add_argument(
        "--plain",
        action="store_true",
        help="print one line per event instead of the live table (for logs and pipes)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolstream`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        if args.turns is not None and args.turns < 1:
            print("toolstream demo: --turns must be at least 1", file=sys.stderr)
            return 2
        if not args.speed > 0:
            print("toolstream demo: --speed must be positive", file=sys.stderr)
            return 2
        from .demo import run_demo

        return run_demo(turns=args.turns, speed=args.speed, plain=args.plain)
    return 2  # pragma: no cover - argparse rejects unknown commands
