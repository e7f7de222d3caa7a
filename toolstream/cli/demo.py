"""``toolstream demo`` in a terminal: the simulated agent and a live view of its calls."""

from __future__ import annotations

import json
import sys

import anyio

from toolstream import EventBus, LiveView, Tracker, to_dict
from toolstream.demo.frameworks import agent_runner

__all__ = ["run_demo"]


async def _watch(bus: EventBus, session: str, *, plain: bool, done: anyio.Event) -> None:
    view = LiveView(max_finished=60)
    async with bus.subscribe(session=session, snapshot=True) as sub:
        if plain:
            async for event in sub:
                data = to_dict(event)
                shown = {k: v for k, v in data.items() if k not in ("v", "session", "ts")}
                print(json.dumps(shown)[:200], flush=True)
            return
        from .terminal import LiveRenderer

        with LiveRenderer(view, title="toolstream demo — Ctrl-C to stop") as screen:
            async with anyio.create_task_group() as tg:

                async def tick() -> None:
                    while True:  # keeps spinners and elapsed times moving between events
                        await anyio.sleep(0.1)
                        screen.refresh()

                tg.start_soon(tick)
                async for batch in sub.batches():
                    for event in batch:
                        view.apply(event)
                    screen.refresh()
                tg.cancel_scope.cancel()
            screen.refresh(force=True)
    done.set()


async def _main(turns: int | None, speed: float, plain: bool, agent: str) -> None:
    bus = EventBus()
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _watch(bus, "demo", plain=plain, done=done))
        async with Tracker(bus, "demo") as tracker:
            # Nobody can click in a terminal: the approval is shown, then expires.
            runner = agent_runner(agent)
            await runner(tracker, turns=turns, speed=speed, approval_timeout=4.0)
        await anyio.sleep(0.2)
        await bus.aclose()


def run_demo(*, turns: int | None, speed: float, plain: bool, agent: str = "simulated") -> int:
    """Run the terminal demo until ``turns`` are done or Ctrl-C; returns the exit code."""
    try:
        anyio.run(_main, turns, speed, plain, agent, backend="asyncio")
    except KeyboardInterrupt:
        print("\ntoolstream demo: stopped", file=sys.stderr)
    return 0
