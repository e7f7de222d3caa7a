"""The demo's chat page in headless Chromium: the AI SDK's own client (bundled into
toolstream/demo/static/chat.js) sends a message, shows the streamed text and the tool
cards (a sub-agent's inside its tool's card, folding once the tool ended), says it waits
for your approval, approves a sub-agent's call and then a call of the turn by a click,
and survives a reload mid-turn and mid-sub-run — over EventBus in one process, over
RedisBus with the agent in a worker process, and with a framework's agent (``--agent``)
through its ``chat_agent``. The same gateway through HTTP alone, for every framework,
turn after turn.

The README's screenshot of the page (docs/images/chat.png) is the one
``test_the_chat_page_in_one_process`` writes to artifacts/chat-page.png."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

import toolstream as ts
from toolstream.demo import build_app
from toolstream.demo.frameworks import AGENTS, EMAIL_WORDS, FIRST_WORDS, answer
from toolstream.testing import serve as serve_app
from toolstream.testing import sse_data

from .browser import new_page, wait_for
from .chat_procs import spawn, wait_until_up
from .conftest import require
from .redis_server import RedisServer, free_port
from .servers import serve
from .test_demo import ARTIFACTS, RESEARCHER_TOOLS, TURN_TOOLS

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web" / "chat"
STATIC = ROOT / "toolstream" / "demo" / "static"
#: The bundles web/chat/build.mjs makes: the AI SDK chat page's and the useStream page's.
BUNDLES = ("chat.js", "usestream.js")

pytestmark = pytest.mark.timeout(180)


def test_the_committed_bundle_is_what_its_sources_build(tmp_path: Path) -> None:
    """toolstream/demo/static/chat.js and usestream.js are web/chat/build.mjs's output
    from web/chat/src and the pinned packages (rebuild: make chat-bundle)."""
    require(shutil.which("node") is not None, "Node.js is not installed")
    require(
        (WEB / "node_modules" / "esbuild").is_dir(),
        "the chat page's build packages are not installed (cd web/chat && npm ci)",
    )
    done = subprocess.run(
        ["node", str(WEB / "build.mjs"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=WEB,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(BUNDLES)
    for name in BUNDLES:
        built = (tmp_path / name).read_bytes()
        assert built == (STATIC / name).read_bytes(), f"rebuild {name}: make chat-bundle"


def test_the_page_uses_no_cdn() -> None:
    page = (ROOT / "toolstream" / "demo" / "static" / "chat.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert 'src="/static/chat.js"' in page


PARTS = "window.chatView.messages.map(m => m.parts.filter(p => p.type !== 'step-start'))"


def parts_of(page: Any) -> list[list[dict[str, Any]]]:
    return list(page.evaluate(PARTS))


WAITING = "waiting for your approval"
STATUS = "document.getElementById('status').textContent"


RESEARCH = ".chat-card[data-tool='research']"
#: The research call's sub-agent's call waiting for the person, inside the research card.
NESTED = f"{RESEARCH} .subrun .chat-card[data-tool='save_notes'][data-state='approval-requested']"
TOGGLE = f"{RESEARCH} .sub-toggle"


def converse(page: Any, url: str, *, screenshot: Path | None = None) -> list[dict[str, Any]]:
    """Send a message, reload mid-turn, reload again while the research call's sub-agent
    waits for the person, approve its call by a click (through POST …/decide), see the
    sub-agent fold once research ended and unfold it, approve the email by a click; the
    assistant message's parts at the end (``screenshot``: the page, waiting for the
    sub-agent's approval)."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/chat")
    wait_for(page, "window.chatView && window.chatView.status === 'ready'")
    page.fill("#prompt", "Research structured concurrency")
    page.click("#send")
    # Mid-turn: the text and the first card are on the page.
    wait_for(page, "document.querySelector('.chat-card[data-tool=\"web_search\"]')", 60)
    first_text = page.evaluate("document.querySelector('.assistant .chat-text').textContent")
    assert first_text.startswith("Let me")
    page.reload()
    # The reloaded page resumes the turn: the same message, rebuilt, then the rest, up to
    # the sub-agent's call that waits for the person, inside the research card.
    wait_for(page, f'document.querySelector("{NESTED}")', 90)
    wait_for(page, f"{STATUS} === '{WAITING}'")
    # Reloaded mid-sub-run: the tree again, open while research runs.
    page.reload()
    wait_for(page, f'document.querySelector("{NESTED}")', 90)
    wait_for(page, f"{STATUS} === '{WAITING}'")
    assert page.get_attribute(TOGGLE, "aria-expanded") == "true"
    assert page.inner_text(f"{TOGGLE} .sub-agent") == "researcher"
    assert page.evaluate(f'document.querySelectorAll("{RESEARCH} .subrun .chat-card").length') == 5
    if screenshot is not None:
        page.evaluate(f'document.querySelector("{NESTED}").scrollIntoView({{block: "center"}})')
        page.screenshot(path=str(screenshot))
    # A phone's width: the nested cards fit, nothing to scroll sideways.
    size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    wait_for(page, "window.innerWidth === 390")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    right = f'document.querySelector("{NESTED} button.deny").getBoundingClientRect().right'
    assert page.evaluate(right) <= 390
    page.set_viewport_size(size)
    # Decided from the page, through the chat's decision endpoint; the sub-agent goes on.
    with page.expect_response(lambda r: r.url.endswith("/decide")) as decided:
        page.click(f"{NESTED} button.approve")
    assert decided.value.status == 200
    # Research ended: its sub-agent folds to one line; a click unfolds it.
    wait_for(
        page,
        f'document.querySelector("{RESEARCH}").dataset.state === "output-available" && '
        f'document.querySelector("{TOGGLE}").getAttribute("aria-expanded") === "false"',
        90,
    )
    assert page.is_hidden(f"{RESEARCH} .sub-body")
    assert page.inner_text(f"{TOGGLE} .sub-counts") == "5 calls · 1 failed"
    page.click(TOGGLE)
    wait_for(page, f'document.querySelector("{TOGGLE}").getAttribute("aria-expanded") === "true"')
    saved = f"{RESEARCH} .chat-card[data-tool='save_notes'][data-state='output-available']"
    assert page.is_visible(saved)
    page.click(TOGGLE)
    wait_for(page, f'document.querySelector("{TOGGLE}").getAttribute("aria-expanded") === "false"')
    # Then the turn's own approval: the response ends at it; the page says it waits.
    email = ".chat-card[data-tool='send_email'][data-state='approval-requested']"
    wait_for(page, f'document.querySelector("{email}")', 90)
    wait_for(page, f"{STATUS} === '{WAITING}'")
    page.click(f"{email} button.approve")
    wait_for(
        page,
        "window.chatView.status === 'ready' && "
        'document.querySelector(\'.chat-card[data-tool="send_email"][data-state="output-available"]\')'
        " && /Done: the research notes/.test(document.body.textContent)",
        90,
    )
    assert page.evaluate(STATUS) == "ready"
    assert errors == []
    messages = page.evaluate("window.chatView.messages")
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert page.evaluate("window.chatView.error") == ""
    return [p for p in messages[1]["parts"] if p["type"] != "step-start"]


