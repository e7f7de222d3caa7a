"""The demo's chat page in headless Chromium: the AI SDK's own client (bundled into
toolstream/demo/static/chat.js) sends a message, shows the streamed text and the tool
cards, approves a call by a click, and survives a reload mid-turn — over EventBus in one
process, and over RedisBus with the agent in a worker process."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

import toolstream as ts
from toolstream.demo import build_app

from .browser import new_page, wait_for
from .chat_procs import spawn, wait_until_up
from .conftest import require
from .redis_server import RedisServer, free_port
from .servers import serve
from .test_demo import TURN_TOOLS

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web" / "chat"
BUNDLE = ROOT / "toolstream" / "demo" / "static" / "chat.js"

pytestmark = pytest.mark.timeout(180)


def test_the_committed_bundle_is_what_its_sources_build(tmp_path: Path) -> None:
    """toolstream/demo/static/chat.js is web/chat/build.mjs's output from web/chat/src
    and the pinned packages (rebuild: make chat-bundle)."""
    require(shutil.which("node") is not None, "Node.js is not installed")
    require(
        (WEB / "node_modules" / "esbuild").is_dir(),
        "the chat page's build packages are not installed (cd web/chat && npm ci)",
    )
    out = tmp_path / "chat.js"
    done = subprocess.run(
        ["node", str(WEB / "build.mjs"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=WEB,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_bytes() == BUNDLE.read_bytes(), "rebuild it: make chat-bundle"


def test_the_page_uses_no_cdn() -> None:
    page = (ROOT / "toolstream" / "demo" / "static" / "chat.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert 'src="/static/chat.js"' in page


PARTS = "window.chatView.messages.map(m => m.parts.filter(p => p.type !== 'step-start'))"


def parts_of(page: Any) -> list[list[dict[str, Any]]]:
    return list(page.evaluate(PARTS))


def converse(page: Any, url: str) -> list[dict[str, Any]]:
    """Send a message, reload mid-turn, approve the email by a click; the assistant
    message's parts at the end."""
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
    # The reloaded page resumes the turn: the same message, rebuilt, then the rest.
    wait_for(page, "document.querySelector('.chat-card[data-state=\"approval-requested\"]')", 90)
    page.click(".chat-card[data-state='approval-requested'] button.approve")
    wait_for(
        page,
        "window.chatView.status === 'ready' && "
        'document.querySelector(\'.chat-card[data-tool="send_email"][data-state="output-available"]\')'
        " && /Done: the research notes/.test(document.body.textContent)",
        90,
    )
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
    secret = "sk-demo-9f8e7d6c5b4a39281706f5e4"
    assert secret not in str(parts)


def test_the_chat_page_in_one_process(browser: Any) -> None:
    bus = ts.EventBus()
    with serve(build_app(bus, speed=2.0)) as served, new_page(browser) as page:
        parts = converse(page, served.url)
    check_turn(parts)
    (session,) = [s for s in bus.sessions() if s.startswith("chat-")]
    (run,) = bus.snapshot(session).runs
    assert run.state == "completed"


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
