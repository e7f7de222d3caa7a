"""The demo's useStream page in headless Chromium: LangGraph's own ``useStream`` core
(``CustomStreamOrchestrator`` + ``FetchStreamTransport``, bundled into
toolstream/demo/static/usestream.js) drives the demo's agent through
``ChatApp(dialect="langgraph")`` at ``/api/langgraph``: a message, the agent's text and
the tool cards with progress, the sub-agent's approval and the email's approved (or
denied) by a click, the turn's end, a reload that gets the thread back with the next
response, Stop, the agent's error — with the simulated agent and with the LangGraph demo
agent through ``chat_agent``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import toolstream as ts
from toolstream.chat import TurnRequest
from toolstream.demo import Gateway, build_app
from toolstream.demo.frameworks import EMAIL_WORDS, FIRST_WORDS, answer

from .browser import new_page, wait_for
from .servers import serve
from .test_demo import TURN_TOOLS

pytestmark = pytest.mark.timeout(120)

STATUS = "document.getElementById('status').textContent"
WAITING = "waiting for your approval"
VIEW = "window.usestreamView"


def card(tool: str, state: str | None = None) -> str:
    """The selector of a tool's card (in ``state``)."""
    found = f".chat-card[data-tool='{tool}']"
    return found if state is None else f"{found}[data-state='{state}']"


def shown(page: Any, selector: str, timeout: float = 30.0) -> None:
    wait_for(page, f'document.querySelector("{selector}")', timeout)


