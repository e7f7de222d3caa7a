"""A simulated agent that exercises everything toolstream reports (used by ``toolstream demo``).

Each turn streams a tool's input token by token, delegates the reading to a sub-agent
(a ``research`` call whose "researcher" runs a parallel batch with one call queued
behind a concurrency limit, a failing tool and a call that waits for a person's
approval, all nested under the call), a long tool with progress and partial output, a
failing tool, a cancelled tool, a call with a secret in its arguments (redacted on
the wire), one with a huge result (truncated on the wire), a call that waits for a
person's approval (it expires when nobody decides) and a hidden internal tool.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from toolstream import ApprovalDenied, Tracker
from toolstream.providers import OpenAIChatIngest

__all__ = ["DEMO_SECRET", "run_agent", "run_turn"]

#: The fake credential the demo passes to a tool; it must never appear on the wire.
DEMO_SECRET = "sk-demo-9f8e7d6c5b4a39281706f5e4"

_PDF = "https://example.com/papers/structured-concurrency.pdf"
_PAGES = [
    "https://anyio.readthedocs.io/en/stable/",
    "https://trio.readthedocs.io/en/stable/",
    "https://docs.python.org/3/library/asyncio.html",
]


def _tokens(text: str) -> list[str]:
    """Split text the way a model streams it: a few characters at a time."""
    out, i = [], 0
    rng = random.Random(len(text))
    while i < len(text):
        n = rng.randint(2, 6)
        out.append(text[i : i + n])
        i += n
    return out


def _openai_stream(tool: str, args: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    """What ``client.chat.completions.create(..., stream=True)`` yields for one call."""
    env = {
        "id": f"chatcmpl-demo{turn}",
        "object": "chat.completion.chunk",
        "created": 1732000000 + turn,
        "model": "gpt-4o-2024-08-06",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **env,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    call_id = f"call_demo{turn}{random.randrange(16**8):08x}"
    chunks = [
        chunk({"role": "assistant", "content": "Let me look that up."}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": tool, "arguments": ""},
                    }
                ]
            }
        ),
    ]
    chunks += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": token}}]})
        for token in _tokens(json.dumps(args))
    ]
    chunks.append(chunk({}, "tool_calls"))
    return chunks


async def research(
    tracker: Tracker,
    turn: int,
    pause: Callable[[float], Awaitable[None]],
    say: Callable[[str], Awaitable[None]],
    *,
    approval_timeout: float,
) -> None:
    """The ``research`` call, whose tool is itself an agent ("researcher"): its run is
    nested under the call, with a parallel batch (three fetches, at most two at a
    time), a tool that fails and a call that waits for a person's approval (it waits
    half as long as the turn's own approval, then expires)."""

    async def fetch_page(url: str) -> dict[str, Any]:
        await pause(random.uniform(0.4, 0.9))
        return {"url": url, "status": 200, "bytes": random.randint(20_000, 90_000)}

    async with tracker.call("research", {"topic": "anyio vs trio", "pages": len(_PAGES)}) as c:
        async with c.subagent("researcher"):
            await say("Reading the three pages, two at a time.")
            async with tracker.batch(limit=2) as batch:
                for url in _PAGES:
                    batch.start_soon(fetch_page, url)
            try:
                async with tracker.call("read_pdf", {"url": _PDF}):
                    await pause(0.3)
                    raise ValueError("the PDF is password-protected")
            except ValueError:
                pass
            await say("I will keep these notes for the team, if you agree.")
            try:
                async with tracker.call(
                    "save_notes",
                    {"path": f"notes/turn-{turn}.md", "pages": len(_PAGES)},
                    approval="Writes the notes to the team's shared folder",
                    approval_timeout=approval_timeout / 2,
                ) as notes:
                    await pause(0.2)
                    notes.complete({"saved": notes.args.get("path")})
            except ApprovalDenied:
                pass
            await say("Three pages read; the PDF was locked.")
        c.complete({"pages_read": len(_PAGES), "failed": 1, "notes": f"notes/turn-{turn}.md"})


#: Seconds a demo approval waits for a person (at speed 1) before it expires.
APPROVAL_TIMEOUT = 20.0