def check_turn(parts: list[dict[str, Any]]) -> None:
    tools = [p["type"].removeprefix("tool-") for p in parts if p["type"].startswith("tool-")]
    # Every card once (nothing doubled by the resume), in the order the agent made them.
    assert tools == TURN_TOOLS
    states = {p["type"].removeprefix("tool-"): p["state"] for p in parts if "toolCallId" in p}
    assert states["run_shell"] == "output-error"
    assert states["send_email"] == "output-available"
    texts = [p["text"] for p in parts if p["type"] == "text"]
    assert texts[0] == "Let me look that up."
    assert texts[-1] == "Done: the research notes are above."
    assert any(p["type"] == "reasoning" for p in parts)
    # The research call's output: the sub-agent's message, the tool's result beside it.
    (research,) = [p for p in parts if p["type"] == "tool-research"]
    message = research["output"]
    assert message["metadata"]["subagents"][0]["agent"] == "researcher"
    assert message["metadata"]["result"]["pages_read"] == 3
    inner = {p["type"].removeprefix("tool-"): p for p in message["parts"] if "toolCallId" in p}
    tools = [p["type"].removeprefix("tool-") for p in message["parts"] if "toolCallId" in p]
    assert tools == RESEARCHER_TOOLS
    assert inner["read_pdf"]["state"] == "output-error"
    assert inner["save_notes"]["state"] == "output-available"
    secret = "sk-demo-9f8e7d6c5b4a39281706f5e4"
    assert secret not in str(parts)


def test_the_chat_page_in_one_process(browser: Any) -> None:
    bus = ts.EventBus()
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        serve(build_app(bus, speed=2.0)) as served,
        new_page(browser, viewport={"width": 1200, "height": 1300}) as page,
    ):
        parts = converse(page, served.url, screenshot=ARTIFACTS / "chat-page.png")
    check_turn(parts)
    (session,) = [s for s in bus.sessions() if s.startswith("chat-")]
    runs = bus.snapshot(session).runs
    (run,) = [r for r in runs if r.parent_call_id is None]
    (sub,) = [r for r in runs if r.parent_call_id is not None]
    assert (run.state, sub.state, sub.agent, sub.parent_run_id) == (
        "completed",
        "completed",
        "researcher",
        run.run_id,
    )


