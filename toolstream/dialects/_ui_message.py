"""A UI message built from UI message stream chunks, as the AI SDK's client builds it.

The AI SDK shows a sub-agent as its parent tool's output: the sub-agent's whole
``UIMessage`` so far (preliminary outputs), as its docs build it with
``readUIMessageStream``. :class:`UIMessageBuilder` is that reader for the chunks
toolstream's own AI SDK dialect writes (the subset it sends), following ``ai`` 7.0's
``processUIMessageStream``: the same parts, states and fields, the ``undefined`` ones
left out as ``JSON.stringify`` leaves them out.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["UIMessageBuilder", "partial_json"]


class UIMessageBuilder:
    """Applies chunks to one assistant message: ``apply(chunk)`` says whether the message
    changed; ``message()`` is a copy of it as JSON (``{id, role, parts, metadata?}``)."""

    __slots__ = ("_partial", "_reasoning", "_text", "_tools", "id", "metadata", "parts")

    def __init__(self) -> None:
        self.id = ""
        self.metadata: dict[str, Any] | None = None
        self.parts: list[dict[str, Any]] = []
        self._tools: dict[str, dict[str, Any]] = {}
        self._text: dict[str, dict[str, Any]] = {}
        self._reasoning: dict[str, dict[str, Any]] = {}
        self._partial: dict[str, dict[str, Any]] = {}

    def message(self) -> dict[str, Any]:
        """The message as JSON, its parts copied (later chunks do not change it)."""
        out: dict[str, Any] = {"id": self.id, "role": "assistant"}
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        out["parts"] = [dict(part) for part in self.parts]
        return out

    def apply(self, chunk: dict[str, Any]) -> bool:
        """Apply one chunk; True when the message changed."""
        kind = chunk.get("type")
        if kind == "start":
            if chunk.get("messageId") is not None:
                self.id = chunk["messageId"]
            return False
        if kind == "start-step":
            self.parts.append({"type": "step-start"})
            return True
        if kind == "text-start":
            text: dict[str, Any] = {"type": "text", "text": "", "state": "streaming"}
            self._text[chunk["id"]] = text
            self.parts.append(text)
            return True
        if kind == "reasoning-start":
            reasoning = {"type": "reasoning", "id": chunk["id"], "text": "", "state": "streaming"}
            self._reasoning[chunk["id"]] = reasoning
            self.parts.append(reasoning)
            return True
        if kind in ("text-delta", "reasoning-delta", "text-end", "reasoning-end"):
            active = self._text if kind.startswith("text") else self._reasoning
            found = active.get(chunk["id"])
            if found is None:
                return False
            if kind.endswith("delta"):
                found["text"] += chunk.get("delta", "")
            else:
                found["state"] = "done"
                del active[chunk["id"]]
            return True
        if kind == "tool-input-start":
            self._partial[chunk["toolCallId"]] = {
                "text": "",
                "toolName": chunk["toolName"],
                "dynamic": bool(chunk.get("dynamic")),
                "title": chunk.get("title"),
            }
            self._tool(chunk, "input-streaming", title=chunk.get("title"))
            return True
        if kind == "tool-input-delta":
            partial = self._partial.get(chunk["toolCallId"])
            if partial is None:
                return False
            partial["text"] += chunk["inputTextDelta"]
            self._tool(
                {"toolCallId": chunk["toolCallId"], **partial},
                "input-streaming",
                input=partial_json(partial["text"]),
                rawInput=partial["text"],
                title=partial["title"],
            )
            return True
        if kind == "tool-input-available":
            self._tool(chunk, "input-available", input=chunk.get("input"), title=chunk.get("title"))
            return True
        if kind == "tool-input-error":
            existing = self._tools.get(chunk["toolCallId"])
            if existing is not None:
                chunk = {**chunk, "dynamic": existing["type"] == "dynamic-tool"}
            self._tool(
                chunk, "output-error", input=chunk.get("input"), errorText=chunk["errorText"]
            )
            return True
        if kind in ("tool-output-available", "tool-output-error"):
            ended = self._tools.get(chunk["toolCallId"])
            if ended is None:
                return False  # the client throws: the dialect never sends it
            fields: dict[str, Any] = {"input": ended.get("input")}
            if kind == "tool-output-available":
                state = "output-available"
                fields["output"] = chunk.get("output")
                fields["preliminary"] = chunk.get("preliminary")
            else:
                state = "output-error"
                fields["errorText"] = chunk["errorText"]
                if ended["type"] != "dynamic-tool":
                    fields["rawInput"] = ended.get("rawInput")
            self._update(ended, state, fields)
            return True
        if kind == "tool-approval-request":
            asked = self._tools.get(chunk["toolCallId"])
            if asked is None:
                return False
            asked["state"] = "approval-requested"
            approval: dict[str, Any] = {"id": chunk["approvalId"]}
            if chunk.get("reason") is not None:
                approval["requestReason"] = chunk["reason"]
            asked["approval"] = approval
            return True
        if kind == "tool-output-denied":
            denied = self._tools.get(chunk["toolCallId"])
            if denied is None:
                return False
            denied["state"] = "output-denied"
            return True
        return False  # finish-step, finish, error, abort, data parts: not in the message

    def _tool(self, chunk: dict[str, Any], state: str, **fields: Any) -> None:
        """Create or update the tool part of ``chunk``'s call (``updateToolPart`` and
        ``updateDynamicToolPart``)."""
        call_id = chunk["toolCallId"]
        part = self._tools.get(call_id)
        dynamic = bool(chunk.get("dynamic"))
        name = chunk["toolName"]
        if part is None:
            part = (
                {"type": "dynamic-tool", "toolName": name, "toolCallId": call_id, "state": state}
                if dynamic
                else {"type": f"tool-{name}", "toolCallId": call_id, "state": state}
            )
            for key, value in fields.items():
                if value is not None:
                    part[key] = value
            self._tools[call_id] = part
            self.parts.append(part)
            return
        if part["type"] == "dynamic-tool":
            part["toolName"] = name
        else:
            part["type"] = f"tool-{name}"
        self._update(part, state, fields)

    @staticmethod
    def _update(part: dict[str, Any], state: str, fields: dict[str, Any]) -> None:
        part["state"] = state
        title = fields.pop("title", None)
        for key in ("input", "output", "errorText", "rawInput", "preliminary"):
            value = fields.get(key)
            if value is None:
                part.pop(key, None)
            else:
                part[key] = value
        if title is not None:
            part["title"] = title


_CLOSERS = {"{": "}", "[": "]"}


def partial_json(text: str) -> Any:
    """The value of JSON text cut off mid-way, as far as it goes (what the AI SDK shows of
    a tool's input while it streams), or None."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    stack: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif char in "}]" and stack:
            stack.pop()
    fixed = text + ('"' if in_string and not escaped else "")
    for candidate in (fixed, fixed.rstrip().rstrip(",:")):
        try:
            return json.loads(candidate + "".join(reversed(stack)))
        except ValueError:
            continue
    return None
