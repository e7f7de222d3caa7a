"""What every ``chat_agent`` shares: a turn is one toolstream run that the framework is
driven in — perhaps several times, across waits for a person — in a task of the server,
and the conversation the client sent, reduced to what may be trusted.

A framework that stops to wait for a person (a LangGraph interrupt, pydantic-ai's
``DeferredToolRequests``, the Agents SDK's interruptions) is resumed here, in the same
run, once the bus has the decisions: the continuation a chat client posts (on any
gateway process of the bus) applies them and streams the rest of that run, so the
client keeps one assistant message per turn.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import toolstream as ts

if TYPE_CHECKING:
    from toolstream.chat import TurnRequest

__all__ = ["Drive", "TurnOptions", "approval_timeout_for", "history", "start_turn_for"]

#: How a framework runs one turn: ``await drive(tracker, request)`` inside the turn's run.
Drive = Callable[[ts.Tracker, "TurnRequest"], Awaitable[None]]
#: Why a call needs a person, where the framework gives no reason: one sentence for
#: every call, one per tool name, or ``(tool, args) -> reason``.
ApprovalReason = str | Mapping[str, str] | Callable[[str, Any], "str | None"]


class TurnOptions:
    """The options every ``chat_agent`` takes, checked once."""

    def __init__(
        self,
        *,
        approval_timeout: float | None,
        messages: bool,
        tracker_options: dict[str, Any],
        approval_reason: ApprovalReason | None = None,
    ) -> None:
        if approval_timeout is not None and (
            isinstance(approval_timeout, bool)
            or not isinstance(approval_timeout, (int, float))
            or not math.isfinite(approval_timeout)
            or approval_timeout <= 0
        ):
            raise ValueError(
                f"approval_timeout must be a positive number of seconds, got {approval_timeout!r}"
            )
        if not isinstance(messages, bool):
            raise TypeError(f"messages must be True or False, not {type(messages).__name__}")
        allowed = {"summarizer", "payload", "hidden", "coalesce", "strict"}
        unknown = sorted(set(tracker_options) - allowed)
        if unknown:
            raise TypeError(
                f"unknown option(s) {', '.join(unknown)}: chat_agent takes its own options "
                f"and the Tracker's {', '.join(sorted(allowed))}"
            )
        self.approval_timeout = approval_timeout
        self.messages = messages
        self.tracker_options = tracker_options
        #: ``(tool, args) -> reason`` for calls whose framework gives none, or None.
        self.reason_for = _reasons(approval_reason)


def _reasons(given: ApprovalReason | None) -> Callable[[str, Any], str | None] | None:
    if given is None or callable(given):
        return given
    if isinstance(given, str):
        sentence = given
        return lambda tool, args: sentence
    if isinstance(given, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        table = dict(given)
        return lambda tool, args: table.get(tool)
    raise TypeError(
        "approval_reason is a sentence, a mapping of tool names to sentences, or a "
        f"function (tool, args) -> sentence; not {type(given).__name__}"
    )


def approval_timeout_for(options: TurnOptions, bus: ts.Bus) -> float:
    """How long a call of this turn waits for a person: the option, else the bus's
    ``session_ttl`` (a turn never waits longer than its session is kept)."""
    if options.approval_timeout is not None:
        return float(options.approval_timeout)
    ttl = getattr(bus, "session_ttl", None)
    return float(ttl) if isinstance(ttl, (int, float)) and ttl > 0 else 3600.0


def start_turn_for(drive: Drive, options: TurnOptions) -> Callable[[TurnRequest], Awaitable[None]]:
    """A ``start_turn`` for ``ChatApp``: the turn runs in a task of the server, as run
    ``request.run_id`` on ``request.bus``, and ``drive`` runs the framework inside it."""

    async def run_turn(request: TurnRequest) -> None:
        bus = request.bus
        if bus is None:  # pragma: no cover - ChatApp always sets it
            raise RuntimeError("the TurnRequest carries no bus: serve chat_agent with ChatApp")
        async with (
            ts.Tracker(bus, request.session, **options.tracker_options) as tracker,
            tracker.run(request.run_id),
        ):
            await drive(tracker, request)

    async def start_turn(request: TurnRequest) -> None:
        request.start_soon(run_turn, request)

    return start_turn


Role = Literal["user", "assistant"]


def history(request: TurnRequest) -> tuple[list[tuple[Role, str]], str]:
    """The conversation before this turn and the user's new words: ``([(role, text),
    ...], prompt)``.

    Only the user's and the assistant's *text* is taken from what the client sent (AI
    SDK UI messages' text parts, AG-UI messages' string content): a client can edit its
    copy, so tool calls, tool results, approval responses and system messages in it
    never reach the framework as real (the bus holds the real ones)."""
    turns: list[tuple[Role, str]] = []
    for message in request.messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = _text_of(message)
        if not text:
            continue
        if turns and turns[-1][0] == role:  # one entry per speaker turn
            turns[-1] = (role, f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append((role, text))
    prompt = request.user_text
    if turns and turns[-1][0] == "user":
        turns.pop()  # the new words are the prompt
    return turns, prompt


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = message.get("parts")
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )
