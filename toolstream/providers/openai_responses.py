"""OpenAI Responses API streams (``response.*`` events) -> live tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import toolstream as ts

from ._base import Ingest, as_mapping, field, logger

__all__ = ["OpenAIResponsesIngest"]

_CALL_ITEMS = {"function_call": "arguments", "custom_tool_call": "input"}


class _Item:
    __slots__ = ("handle", "kind", "text")

    def __init__(self, handle: ts.CallHandle, kind: str) -> None:
        self.handle = handle
        self.kind = kind
        self.text: list[str] = []


class OpenAIResponsesIngest(Ingest):
    """Feeds Responses API events to a tracker.

    ``response.output_item.added`` with a ``function_call`` item announces the call
    (the item's ``call_id``, ``call_…``, is the call's id; its ``id``, ``fc_…``, is what
    the argument events name), ``response.function_call_arguments.delta`` streams its
    input and ``.done`` (or ``response.output_item.done``) makes it ready.
    ``response.failed`` and ``error`` events fail every call not yet ready;
    ``response.incomplete`` ends the inputs as they are. ``on_text`` receives
    ``response.output_text.delta`` text. Unknown event types are ignored.
    """

    def _begin(self) -> None:
        self._items: dict[str, _Item] = {}  # item id (fc_…) -> call
        self.status: str | None = None

    def _feed(self, chunk: object) -> None:
        """Take one Responses stream event (dict or SDK object)."""
        event = as_mapping(chunk, "response stream event")
        kind = field(event, "type", str, "response stream event")
        where = f"{kind} (sequence_number {event.get('sequence_number', '?')})"
        if kind == "response.output_item.added":
            self._added(as_mapping(event.get("item"), f"{where}.item"), f"{where}.item")
        elif kind in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            call = self._item(event, where)
            delta = field(event, "delta", str, where)
            if delta:
                call.text.append(delta)
                if call.handle.state is ts.CallState.CREATED:
                    call.handle.args_delta(delta)
        elif kind in (
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.done",
        ):
            call = self._item(event, where)
            text_field = "arguments" if kind.startswith("response.function") else "input"
            self._ready(call, field(event, text_field, str, where, required=False))
        elif kind == "response.output_item.done":
            item_data = as_mapping(event.get("item"), f"{where}.item")
            item_id = item_data.get("id")
            if isinstance(item_id, str) and item_id in self._items:
                found = self._items[item_id]
                final = item_data.get(_CALL_ITEMS.get(found.kind, "arguments"))
                self._ready(found, final if isinstance(final, str) else None)
        elif kind == "response.output_text.delta":
            self._text(event.get("delta"), event.get("item_id"))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._reasoning(event.get("delta"))
        elif kind == "response.completed":
            self.status = "completed"
            self._close_open_inputs()
        elif kind == "response.incomplete":
            self.status = "incomplete"
            self._close_open_inputs()
        elif kind == "response.failed":
            self.status = "failed"
            response = event.get("response")
            error = (
                as_mapping(response, f"{where}.response").get("error")
                if response is not None
                else None
            )
            message = "the response failed"
            if isinstance(error, Mapping):
                message = f"{error.get('code') or 'error'}: {error.get('message') or message}"
            self._fail_pending(message)
        elif kind == "error":
            self.status = "failed"
            self._fail_pending(
                f"{event.get('code') or 'error'}: {event.get('message') or 'stream error'}"
            )

    def _added(self, item: Mapping[str, Any], where: str) -> None:
        item_kind = item.get("type")
        if not isinstance(item_kind, str) or item_kind not in _CALL_ITEMS:
            return  # messages, reasoning...: not tool calls
        item_id = field(item, "id", str, where)
        if item_id in self._items:
            return  # announced already (a repeated event)
        name = field(item, "name", str, where)
        call_id = field(item, "call_id", str, where, required=False) or item_id
        handle = self._announce(name, call_id)
        found = self._items[item_id] = _Item(handle, str(item_kind))
        initial = item.get(_CALL_ITEMS[str(item_kind)])
        if isinstance(initial, str) and initial:
            found.text.append(initial)
            handle.args_delta(initial)

    def _item(self, event: Mapping[str, Any], where: str) -> _Item:
        item_id = field(event, "item_id", str, where)
        item = self._items.get(item_id)
        if item is None:
            raise ts.ProviderStreamError(
                f"{where}: item_id {item_id!r} was never announced (no output_item.added)"
            )
        return item

    def _ready(self, item: _Item, final: str | None) -> None:
        handle = item.handle
        if handle.state is not ts.CallState.CREATED:
            return
        streamed = "".join(item.text)
        if final is not None and final != streamed:
            if final.startswith(streamed):
                rest = final[len(streamed) :]
                item.text.append(rest)
                handle.args_delta(rest)  # deltas were lost at the end: catch up
            else:
                logger.warning(
                    "call %s: the final arguments differ from the streamed ones", handle.call_id
                )
        if item.kind == "custom_tool_call":
            handle.ready(args=final if final is not None else streamed)
        else:
            handle.ready()
