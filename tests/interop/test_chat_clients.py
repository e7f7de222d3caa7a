"""The peers' own chat clients drive ChatApp through every scenario of the canonical
script (tests/chat_scenarios.py), against every chat server that follows it
(``FLAVOURS``), each under a real uvicorn on 127.0.0.1:

- the ``ai`` package's ``AbstractChat`` + ``DefaultChatTransport`` (what ``useChat``
  runs) in Node, for ai 6 and ai 7 (chat_ai.mjs);
- ``@ag-ui/client``'s ``HttpAgent`` with its event verifier (chat_agui.mjs);
- ``@ai-sdk/react``'s ``useChat`` in headless Chromium, for both generations
  (page/use_chat.jsx, bundled at test time).

A client runs all its scenarios in one process (one browser) against one server; each
scenario is a test of its own. The checks hold for any agent that follows the script
(a framework may stringify a tool's result, split a text into parts, or add reasoning).
Every AI SDK response is validated chunk by chunk with that generation's own
``uiMessageChunkSchema()``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolstream as ts
from tests.browser import browser_page, wait_for, with_page
from tests.chat_scenarios import CRASH, FLAVOURS, STORY
from tests.conftest import require
from tests.servers import serve

from .sessions import HERE, node_checks_available

pytestmark = pytest.mark.timeout(300)

#: The AI SDK generations: argv of the drivers -> the ``ai`` version they must run.
GENERATIONS = {"6": "6.0.326", "7": "7.0.173"}
NODE_SCENARIOS = [
    "weather",
    "build",
    "approve",
    "deny",
    "reload",
    "reload-after-approval",
    "stop",
    "crash",
    "retry",
]
AGUI_SCENARIOS = ["weather", "build", "approve", "deny", "stop", "crash", "retry"]
PAGE_SCENARIOS = ["weather", "approve", "deny", "reload", "reload-after-approval"]

#: What the user types (the canonical script's keyword picks the turn).
PROMPTS = {
    "weather": "What is the weather in Paris?",
    "email": "Email the team, please.",
    # The approved call then runs 3 s (not 0.5 s): a reload lands while it runs.
    "email-slowly": "Email the team slowly, please.",
    "story": "Tell me a story.",
}

Result = dict[str, Any]


def run_driver(script: str, *args: str) -> Result:
    """Run a Node driver of tests/interop; its JSON document."""
    available, reason = node_checks_available()
    require(available, reason)
    done = subprocess.run(
        ["node", str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: Result = json.loads(done.stdout)
    return result


class Batch:
    """One client's run of all its scenarios against one server: the results, and the
    server's bus (the server still serving) to check what the agent did."""

    def __init__(
        self, client: str, generation: str | None, bus: ts.EventBus, document: Result
    ) -> None:
        self.client = client
        self.generation = generation
        self.bus = bus
        self.version: str | None = document.get("version")
        self.results: dict[str, Result] = document["results"]

    def result(self, scenario: str) -> Result:
        result = self.results[scenario]
        assert result["ok"], result["error"]
        return result


