"""A chat agent in a worker process: a ChatApp on RedisBus hands turns to it through a
Redis list, as a gateway hands work to its workers.

python -m tests.chat_procs worker URL PREFIX AGENT     (AGENT: script | demo)
python -m tests.chat_procs gateway URL PREFIX PORT DIALECT
python -m tests.chat_procs demo URL PREFIX PORT        (the demo's gateway and pages)
python -m tests.chat_procs framework URL PREFIX PORT FRAMEWORK DIALECT

``framework`` serves ``ChatApp(RedisBus, chat_agent(...))`` of a framework's scripted
agent (tests/chat_frameworks.py): the agent runs in the gateway process that took the
turn, and any gateway process of the bus can take its continuation.

The gateway serves a ChatApp on RedisBus whose ``start_turn`` and ``cancel_turn``
(:class:`RedisTurns`) hand turns to the worker. The worker runs each turn on its own
RedisBus: ``script`` runs the canonical script of tests/chat_scenarios.py, ``demo`` the
demo's simulated agent.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import redis.asyncio

import toolstream as ts
from toolstream.chat import TurnRequest

ROOT = Path(__file__).resolve().parent.parent


def jobs_key(prefix: str) -> str:
    return f"{prefix}:chat-jobs"


class RedisTurns:
    """``start_turn`` / ``cancel_turn`` for a ChatApp whose agent runs in a worker."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.key = jobs_key(prefix)
        self.started: list[str] = []

    async def _push(self, job: dict[str, Any]) -> None:
        client = redis.asyncio.Redis.from_url(self.url)
        try:
            await client.rpush(self.key, json.dumps(job))
        finally:
            await client.aclose()

    async def start_turn(self, request: TurnRequest) -> None:
        self.started.append(request.run_id)
        job = {"session": request.session, "run_id": request.run_id, "text": request.user_text}
        await self._push(job)

    async def cancel_turn(self, session: str, run_id: str) -> bool:
        await self._push({"cancel": run_id, "session": session})
        return True


def spawn(*args: str) -> subprocess.Popen[str]:
    """``python -m tests.chat_procs *args``."""
    from tests.servers import spawn_module

    return spawn_module("tests.chat_procs", *args)


def wait_until_up(url: str, procs: list[subprocess.Popen[str]], within: float = 30.0) -> None:
    """Return once ``url``/healthz answers 200 (a process exiting first is an error)."""
    import time

    import httpx

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a chat process exited")
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {within} s")


def with_health(app: Any) -> Any:
    """``app``, with ``GET /healthz`` answering 200 (what :func:`wait_until_up` asks)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/healthz":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        await app(scope, receive, send)

    return wrapped


def gateway(url: str, prefix: str, port: int, dialect: str) -> None:
    """Serve a ChatApp on RedisBus on 127.0.0.1:port (``/healthz`` answers 200 when up)."""
    import uvicorn

    from toolstream.chat import ChatApp
    from toolstream.redis import RedisBus

    bus = RedisBus(url, prefix=prefix)
    turns = RedisTurns(url, prefix)
    chat = ChatApp(bus, turns.start_turn, cancel_turn=turns.cancel_turn, dialect=dialect)  # type: ignore[arg-type]

    uvicorn.run(with_health(chat), host="127.0.0.1", port=port, log_level="warning", lifespan="off")


async def worker(url: str, prefix: str, agent: str) -> None:
    from tests.chat_scenarios import run_script
    from toolstream.demo.agent import run_turn
    from toolstream.redis import RedisBus

    client = redis.asyncio.Redis.from_url(url)
    scopes: dict[tuple[str, str], anyio.CancelScope] = {}
    async with RedisBus(url, prefix=prefix, lease=2.0) as bus, anyio.create_task_group() as tg:

        async def turn(job: dict[str, Any]) -> None:
            key = (job["session"], job["run_id"])
            with anyio.CancelScope() as scope:
                scopes[key] = scope
                try:
                    if agent == "demo":
                        async with ts.Tracker(bus, job["session"]) as tracker:
                            title = job["text"][:60] or "A turn"
                            await run_turn(
                                tracker,
                                1,
                                speed=4.0,
                                run_id=job["run_id"],
                                title=title,
                                approval_timeout=600,
                            )
                    else:
                        await run_script(bus, job["session"], job["run_id"], job["text"])
                finally:
                    scopes.pop(key, None)
                    await bus.flush()

        while True:
            popped = await client.blpop([jobs_key(prefix)], timeout=0)
            assert popped is not None
            job = json.loads(popped[1])
            if "cancel" in job:
                scope = scopes.get((job["session"], job["cancel"]))
                if scope is not None:
                    scope.cancel()
                continue
            tg.start_soon(turn, job)


def demo(url: str, prefix: str, port: int) -> None:
    """Serve the demo's gateway (its chat page included) on RedisBus, its chat turns
    handed to the worker."""
    import uvicorn

    from toolstream.demo import Gateway
    from toolstream.redis import RedisBus

    bus = RedisBus(url, prefix=prefix)
    turns = RedisTurns(url, prefix)
    app = Gateway(bus, start_turn=turns.start_turn, cancel_turn=turns.cancel_turn)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def framework(url: str, prefix: str, port: int, name: str, dialect: str) -> None:
    """Serve ``ChatApp(RedisBus, chat_agent(<name>'s scripted agent))`` on 127.0.0.1:port
    (``/healthz`` answers 200 when up)."""
    import uvicorn

    from tests.chat_frameworks import framework_chat_app
    from toolstream.redis import RedisBus

    chat = framework_chat_app(name, RedisBus(url, prefix=prefix), dialect=dialect)

    uvicorn.run(with_health(chat), host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    import asyncio

    role, *args = sys.argv[1:]
    if role == "worker":
        asyncio.run(worker(args[0], args[1], args[2]))
    elif role == "gateway":
        gateway(args[0], args[1], int(args[2]), args[3])
    elif role == "demo":
        demo(args[0], args[1], int(args[2]))
    elif role == "framework":
        framework(args[0], args[1], int(args[2]), args[3], args[4])
    else:
        raise SystemExit(f"unknown role {role!r}")