async def run_turn(
    tracker: Tracker,
    turn: int,
    *,
    speed: float = 1.0,
    approval_timeout: float = APPROVAL_TIMEOUT,
    run_id: str | None = None,
    title: str | None = None,
) -> None:
    """One agent turn (a run) with every kind of call, and the agent's text between
    them (``run_id``: the run's id, as a chat endpoint asks for)."""

    async def pause(seconds: float) -> None:
        await anyio.sleep(seconds / speed)

    async def say(text: str, reasoning: str = "") -> None:
        """The agent's text, streamed a few characters at a time."""
        async with tracker.message() as message:
            for token in _tokens(reasoning):
                message.reasoning(token)
                await pause(0.02)
            for token in _tokens(text):
                message.delta(token)
                await pause(0.03)

    title = title or f"Turn {turn}: research structured concurrency"
    async with tracker.run(run_id, title=title):
        # 1. A model streams a tool call, token by token, in OpenAI's chunk format; the
        #    ingest announces the card at the first token and fills its input live.
        ingest = OpenAIChatIngest(tracker)
        for chunk in _openai_stream(
            "web_search", {"query": "anyio vs trio structured concurrency", "limit": 5}, turn
        ):
            ingest.feed(chunk)
            await pause(0.04)
        for h in ingest.finish():
            async with tracker.call(h.tool, h.args, call_id=h.call_id) as c:
                for i in range(5):
                    await pause(0.15)
                    c.progress((i + 1) / 5, message=f"fetched {i + 1} of 5 result pages")
                c.complete([{"title": f"Result {i}", "url": _PAGES[i % 3]} for i in range(5)])

        await say(
            "Five results. A researcher will read the three most relevant pages.",
            reasoning="The first results are the official docs; reading them is enough. ",
        )

        # 2. A sub-agent: the research call is itself an agent, whose calls nest under it.
        await research(tracker, turn, pause, say, approval_timeout=approval_timeout / speed)

        # 3. A long tool with progress and partial output.
        async with tracker.call("summarize_documents", {"documents": len(_PAGES)}) as c:
            for i in range(8):
                await pause(0.3)
                c.progress(current=i + 1, total=8, message=f"reading section {i + 1} of 8")
                c.output_delta(f"Section {i + 1}: cancel scopes compose across libraries.\n")
            c.complete({"summary": "anyio runs on both asyncio and trio", "sections": 8})

        await say("The sources agree: anyio runs on both asyncio and trio. Checking the tests.")

        # 4. A tool that fails.
        try:
            async with tracker.call("run_shell", {"cmd": "pytest -x tests/"}) as c:
                await pause(0.5)
                c.output_delta("collected 42 items\nFAILED tests/test_bus.py::test_replay\n")
                raise RuntimeError("command failed: exit code 2")
        except RuntimeError:
            pass

        # 5. A tool that is cancelled (the agent gives up waiting, and says why).
        async with tracker.call("slow_database_query", {"sql": "SELECT * FROM events"}) as c:
            c.progress(message="waiting for a lock")
            with anyio.move_on_after(0.8 / speed):
                await anyio.sleep(60)
            c.cancel("gave up waiting for a lock")

        # 6. A secret in the arguments: redacted before it is published.
        async with tracker.call(
            "call_api",
            {"url": "https://api.example.com/v1/report", "api_key": DEMO_SECRET},
        ) as c:
            await pause(0.3)
            c.complete({"status": 200, "echo": f"Authorization: Bearer {DEMO_SECRET}"})

        # 7. A huge result: published as a truncated preview.
        async with tracker.call("export_table", {"table": "events", "format": "json"}) as c:
            await pause(0.3)
            c.complete([{"id": i, "payload": "x" * 200} for i in range(5_000)])

        await say("I would like to email these notes to the team; that needs your OK.")

        # 8. A call that needs a person's OK: the page shows Approve / Deny on its card;
        #    left alone, the approval expires and the call ends denied.
        try:
            async with tracker.call(
                "send_email",
                {"to": "team@example.com", "subject": f"Turn {turn}: research notes"},
                approval="Sends an email to the whole team",
                approval_timeout=approval_timeout / speed,
            ) as c:
                await pause(0.4)
                c.complete({"sent_to": c.args.get("to"), "message_id": f"msg-{turn}"})
        except ApprovalDenied:
            pass  # denied or expired: the card says so; the turn goes on

        # 9. A hidden internal tool: tracked, never published.
        async with tracker.call("_update_memory", {"note": "user prefers anyio"}):
            await pause(0.1)

        await say("Done: the research notes are above.")


async def run_agent(
    tracker: Tracker,
    *,
    turns: int | None = None,
    speed: float = 1.0,
    approval_timeout: float = APPROVAL_TIMEOUT,
) -> None:
    """Run turns forever (or ``turns`` of them), with a short pause between them."""
    turn = 1
    while turns is None or turn <= turns:
        await run_turn(tracker, turn, speed=speed, approval_timeout=approval_timeout)
        turn += 1
        if turns is None or turn <= turns:
            await anyio.sleep(1.5 / speed)
