"""The ``toolstream`` command: ``toolstream demo`` (the main job) and ``toolstream tail``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from toolstream._extras import require

# The demo serves pages (uvicorn, websockets), tail follows them (httpx, httpx-sse) and
# both draw with rich: the command needs its extra whatever it is asked to do.
for _module in ("rich", "uvicorn", "websockets", "httpx", "httpx_sse"):
    require(_module, "cli", "the toolstream command")

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolstream",
        description="Stream the lifecycle of an AI agent's tool calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="a live gateway and web page of tool cards, fed by a simulated agent",
        description="Serves a page of live tool cards (SSE at /events, WebSocket at /ws) "
        "while a simulated agent keeps making realistic tool calls on session 'demo'.",
    )
    demo.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    demo.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    demo.add_argument(
        "--turns",
        type=int,
        default=None,
        help="stop after N turns, the server too (default: until Ctrl-C)",
    )
    demo.add_argument("--speed", type=float, default=1.0, help="time factor (2 = twice as fast)")
    demo.add_argument(
        "--terminal",
        action="store_true",
        help="no server: watch the calls in this terminal instead",
    )
    demo.add_argument("--plain", action="store_true", help="with --terminal: one line per event")
    demo.add_argument(
        "--agent",
        default="simulated",
        choices=["simulated", "pydantic-ai", "openai-agents", "langgraph"],
        help="who makes the calls: the simulated agent (default), or a framework driven by "
        "its own fake model through toolstream's integration (no API key)",
    )
    tail = commands.add_parser(
        "tail",
        help="follow a toolstream endpoint in the terminal",
        description="Follows an SSE endpoint (http://...) or a WebSocket endpoint (ws://...) "
        "and shows its calls live; reconnects with Last-Event-ID.",
    )
    tail.add_argument("url", help="e.g. http://127.0.0.1:8765/events or ws://127.0.0.1:8765/ws")
    tail.add_argument(
        "--session",
        default=None,
        help="the session to follow (default: the URL's ?session=, else demo)",
    )
    tail.add_argument("--dialect", default="native", help="wire dialect (default native)")
    tail.add_argument("--json", action="store_true", help="print one event per line, for scripts")
    tail.add_argument(
        "--expand",
        action="store_true",
        help="show every sub-agent's calls (by default a finished call's collapse to one line)",
    )
    tail.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="an HTTP header"
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
        from toolstream.demo.frameworks import missing_framework

        missing = missing_framework(args.agent)
        if missing is not None:
            print(f"toolstream demo: --agent {args.agent}: {missing}", file=sys.stderr)
            return 1
        if args.terminal:
            from .demo import run_demo

            return run_demo(turns=args.turns, speed=args.speed, plain=args.plain, agent=args.agent)
        from .web import run_web_demo

        return run_web_demo(
            host=args.host, port=args.port, turns=args.turns, speed=args.speed, agent=args.agent
        )
    if args.command == "tail":
        from .tail import run_tail

        headers = {}
        for item in args.header:
            name, sep, value = item.partition(":")
            if not sep:
                print(f"toolstream tail: --header {item!r} is not NAME:VALUE", file=sys.stderr)
                return 2
            headers[name.strip()] = value.strip()
        session = args.session or _query_session(args.url) or "demo"
        return run_tail(
            args.url,
            session=session,
            dialect=args.dialect,
            as_json=args.json,
            headers=headers,
            expand=args.expand,
        )
    return 2  # pragma: no cover - argparse rejects unknown commands


def _query_session(url: str) -> str | None:
    """The ``session`` a URL names in its query, if any."""
    from urllib.parse import parse_qs, urlsplit

    values = parse_qs(urlsplit(url).query).get("session")
    return values[0] if values else None
