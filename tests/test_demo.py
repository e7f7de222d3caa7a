"""The main job: `toolstream demo` — the gateway, the page in a real browser, and `tail`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.sync.client import connect

import toolstream as ts
from toolstream.demo import DEMO_SECRET, build_app
from toolstream.demo.agent import run_turn
from toolstream.demo.frameworks import EMAIL_WORDS, FIRST_WORDS, agent_runner, answer

from .browser import new_page, wait_for
from .servers import Served, bind, free_port, serve

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"


#: What runs the agent's turns: ``run_agent``'s signature.
Runner = Callable[..., Awaitable[None]]


class Agent:
    """The simulated agent on its own thread and loop, as a framework would run it
    (``runner``: turns of the test's own instead)."""

    def __init__(
        self,
        bus: ts.EventBus,
        *,
        speed: float,
        turns: int | None,
        approval_timeout: float = 1.5,
        framework: str = "simulated",
        runner: Runner | None = None,
    ) -> None:
        self.bus = bus
        self.stop = threading.Event()
        self.approval_timeout = approval_timeout
        self.runner = runner or agent_runner(framework)
        self.thread = threading.Thread(target=self._run, args=(speed, turns), daemon=True)
        self.thread.start()

    def _run(self, speed: float, turns: int | None) -> None:
        async def main() -> None:
            async with ts.Tracker(self.bus, "demo") as tracker, anyio.create_task_group() as tg:

                async def watch() -> None:
                    while not self.stop.is_set():  # noqa: ASYNC110 - set by the test thread
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                await self.runner(
                    tracker, turns=turns, speed=speed, approval_timeout=self.approval_timeout
                )
                tg.cancel_scope.cancel()

        anyio.run(main)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def demo() -> Iterator[tuple[ts.EventBus, Served]]:
    bus = ts.EventBus()
    agent = Agent(bus, speed=4.0, turns=None)
    with serve(build_app(bus), ws="websockets-sansio") as served:
        yield bus, served
    agent.close()
    bus.close()


def read_sse(url: str, seconds: float) -> list[dict[str, Any]]:
    """Every data line of a stream for ``seconds``."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    with httpx.stream("GET", url, timeout=httpx.Timeout(5, read=seconds + 5)) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
            if time.monotonic() > deadline:
                break
    return out


def test_the_page_and_its_assets_load(demo: tuple[ts.EventBus, Served]) -> None:
    _, served = demo
    page = httpx.get(f"{served.url}/")
    assert page.status_code == 200 and "toolstream" in page.text and "/static/app.js" in page.text
    for asset, kind in (("app.js", "javascript"), ("style.css", "css")):
        response = httpx.get(f"{served.url}/static/{asset}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
    assert httpx.get(f"{served.url}/static/../secret").status_code == 404
    assert httpx.get(f"{served.url}/nope").status_code == 404
    assert httpx.get(f"{served.url}/healthz").json() == {"ok": True}


def test_the_stream_shows_everything_the_demo_promises(demo: tuple[ts.EventBus, Served]) -> None:
    _, served = demo
    events = read_sse(f"{served.url}/events?session=demo", 9)
    types = {e["type"] for e in events}
    lifecycle = {cls.type for cls in ts.EVENT_TYPES} - {"tool.output.partial"}
    assert lifecycle <= types, lifecycle - types
    wire = json.dumps(events)
    assert DEMO_SECRET not in wire and DEMO_SECRET[8:20] not in wire
    assert "[redacted]" in wire
    assert any(isinstance(e.get("result"), dict) and e["result"].get("truncated") for e in events)
    assert {e["tool"] for e in events if e.get("tool")}.isdisjoint({"_update_memory"}), (
        "hidden tools stay hidden"
    )
    assert any(e["type"] == "batch.phase" and e["phase"] == "queued" for e in events)
    batches: dict[str, list[int]] = {}
    for e in events:
        if e["type"] == "tool.queued":
            batches.setdefault(e["batch_id"], []).append(e["position"])
    assert [1, 2, 3] in batches.values(), "a parallel batch of three behind a concurrency limit"
    # The research call's sub-agent: its run nested under the call, its calls carrying it.
    nested = [e for e in events if e["type"] == "run.started" and e.get("parent_call_id")]
    assert nested and {e["agent"] for e in nested} == {"researcher"}
    research = {e["call_id"] for e in events if e.get("tool") == "research"}
    inner = {e["tool"] for e in events if e.get("parent_call_id") in research and e.get("tool")}
    assert inner >= {"fetch_page", "read_pdf"}


@pytest.mark.parametrize(
    ("dialect", "marker"),
    [("agui", "TOOL_CALL_START"), ("ai_sdk", "tool-input-start"), ("hermes", "running")],
)
def test_every_dialect_endpoint_streams(
    demo: tuple[ts.EventBus, Served], dialect: str, marker: str
) -> None:
    _, served = demo
    messages = read_sse(f"{served.url}/events?session=demo&dialect={dialect}", 5)
    assert marker in json.dumps(messages)


def test_the_websocket_endpoint(demo: tuple[ts.EventBus, Served]) -> None:
    _, served = demo
    with connect(served.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"op": "subscribe", "session": "demo", "types": ["tool.completed"]}))
        seen: list[str] = []
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=10))
            if message["op"] == "ping":
                ws.send('{"op":"pong"}')
            elif message["op"] == "event" and message["data"]["type"] == "tool.completed":
                seen.append(message["data"]["tool"])
    assert len(seen) == 3


def test_tail_json_prints_a_calls_lifecycle_in_order(demo: tuple[ts.EventBus, Served]) -> None:
    _, served = demo
    lines: list[dict[str, Any]] = []
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolstream",
            "tail",
            f"{served.url}/events",
            "--session",
            "demo",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as tail:
        try:
            deadline = time.monotonic() + 15
            assert tail.stdout is not None
            while time.monotonic() < deadline:
                line = tail.stdout.readline()
                if not line:
                    break
                lines.append(json.loads(line))
                # A web_search call seen whole (the tail may connect in the middle of one).
                created = {
                    e["call_id"]
                    for e in lines
                    if e.get("tool") == "web_search" and e["type"] == "tool.created"
                }
                if any(e["type"] == "tool.completed" and e["call_id"] in created for e in lines):
                    break
        finally:
            tail.terminate()
            tail.wait(10)
    web = [e for e in lines if e.get("tool") == "web_search"]
    done = {e["call_id"] for e in web if e["type"] == "tool.completed"}
    call_id = next(
        e["call_id"] for e in web if e["type"] == "tool.created" and e["call_id"] in done
    )
    kinds = [e["type"] for e in web if e["call_id"] == call_id]
    assert kinds[0] == "tool.created" and kinds[-1] == "tool.completed"
    order = [
        "tool.created",
        "tool.args.delta",
        "tool.ready",
        "tool.started",
        "tool.progress",
        "tool.completed",
    ]
    assert list(dict.fromkeys(kinds)) == order, kinds


CALLS = "[...window.toolstreamState.calls.values()]"

#: The id of the first card of a tool (in a state, under a selector), or null.
FIND = """([scope, tool, state]) => {
  const root = scope ? document.querySelector(scope) : document;
  const card = root && [...root.querySelectorAll('.card')].find((c) =>
    c.querySelector(':scope > .top > .tool').textContent === tool
    && (!state || c.dataset.state === state));
  return card ? card.id : null; }"""


def find_card(tool: str, state: str | None = None, scope: str | None = None) -> str:
    """A JavaScript expression: the id of the first card of ``tool``, or null."""
    return f"({FIND})({json.dumps([scope, tool, state])})"


def card_of(page: Any, tool: str, state: str | None = None, scope: str | None = None) -> str:
    """``#<id>`` of the first card of ``tool``, once there is one."""
    return f"#{wait_for(page, find_card(tool, state, scope))}"


def test_the_page_in_a_real_browser_across_restarts(browser: Any) -> None:
    bus = ts.EventBus()
    agent = Agent(bus, speed=3.0, turns=None)
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        with new_page(browser) as page:
            page.set_viewport_size({"width": 1400, "height": 1000})
            with serve(build_app(bus), port=port, ws="websockets-sansio") as served:
                page.goto(f"{served.url}/")
                for state in ("completed", "failed", "cancelled"):
                    wait_for(
                        page, f"document.querySelector('.card[data-state=\"{state}\"]') !== null"
                    )
                # the DOM shows states, moving progress, summaries, errors
                bars = "[...document.querySelectorAll('.card .bar > i')]"
                wait_for(page, f"{bars}.some(i => parseFloat(i.style.width) > 0)")
                shell = card_of(page, "run_shell", "failed")
                assert "exit code 2" in page.inner_text(f"{shell} > .error")
                assert "finished in" in page.inner_text('.card[data-state="completed"] .summary')
                assert wait_for(page, "document.querySelectorAll('.batch').length") >= 1
                page.select_option("#dialect", "hermes")
                wait_for(
                    page,
                    "document.getElementById('raw-log').textContent.includes('hermes.tool.progress')",
                )
                page.screenshot(path=str(ARTIFACTS / "demo-page.png"))
                # switch to WebSocket
                page.select_option("#transport", "ws")
                wait_for(
                    page, "document.getElementById('status').textContent === 'live (WebSocket)'"
                )
            # the HTTP server restarts over the same bus, mid-stream
            time.sleep(1.0)
            with serve(build_app(bus), port=port, ws="websockets-sansio"):
                wait_for(
                    page, "document.getElementById('status').textContent === 'live (WebSocket)'"
                )
                time.sleep(2.0)
                agent.close()  # let the page catch up with a quiet session
                time.sleep(1.0)
                shown = page.evaluate(f"{CALLS}.map(c => [c.call_id, c.state])")
            truth = {c.call_id: c.state.value for c in bus.snapshot("demo").calls}
            ids = [call_id for call_id, _ in shown]
            assert len(ids) == len(set(ids)), "no card duplicated"
            missing = set(truth) - set(ids)
            assert not missing, f"cards lost across the restart: {missing}"
            assert all(truth[call_id] == state for call_id, state in shown if call_id in truth)
            # the whole demo restarts: a new bus, a stale cursor -> a clean reset
            with serve(build_app(ts.EventBus()), port=port, ws="websockets-sansio"):
                wait_for(
                    page, "document.getElementById('status').textContent === 'live (WebSocket)'"
                )
                wait_for(
                    page, f"{CALLS}.every(c => c.state !== 'running' && c.state !== 'created')"
                )
                assert page.evaluate("document.querySelectorAll('.spinner').length") == 0
    finally:
        agent.close()
        bus.close()


#: A demo turn's own calls, in the order the agent makes them (the chat page's cards).
TURN_TOOLS = [
    "web_search",
    "research",
    "summarize_documents",
    "run_shell",
    "slow_database_query",
    "call_api",
    "export_table",
    "send_email",
]
#: The calls of the research call's sub-agent ("researcher"), nested in its card.
RESEARCHER_TOOLS = ["fetch_page", "fetch_page", "fetch_page", "read_pdf", "save_notes"]
#: Every card of a turn on the tool-card page, in order: the sub-agent's inside research.
PAGE_TOOLS = [*TURN_TOOLS[:2], *RESEARCHER_TOOLS, *TURN_TOOLS[2:]]


def test_the_page_reads_like_a_conversation(browser: Any) -> None:
    bus = ts.EventBus()
    agent = Agent(bus, speed=3.0, turns=None)
    try:
        with new_page(browser) as page, serve(build_app(bus), ws="websockets-sansio") as served:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.set_viewport_size({"width": 1400, "height": 1000})
            page.goto(f"{served.url}/")
            wait_for(page, "document.querySelectorAll('.turn').length >= 3", timeout=60)
            turns = page.evaluate(
                "[...document.querySelectorAll('.turn')].map(t => "
                "[t.querySelector('.turn-title').textContent, t.open, t.dataset.state])"
            )
            numbers = [int(title.split(":")[0].removeprefix("Turn ")) for title, _, _ in turns]
            assert numbers == sorted(numbers, reverse=True), "the current turn on top"
            assert [is_open for _, is_open, _ in turns] == [True] + [False] * (len(turns) - 1)
            # An earlier turn is one line that says what happened.
            second = ".turn:nth-child(2)"
            assert page.inner_text(f"{second} .turn-counts") == (
                "13 calls · 2 failed · 1 cancelled · 2 denied"
            )
            # Opened, it shows its calls in the order they were made, the batch around its own.
            page.click(f"{second} > summary")
            assert page.evaluate(f"document.querySelector('{second}').open")
            tools = page.evaluate(
                f"[...document.querySelectorAll('{second} .card .tool')].map(e => e.textContent)"
            )
            assert tools == PAGE_TOOLS
            # The agent's text sits where it was said: before the first card, between
            # the steps, after the last card.
            order = page.evaluate(
                f"[...document.querySelector('{second} .turn-body').children].map(e => "
                "e.classList.contains('said') ? 'said: ' + e.querySelector('.said-text')"
                ".textContent : e.querySelector('.tool')?.textContent ?? 'batch')"
            )
            assert order[:2] == ["said: Let me look that up.", "web_search"]
            assert order[-1] == "said: Done: the research notes are above."
            assert sum(1 for item in order if item.startswith("said: ")) == 5
            assert page.evaluate(
                f"document.querySelector('{second} .said .thinking:not([hidden]) span').textContent"
            ).startswith("The first results are the official docs")
            # The research call's sub-agent, in its card: folded to one line (the call
            # ended), unfolded by a click, folded again by another.
            research = card_of(page, "research", scope=second)
            toggle = f"{research} > .subruns > .subrun > .sub-toggle"
            assert page.get_attribute(toggle, "aria-expanded") == "false"
            assert page.is_hidden(f"{research} > .subruns > .subrun > .sub-body")
            line = [page.inner_text(f"{toggle} > .sub-{part}") for part in ("agent", "state")]
            assert line == ["researcher", "completed"]
            assert page.inner_text(f"{toggle} > .sub-counts") == "5 calls · 1 failed · 1 denied"
            page.click(toggle)
            assert page.get_attribute(toggle, "aria-expanded") == "true"
            pdf = card_of(page, "read_pdf", "failed", scope=research)
            assert page.is_visible(pdf)
            assert "password-protected" in page.inner_text(f"{pdf} > .error")
            batch = f"{second} .batch"
            in_batch = page.evaluate(
                f"[...document.querySelectorAll('{batch} .card .tool')].map(e => e.textContent)"
            )
            assert in_batch == ["fetch_page"] * 3
            assert page.inner_text(f"{batch} .batch-head") == (
                "3 calls in parallel — done (3 completed)"
            )
            page.click(toggle)
            assert page.get_attribute(toggle, "aria-expanded") == "false"
            assert page.is_hidden(pdf)

            def card(state: str, tool: str) -> str:
                selector = f'{second} .card[data-state="{state}"]:has(.tool:text-is("{tool}"))'
                return str(page.inner_text(selector))

            cancelled = card("cancelled", "slow_database_query")
            assert "gave up waiting for a lock" in cancelled
            assert "cancelled: cancelled" not in cancelled
            assert "exit code 2" in card("failed", "run_shell")
            exported = card("completed", "export_table")
            assert "Result truncated: 1.1 MB" in exported
            expired = card("denied", "send_email")
            assert "not approved in time" in expired
            assert "(3 fields)" not in page.inner_text(second)
            # Streamed output: whole lines, the newest last.
            output = page.inner_text(
                f"{second} .card:has(.tool:text-is('summarize_documents')) pre"
            )
            lines = output.strip().splitlines()
            assert lines[-1] == "Section 8: cancel scopes compose across libraries."
            assert all(line.endswith("libraries.") for line in lines)
            # What the reader opened stays open when the next turn begins.
            first = numbers[0]
            wait_for(
                page,
                "parseInt(document.querySelector('.turn .turn-title').textContent.slice(5))"
                f" > {first}",
                timeout=60,
            )
            states = page.evaluate("[...document.querySelectorAll('.turn')].map(t => t.open)")
            assert states[0] is True and states[1] is False and states[2] is True
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "demo-conversation.png"), full_page=True)
            assert errors == []
    finally:
        agent.close()
        bus.close()