def test_the_chat_page_on_redis_with_the_agent_in_a_worker(
    browser: Any, redis_server: RedisServer
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = [
        spawn("worker", redis_server.url, prefix, "demo"),
        spawn("demo", redis_server.url, prefix, str(port)),
    ]
    try:
        wait_until_up(url, procs)
        with new_page(browser) as page:
            parts = converse(page, url)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
    check_turn(parts)


# -- a framework's agent on the chat page (toolstream demo --agent <framework>) ----------------

#: The framework scenario's calls, in the order the model makes them.
FRAMEWORK_TOOLS = ["web_search", "fetch_page", "fetch_page", "run_shell", "send_email"]

#: Where each control of the chat page's header is, and how wide the page is.
HEADER = """() => {
  const box = (s) => { const r = document.querySelector(s).getBoundingClientRect();
    return {s, left: r.left, right: r.right, top: r.top, bottom: r.bottom, height: r.height}; };
  return {width: window.innerWidth, scroll: document.documentElement.scrollWidth,
    title: box('header h1'),
    controls: ['#status', 'header .chat-label', '#new-chat', 'header a'].map(box)};
}"""

#: WCAG's contrast ratio between an element's text and the header's background.
CONTRAST = """(selector) => {
  const rgb = (c) => c.match(/[0-9.]+/g).slice(0, 3).map(Number);
  const channel = (v) => (v <= 10.02 ? v / 255 / 12.92 : ((v / 255 + 0.055) / 1.055) ** 2.4);
  const lum = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const fg = lum(rgb(getComputedStyle(document.querySelector(selector)).color));
  const bg = lum(rgb(getComputedStyle(document.querySelector('header')).backgroundColor));
  return (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
}"""


def check_header_fits(page: Any) -> None:
    """Every control of the header whole, on one line, inside the page, apart from the
    others; the title on at most two lines; nothing to scroll sideways."""
    header = page.evaluate(HEADER)
    width = header["width"]
    assert header["scroll"] <= width, header
    assert header["title"]["height"] <= 50, header["title"]
    boxes = [header["title"], *header["controls"]]
    for box in boxes:
        assert box["left"] >= 0 and box["right"] <= width, box
    for box in header["controls"]:
        assert box["height"] <= 36, box  # one line (a button with its padding)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["right"] <= b["left"]
                or b["right"] <= a["left"]
                or a["bottom"] <= b["top"]
                or b["bottom"] <= a["top"]
            )
            assert apart, (a, b)
    for control in ("#status", "#new-chat", "header a"):
        clipped = page.evaluate(
            f"(e => e.scrollWidth > e.clientWidth)(document.querySelector('{control}'))"
        )
        assert not clipped, control


def test_a_frameworks_agent_on_the_chat_page_on_a_phone(browser: Any) -> None:
    """``toolstream demo --agent langgraph``: the chat page's turn is the framework's,
    through ``chat_agent``: text, the research cards, text, the email waiting for your
    approval (the page says so), a reload mid-turn, Approve — one assistant message.
    After the reload the page is a phone's width, and its header fits it."""
    bus = ts.EventBus()
    with (
        serve(build_app(bus, speed=2.0, agent="langgraph")) as served,
        new_page(browser, viewport={"width": 1200, "height": 900}) as page,
    ):
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(served.url + "/chat")
        wait_for(page, f"{STATUS} === 'ready'")
        page.fill("#prompt", "Research structured concurrency")
        page.click("#send")
        wait_for(page, "document.querySelector('.chat-card[data-tool=\"web_search\"]')", 30)
        said = "document.querySelector('.assistant .chat-text').textContent"
        assert page.evaluate(said) == FIRST_WORDS
        page.reload()
        page.set_viewport_size({"width": 390, "height": 844})
        waiting = ".chat-card[data-tool='send_email'][data-state='approval-requested']"
        wait_for(page, f'document.querySelector("{waiting}")', 30)
        wait_for(page, f"{STATUS} === '{WAITING}'")
        check_header_fits(page)
        assert page.evaluate(CONTRAST, "header a") >= 4.5  # WCAG AA for text
        assert page.evaluate(CONTRAST, "#status") >= 4.5
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chat-page-phone.png"))
        page.click(f"{waiting} button.approve")
        done = answer("sent to team@example.com")
        wait_for(
            page,
            f"window.chatView.status === 'ready' && document.body.textContent.includes('{done}')",
            30,
        )
        assert page.evaluate(STATUS) == "ready"
        assert page.evaluate("document.querySelectorAll('.chat-message.assistant').length") == 1
        messages = page.evaluate("window.chatView.messages")
        assert errors == []
    assert [m["role"] for m in messages] == ["user", "assistant"]
    parts = [p for p in messages[1]["parts"] if p["type"] != "step-start"]
    # text, the research cards, text, the email, text: in the order the model said them.
    kinds = [p["type"].removeprefix("tool-") if "toolCallId" in p else p["type"] for p in parts]
    assert kinds == ["text", *FRAMEWORK_TOOLS[:4], "text", "send_email", "text"]
    assert [p["text"] for p in parts if p["type"] == "text"] == [FIRST_WORDS, EMAIL_WORDS, done]
    states = [p["state"] for p in parts if "toolCallId" in p]
    assert states == ["output-available"] * 3 + ["output-error", "output-available"]
    assert "sent to team@example.com" in str(parts[-2]["output"])
    (session,) = [s for s in bus.sessions() if s.startswith("chat-")]
    (run,) = bus.snapshot(session).runs
    assert run.state == "completed"


