"""Bridges to the callback style agent frameworks already use, both ways:
``tool_start_callback`` / ``tool_complete_callback`` / ``tool_progress_callback``."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import attrs

import toolstream as ts
from toolstream._core.scheduler import call_later

from ._sink import Sink

__all__ = ["LegacyCallbackSink", "LegacyCallbacks", "legacy_callbacks"]

_MAX_REMEMBERED = 10_000


@attrs.define
class _Held:
    """An id-less ``tool.started`` report, held until the call's id arrives."""

    args: Any
    title: str | None


# -- into a tracker: a framework's legacy callbacks drive the lifecycle ----------------------


def _default_is_error(result: object) -> bool:
    """Exceptions, and results shaped like ``{"error": ...}`` or ``{"success": false}``
    (as a mapping or its JSON text), are failures."""
    if isinstance(result, BaseException):
        return True
    if isinstance(result, str) and result[:1] == "{":
        try:
            result = json.loads(result)
        except ValueError:
            return False
    if isinstance(result, dict):
        return bool(result.get("error")) or result.get("success") is False
    return False


class LegacyCallbacks:
    """``tool_start_callback``, ``tool_complete_callback`` and ``tool_progress_callback``
    that drive a :class:`~toolstream.Tracker`. Made by :func:`legacy_callbacks`."""

    def __init__(
        self, tracker: ts.Tracker, is_error: Callable[[object], bool], hold: float = 0.2
    ) -> None:
        self.tracker = tracker
        self.is_error = is_error
        self.hold = hold
        self._lock = threading.Lock()
        # id-less starts not yet published, per tool name, oldest first (see _hold)
        self._held: dict[str, deque[_Held]] = {}
        self._by_id: OrderedDict[str, ts.CallHandle] = OrderedDict()  # bounded, see _remember
        # Calls per tool name, oldest first: progress callbacks carry no id, so they go
        # to the oldest unfinished call of that name (what hermes' own adapters do).
        self._by_name: dict[str, deque[ts.CallHandle]] = {}
        self._claimed: set[str] = set()  # tracker call ids a framework id points to
        self._uses_ids = False

    def _open(self, name: str) -> ts.CallHandle | None:
        queue = self._by_name.get(name)
        while queue:
            if not queue[0].done:
                return queue[0]
            queue.popleft()
        return None

    def _unclaimed(self, name: str) -> ts.CallHandle | None:
        """The oldest open call of ``name`` that no framework id names yet."""
        for handle in self._by_name.get(name, ()):
            if not handle.done and handle.call_id not in self._claimed:
                return handle
        return None

    def _remember(self, handle: ts.CallHandle, call_id: str | None) -> None:
        if call_id is not None:
            self._by_id[call_id] = handle
            self._claimed.add(handle.call_id)
            if len(self._by_id) > _MAX_REMEMBERED:  # forget the oldest ended calls
                for old_id, old in list(self._by_id.items())[: _MAX_REMEMBERED // 10]:
                    if old.done:
                        del self._by_id[old_id]
                        self._claimed.discard(old.call_id)
        self._by_name.setdefault(handle.tool, deque()).append(handle)

    def tool_start_callback(self, call_id: str, name: str, args: Any = None) -> None:
        """The tool ``name`` starts, as call ``call_id`` (any thread)."""
        with self._lock:
            self._uses_ids = True
            handle = self._by_id.get(call_id)
            held = None
            if handle is None:
                held = self._take_held(name)
                # A call a progress callback already published (no id then) becomes this one.
                handle = None if held is not None else self._unclaimed(name)
                if handle is not None:
                    self._by_id[call_id] = handle
                    self._claimed.add(handle.call_id)
                else:
                    # Held (not yet published), or never reported: the call is
                    # published with the framework's id from its first event.
                    handle = self.tracker.create(
                        name, call_id=call_id, announce=False, title=held.title if held else None
                    )
                    self._remember(handle, call_id)
        if args is None and held is not None:
            args = held.args
        if handle.state is None or handle.state.value in ("created", "ready", "queued"):
            handle.start({} if args is None else args)

    def tool_complete_callback(
        self, call_id: str, name: str, args: Any = None, result: Any = None
    ) -> None:
        """Call ``call_id`` returned ``result`` (an error result makes it failed)."""
        with self._lock:
            handle = self._by_id.get(call_id)
            if handle is None:  # a completion without a start: handled, not dropped
                held = self._take_held(name)
                handle = self.tracker.create(
                    name, call_id=call_id, announce=False, title=held.title if held else None
                )
                self._remember(handle, call_id)
                if args is None and held is not None:
                    args = held.args
        if handle.done:
            return
        if handle.state is None and args is not None:
            handle.start(args)
        if self.is_error(result):
            handle.fail(result if isinstance(result, BaseException) else _error_text(result))
        else:
            handle.complete(result)

    def tool_progress_callback(
        self, event_type: str, name: str, preview: Any = None, args: Any = None, **kwargs: Any
    ) -> None:
        """hermes-style progress: ``"tool.started"``, ``"tool.output"``,
        ``"tool.progress"``, ``"tool.completed"`` (with ``is_error=``, ``result=``)."""
        if event_type == "tool.started":
            with self._lock:
                if self.hold > 0 or self._uses_ids:
                    # The id-bearing start callback usually follows at once (hermes-agent
                    # calls it right after): hold this start briefly so the call is
                    # published under the framework's id, never under one of ours, with
                    # this report's preview as its title.
                    self._held.setdefault(name, deque()).append(_Held(args, _text(preview)))
                    call_later(self.hold, lambda: self._release(name))
                    return
                new = self.tracker.create(name, announce=False, title=_text(preview))
                self._remember(new, None)
            new.start({} if args is None else args)
            return
        if event_type == "tool.completed" and self._uses_ids:
            return  # the complete callback, with the call's id, ends it
        if not self._uses_ids:
            self._release(name)  # a held start of this tool is the call this reports on
        with self._lock:
            handle = self._open(name)
        if handle is None:
            if event_type != "tool.completed":
                return
            handle = self.tracker.create(name, announce=False)
            with self._lock:
                self._remember(handle, None)
        if event_type == "tool.output" and preview:
            handle.output_delta(str(preview))
        elif event_type == "tool.progress":
            handle.progress(
                kwargs.get("fraction"),
                current=kwargs.get("current"),
                total=kwargs.get("total"),
                message=_text(preview),
            )
        elif event_type == "tool.completed" and not handle.done:
            result = kwargs.get("result")
            if kwargs.get("is_error") or self.is_error(result):
                handle.fail(
                    _error_text(result) if result is not None else "the tool reported an error"
                )
            else:
                handle.complete(result)

    def _take_held(self, name: str) -> _Held | None:
        """The oldest held start of ``name``, now claimed by an id (lock held)."""
        queue = self._held.get(name)
        if not queue:
            return None
        held = queue.popleft()
        if not queue:
            del self._held[name]
        return held

    def _release(self, name: str) -> None:
        """Publish the held starts of ``name`` under ids of our own: no id came within
        ``hold`` seconds, or an id-less report needs the call now. Once the framework
        has given ids, they are dropped instead."""
        with self._lock:
            queue = self._held.pop(name, None)
            if not queue or self.tracker.closed or self._uses_ids:
                return  # the session is over; or the framework gives ids: its own start
                # callback announces the call (the id-less report was redundant)
            started = []
            for held in queue:
                handle = self.tracker.create(name, announce=False, title=held.title)
                self._remember(handle, None)
                started.append((handle, held.args))
        for handle, args in started:
            handle.start({} if args is None else args)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _error_text(result: object) -> str:
    if isinstance(result, str):
        text = result
        try:
            result = json.loads(text)
        except ValueError:
            return text
    if isinstance(result, dict):
        error = result.get("error") or result.get("message") or result.get("code")
        if error:
            return str(error)
    return json.dumps(result, default=str)[:500]


def legacy_callbacks(
    tracker: ts.Tracker,
    *,
    is_error: Callable[[object], bool] = _default_is_error,
    hold: float = 0.2,
) -> LegacyCallbacks:
    """An object with ``tool_start_callback(call_id, name, args)``,
    ``tool_complete_callback(call_id, name, args, result)`` and
    ``tool_progress_callback(event_type, name, preview, args, **kwargs)`` that drive
    ``tracker``: hand it to a framework that already calls these (from any thread) and
    it gets the full lifecycle, exactly one terminal per call.

    A completion for a call never started gets a synthesized start; a call started and
    never completed is closed when the tracker closes; a result ``is_error`` recognizes
    (by default: exceptions, ``{"error": ...}``, ``{"success": false}``) makes the call
    failed.

    An id-less ``tool.started`` progress report is held up to ``hold`` seconds (or
    until another report of that tool needs it): when the id-bearing start callback
    follows, as it does in hermes-agent, the call carries the framework's id on every
    event. ``hold=0`` publishes id-less starts at once, under an id of toolstream's.
    """
    if not hold >= 0:
        raise ValueError(f"hold must be a number of seconds >= 0, not {hold!r}")
    return LegacyCallbacks(tracker, is_error, hold)


# -- out of a bus: a legacy consumer keeps working ---------------------------------------------


class LegacyCallbackSink(Sink):
    """Feeds a bus's events to legacy callbacks: ``tool_start_callback(call_id, name,
    args)`` when a call starts, ``tool_complete_callback(call_id, name, args, result)``
    when it ends (a failure's result is ``{"error": message, "type": type}``, a
    cancellation's ``{"cancelled": reason}``, a denial's ``{"denied": reason, "by": who}``),
    and hermes-style
    ``tool_progress_callback(event_type, name, preview, args, **kwargs)`` for
    ``tool.started``, ``tool.progress``, ``tool.output`` and ``tool.completed``.
    Use with ``async with``; callbacks may be sync or async, each isolated.
    """

    def __init__(
        self,
        bus: ts.Bus,
        *,
        session: str | None = None,
        tool_start_callback: Callable[..., Any] | None = None,
        tool_complete_callback: Callable[..., Any] | None = None,
        tool_progress_callback: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(bus, session=session, types=())
        self.tool_start_callback = tool_start_callback
        self.tool_complete_callback = tool_complete_callback
        self.tool_progress_callback = tool_progress_callback
        self._args: dict[str, Any] = {}
        self._started: set[str] = set()

    async def __aenter__(self) -> LegacyCallbackSink:
        await super().__aenter__()
        return self

    async def _handle(self, event: ts.Event) -> None:
        call_id = event.call_id
        if not call_id:
            return
        if isinstance(event, ts.ToolReady):
            self._args[call_id] = event.args
        elif isinstance(event, ts.ToolStarted):
            if event.args is not None:
                self._args[call_id] = event.args
            await self._start(event)
        elif isinstance(event, (ts.ToolProgress, ts.ToolOutputDelta, ts.ToolOutputPartial)):
            await self._start(event)
            progress = self.tool_progress_callback
            if progress is None:
                return
            if isinstance(event, ts.ToolProgress):
                await self._call(
                    progress,
                    "tool.progress",
                    event.tool,
                    event.message,
                    None,
                    fraction=event.fraction,
                    current=event.current,
                    total=event.total,
                )
            elif isinstance(event, ts.ToolOutputDelta):
                await self._call(progress, "tool.output", event.tool, event.text, None)
        elif isinstance(event, (ts.ToolCompleted, ts.ToolFailed, ts.ToolCancelled, ts.ToolDenied)):
            await self._start(event)
            args = self._args.pop(call_id, None)
            self._started.discard(call_id)
            if isinstance(event, ts.ToolCompleted):
                result: Any = event.result
                is_error = False
            elif isinstance(event, ts.ToolFailed):
                result = {"error": event.error.message, "type": event.error.type}
                is_error = True
            elif isinstance(event, ts.ToolDenied):
                result = {"denied": event.reason or "not approved", "by": event.by}
                is_error = True
            else:
                result = {"cancelled": event.reason or "cancelled"}
                is_error = True
            if self.tool_complete_callback is not None:
                await self._call(self.tool_complete_callback, call_id, event.tool, args, result)
            if self.tool_progress_callback is not None:
                await self._call(
                    self.tool_progress_callback,
                    "tool.completed",
                    event.tool,
                    None,
                    None,
                    duration=event.duration_s,
                    is_error=is_error,
                    result=json.dumps(result, default=str),
                )

    async def _start(self, event: ts.Event) -> None:
        if event.call_id in self._started:
            return
        self._started.add(event.call_id)
        args = self._args.get(event.call_id, {})
        if self.tool_progress_callback is not None:
            preview = getattr(event, "summary", None) or event.tool
            await self._call(self.tool_progress_callback, "tool.started", event.tool, preview, args)
        if self.tool_start_callback is not None:
            await self._call(self.tool_start_callback, event.call_id, event.tool, args)