BODY_ORDER = (
    "[...document.querySelector('.turn[data-run=\"mid\"] .turn-body').children].map(e => "
    "e.classList.contains('said') ? 'said: ' + e.querySelector('.said-text').textContent "
    ": e.classList.contains('batch') ? 'batch: ' + [...e.querySelectorAll('.tool')]"
    ".map(t => t.textContent).join(' ') : e.querySelector('.tool').textContent)"
)


def test_a_page_opened_mid_turn_places_the_text_among_the_cards(browser: Any) -> None:
    """A page opened in the middle of a turn starts from the stream's snapshot: the
    agent's text and the cards are placed where they were said and made, as the live
    stream shows them, and what follows live goes after them."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "demo")
    with tracker.run("mid", title="Opened mid-turn"):
        with tracker.message() as said:
            said.delta("First a search.")
        with tracker.call("web_search", {"q": "anyio"}) as call:
            call.complete(["https://anyio.readthedocs.io"])
        with tracker.message() as said:
            said.delta("Now two pages at once.")
        for url in ("a", "b"):
            fetch = tracker.create("fetch_page", batch_id="batch-mid")
            fetch.start({"url": url})
            fetch.complete({"status": 200})
        with tracker.message() as said:
            said.delta("Now the tests.")
        shell = tracker.create("run_shell")
        shell.start({"cmd": "pytest"})
        tracker.flush()
        with new_page(browser) as page, serve(build_app(bus)) as served:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{served.url}/")
            wait_for(page, "document.querySelector('.card[data-state=\"running\"]') !== null")
            assert page.evaluate(BODY_ORDER) == [
                "said: First a search.",
                "web_search",
                "said: Now two pages at once.",
                "batch: fetch_page fetch_page",
                "said: Now the tests.",
                "run_shell",
            ]
            shell.fail(RuntimeError("exit code 2"))
            with tracker.message() as said:
                said.delta("The tests fail.")
            tracker.flush()
            wait_for(page, f"{BODY_ORDER}.length === 7")
            assert page.evaluate(BODY_ORDER)[-2:] == ["run_shell", "said: The tests fail."]
            assert errors == []
    bus.close()


#: The tool names of the cards a card sits inside, innermost first.
PARENTS = """(id) => { const out = []; let e = document.getElementById(id).parentElement;
  for (; e; e = e.parentElement) {
    if (e.classList.contains('card')) out.push(e.querySelector('.tool').textContent);
  }
  return out; }"""
LEFT = "(id) => document.getElementById(id).getBoundingClientRect().left"


def test_a_subagents_calls_nest_in_the_card_of_their_call(browser: Any) -> None:
    """A sub-agent's calls and text are drawn inside the card of the call that runs it (a
    deeper sub-agent's inside its own call's card, indented further), open while the call
    runs; a page reloaded mid-sub-run draws the tree again from the stream's reset; once
    the call ended its sub-agent folds to one line, a button (``aria-expanded``) that
    unfolds it; all of it fits a phone's width."""
    bus = ts.EventBus()
    tracker = ts.Tracker(bus, "demo")
    toggles = (
        "[...document.querySelectorAll('.sub-toggle')].map(b => b.getAttribute('aria-expanded'))"
    )
    with new_page(browser) as page, serve(build_app(bus)) as served:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.set_viewport_size({"width": 1000, "height": 900})
        with (
            tracker.run("t1", title="A nested turn"),
            tracker.call("research", {"topic": "anyio"}, call_id="research") as research,
        ):
            with research.subagent("researcher", run_id="sub1"):
                with tracker.message() as said:
                    said.delta("Reading the pages.")
                with tracker.call("fetch_page", {"url": "a"}, call_id="fetch") as fetch:
                    fetch.complete({"status": 200})
                with tracker.call("summarize", call_id="summarize") as summarize:
                    with summarize.subagent("summarizer", run_id="sub2"):
                        deep = tracker.create("read_section", call_id="deep")
                        deep.start({"section": 1})
                        tracker.flush()
                        for opened in ("goto", "reload"):  # live, then from the reset
                            if opened == "goto":
                                page.goto(f"{served.url}/")
                            else:
                                page.reload()
                            wait_for(page, "document.getElementById('call-deep') !== null")
                            assert page.evaluate(PARENTS, "call-deep") == ["summarize", "research"]
                            assert page.evaluate(PARENTS, "call-fetch") == ["research"]
                            said_in = (
                                "document.querySelector('#call-research .said-text').textContent"
                            )
                            assert page.evaluate(said_in) == "Reading the pages."
                            assert page.evaluate(toggles) == ["true", "true"]
                            lefts = [
                                page.evaluate(LEFT, f"call-{c}")
                                for c in ("research", "summarize", "deep")
                            ]
                            assert lefts == sorted(lefts) and lefts[0] < lefts[1] < lefts[2]
                            assert page.inner_text("#call-research .sub-agent") == "researcher"
                            assert page.evaluate("document.querySelectorAll('.turn').length") == 1
                        # The reader folds the running sub-agent; it stays folded.
                        page.click("#call-summarize .sub-toggle")
                        assert page.is_hidden("#call-deep")
                        page.click("#call-summarize .sub-toggle")
                        assert page.is_visible("#call-deep")
                        deep.complete({"words": 120})
                    summarize.complete("short")
            research.complete({"pages": 1})
        tracker.flush()
        # The call ended: its sub-agent is one line that says what happened.
        wait_for(page, f"{toggles}[0] === 'false'")
        assert page.is_hidden("#call-fetch")
        assert page.inner_text("#call-research > .subruns .sub-counts") == "3 calls"
        assert page.inner_text(".turn-counts") == "4 calls"
        page.click("#call-research .sub-toggle")
        assert page.evaluate(toggles) == ["true", "true"], "the reader's choice for summarize"
        assert page.is_visible("#call-deep")
        page.click("#call-research .sub-toggle")
        assert page.is_hidden("#call-summarize")
        # Keyboard: the line is a button.
        page.focus("#call-research .sub-toggle")
        page.keyboard.press("Enter")
        assert page.get_attribute("#call-research .sub-toggle", "aria-expanded") == "true"
        # A phone's width: nothing to scroll sideways, the deepest card inside the page.
        page.set_viewport_size({"width": 390, "height": 844})
        wait_for(page, "window.innerWidth === 390")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        box = page.evaluate("document.getElementById('call-deep').getBoundingClientRect().right")
        assert box <= 390
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "demo-nested-phone.png"), full_page=True)
        assert errors == []
    bus.close()


