"""The canonical chat script, and the chat servers that follow it.

The user's words pick the scenario; the agent's messages and calls are exactly these:

- ``weather``: text ``Let me check the weather in Paris.`` -> ``get_weather``
  ``{"city": "Paris"}`` (progress 0.5 ``halfway there``, then ``{"city": "Paris",
  "temperature": 21}``) -> text ``It is 21 degrees in Paris.``
- ``build``: text ``Running the build.`` -> ``run_build`` ``{"target": "all"}``, which
  fails with an error mentioning ``exit code 1`` -> text ``The build failed.``
- ``email``: text ``I will email the team.`` -> ``send_email`` ``{"to":
  "team@example.com"}``, which needs a person's approval (``Sends an email``) and runs
  0.5 s once approved (3 s when the user says "slowly"), returning ``{"sent": true}``
  -> text ``Sent.``; denied, the call never runs -> text ``Not sent.``
- ``story``: 30 words (``word0 `` ... ``word29 ``, one every 0.05 s) -> ``lookup``
  ``{"q": "ending"}`` returning ``{"ok": 1}`` after 0.2 s -> text ``The end.``
- ``wait``: text ``Working on it.`` -> ``sleep`` ``{"seconds": 30}`` (a client stops it)
- ``crash``: text ``Thinking.`` -> the agent raises ``RuntimeError("the model is
  unavailable")``.

:data:`FLAVOURS` are the chat servers whose agents follow it; the real clients drive
every scenario against each (tests/interop/test_chat_clients.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio

import toolstream as ts
from toolstream.chat import ChatApp, TurnRequest

#: The words of the long answer, streamed one at a time (the resume tests cut it).
STORY = [f"word{i} " for i in range(30)]

#: The keyword in the user's words that picks each script, in the order they are tried.
SCRIPTS = ("weather", "build", "email", "story", "wait", "crash", "deploy")

#: ``RuntimeError`` text of the ``crash`` script.
CRASH = "the model is unavailable"


async def run_script(bus: ts.Bus, session: str, run_id: str, text: str, pace: float = 0.05) -> None:
    """One turn of the canonical script, as run ``run_id`` of chat ``session``.

    Besides the canonical scripts, ``deploy`` asks a person from inside a running call
    (progress, then ``request_approval``), for the endpoint tests; other words get a
    one-line answer.
    """
    words = text.lower()
    script = next((name for name in SCRIPTS if name in words), None)
    async with ts.Tracker(bus, session) as tracker, tracker.run(run_id):
        if script == "weather":
            _say(tracker, "Let me check the weather in Paris.")
            async with tracker.call("get_weather", {"city": "Paris"}) as call:
                call.progress(0.5, message="halfway there")
                await anyio.sleep(pace)
                call.complete({"city": "Paris", "temperature": 21})
            _say(tracker, "It is 21 degrees in Paris.")
        elif script == "build":
            _say(tracker, "Running the build.")
            try:
                async with tracker.call("run_build", {"target": "all"}):
                    await anyio.sleep(pace)
                    raise RuntimeError("the build exited with exit code 1")
            except RuntimeError:
                pass
            _say(tracker, "The build failed.")
        elif script == "email":
            _say(tracker, "I will email the team.")
            try:
                async with tracker.call(
                    "send_email", {"to": "team@example.com"}, approval="Sends an email"
                ) as call:
                    await anyio.sleep((60 if "slowly" in words else 10) * pace)
                    call.complete({"sent": True})
                said = "Sent."
            except ts.ApprovalDenied:
                said = "Not sent."
            _say(tracker, said)
        elif script == "story":
            with tracker.message() as message:
                for word in STORY:
                    message.delta(word)
                    await anyio.sleep(pace)
            async with tracker.call("lookup", {"q": "ending"}) as call:
                await anyio.sleep(4 * pace)
                call.complete({"ok": 1})
            _say(tracker, "The end.")
        elif script == "wait":
            _say(tracker, "Working on it.")
            async with tracker.call("sleep", {"seconds": 30}) as call:
                await anyio.sleep(30)
                call.complete(None)
        elif script == "crash":
            _say(tracker, "Thinking.")
            raise RuntimeError(CRASH)
        elif script == "deploy":
            async with tracker.call("deploy", {"env": "prod"}) as call:
                call.progress(0.5, message="built")
                decision = await call.request_approval("Push to prod?")
                call.complete({"pushed": decision.approved})
        else:
            _say(tracker, "I can check the weather, run the build, email the team or tell a story.")


def _say(tracker: ts.Tracker, text: str) -> None:
    with tracker.message() as message:
        message.delta(text)


Dialect = Literal["ai_sdk", "agui", "langgraph"]
#: A chat server: ``(bus, dialect) -> ChatApp`` whose turns follow the canonical script.
ChatServer = Callable[[ts.Bus, Dialect], ChatApp]


class Turns:
    """A ``start_turn`` (and ``start_task``: a ``TaskRequest`` is a ``TurnRequest``) that
    runs the script in the server process and keeps the requests it got."""

    def __init__(self, bus: ts.Bus) -> None:
        self.bus = bus
        self.started: list[TurnRequest] = []

    async def __call__(self, request: TurnRequest) -> None:
        self.started.append(request)
        request.start_soon(run_script, self.bus, request.session, request.run_id, request.user_text)


def scripted(bus: ts.Bus, dialect: Dialect = "ai_sdk") -> ChatApp:
    """The script by hand on a plain Tracker, its turns run in this process."""

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(run_script, bus, request.session, request.run_id, request.user_text)

    return ChatApp(bus, start_turn, dialect=dialect)


def framework(name: str) -> ChatServer:
    """``ChatApp(bus, chat_agent(...))`` of a framework's agent playing the script with
    its own fake model (tests/chat_frameworks.py)."""

    def make(bus: ts.Bus, dialect: Dialect = "ai_sdk") -> ChatApp:
        from tests.chat_frameworks import framework_chat_app

        return framework_chat_app(name, bus, dialect=dialect)

    return make


#: Every chat server that follows the canonical script, by name. Add one with one line,
#: e.g. ``"langgraph": lambda bus, dialect: ChatApp(bus, chat_agent(graph), dialect=dialect)``.
FLAVOURS: dict[str, ChatServer] = {
    "scripted": scripted,
    "langgraph": framework("langgraph"),  # interrupt() inside the tool
    "langgraph-hitl": framework("langgraph-hitl"),  # HumanInTheLoopMiddleware
    "pydantic-ai": framework("pydantic-ai"),
    "openai-agents": framework("openai-agents"),
}


# -- what the AI SDK's transport posts, and what comes back --------------------------------


def kinds(items: list[Any]) -> list[str]:
    """The ``type`` of each chunk (``[DONE]`` as itself)."""
    return [c["type"] if isinstance(c, dict) else c for c in items]


def user(text: str, chat: str = "c1") -> dict[str, Any]:
    """A turn as ``DefaultChatTransport`` posts it: the user's message."""
    return {
        "id": chat,
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
    }


def approval_reply(first: dict[str, Any], streamed: list[Any], approved: bool) -> dict[str, Any]:
    """What ``useChat`` posts after ``addToolApprovalResponse`` on the response
    ``streamed`` to ``first``: the assistant message, its tool part approval-responded."""
    asked = next(
        c for c in streamed if isinstance(c, dict) and c["type"] == "tool-approval-request"
    )
    message_id = next(
        c["messageId"] for c in streamed if isinstance(c, dict) and c["type"] == "start"
    )
    tool = next(
        c["toolName"]
        for c in streamed
        if isinstance(c, dict)
        and c["type"] == "tool-input-start"
        and c["toolCallId"] == asked["toolCallId"]
    )
    part = {
        "type": f"tool-{tool}",
        "toolCallId": asked["toolCallId"],
        "state": "approval-responded",
        "approval": {"id": asked["approvalId"], "approved": approved},
    }
    assistant = {"id": message_id, "role": "assistant", "parts": [part]}
    return {**first, "messageId": message_id, "messages": [*first["messages"], assistant]}