class Batches:
    """Each batch runs once, when its first test asks for it; its server keeps serving
    until the module ends. A batch that failed or skipped does so for each test."""

    def __init__(self, stack: contextlib.ExitStack, tmp: Path) -> None:
        self._stack = stack
        self._tmp = tmp
        self._done: dict[tuple[str, ...], Any] = {}
        self._buses: dict[str, ts.EventBus] = {}

    def _once(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        if key not in self._done:
            try:
                self._done[key] = make()
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:
                self._done[key] = exc
        done = self._done[key]
        if isinstance(done, BaseException):
            raise done
        return done

    def _server(self, flavour: str, dialect: str, page: Callable[[Any], Any] | None) -> str:
        bus = ts.EventBus()
        self._stack.callback(bus.close)
        app = FLAVOURS[flavour](bus, "agui" if dialect == "agui" else "ai_sdk")
        served = self._stack.enter_context(serve(app if page is None else page(app)))
        self._buses[served.url] = bus
        return served.url

    def node(self, flavour: str, generation: str) -> Batch:
        def make() -> Batch:
            require(*node_checks_available())
            url = self._server(flavour, "ai_sdk", None)
            document = run_driver("chat_ai.mjs", url + "/api/chat", generation, *NODE_SCENARIOS)
            return Batch("node", generation, self._buses[url], document)

        batch: Batch = self._once(("node", flavour, generation), make)
        return batch

    def agui(self, flavour: str) -> Batch:
        def make() -> Batch:
            require(*node_checks_available())
            url = self._server(flavour, "agui", None)
            document = run_driver("chat_agui.mjs", url + "/agent", *AGUI_SCENARIOS)
            return Batch("agui", None, self._buses[url], document)

        batch: Batch = self._once(("agui", flavour), make)
        return batch

    def bundle(self, generation: str) -> bytes:
        def make() -> bytes:
            require(*node_checks_available())
            out = self._tmp / f"use_chat_ai{generation}.js"
            done = subprocess.run(
                ["node", str(HERE / "page" / "build.mjs"), generation, str(out)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                cwd=HERE,
            )
            assert done.returncode == 0, done.stderr[-4000:]
            return out.read_bytes()

        bundle: bytes = self._once(("bundle", generation), make)
        return bundle

    def page(self, flavour: str, generation: str) -> Batch:
        def make() -> Batch:
            script = self.bundle(generation)
            url = self._server(
                flavour, "ai_sdk", lambda app: with_page(PAGE, app, {"/use_chat.js": script})
            )
            results = run_pages(url, PAGE_SCENARIOS)
            return Batch("page", generation, self._buses[url], {"results": results})

        batch: Batch = self._once(("page", flavour, generation), make)
        return batch


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Batches]:
    with contextlib.ExitStack() as stack:
        yield Batches(stack, tmp_path_factory.mktemp("chat-clients"))


# -- useChat in Chromium -------------------------------------------------------------------

PAGE = (
    b'<!doctype html><html><head><meta charset="utf-8"><title>useChat</title></head>'
    b'<body><div id="root"></div><script type="module" src="/use_chat.js"></script>'
    b"</body></html>"
)


def idle(responses: int) -> str:
    """JavaScript: the chat is idle after ``responses`` responses, each read to its end."""
    return (
        "window.chatView && ['ready', 'error'].includes(window.chatView.status)"
        f" && window.chatLog.responses.length >= {responses}"
        " && window.chatLog.responses.every(r => r.end !== 'open')"
    )


LAST_TEXT = (
    "(m => m && m.role === 'assistant' ? m.parts.filter(p => p.type === 'text')"
    ".map(p => p.text).join('') : '')(window.chatView.messages.at(-1))"
)
APPROVE = ".tool[data-state='approval-requested'] button.approve"
DENY = ".tool[data-state='approval-requested'] button.deny"


class PageScenario:
    """One scenario on the page: a fresh chat; what the test did, and what the page
    recorded (across reloads)."""

    def __init__(self, page: Any, url: str) -> None:
        self.page = page
        self.url = url
        self.steps: list[dict[str, Any]] = []
        self.earlier: list[dict[str, Any]] = []  # responses of page loads before a reload
        self.page_errors: list[str] = []
        # Clear the stored chat from a page of the same origin that runs no app: the
        # app's own page would store its restored chat again once it renders (a race
        # that left the last scenario's user message in the next one).
        page.goto(url + "/no-app-here")
        page.evaluate("sessionStorage.clear()")
        page.goto(url + "/")
        wait_for(page, idle(1))  # the resume on load: nothing to resume (204)

    def send(self, text: str) -> None:
        self.page.fill("#prompt", text)
        self.page.click("#send")

    def asked(self) -> None:
        wait_for(self.page, f"document.querySelector({APPROVE!r}) && ({idle(2)})")
        view = self.page.evaluate("window.chatView")
        last = view["messages"][-1]
        (part,) = [p for p in last["parts"] if p.get("state") == "approval-requested"]
        shown = self.page.query_selector(".tool[data-state='approval-requested'] .reason")
        self.steps.append(
            {
                "step": "asked",
                "messageId": last["id"],
                "part": part,
                "shown": None if shown is None else shown.text_content(),
            }
        )

    def decided(self) -> None:
        self.steps.append(
            {
                "step": "decided",
                "messageId": self.page.evaluate("window.chatView.messages.at(-1).id"),
            }
        )

    def reload(self) -> None:
        """Reload the page mid-turn; the responses of this load are kept (an open one
        as cut by the reload)."""
        for response in self.page.evaluate("window.chatLog.responses"):
            self.earlier.append(
                {**response, "end": "reloaded" if response["end"] == "open" else response["end"]}
            )
        self.page.reload()

    def result(self) -> Result:
        view = self.page.evaluate("window.chatView") or {}
        log = self.page.evaluate("window.chatLog") or {}
        return {
            "chat": view.get("id"),
            "status": view.get("status"),
            "chatError": view.get("error") or None,
            "steps": self.steps,
            "errors": log.get("errors", []) + self.page_errors,
            "data": log.get("data", []),
            "messages": view.get("messages", []),
            "responses": self.earlier + log.get("responses", []),
        }


def page_weather(s: PageScenario) -> None:
    s.send(PROMPTS["weather"])
    wait_for(s.page, idle(2))


def page_decided(s: PageScenario, approved: bool) -> None:
    s.send(PROMPTS["email"])
    s.asked()
    s.page.click(APPROVE if approved else DENY)
    wait_for(s.page, idle(3))
    s.decided()


def page_reload(s: PageScenario) -> None:
    s.send(PROMPTS["story"])
    wait_for(s.page, f"{LAST_TEXT}.length > 10")
    s.steps.append({"step": "cut", "text": s.page.evaluate(LAST_TEXT)})
    s.reload()
    # The page restores the chat and the user's message; resume rebuilds the answer.
    wait_for(s.page, idle(1))


def page_reload_after_approval(s: PageScenario) -> None:
    s.send(PROMPTS["email-slowly"])
    s.asked()
    s.page.click(APPROVE)
    # The continuation has begun: the approved call runs (3 s). Reload there.
    wait_for(s.page, "window.chatLog.responses.length >= 3 && window.chatLog.responses[2].status")
    s.steps.append(
        {"step": "cut", "parts": s.page.evaluate("window.chatView.messages.at(-1).parts")}
    )
    s.reload()
    wait_for(s.page, idle(1))


PAGE_FLOWS: dict[str, Callable[[PageScenario], None]] = {
    "weather": page_weather,
    "approve": lambda s: page_decided(s, True),
    "deny": lambda s: page_decided(s, False),
    "reload": page_reload,
    "reload-after-approval": page_reload_after_approval,
}


def run_pages(url: str, scenarios: list[str]) -> dict[str, Result]:
    """Every scenario in sequence in one Chromium, each on a fresh chat."""
    results: dict[str, Result] = {}
    with browser_page() as page:
        failures: list[str] = []
        page.on("pageerror", lambda e: failures.append(f"page error: {e}"))
        for name in scenarios:
            failures.clear()
            scenario: PageScenario | None = None
            try:
                scenario = PageScenario(page, url)
                PAGE_FLOWS[name](scenario)
                results[name] = {"ok": True, **scenario.result()}
            except Exception as exc:
                recorded: Result = {}
                if scenario is not None:
                    with contextlib.suppress(Exception):  # the page may be gone
                        recorded = scenario.result()
                results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", **recorded}
            results[name]["errors"] = results[name].get("errors", []) + failures
    return results


# -- what the script says a client ends with -----------------------------------------------


def value(output: Any) -> Any:
    """A tool's result as data (a framework may have sent it as a JSON string)."""
    if isinstance(output, str):
        try:
            return json.loads(output)
        except ValueError:
            return output
    return output


def mentions(output: Any, text: str) -> bool:
    return text in (output if isinstance(output, str) else json.dumps(output))


def outline(message: Result) -> list[tuple[str, str | None]]:
    """The message's text and tool parts in order: ("text", the text stripped), adjacent
    text parts as one; (tool part type, state)."""
    out: list[tuple[str, str | None]] = []
    for part in message["parts"]:
        kind = part["type"]
        if kind == "text":
            if out and out[-1][0] == "text":
                out[-1] = ("text", (str(out[-1][1]) + part["text"]).strip())
            else:
                out.append(("text", part["text"].strip()))
        elif kind.startswith("tool-"):
            out.append((kind, part.get("state")))
    return out


def tool_part(message: Result, tool: str) -> Result:
    parts: list[Result] = [p for p in message["parts"] if p["type"] == f"tool-{tool}"]
    assert len(parts) == 1, parts
    return parts[0]


def one_turn(result: Result) -> Result:
    """The assistant message of a chat that is exactly (user, assistant)."""
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant"], roles
    assistant: Result = result["messages"][1]
    return assistant


def step(result: Result, name: str) -> Result:
    found: list[Result] = [s for s in result["steps"] if s["step"] == name]
    assert len(found) == 1, result["steps"]
    return found[0]


def settled_well(result: Result) -> None:
    assert result["errors"] == [], result["errors"]
    assert (result["status"], result["chatError"]) == ("ready", None)


def check_responses(result: Result, batch: Batch) -> None:
    """Every chunk of every response accepted by the generation's own schema; no body
    cut short (but where this client cut it: a stop, a reload)."""
    for r in result["responses"]:
        said = f"{r['method']} {r['path']} ({r['status']})"
        assert r["refused"] == [], (
            f"{said}: chunks refused by ai {batch.generation}: {r['refused']}"
        )
        assert r["end"] in ("eof", "no body", "aborted", "reloaded"), f"{said} ended: {r['end']}"
        if r["end"] == "eof":
            assert r["status"] == 200, said
            assert r["chunks"] and r["chunks"][-1] == "[DONE]", f"{said}: no [DONE] at the end"


def ran_once(bus: ts.EventBus, chat: str, tool: str) -> None:
    """The agent ran the tool once, in one run that did the work (a framework that
    stops to wait may leave one more run, ended ``interrupted``)."""
    snapshot = bus.snapshot(chat)
    calls = [c for c in snapshot.calls if c.tool == tool]
    seen = (
        f"{tool} calls {[(c.call_id, c.state.value, c.run_id) for c in calls]}, "
        f"runs {[(r.run_id, r.state) for r in snapshot.runs]}"
    )
    assert [c.state for c in calls] == [ts.CallState.COMPLETED], seen
    sub = bus.subscribe(session=chat, after=f"{bus.epoch}-0")
    try:
        events = sub.take_nowait()
    finally:
        sub.close()
    completed = [e for e in events if isinstance(e, ts.ToolCompleted)]
    assert [e.call_id for e in completed] == [calls[0].call_id], seen
    runs = [r.state for r in snapshot.runs if r.state != "interrupted"]
    assert runs == ["completed"], seen


def stopped(bus: ts.EventBus, chat: str) -> None:
    """The turn was cancelled on the server: the sleeping call and its run."""
    snapshot = bus.snapshot(chat)
    assert [c.state for c in snapshot.calls if c.tool == "sleep"] == [ts.CallState.CANCELLED]
    assert [r.state for r in snapshot.runs] == ["cancelled"]


# -- the AI SDK clients (Node and the page) ------------------------------------------------


def check_weather(result: Result, batch: Batch) -> None:
    assistant = one_turn(result)
    assert outline(assistant) == [
        ("text", "Let me check the weather in Paris."),
        ("tool-get_weather", "output-available"),
        ("text", "It is 21 degrees in Paris."),
    ]
    call = tool_part(assistant, "get_weather")
    assert call["input"] == {"city": "Paris"}
    assert mentions(call["output"], "21"), call["output"]
    settled_well(result)
    if batch.client == "node":
        assert "data-tool-progress" in [d["type"] for d in result["data"]], result["data"]


def check_build(result: Result, batch: Batch) -> None:
    assistant = one_turn(result)
    assert outline(assistant) == [
        ("text", "Running the build."),
        ("tool-run_build", "output-error"),
        ("text", "The build failed."),
    ]
    assert "exit code 1" in tool_part(assistant, "run_build")["errorText"]
    settled_well(result)


def check_decided(result: Result, batch: Batch, approved: bool) -> None:
    asked, decided = step(result, "asked"), step(result, "decided")
    assert asked["part"]["state"] == "approval-requested"
    request = [
        c
        for r in result["responses"]
        for c in r["chunks"]
        if isinstance(c, dict) and c["type"] == "tool-approval-request"
    ]
    assert request and request[0].get("reason") == "Sends an email", request
    if batch.generation == "7":  # ai 6's parts carry no reason (its client drops it)
        assert asked["part"]["approval"].get("requestReason") == "Sends an email"
        if batch.client == "page":
            assert asked["shown"] == "Sends an email"
    assistant = one_turn(result)
    # One assistant message across the approval: the same before and after.
    assert assistant["id"] == asked["messageId"] == decided["messageId"]
    assert outline(assistant) == [
        ("text", "I will email the team."),
        ("tool-send_email", "output-available" if approved else "output-denied"),
        ("text", "Sent." if approved else "Not sent."),
    ]
    call = tool_part(assistant, "send_email")
    assert call["approval"]["approved"] is approved
    if approved:
        assert value(call["output"]) == {"sent": True}
    settled_well(result)


def check_reload(result: Result, batch: Batch) -> None:
    whole = "".join(STORY)
    cut = step(result, "cut")["text"]
    assert 0 < len(cut) < len(whole.strip()) and whole.startswith(cut), cut  # mid-text
    assistant = one_turn(result)
    # Nothing lost, nothing doubled.
    assert outline(assistant) == [
        ("text", whole.strip()),
        ("tool-lookup", "output-available"),
        ("text", "The end."),
    ]
    assert value(tool_part(assistant, "lookup")["output"]) == {"ok": 1}
    assert [r["status"] for r in result["responses"] if r["method"] == "GET"][-1] == 200
    settled_well(result)


def check_reload_after_approval(result: Result, batch: Batch) -> None:
    at_cut = [p for p in step(result, "cut")["parts"] if p["type"] == "tool-send_email"]
    assert [p["state"] for p in at_cut] != ["output-available"], "cut after the call ended"
    assistant = one_turn(result)
    assert outline(assistant) == [
        ("text", "I will email the team."),
        ("tool-send_email", "output-available"),
        ("text", "Sent."),
    ]
    call = tool_part(assistant, "send_email")
    assert value(call["output"]) == {"sent": True}
    # Rebuilt from the stream, the part may not know the decision; if it says, it is yes.
    assert (call.get("approval") or {}).get("approved", True) is True
    settled_well(result)


def check_stop(result: Result, batch: Batch) -> None:
    assert step(result, "stop")["status"] == 200
    resumed = [r["status"] for r in result["responses"] if r["method"] == "GET"]
    assert resumed == [204], resumed
    settled_well(result)
    stopped(batch.bus, result["chat"])


def check_crash(result: Result, batch: Batch) -> None:
    assert any(CRASH in e for e in result["errors"]), result["errors"]
    assert result["status"] == "error"
    (response,) = result["responses"]
    assert response["end"] == "eof" and response["chunks"][-1] == "[DONE]"
    failed = [c for c in response["chunks"] if isinstance(c, dict) and c["type"] == "error"]
    assert failed and CRASH in failed[0]["errorText"], response["chunks"]


def check_retry(result: Result, batch: Batch) -> None:
    check_decided(
        {**result, "responses": [r for r in result["responses"] if not r.get("retry")]},
        batch,
        approved=True,
    )
    (again,) = [r for r in result["responses"] if r.get("retry")]
    # The continued run's stream, replayed, or 204 once nothing is active (DESIGN §14);
    # check_responses has validated every chunk of it.
    assert again["status"] in (200, 204), again
    if again["status"] == 200:
        assert again["end"] == "eof" and again["chunks"][-1] == "[DONE]", again
    ran_once(batch.bus, result["chat"], "send_email")


AI_SDK_CHECKS: dict[str, Callable[[Result, Batch], None]] = {
    "weather": check_weather,
    "build": check_build,
    "approve": lambda result, batch: check_decided(result, batch, approved=True),
    "deny": lambda result, batch: check_decided(result, batch, approved=False),
    "reload": check_reload,
    "reload-after-approval": check_reload_after_approval,
    "stop": check_stop,
    "crash": check_crash,
    "retry": check_retry,
}


@pytest.mark.parametrize("scenario", NODE_SCENARIOS)
@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_abstract_chat_in_node(
    batches: Batches, flavour: str, generation: str, scenario: str
) -> None:
    batch = batches.node(flavour, generation)
    result = batch.result(scenario)
    check_responses(result, batch)
    AI_SDK_CHECKS[scenario](result, batch)


@pytest.mark.parametrize("scenario", PAGE_SCENARIOS)
@pytest.mark.parametrize("generation", GENERATIONS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_use_chat_in_chromium(
    batches: Batches, flavour: str, generation: str, scenario: str
) -> None:
    batch = batches.page(flavour, generation)
    result = batch.result(scenario)
    check_responses(result, batch)
    AI_SDK_CHECKS[scenario](result, batch)


@pytest.mark.parametrize("generation", GENERATIONS)
def test_each_generation_runs_its_own_ai_package(batches: Batches, generation: str) -> None:
    """The Node driver imports the generation's ``ai``; the page's bundle holds that one
    ``ai`` and no other (``@ai-sdk/react`` 3 uses ai 6)."""
    flavour = next(iter(FLAVOURS))
    assert batches.node(flavour, generation).version == GENERATIONS[generation]
    bundle = batches.bundle(generation)
    versions = {v: f'"{v}"'.encode() in bundle for v in GENERATIONS.values()}
    assert versions == {v: v == GENERATIONS[generation] for v in GENERATIONS.values()}


# -- AG-UI's HttpAgent -------------------------------------------------------------------------


def said(result: Result) -> list[str]:
    """The assistant's words between its calls (text messages with nothing between them
    as one), stripped."""
    out: list[str] = []
    joined = False  # the previous message was the assistant's text, no call after it
    for m in result["messages"]:
        content = m.get("content") if m["role"] == "assistant" else None
        if isinstance(content, str) and content:
            if joined:
                out[-1] += content
            else:
                out.append(content)
            joined = not m.get("toolCalls")
        else:
            joined = False
    return [text.strip() for text in out]


def tool_results(result: Result) -> list[str]:
    return [m["content"] for m in result["messages"] if m["role"] == "tool"]


def verified(run: Result) -> None:
    """The run's stream passed the verifier, from RUN_STARTED to its end."""
    assert run["failed"] is None, run["failed"]
    assert run["events"][0] == "RUN_STARTED", run["events"]


def agui_weather(result: Result, batch: Batch) -> None:
    (run,) = result["runs"]
    verified(run)
    assert (run["events"][-1], run["outcome"]) == ("RUN_FINISHED", "success")
    assert "TOOL_CALL_START" in run["events"]
    assert said(result) == ["Let me check the weather in Paris.", "It is 21 degrees in Paris."]
    (output,) = tool_results(result)
    assert "21" in output


def agui_build(result: Result, batch: Batch) -> None:
    (run,) = result["runs"]
    verified(run)
    assert (run["events"][-1], run["outcome"]) == ("RUN_FINISHED", "success")
    assert said(result) == ["Running the build.", "The build failed."]
    (output,) = tool_results(result)
    assert "exit code 1" in output


def agui_decided(result: Result, batch: Batch, approved: bool) -> None:
    first, second = result["runs"]
    verified(first)
    assert (first["events"][-1], first["outcome"]) == ("RUN_FINISHED", "interrupt")
    (interrupt,) = first["finished"]["interrupts"]
    assert interrupt["message"] == "Sends an email" and interrupt["toolCallId"]
    # The continuation does not send the call again; it goes on from the decision.
    verified(second)
    assert "TOOL_CALL_START" not in second["events"]
    assert (second["events"][-1], second["outcome"]) == ("RUN_FINISHED", "success")
    assert second["interrupts"] == []
    assert said(result) == ["I will email the team.", "Sent." if approved else "Not sent."]
    (output,) = tool_results(result)
    if approved:
        assert value(output) == {"sent": True}
    else:
        assert "denied" in output.lower(), output


def agui_stop(result: Result, batch: Batch) -> None:
    assert step(result, "stop")["status"] == 200
    (run,) = result["runs"]
    verified(run)
    assert run["events"][-1] == "RUN_FINISHED"
    assert run["finished"] == {"type": "cancelled"}
    stopped(batch.bus, result["thread"])


def agui_crash(result: Result, batch: Batch) -> None:
    (run,) = result["runs"]
    verified(run)
    assert run["events"][-1] == "RUN_ERROR"
    assert CRASH in run["runError"], run["runError"]


def agui_retry(result: Result, batch: Batch) -> None:
    agui_decided(result, batch, approved=True)
    again = step(result, "retry")
    assert again["status"] in (200, 204), again
    if again["status"] == 200:
        assert again["verified"] == "ok", again
    ran_once(batch.bus, result["thread"], "send_email")


AGUI_CHECKS: dict[str, Callable[[Result, Batch], None]] = {
    "weather": agui_weather,
    "build": agui_build,
    "approve": lambda result, batch: agui_decided(result, batch, approved=True),
    "deny": lambda result, batch: agui_decided(result, batch, approved=False),
    "stop": agui_stop,
    "crash": agui_crash,
    "retry": agui_retry,
}


@pytest.mark.parametrize("scenario", AGUI_SCENARIOS)
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_http_agent(batches: Batches, flavour: str, scenario: str) -> None:
    batch = batches.agui(flavour)
    result = batch.result(scenario)
    for output in tool_results(result):
        assert "Error: Error:" not in output, output
    AGUI_CHECKS[scenario](result, batch)