async def _turns_then_a_nested_approval(
    tracker: ts.Tracker, *, turns: int | None, speed: float, approval_timeout: float
) -> None:
    """Three quick turns (their approvals expire), then a turn whose sub-agent's call
    waits for the person as long as ``approval_timeout``."""
    for turn in (1, 2, 3):
        await run_turn(tracker, turn, speed=8.0, approval_timeout=2.0)
    await run_turn(tracker, 4, speed=speed, approval_timeout=approval_timeout)


def test_the_readme_screenshot_a_nested_turn(browser: Any) -> None:
    """The README's screenshot (docs/images/demo.png is artifacts/demo-page.png): the
    fourth turn's research call open with its sub-agent's calls, one of them waiting for
    Approve / Deny; earlier turns one line each; the raw hermes wire, whose sub-agent's
    calls name their parent call. A click approves, and the research call ends folded."""
    bus = ts.EventBus()
    agent = Agent(
        bus, speed=3.0, turns=None, approval_timeout=600.0, runner=_turns_then_a_nested_approval
    )
    try:
        with (
            new_page(browser, viewport={"width": 1500, "height": 1500}) as page,
            serve(build_app(bus), ws="websockets-sansio") as served,
        ):
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{served.url}/")
            page.select_option("#dialect", "hermes")
            newest = "document.querySelector('.turn .turn-title').textContent"
            wait_for(page, f"{newest}.startsWith('Turn 4')", 60)
            waiting = card_of(page, "save_notes", "awaiting_approval", scope=".turn:first-child")
            wait_for(
                page,
                "document.getElementById('raw-log').textContent.includes('parentToolCallId')",
            )
            titles = page.evaluate(
                "[...document.querySelectorAll('.turn')].map(t => [t.open, "
                "t.querySelector('.turn-title').textContent])"
            )
            assert titles[0] == [True, "Turn 4: research structured concurrency"]
            assert [is_open for is_open, _ in titles[1:]] == [False, False, False]
            assert page.evaluate(PARENTS, waiting[1:]) == ["research"]
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "demo-page-nested.png"))
            page.click(f"{waiting} > .approval .approve")
            research = card_of(page, "research")
            wait_for(page, f"document.querySelector('{research}').dataset.state === 'completed'")
            assert page.get_attribute(f"{research} .sub-toggle", "aria-expanded") == "false"
            assert errors == []
    finally:
        agent.close()
        bus.close()


