"""Bounding what a ``stream.reset`` carries.

A reset is built for every client that connects without a cursor, so its size is paid
per connection: 500 finished calls of 32 KiB each would be a 16 MiB reset, built anew
for each client. :func:`bound_snapshot` caps every field of every call at
:data:`FIELD_BYTES` (the payload policy's default cap) and the snapshot as a whole at
a budget: open calls always stay, the oldest finished calls go first.
"""

from __future__ import annotations

from typing import Any

import attrs

from .build import deep_size
from .events import CallSnapshot, ErrorInfo, JSONValue, MessageSnapshot, Snapshot
from .jsonenc import dumps

__all__ = ["DEFAULT_RESET_BYTES", "FIELD_BYTES", "bound_snapshot"]

#: The default budget of one reset.
DEFAULT_RESET_BYTES = 1024 * 1024
#: The most any one field of a call in a reset may hold (as the payload policy's cap).
FIELD_BYTES = 32 * 1024
#: What an open call's fields shrink to when the open calls alone exceed the budget.
_SQUEEZED_BYTES = 1024
_PREVIEW_CHARS = 1024
_CALL_OVERHEAD = 256
_VALUE_FIELDS = ("args", "output", "result")
_TEXT_FIELDS = ("summary", "message", "title", "reason")


def _size(call: CallSnapshot) -> int:
    size = _CALL_OVERHEAD + len(call.args_text) + len(call.output_text)
    for name in _VALUE_FIELDS:
        value = getattr(call, name)
        if value is not None:
            size += deep_size(value)
    for name in _TEXT_FIELDS:
        text = getattr(call, name)
        if text:
            size += len(text)
    if call.error is not None:
        size += len(call.error.type) + len(call.error.message)
    if call.subruns:
        size += sum(len(run) + 8 for run in call.subruns)
    return size


def _cap_value(value: JSONValue, limit: int) -> JSONValue:
    if value is None or deep_size(value) <= limit:
        return value
    text = dumps(value)
    size = len(text.encode("utf-8"))
    if size <= limit:
        return value
    preview = value if isinstance(value, str) else text
    return {"truncated": True, "bytes": size, "preview": preview[: min(_PREVIEW_CHARS, limit)]}


def _cap_text(text: str, limit: int, *, keep_end: bool = False) -> str:
    if len(text) <= limit // 4 or len(text.encode("utf-8")) <= limit:
        return text
    cut = text.encode("utf-8")
    kept = cut[-limit:] if keep_end else cut[:limit]
    return kept.decode("utf-8", "ignore")


def _cap_call(call: CallSnapshot, limit: int) -> CallSnapshot:
    changes: dict[str, Any] = {}
    for name in _VALUE_FIELDS:
        value = getattr(call, name)
        capped = _cap_value(value, limit)
        if capped is not value:
            changes[name] = capped
    if call.args_text:
        text = _cap_text(call.args_text, limit)
        if text is not call.args_text:
            changes["args_text"] = text
    if call.output_text:
        text = _cap_text(call.output_text, limit, keep_end=True)  # the newest output
        if text is not call.output_text:
            changes["output_text"] = text
    for name in _TEXT_FIELDS:
        text = getattr(call, name)
        if text:
            capped_text = _cap_text(text, limit)
            if capped_text is not text:
                changes[name] = capped_text
    error = call.error
    if error is not None and len(error.message) > limit // 4:
        message = _cap_text(error.message, limit)
        if message is not error.message:
            changes["error"] = ErrorInfo(
                type=error.type, message=message, retryable=error.retryable
            )
    return attrs.evolve(call, **changes) if changes else call


def bound_snapshot(snapshot: Snapshot, max_bytes: int) -> Snapshot:
    """``snapshot`` with every call field capped at :data:`FIELD_BYTES`, and within
    ``max_bytes`` as a whole: the oldest finished calls are left out first; if the open
    calls alone are over, their fields shrink to short previews."""
    field_limit = min(FIELD_BYTES, max(_SQUEEZED_BYTES, max_bytes // 4))
    if snapshot.messages:
        snapshot = _bound_messages(snapshot, field_limit, max_bytes // 2)
    calls = snapshot.calls
    sizes = [_size(c) for c in calls]
    if sum(sizes) <= max_bytes and max(sizes, default=0) <= field_limit:
        return snapshot  # the common case: nothing to cut
    capped = [
        _cap_call(c, field_limit) if s > field_limit else c
        for c, s in zip(calls, sizes, strict=True)
    ]
    sizes = [_size(c) if c is not o else s for c, o, s in zip(capped, calls, sizes, strict=True)]
    open_total = sum(s for c, s in zip(capped, sizes, strict=True) if not c.state.terminal)
    if open_total > max_bytes:
        capped = [c if c.state.terminal else _cap_call(c, _SQUEEZED_BYTES) for c in capped]
        sizes = [_size(c) for c in capped]
        open_total = sum(s for c, s in zip(capped, sizes, strict=True) if not c.state.terminal)
    budget = max_bytes - open_total
    keep: set[int] = set()
    for i in range(len(capped) - 1, -1, -1):  # newest finished calls first
        if capped[i].state.terminal and sizes[i] <= budget:
            keep.add(i)
            budget -= sizes[i]
    kept = tuple(c for i, c in enumerate(capped) if not c.state.terminal or i in keep)
    ids = {c.call_id for c in kept}
    batches = tuple(b for b in snapshot.batches if ids.intersection(b.call_ids) or not b.call_ids)
    return Snapshot(calls=kept, runs=snapshot.runs, batches=batches, messages=snapshot.messages)


def _message_size(message: MessageSnapshot) -> int:
    return _CALL_OVERHEAD + len(message.text) + len(message.reasoning)


def _bound_messages(snapshot: Snapshot, field_limit: int, budget: int) -> Snapshot:
    """Messages with their text and reasoning capped at ``field_limit`` (the newest text
    kept), within ``budget`` as a whole: those of open runs stay, the oldest others go
    first."""
    messages = list(snapshot.messages)
    for i, message in enumerate(messages):
        text = _cap_text(message.text, field_limit, keep_end=True)
        reasoning = _cap_text(message.reasoning, field_limit, keep_end=True)
        if text is not message.text or reasoning is not message.reasoning:
            messages[i] = attrs.evolve(message, text=text, reasoning=reasoning)
    sizes = [_message_size(m) for m in messages]
    if sum(sizes) > budget:
        running = {r.run_id for r in snapshot.runs if r.state == "running"}
        total = sum(sizes)
        keep = [True] * len(messages)
        for i, message in enumerate(messages):  # oldest first
            if total <= budget:
                break
            if message.run_id not in running:
                keep[i] = False
                total -= sizes[i]
        messages = [m for m, kept in zip(messages, keep, strict=True) if kept]
    return attrs.evolve(snapshot, messages=tuple(messages))
