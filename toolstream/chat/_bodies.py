"""What a chat client POSTs, read into one shape: the AI SDK's chat request, AG-UI's
``RunAgentInput`` and what LangGraph's ``FetchStreamTransport`` sends. Anything
malformed is a :class:`BadBody` with the reason (a 400)."""

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
#: The longest user message a LangGraph ``input`` may carry (kept on the bus).
MAX_USER_TEXT = 64 * 1024


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
    if dialect == "langgraph":
        return _langgraph(body)
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


def _langgraph(body: dict[str, Any]) -> ChatBody:
    """``{input, command?, config: {configurable: {thread_id}}, context?,
    streamSubgraphs?}`` (``FetchStreamTransport``): ``input`` starts a turn with the
    user's messages, ``command.resume`` (``{"<interrupt id>": {approved, reason?,
    args?}}``) answers the thread's interrupts. ``messages`` are the user's new
    messages as ``{"role": "user", "content": text, "id"?}``."""
    config = body.get("config")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict) or configurable.get("thread_id") is None:
        raise BadBody("config.configurable.thread_id (the thread id) is required")
    session = _id(configurable["thread_id"], "config.configurable.thread_id")
    given = body.get("input")
    command = body.get("command")
    if command is not None and not isinstance(command, dict):
        raise BadBody("command must be an object ({resume: {<interrupt id>: decision}})")
    command = command or {}
    for unsupported in ("goto", "update"):
        if command.get(unsupported) is not None:
            raise BadBody(f"command.{unsupported} is not supported; send command.resume")
    resume = command.get("resume")
    if given is None and resume is None:
        raise BadBody("the body needs input (a new turn) or command.resume (decisions)")
    if given is not None and resume is not None:
        raise BadBody("send either input (a new turn) or command.resume, not both")
    if resume is not None:
        decisions = _resume(resume)
        return ChatBody(
            session=session,
            run_id=None,
            messages=[],
            decisions=decisions,
            continuation=True,
            body=body,
        )
    if not isinstance(given, dict):
        raise BadBody("input must be an object, e.g. {messages: [{type: 'human', content}]}")
    return ChatBody(
        session=session,
        run_id=None,
        messages=_user_messages(given.get("messages")),
        decisions=[],
        continuation=False,
        body=body,
    )


def _user_messages(messages: object) -> list[Any]:
    """The user's messages of a LangGraph ``input`` (a list, or one message), as
    ``{"role": "user", "content": text, "id"?}``; only the user's are accepted: the
    thread's other messages are the bus's, never the client's copy."""
    if messages is None:
        return []
    if isinstance(messages, (dict, str)):
        messages = [messages]
    if not isinstance(messages, list):
        raise BadBody("input.messages must be a list of messages")
    out: list[Any] = []
    for k, message in enumerate(messages):
        if isinstance(message, str):
            message = {"type": "human", "content": message}
        if not isinstance(message, dict):
            raise BadBody(f"input.messages[{k}] must be a message object")
        kind = message.get("type", message.get("role"))
        if kind not in ("human", "user"):
            raise BadBody(f"input.messages[{k}]: only the user's messages (type 'human') are taken")
        text = _text(message.get("content"))
        if text is None:
            raise BadBody(f"input.messages[{k}].content must be text or a list of text blocks")
        if len(text) > MAX_USER_TEXT or not is_utf8(text):
            raise BadBody(
                f"input.messages[{k}] must be valid text of at most {MAX_USER_TEXT} characters"
            )
        user: dict[str, Any] = {"role": "user", "content": text}
        if message.get("id") is not None:
            user["id"] = _id(message["id"], f"input.messages[{k}].id")
        out.append(user)
    return out


def _text(content: object) -> str | None:
    """A LangChain message's content as text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                return None
            texts.append(text)
    return "".join(texts)


def _resume(resume: object) -> list[Decision]:
    """``command.resume`` as LangGraph maps resume values by interrupt id: ``{"<interrupt
    id>": {approved, reason?, args?}}`` (an interrupt's id is its approval's id)."""
    if not isinstance(resume, dict) or not resume:
        raise BadBody(
            'command.resume maps each interrupt\'s id to its decision: {"<interrupt id>": '
            '{"approved": true}}'
        )
    out: list[Decision] = []
    for approval_id, value in resume.items():
        _id(approval_id, "an interrupt id in command.resume")
        if not isinstance(value, dict) or not isinstance(value.get("approved"), bool):
            raise BadBody(
                f"command.resume[{approval_id!r}] must be {{approved: true|false, reason?, args?}}"
            )
        reason = value.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise BadBody(f"command.resume[{approval_id!r}].reason must be text")
        args = value.get("args")
        if args is not None and not isinstance(args, dict):
            raise BadBody(f"command.resume[{approval_id!r}].args must be an object")
        out.append(
            Decision(approval_id=approval_id, approved=value["approved"], reason=reason, args=args)
        )
    return out
