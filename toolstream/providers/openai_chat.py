"""OpenAI Chat Completions streams (``chat.completion.chunk``) -> live tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import toolstream as ts

from ._base import Ingest, as_mapping, field

__all__ = ["OpenAIChatIngest"]


class _Pending:
    __slots__ = ("custom", "handle", "text")

    def __init__(self, handle: ts.CallHandle, custom: bool) -> None:
        self.handle = handle
        self.custom = custom  # a "custom" (free-form text input) tool
        self.text: list[str] = []


class OpenAIChatIngest(Ingest):
    """Feeds ``choices[].delta.tool_calls[]`` fragments to a tracker.

    A call is announced (``tool.created``) at its first fragment, its arguments stream
    as ``tool.args.delta``, and it is ``ready`` as soon as the next tool-call index
    begins, or at ``finish_reason``: not when the turn ends. ``on_text`` receives the
    assistant's text. Usage-only chunks (``choices: []``) are fine. A ``custom`` tool's
    free-form input is published as a JSON string.
    """

    def _begin(self) -> None:
        self._pending: dict[tuple[int, int], _Pending] = {}
        self._current: dict[int, int] = {}  # choice index -> tool-call index being streamed
        self.finish_reason: str | None = None

    def _feed(self, chunk: object) -> None:
        """Take one ``chat.completion.chunk`` (dict or SDK object)."""
        data = as_mapping(chunk, "chat.completion.chunk")
        where = f"chunk {data.get('id', '?')!s:.40}"
        choices = field(data, "choices", list, where, required=False) or []
        for n, raw_choice in enumerate(choices):
            choice = as_mapping(raw_choice, f"{where} choices[{n}]")
            cwhere = f"{where} choices[{n}]"
            index = field(choice, "index", int, cwhere, required=False) or 0
            delta = choice.get("delta")
            if delta is not None:
                delta = as_mapping(delta, f"{cwhere}.delta")
                # Reasoning, as hosts that stream it put it (vLLM, DeepSeek, OpenRouter).
                reasoning = delta.get("reasoning_content", delta.get("reasoning"))
                self._reasoning(reasoning, data.get("id"))
                self._text(delta.get("content"), data.get("id"))
                calls = field(delta, "tool_calls", list, f"{cwhere}.delta", required=False) or []
                for k, raw_call in enumerate(calls):
                    self._tool_fragment(
                        index,
                        as_mapping(raw_call, f"{cwhere}.delta.tool_calls[{k}]"),
                        f"{cwhere}.delta.tool_calls[{k}]",
                        data,
                    )
            reason = field(choice, "finish_reason", str, cwhere, required=False)
            if reason is not None:
                self.finish_reason = reason
                if reason == "content_filter":
                    self._fail_pending("the provider's content filter stopped the turn")
                else:
                    for (choice_index, _), pending in self._pending.items():
                        if choice_index == index:
                            self._ready(pending)

    def _tool_fragment(
        self, choice: int, fragment: Mapping[str, Any], where: str, chunk: Mapping[str, Any]
    ) -> None:
        index = field(fragment, "index", int, where)
        key = (choice, index)
        pending = self._pending.get(key)
        function = fragment.get("function")
        custom = fragment.get("custom")
        body = as_mapping(function if function is not None else custom or {}, f"{where}.function")
        if pending is None:
            name = field(
                body, "name", str, f"{where}.{'custom' if custom is not None else 'function'}"
            )
            call_id = field(fragment, "id", str, where, required=False)
            previous = self._current.get(choice)
            if previous is not None and previous != index:
                # A new index begins: the previous call's input is complete.
                self._ready(self._pending[(choice, previous)])
            handle = self._announce(
                name,
                call_id,
                parent_id=chunk.get("id") if isinstance(chunk.get("id"), str) else None,
            )
            pending = self._pending[key] = _Pending(handle, custom is not None)
            self._current[choice] = index
        text_field = "input" if pending.custom else "arguments"
        text = field(
            body,
            text_field,
            str,
            f"{where}.{'custom' if pending.custom else 'function'}",
            required=False,
        )
        if text:
            pending.text.append(text)
            if pending.handle.state is ts.CallState.CREATED:
                pending.handle.args_delta(text)

    def _ready(self, pending: _Pending) -> None:
        handle = pending.handle
        if handle.state is not ts.CallState.CREATED:
            return
        if pending.custom:
            handle.ready(args="".join(pending.text))  # free-form input: a JSON string
        else:
            handle.ready()