def test_the_page_keeps_hundreds_of_calls_bounded(browser: Any) -> None:
    bus = ts.EventBus(replay=5_000)
    with new_page(browser) as page, serve(build_app(bus), ws="websockets-sansio") as served:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{served.url}/")
        wait_for(page, "document.getElementById('status').textContent === 'live (SSE)'")
        tracker = ts.Tracker(bus, "demo")
        for i in range(800):
            with tracker.call("bulk", {"i": i}) as call:
                call.progress(0.5)
        running = tracker.create("still_running")
        running.start()
        # The card on the page, not only the call in the page's state: counted after the
        # frame that drew it (and trimmed the oldest).
        wait_for(
            page,
            "[...document.querySelectorAll('.card .tool')]"
            ".some(e => e.textContent === 'still_running')",
        )
        cards = page.evaluate("document.querySelectorAll('.card').length")
        assert 250 <= cards <= 301, cards  # the newest 300 finished, and the open one
        assert page.evaluate("document.querySelectorAll('.spinner').length") == 1
        assert errors == []
    bus.close()


def _demo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolstream", "demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_busy_port_gets_one_line_that_says_what_to_do() -> None:
    with bind() as busy:
        busy.listen()
        port = busy.getsockname()[1]
        done = _demo("--port", str(port))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in lines[0]
    assert f"--port {port + 1}" in lines[0] and f"make demo PORT={port + 1}" in lines[0]


