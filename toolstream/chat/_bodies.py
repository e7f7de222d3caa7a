"""What a chat client POSTs, read into one shape: the AI SDK's chat request and AG-UI's
``RunAgentInput``. Anything malformed is a :class:`BadBody` with the reason (a 400)."""

from __future__ import annotations

from typing import Any

import attrs

from toolstream import Decision
from toolstream._core.jsonenc import is_utf8
from toolstream.dialects import agui, ai_sdk

__all__ = ["BadBody", "ChatBody", "parse_body"]

#: The longest chat (thread) id and run id accepted.
MAX_ID_CHARS = 200
_TRIGGERS = ("submit-message", "regenerate-message")


class BadBody(ValueError):
    """The request body is not what the client protocol sends."""


@attrs.frozen(kw_only=True)
class ChatBody:
    """A chat request, whatever the client: its session (chat / thread id), the run id
    it asked for (AG-UI), its messages, the decisions it carries, and whether it
    continues a run waiting for a person rather than starting a turn."""

    session: str
    run_id: str | None
    messages: list[Any]
    decisions: list[Decision]
    continuation: bool
    body: dict[str, Any]


def _id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadBody(f"{what} must be a non-empty string")
    if len(value) > MAX_ID_CHARS or not is_utf8(value) or any(c in value for c in "\r\n\x00"):
        raise BadBody(f"{what} must be valid text of at most {MAX_ID_CHARS} characters")
    return value


def parse_body(dialect: str, body: object) -> ChatBody:
    """Read a parsed JSON body as ``dialect``'s client sends it."""
    if not isinstance(body, dict):
        raise BadBody("the body must be a JSON object")
    if dialect == "agui":
        return _agui(body)
    return _ai_sdk(body)


def _ai_sdk(body: dict[str, Any]) -> ChatBody:
    """``{id, messages, trigger, messageId?}`` (``DefaultChatTransport``), or
    ``{id, message}`` (the AI SDK's docs for sending only the last message)."""
    session = _id(body.get("id"), "id (the chat id)")
    messages = body.get("messages")
    if messages is None and isinstance(body.get("message"), dict):
        messages = [body["message"]]
    if not isinstance(messages, list) or not messages:
        raise BadBody("messages must be a non-empty list of UI messages")
    for k, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadBody(f"messages[{k}] must be a UI message with a role")
        if not isinstance(message.get("parts", []), list):
            raise BadBody(f"messages[{k}].parts must be a list")
    trigger = body.get("trigger")
    if trigger is not None and trigger not in _TRIGGERS:
        raise BadBody(f"trigger must be one of {', '.join(_TRIGGERS)}")
    last = messages[-1]
    # useChat sends the whole conversation: only the last message's approval responses
    # are new (older ones were applied by the request that carried them).
    decisions = ai_sdk.decisions([last])
    continuation = last["role"] == "assistant" and trigger != "regenerate-message"
    if continuation and not decisions:
        raise BadBody("the last message is the assistant's but carries no approval response")
    return ChatBody(
        session=session,
        run_id=None,
        messages=messages,
        decisions=decisions,
        continuation=continuation,
        body=body,
    )


def _agui(body: dict[str, Any]) -> ChatBody:
    """``RunAgentInput``: ``{threadId, runId, messages, state, tools, context,
    forwardedProps, resume?}``."""
    session = _id(body.get("threadId"), "threadId")
    run_id = _id(body.get("runId"), "runId")
    messages = body.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise BadBody("messages must be a list of AG-UI messages")
    resume = body.get("resume")
    if resume is not None and not isinstance(resume, list):
        raise BadBody("resume must be a list of {interruptId, status, payload?}")
    decisions = agui.decisions(body)
    if resume and len(decisions) != len(resume):
        raise BadBody("every resume entry needs an interruptId and a status")
    return ChatBody(
        session=session,
        run_id=run_id,
        messages=messages,
        decisions=decisions,
        continuation=bool(decisions),
        body=body,
    )
