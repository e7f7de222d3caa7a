"""Scripted agents for the chat endpoint tests: what a real agent announces, without a
model. The user's last words pick the script."""

from __future__ import annotations

from typing import Any

import anyio

import toolstream as ts
from toolstream.chat import ChatApp, TurnRequest

#: The words of the long answer, streamed one at a time (the resume tests cut it).
STORY = [f"word{i} " for i in range(30)]


async def run_script(bus: ts.Bus, session: str, run_id: str, text: str, pace: float = 0.05) -> None:
    """One turn: a long answer around a plain call ("story"), a running call that asks a
    person ("deploy"), or an email that needs a person's approval (anything else)."""
    async with ts.Tracker(bus, session) as tracker, tracker.run(run_id):
        if "story" in text:
            with tracker.message() as message:
                for word in STORY:
                    message.delta(word)
                    await anyio.sleep(pace)
            async with tracker.call("lookup", {"q": "ending"}) as call:
                await anyio.sleep(4 * pace)
                call.complete({"ok": 1})
            with tracker.message() as message:
                message.delta("The end.")
            return
        if "deploy" in text:  # an approval asked from inside the running tool
            async with tracker.call("deploy", {"env": "prod"}) as call:
                call.progress(0.5, message="built")
                decision = await call.request_approval("Push to prod?")
                call.complete({"pushed": decision.approved})
            return
        with tracker.message() as message:
            message.reasoning("They want an email sent. ")
            message.delta("I will email the team.\n")
        try:
            async with tracker.call(
                "send_email", {"to": "team@example.com"}, approval="Sends an email"
            ) as call:
                call.complete({"sent": True})
            said = "Sent."
        except ts.ApprovalDenied:
            said = "Not sent."
        with tracker.message() as message:
            message.delta(said)


def chat_app(bus: ts.Bus, **options: Any) -> ChatApp:
    """A ChatApp whose turns run the scripts in this process."""

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(run_script, bus, request.session, request.run_id, request.user_text)

    return ChatApp(bus, start_turn, **options)
