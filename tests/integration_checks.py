"""What every framework integration's tests check the same way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

import toolstream as ts
from tests.interop.sessions import run_node_checks, wire
from tests.interop.test_dialects import strict_agui
from toolstream import dialects
from toolstream.dialects import Encoder


def events_of(bus: ts.EventBus, session: str = "s") -> list[ts.Event]:
    """Every event of the session so far."""
    return bus.subscribe(session=session, after=f"{bus.epoch}-0").take_nowait()


def words(bus: ts.EventBus, *, first: type[ts.Event] = ts.ToolCreated) -> list[tuple[str, str]]:
    """The session's words and cards in bus order: each message's text per kind
    (``("text", ...)``, ``("reasoning", ...)``, deltas of one kind joined), its end
    (``("message.finished", "")``) and each call's ``first`` event (``(type, call id)``)."""
    out: list[tuple[str, str]] = []
    for event in events_of(bus):
        if isinstance(event, ts.MessageDelta):
            if out and out[-1][0] == event.kind:
                out[-1] = (event.kind, out[-1][1] + event.text)
            else:
                out.append((event.kind, event.text))
        elif isinstance(event, (ts.MessageFinished, first)):
            out.append((event.type, event.call_id))
    return out


#: What a model that says something before its one call and "done" after it leaves.
SPOKEN = [
    ("reasoning", "A search. "),
    ("text", "Searching now."),
    ("message.finished", ""),
    ("tool.created", "call_w"),
    ("text", "done"),
    ("message.finished", ""),
]


def types_of(bus: ts.EventBus, call_id: str) -> list[str]:
    """The wire names of one call's events."""
    return [e.type for e in events_of(bus) if e.call_id == call_id]


async def cancel_once_running(
    bus: ts.EventBus, call_id: str, run: Callable[[], Awaitable[object]], session: str = "s"
) -> None:
    """Run ``run()`` and cancel it as soon as the call ``call_id`` has started (its
    ``tool.started`` is on the bus). A fixed delay races a loaded machine: the tool
    may not have started yet."""

    async def go() -> None:
        await run()

    async with (
        bus.subscribe(ts.ToolStarted, session=session) as started,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(go)
        with anyio.fail_after(30):
            async for event in started:
                if event.call_id == call_id:
                    break
        tg.cancel_scope.cancel()


def ai_sdk_part_states(events: list[ts.Event]) -> dict[str, str]:
    """Encode ``events`` in AG-UI and the AI SDK stream, check both with the peers' own
    validators (the ``ag-ui-protocol`` models, ``@ag-ui/client``'s verifier, the ``ai``
    package's schema and ``readUIMessageStream``), and return each AI SDK tool part's
    final state by call id."""
    cases: list[dict[str, Any]] = []
    for name in ("agui", "ai_sdk"):
        encoder = Encoder(dialects.get(name))
        frames = [f for e in events for f in encoder.encode(e)] + encoder.close()
        if name == "agui":
            for frame in frames:
                strict_agui(frame.message.payload)
        cases.append({"name": name, "dialect": name, "messages": wire(frames)})
    results = run_node_checks(cases)
    assert all(r["ok"] for r in results), results
    return {
        p["toolCallId"]: p["state"]
        for m in results[1]["messages"]
        for p in m["parts"]
        if p.get("toolCallId")
    }


def import_error_names_the_extra(module: str, framework_module: str, extra: str) -> None:
    """Importing ``module`` without ``framework_module`` fails naming ``extra``."""
    import subprocess
    import sys

    code = (
        f"import sys; sys.modules[{framework_module!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert f'pip install "toolstream[{extra}]"' in done.stdout, done.stdout