def test_turns_stop_the_web_demo_as_they_stop_the_terminal_one() -> None:
    port = free_port()
    started = time.monotonic()
    web = _demo("--port", str(port), "--turns", "1", "--speed", "20")
    assert web.returncode == 0, web.stderr
    assert "stops after 1 turn" in web.stdout
    assert time.monotonic() - started < 30
    terminal = _demo("--terminal", "--plain", "--turns", "1", "--speed", "20")
    assert terminal.returncode == 0, terminal.stderr


def test_make_demo_takes_host_port_and_args() -> None:
    done = subprocess.run(
        ["make", "-n", "demo", "HOST=0.0.0.0", "PORT=9123", "ARGS=--turns 2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "toolstream demo --host 0.0.0.0 --port 9123 --agent simulated --turns 2" in done.stdout
    with_agent = subprocess.run(
        ["make", "-n", "demo", "AGENT=langgraph"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "-e '.[cli,langgraph]'" in with_agent.stdout
    assert "--agent langgraph" in with_agent.stdout


@pytest.mark.parametrize("transport", ["sse", "ws"])
def test_a_person_approves_and_denies_from_the_page(browser: Any, transport: str) -> None:
    """The card of a call waiting for approval has Approve / Deny; a click decides, over
    the page's own transport, and the card ends as it should: the sub-agent's call
    (inside the research card, open while research runs) approved, the email denied;
    the turn completes."""
    bus = ts.EventBus()
    agent = Agent(bus, speed=4.0, turns=None, approval_timeout=240.0)
    try:
        with new_page(browser) as page, serve(build_app(bus), ws="websockets-sansio") as served:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.set_viewport_size({"width": 1400, "height": 1000})
            page.goto(f"{served.url}/")
            if transport == "ws":
                page.select_option("#transport", "ws")
                wait_for(
                    page, "document.getElementById('status').textContent === 'live (WebSocket)'"
                )
            outcomes = {}
            for verdict, tool, asks in (
                ("approve", "save_notes", "Needs your OK: Writes the notes"),
                ("deny", "send_email", "Needs your OK: Sends an email"),
            ):
                card = card_of(page, tool, "awaiting_approval")
                wait_for(page, f"document.querySelector('{card} > .approval:not([hidden])')")
                if tool == "save_notes":  # inside the research card, its sub-agent open
                    assert page.evaluate(PARENTS, card[1:]) == ["research"]
                    research = card_of(page, "research")
                    toggle = f"{research} .sub-toggle"
                    assert page.get_attribute(toggle, "aria-expanded") == "true"
                assert asks in page.inner_text(f"{card} > .approval")
                assert "expires in" in page.inner_text(f"{card} .expires")
                page.click(f"{card} > .approval .{verdict}")
                ended = "completed" if verdict == "approve" else "denied"
                wait_for(page, f"document.querySelector('{card}').dataset.state === '{ended}'")
                assert page.evaluate(f"document.querySelector('{card} > .approval').hidden")
                outcomes[verdict] = (
                    page.inner_text(f"{card} > .decision"),
                    page.inner_text(f"{card} > .summary"),
                )
                if tool == "save_notes":  # the sub-agent goes on; research ends, folded
                    wait_for(
                        page, f"document.querySelector('{research}').dataset.state === 'completed'"
                    )
                    assert page.get_attribute(toggle, "aria-expanded") == "false"
            assert outcomes["approve"][0] == "approved"
            assert outcomes["deny"] == ("", "send_email was denied")
            wait_for(page, "document.querySelector('.turn').dataset.state === 'completed'")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"demo-approval-{transport}.png"))
            assert errors == []
        # the bus agrees: one approved call that ran, one denied, each decided once
        events = bus.subscribe(session="demo", after=f"{bus.epoch}-0").take_nowait()
        resolved = [e for e in events if isinstance(e, ts.ApprovalResolved)]
        assert [(e.approved, e.by) for e in resolved[:2]] == [
            (True, "anonymous"),
            (False, "anonymous"),
        ]
    finally:
        agent.close()
        bus.close()


@pytest.mark.parametrize("framework", ["pydantic-ai", "openai-agents", "langgraph"])
def test_the_page_shows_a_frameworks_calls(browser: Any, framework: str) -> None:
    """``toolstream demo --agent <framework>``: the scenario through the real framework and
    its fake model; its calls (the model's ids) and its words on the page, in one turn; a
    click approves the email."""
    bus = ts.EventBus()
    agent = Agent(bus, speed=4.0, turns=1, approval_timeout=240.0, framework=framework)
    try:
        with new_page(browser) as page, serve(build_app(bus), ws="websockets-sansio") as served:
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{served.url}/")
            waiting = "#call-call_1_email .approval:not([hidden])"
            wait_for(page, f"document.querySelector('{waiting}') !== null", timeout=30)
            page.click("#call-call_1_email .approve")
            wait_for(
                page,
                "document.querySelector('#call-call_1_email').dataset.state === 'completed'",
                timeout=30,
            )
            states = page.evaluate(f"Object.fromEntries({CALLS}.map(c => [c.call_id, c.state]))")
            assert states["call_1_search"] == "completed"
            assert states["call_1_fetch1"] == states["call_1_fetch2"] == "completed"
            assert states["call_1_shell"] == "failed"
            summary = page.evaluate(f"{CALLS}.find(c => c.call_id === 'call_1_email').summary")
            assert "sent to team@" in summary, summary
            # The model's words between the cards: before its calls, before the email,
            # and its answer once the email was sent.
            said = "[...document.querySelectorAll('.said-text')].map(e => e.textContent)"
            wait_for(page, f"{said}.length === 3")
            assert page.evaluate(said) == [FIRST_WORDS, EMAIL_WORDS, answer("sent to team")]
            # One turn, though the framework ran twice in it (before and after the email).
            assert page.evaluate("document.querySelectorAll('.turn').length") == 1
            assert errors == []
    finally:
        agent.close()
        bus.close()


def test_an_agent_whose_framework_is_missing_gets_one_line() -> None:
    code = (
        "import sys; sys.modules['langgraph'] = None\n"
        "from toolstream.cli import main\n"
        "sys.exit(main(['demo', '--agent', 'langgraph', '--terminal', '--turns', '1']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert 'pip install "toolstream[langgraph]"' in done.stderr


def test_an_agent_whose_framework_is_missing_names_the_extra() -> None:
    """``build_app(bus, agent=...)`` (what ``toolstream demo --agent`` serves) without the
    framework: the ImportError names the extra to install."""
    code = (
        "import sys; sys.modules['langgraph'] = None\n"
        "import toolstream as ts\n"
        "from toolstream.demo import build_app\n"
        "try:\n"
        "    build_app(ts.EventBus(), agent='langgraph')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "toolstream[langgraph]"' in done.stdout