# -- the same gateway through HTTP, for every framework -----------------------------------------


def user(n: int, text: str) -> dict[str, Any]:
    return {"id": f"u{n}", "role": "user", "parts": [{"type": "text", "text": text}]}


def words(chunks: list[Any]) -> list[str]:
    """The text of each text part of an AI SDK stream, in order."""
    out: list[str] = []
    for chunk in chunks:
        if isinstance(chunk, dict) and chunk["type"] == "text-start":
            out.append("")
        elif isinstance(chunk, dict) and chunk["type"] == "text-delta":
            out[-1] += chunk["delta"]
    return out


def of_type(chunks: list[Any], kind: str) -> list[dict[str, Any]]:
    return [c for c in chunks if isinstance(c, dict) and c["type"] == kind]


@pytest.mark.parametrize("framework", AGENTS)
def test_the_demo_serves_a_frameworks_chat_turns_through_chat_agent(framework: str) -> None:
    """``build_app(bus, agent=<framework>)``: ``/api/chat`` runs the framework's demo agent
    through its ``chat_agent``, turn after turn in one chat: its words around its calls,
    the email waiting for a decision, the continuation in the same message, new call ids
    each turn; approved the first time, denied the second."""
    bus = ts.EventBus()
    history: list[dict[str, Any]] = []
    call_ids: list[set[str]] = []
    with (
        serve_app(build_app(bus, speed=8.0, agent=framework)) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        for turn, approved in enumerate((True, False)):
            history.append(user(turn, "Research structured concurrency"))
            body = {"id": "chat-http", "messages": history}
            first = sse_data(http.post("/api/chat", json=body).text)
            assert first[-1] == "[DONE]"
            assert of_type(first, "finish")[0].get("finishReason") == "tool-calls"
            assert words(first) == [FIRST_WORDS, EMAIL_WORDS]
            inputs = of_type(first, "tool-input-available")
            assert [c["toolName"] for c in inputs] == FRAMEWORK_TOOLS
            assert [c["toolCallId"] for c in of_type(first, "tool-output-error")] == [
                inputs[3]["toolCallId"]
            ]
            assert any(
                c["data"]["toolCallId"] == inputs[0]["toolCallId"]
                for c in of_type(first, "data-tool-progress")
            ), "the search's progress"
            (asked,) = of_type(first, "tool-approval-request")
            assert asked["toolCallId"] == inputs[4]["toolCallId"]
            call_ids.append({c["toolCallId"] for c in inputs})
            # The person decides: the continuation goes on in the same message.
            message_id = first[0]["messageId"]
            decided = {
                "type": "tool-send_email",
                "toolCallId": asked["toolCallId"],
                "state": "approval-responded",
                "input": {"to": "team@example.com"},
                "approval": {"id": asked["approvalId"], "approved": approved},
            }
            text = [{"type": "text", "text": t} for t in words(first)]
            assistant = {"id": message_id, "role": "assistant", "parts": [*text, decided]}
            body = {"id": "chat-http", "messages": [*history, assistant]}
            rest = sse_data(http.post("/api/chat", json=body).text)
            assert rest[0] == {"type": "start", "messageId": message_id}
            assert rest[-1] == "[DONE]"
            assert not of_type(rest, "tool-input-available"), "no card sent twice"
            ended = "tool-output-available" if approved else "tool-output-denied"
            assert [c["toolCallId"] for c in of_type(rest, ended)] == [asked["toolCallId"]]
            said = answer("sent to team@example.com" if approved else "")
            assert words(rest) == [said]
            # The client's copy of the turn: its text (what the next turn's history holds).
            history.append(
                {
                    "id": message_id,
                    "role": "assistant",
                    "parts": [{"type": "text", "text": t} for t in words(first) + words(rest)],
                }
            )
    assert not call_ids[0] & call_ids[1], "each turn's calls have ids of their own"
    runs = bus.snapshot("chat-http").runs
    assert [r.state for r in runs] == ["completed", "completed"]