def send(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")


def decide(page: Any, tool: str, button: str) -> None:
    """Wait for ``tool``'s approval (the page says it waits) and click ``button``."""
    waiting = card(tool, "awaiting_approval")
    shown(page, waiting)
    wait_for(page, f"{STATUS} === '{WAITING}'")
    page.click(f"{waiting} button.{button}")


def opened(page: Any, url: str) -> list[str]:
    """The page, loaded and ready; the errors it raises, as they come."""
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/usestream")
    wait_for(page, f"{VIEW} && {STATUS} === 'ready'")
    return errors


#: The simulated turn's calls of its own (the researcher's are inside research's card).
OWN_TOOLS = [t for t in TURN_TOOLS if t != "_update_memory"]
#: The researcher's calls, shown inside the research card.
NESTED = f"{card('research')} .subrun"


def test_the_usestream_page_and_its_bundle_are_served() -> None:
    bus = ts.EventBus()
    with serve(build_app(bus)) as served:
        page = httpx.get(f"{served.url}/usestream")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert 'src="/static/usestream.js"' in page.text
        assert "http://" not in page.text and "https://" not in page.text  # no CDN
        script = httpx.get(f"{served.url}/static/usestream.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert script.text.startswith("// Built by web/chat/build.mjs from web/chat/src/usestream")
        # The two chat pages link to each other.
        assert 'href="/chat"' in page.text
        assert 'href="/usestream"' in httpx.get(f"{served.url}/chat").text


def test_the_usestream_page_with_the_simulated_agent(browser: Any) -> None:
    """A turn approved by clicks (the sub-agent's save_notes, then the email) to its end;
    a reload keeps the thread, which the next message's response brings back; Stop ends
    that second turn."""
    bus = ts.EventBus()
    with serve(build_app(bus, speed=6.0)) as served, new_page(browser) as page:
        errors = opened(page, served.url)
        thread = page.evaluate(f"{VIEW}.threadId")
        send(page, "Research structured concurrency")
        shown(page, card("web_search"))
        wait_for(page, f"{VIEW}.messages.some(m => m.type === 'ai' && m.content)")
        # The sub-agent's call asks inside the research card; approved by a click.
        decide(page, "save_notes", "approve")
        shown(page, f"{NESTED} {card('save_notes', 'completed')}")
        assert page.is_visible(f"{NESTED} {card('read_pdf', 'failed')}")
        decide(page, "send_email", "approve")
        wait_for(
            page,
            f"{STATUS} === 'ready' && document.body.textContent.includes("
            "'Done: the research notes are above.')",
            30,
        )
        assert page.get_attribute(card("send_email"), "data-state") == "completed"
        view = page.evaluate(VIEW)
        assert [t["name"] for t in view["toolCalls"]] == OWN_TOOLS
        states = {t["name"]: t["state"] for t in view["toolCalls"]}
        assert set(states.values()) == {"completed", "error"}
        assert states["run_shell"] == states["slow_database_query"] == "error"
        # The search's progress came in its tools events and reached the page.
        search = next(t for t in view["toolCalls"] if t["name"] == "web_search")
        assert view["tools"][search["id"]]["progress"]["progress"] == 1
        assert view["error"] is None
        assert view["messages"][0]["type"] == "human"
        assert "sk-demo" not in str(view)

        # A reload: the thread id is kept; the thread comes back with the next response.
        page.reload()
        wait_for(page, f"{VIEW} && {STATUS} === 'ready'")
        assert page.evaluate(f"{VIEW}.threadId") == thread
        assert page.is_visible("#reloaded")
        send(page, "Once more, please")
        wait_for(
            page,
            f"{VIEW}.messages.filter(m => m.type === 'human').length === 2 && "
            "document.body.textContent.includes('Done: the research notes are above.')",
        )
        # Stop, as soon as the second turn's first card shows: the turn is cancelled.
        wait_for(page, f'document.querySelectorAll("{card("web_search")}").length === 2')
        with page.expect_response(lambda r: r.url.endswith("/stop")) as stopped:
            page.click("#stop")
        assert stopped.value.status == 200
        wait_for(page, f"{STATUS} === 'stopped' && !{VIEW}.isLoading")
        # The response was still open (the turn had not reached its approvals): the second
        # turn's running call shows cancelled, after the first turn's cancelled query.
        cancelled = "[...document.querySelectorAll(\".chat-card[data-state='cancelled']\")]"
        tools = page.evaluate(f"{cancelled}.map(c => c.dataset.tool)")
        assert len(tools) == 2 and tools[0] == "slow_database_query", tools
        assert errors == []
    runs = [r for r in bus.snapshot(thread).runs if r.parent_call_id is None]
    assert [r.state for r in runs] == ["completed", "cancelled"]


def test_the_usestream_page_denies(browser: Any) -> None:
    """Deny by a click: the sub-agent's call and the email never run, the turn goes on."""
    bus = ts.EventBus()
    with serve(build_app(bus, speed=6.0)) as served, new_page(browser) as page:
        errors = opened(page, served.url)
        send(page, "Research structured concurrency")
        decide(page, "save_notes", "deny")
        shown(page, f"{NESTED} {card('save_notes', 'denied')}")
        decide(page, "send_email", "deny")
        wait_for(
            page,
            f"{STATUS} === 'ready' && document.body.textContent.includes("
            "'Done: the research notes are above.')",
            30,
        )
        email = card("send_email", "denied")
        assert page.inner_text(f"{email} .error").startswith("Denied: denied on the demo page")
        assert errors == []
    (session,) = [s for s in bus.sessions() if s.startswith("thread-")]
    calls = {c.tool: c.state for c in bus.snapshot(session).calls}
    assert calls["send_email"] == calls["save_notes"] == "denied"


def test_the_usestream_page_with_the_langgraph_agent(browser: Any) -> None:
    """``build_app(bus, agent="langgraph")``: the LangGraph demo agent through
    ``chat_agent``, its email approved by a click."""
    bus = ts.EventBus()
    with (
        serve(build_app(bus, speed=4.0, agent="langgraph")) as served,
        new_page(browser) as page,
    ):
        errors = opened(page, served.url)
        send(page, "Research structured concurrency")
        wait_for(page, f"document.body.textContent.includes({FIRST_WORDS!r})")
        shown(page, card("run_shell", "failed"))
        decide(page, "send_email", "approve")
        done = answer("sent to team@example.com")
        wait_for(page, f"{STATUS} === 'ready' && document.body.textContent.includes({done!r})")
        view = page.evaluate(VIEW)
        assert errors == []
    texts = [m["content"] for m in view["messages"] if m["type"] == "ai" and m["content"]]
    assert texts == [FIRST_WORDS, EMAIL_WORDS, done]
    names = [t["name"] for t in view["toolCalls"]]
    assert names == ["web_search", "fetch_page", "fetch_page", "run_shell", "send_email"]
    search = view["toolCalls"][0]["id"]
    assert view["tools"][search]["progress"], "the search's progress"
    (session,) = [s for s in bus.sessions() if s.startswith("thread-")]
    assert [r.state for r in bus.snapshot(session).runs] == ["completed"]


def test_the_usestream_page_shows_the_agents_error(browser: Any) -> None:
    bus = ts.EventBus()

    async def fails(request: TurnRequest) -> None:
        async def agent() -> None:
            async with (
                ts.Tracker(bus, request.session) as tracker,
                tracker.run(request.run_id),
            ):
                raise RuntimeError("the model is unreachable")

        request.start_soon(agent)

    with serve(Gateway(bus, start_turn=fails)) as served, new_page(browser) as page:
        errors = opened(page, served.url)
        send(page, "Hello")
        wait_for(page, f"{STATUS}.startsWith('error')")
        assert page.evaluate(STATUS) == "error: RuntimeError: the model is unreachable"
        assert errors == []
