"""Anthropic Messages streams (``message_start``, ``content_block_*``...) -> live tool calls."""

from __future__ import annotations

import toolstream as ts

from ._base import Ingest, as_mapping, field

__all__ = ["AnthropicIngest"]

_TOOL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")


class AnthropicIngest(Ingest):
    """Feeds Messages stream events to a tracker.

    ``content_block_start`` with a ``tool_use`` block announces the call (its
    ``toolu_…`` id), ``input_json_delta`` fragments stream its input (the first one is
    often empty), and ``content_block_stop`` makes it ready. ``message_delta`` records
    the stop reason (``max_tokens`` can cut an input off: it is then flagged invalid,
    never guessed). ``ping`` and text or thinking blocks interleave freely;
    ``on_text`` receives the text. An ``error`` event fails every call not yet ready.
    """

    def _begin(self) -> None:
        self._blocks: dict[int, ts.CallHandle] = {}
        self._message_id: str | None = None
        self.stop_reason: str | None = None

    def _feed(self, chunk: object) -> None:
        """Take one Messages stream event (dict or SDK object)."""
        event = as_mapping(chunk, "message stream event")
        kind = field(event, "type", str, "message stream event")
        where = kind
        if kind == "message_start":
            message = event.get("message")
            if message is not None:
                message_id = as_mapping(message, f"{where}.message").get("id")
                self._message_id = message_id if isinstance(message_id, str) else None
        elif kind == "content_block_start":
            index = field(event, "index", int, where)
            block = as_mapping(event.get("content_block"), f"{where}.content_block")
            block_type = field(block, "type", str, f"{where}.content_block")
            if block_type in _TOOL_BLOCKS:
                name = field(block, "name", str, f"{where}.content_block")
                call_id = field(block, "id", str, f"{where}.content_block")
                known = self._blocks.get(index)
                if known is not None and known.given_id == call_id:
                    return  # announced already (a repeated event)
                self._blocks[index] = self._announce(name, call_id, parent_id=self._message_id)
            elif block_type == "text":
                self._text(block.get("text"), self._message_id)
            elif block_type == "thinking":
                self._reasoning(block.get("thinking"), self._message_id)
        elif kind == "content_block_delta":
            index = field(event, "index", int, where)
            delta = as_mapping(event.get("delta"), f"{where}.delta")
            delta_type = field(delta, "type", str, f"{where}.delta")
            if delta_type == "input_json_delta":
                handle = self._blocks.get(index)
                if handle is None:
                    raise ts.ProviderStreamError(f"{where}: index {index} is not a tool_use block")
                text = field(delta, "partial_json", str, f"{where}.delta", required=False)
                if text and handle.state is ts.CallState.CREATED:
                    handle.args_delta(text)
            elif delta_type == "text_delta":
                self._text(delta.get("text"), self._message_id)
            elif delta_type == "thinking_delta":
                self._reasoning(delta.get("thinking"), self._message_id)
        elif kind == "content_block_stop":
            index = field(event, "index", int, where)
            handle = self._blocks.get(index)
            if handle is not None:
                self._complete_input(handle)
        elif kind == "message_delta":
            change = event.get("delta")
            if change is not None:
                reason = as_mapping(change, f"{where}.delta").get("stop_reason")
                if isinstance(reason, str):
                    self.stop_reason = reason
                    if reason == "refusal":
                        self._fail_pending("the model refused to continue")
        elif kind == "message_stop":
            self._close_open_inputs()
        elif kind == "error":
            error = event.get("error")
            detail = as_mapping(error, f"{where}.error") if error is not None else {}
            self._fail_pending(
                f"{detail.get('type') or 'error'}: {detail.get('message') or 'stream error'}"
            )
        # "ping" and event types added later: nothing to do
