"""Short human sentences for tool calls, shown by clients that know no tool's schema."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

import attrs

from .events import ErrorInfo, JSONValue

logger = logging.getLogger("toolstream.summaries")

__all__ = [
    "APPROVAL",
    "CANCELLED",
    "ERROR",
    "RESULT",
    "START",
    "CallInfo",
    "Summaries",
    "Summarizer",
    "SummaryKind",
    "summarize",
]


@attrs.frozen(kw_only=True)
class CallInfo:
    """What a summarizer may know about a call: the *published* (redacted) input."""

    call_id: str
    tool: str
    #: The call's input after the payload policy: secrets are already redacted.
    args: JSONValue = None
    args_valid: bool = True
    run_id: str | None = None
    title: str | None = None
    #: Seconds since the call started, for result and error summaries.
    duration_s: float | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Turns calls into short sentences. Any method may return ``None`` (no summary)."""

    def start(self, call: CallInfo) -> str | None:
        """A sentence for a call about to run: "Searching the web for 'anyio'"."""

    def result(self, call: CallInfo, result: object) -> str | None:
        """A sentence for a completed call: "Found 12 results in 1.4 s"."""

    def error(self, call: CallInfo, error: ErrorInfo) -> str | None:
        """A sentence for a failed call: "Command failed: exit code 2"."""


StartTemplate: TypeAlias = str | Callable[[CallInfo], "str | None"]
ResultTemplate: TypeAlias = str | Callable[[CallInfo, Any], "str | None"]
ErrorTemplate: TypeAlias = str | Callable[[CallInfo, ErrorInfo], "str | None"]


@attrs.frozen
class _Templates:
    start: StartTemplate | None = None
    result: ResultTemplate | None = None
    error: ErrorTemplate | None = None
    cancelled: str | Callable[[CallInfo, str | None], str | None] | None = None


def format_duration(seconds: float | None) -> str:
    """``0.32`` -> ``"320 ms"``, ``1.44`` -> ``"1.4 s"``, ``125`` -> ``"2 min 5 s"``."""
    if seconds is None:
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _format_size(size: int) -> str:
    """``512`` -> ``"512 bytes"``, ``20480`` -> ``"20 KB"``, ``1153433`` -> ``"1.1 MB"``."""
    if size < 1024:
        return f"{size} byte{'s' if size != 1 else ''}"
    if size < 1024 * 1024:
        kb = size / 1024
        return f"{kb:.1f} KB" if kb < 10 else f"{kb:.0f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _value(value: object) -> str | None:
    """A value in a few plain words, or None when it has none (a nested object)."""
    if value is None or isinstance(value, bool):
        return {None: "none", True: "yes", False: "no"}[value]
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 32 else repr(value[:31] + "…")
    if isinstance(value, (list, tuple)):
        return f"{len(value)} item{'s' if len(value) != 1 else ''}"
    return None


def _describe_result(result: object) -> str:
    """A result in plain words: ``"12 items"``, ``"status 200, bytes 5123"``, ``"a 1.1 MB
    result, truncated"`` (the payload policy's marker); ``""`` for ``None``."""
    if result is None:
        return ""
    if isinstance(result, Mapping):
        if (
            result.get("truncated") is True
            and isinstance(result.get("bytes"), int)
            and "preview" in result
        ):
            return f"a {_format_size(result['bytes'])} result, truncated"
        if not result:
            return "an empty result"
        parts = []
        for key, value in result.items():
            text = _value(value)
            if text is not None:
                parts.append(f"{key} {text}")
            if len(parts) == 3:
                break
        if not parts:  # only nested objects: name them
            parts = [str(k) for k in list(result)[:3]]
            parts[0] = ("key " if len(result) == 1 else "keys ") + parts[0]
        return ", ".join(parts) + (", …" if len(result) > len(parts) else "")
    if isinstance(result, (set, frozenset)):
        result = list(result)
    return _value(result) or ""


class Summaries:
    """The default summarizer: per-tool templates, and a generic sentence otherwise.

    Templates are format strings or callables::

        summaries = Summaries()
        summaries.register(
            "web_search",
            start="Searching the web for {q!r}",                  # args by name
            result=lambda call, result: f"Found {len(result)} results "
                                        f"in {format_duration(call.duration_s)}",
            error="Search failed: {error.message}",
        )

    Format strings see the call's (redacted) arguments by name, and ``tool``,
    ``call_id``, ``args``, ``result``, ``error``, ``reason`` and ``duration`` (a
    human string). A template that fails falls back to the generic sentence, and
    the failure is logged.
    """

    def __init__(self, *, max_length: int = 160) -> None:
        self._templates: dict[str, _Templates] = {}
        self.max_length = max_length

    def register(
        self,
        tool: str,
        *,
        start: StartTemplate | None = None,
        result: ResultTemplate | None = None,
        error: ErrorTemplate | None = None,
        cancelled: str | Callable[[CallInfo, str | None], str | None] | None = None,
    ) -> None:
        """Set the templates for one tool (omitted ones use the generic sentence)."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        self._templates[tool] = _Templates(start, result, error, cancelled)

    # -- the Summarizer protocol ----------------------------------------------------

    def start(self, call: CallInfo) -> str | None:
        """The sentence for a call about to run."""
        tpl = self._templates.get(call.tool)
        if tpl is not None and tpl.start is not None:
            text = self._render(tpl.start, call, {}, (call,))
            if text is not None:
                return text
        return self._clip(self.generic_start(call))

    def result(self, call: CallInfo, result: object) -> str | None:
        """The sentence for a completed call."""
        tpl = self._templates.get(call.tool)
        if tpl is not None and tpl.result is not None:
            text = self._render(tpl.result, call, {"result": result}, (call, result))
            if text is not None:
                return text
        return self._clip(self.generic_result(call, result))

    def error(self, call: CallInfo, error: ErrorInfo) -> str | None:
        """The sentence for a failed call."""
        tpl = self._templates.get(call.tool)
        if tpl is not None and tpl.error is not None:
            text = self._render(tpl.error, call, {"error": error}, (call, error))
            if text is not None:
                return text
        return self._clip(self.generic_error(call, error))

    def cancelled(self, call: CallInfo, reason: str | None) -> str | None:
        """The sentence for a cancelled call."""
        tpl = self._templates.get(call.tool)
        if tpl is not None and tpl.cancelled is not None:
            text = self._render(tpl.cancelled, call, {"reason": reason}, (call, reason))
            if text is not None:
                return text
        return self._clip(self.generic_cancelled(call, reason))

    # -- generic sentences (also the fallback for any summarizer that raises) ------------

    @staticmethod
    def generic_start(call: CallInfo) -> str:
        """ "Running web_search (q='anyio')"."""
        args = call.args
        if isinstance(args, dict) and args:
            shown = [f"{k}={_short(v)}" for k, v in list(args.items())[:3]]
            more = ", …" if len(args) > 3 else ""
            return f"Running {call.tool} ({', '.join(shown)}{more})"
        return f"Running {call.tool}"

    @staticmethod
    def generic_result(call: CallInfo, result: object) -> str:
        """ "web_search finished in 1.4 s — 12 items"; "fetch finished in 80 ms — status
        200, bytes 5123"; "export finished in 2.0 s — a 1.1 MB result, truncated"."""
        took = "" if call.duration_s is None else f" in {format_duration(call.duration_s)}"
        detail = _describe_result(result)
        return f"{call.tool} finished{took}" + (f" — {detail}" if detail else "")

    @staticmethod
    def generic_error(call: CallInfo, error: ErrorInfo) -> str:
        """ "web_search failed: TimeoutError: timed out"."""
        detail = f"{error.type}: {error.message}" if error.message else error.type
        return f"{call.tool} failed: {detail}"

    @staticmethod
    def generic_cancelled(call: CallInfo, reason: str | None) -> str:
        """ "web_search cancelled: run finished"; "web_search was cancelled" when the
        reason says no more than that."""
        if not reason or reason == "cancelled":
            return f"{call.tool} was cancelled"
        return f"{call.tool} cancelled: {reason}"

    @staticmethod
    def generic_approval(call: CallInfo, reason: str | None) -> str:
        """ "send_email (to='bob@example.com') needs approval"."""
        args = call.args
        if isinstance(args, dict) and args:
            shown = [f"{k}={_short(v)}" for k, v in list(args.items())[:3]]
            more = ", …" if len(args) > 3 else ""
            return f"{call.tool} ({', '.join(shown)}{more}) needs approval"
        return f"{call.tool} needs approval"

    # -- helpers ------------------------------------------------------------------------

    def _clip(self, text: str) -> str:
        return text if len(text) <= self.max_length else text[: self.max_length - 1] + "…"

    def _render(
        self, template: object, call: CallInfo, extra: dict[str, object], args: tuple[object, ...]
    ) -> str | None:
        try:
            if isinstance(template, str):
                fields: dict[str, object] = {}
                if isinstance(call.args, dict):
                    fields.update(call.args)
                fields.update(
                    tool=call.tool,
                    call_id=call.call_id,
                    args=call.args,
                    duration=format_duration(call.duration_s),
                    duration_s=call.duration_s,
                    call=call,
                )
                fields.update(extra)
                text: object = template.format_map(fields)
            elif callable(template):
                text = template(*args)
            else:
                raise TypeError(f"a template must be a str or a callable, not {template!r}")
            if text is None:
                return None
            return self._clip(str(text))
        except Exception:
            logger.warning(
                "summary template for tool %r failed; using the generic text",
                call.tool,
                exc_info=True,
            )
            return None


# -- asking a summarizer -----------------------------------------------------------------


@attrs.frozen
class SummaryKind:
    """One kind of summary: the summarizer method that writes it, whether that method
    takes the call only (``start``) or the call and a detail, and the generic sentence
    used when the summarizer has no such method or raises."""

    method: str
    generic: Callable[[CallInfo, Any], str]
    call_only: bool = False


START = SummaryKind("start", lambda call, _: Summaries.generic_start(call), call_only=True)
RESULT = SummaryKind("result", Summaries.generic_result)
ERROR = SummaryKind("error", Summaries.generic_error)
#: ``cancelled`` is not part of the Summarizer protocol: the generic sentence without it.
CANCELLED = SummaryKind("cancelled", Summaries.generic_cancelled)
#: ``approval`` neither: the sentence of a call waiting for a person.
APPROVAL = SummaryKind("approval", Summaries.generic_approval)


def summarize(summarizer: object, kind: SummaryKind, call: CallInfo, detail: Any) -> str | None:
    """``kind``'s sentence for ``call`` from ``summarizer`` (its generic one when it lacks
    the method). A summarizer that raises never breaks the call: the generic sentence is
    used and the failure logged."""
    try:
        method = getattr(summarizer, kind.method, None)
        if method is None:
            text: object = kind.generic(call, detail)
        elif kind.call_only:
            text = method(call)
        else:
            text = method(call, detail)
    except Exception:
        logger.warning(
            "summarizer %r failed for %s of %r; using the generic text",
            summarizer,
            kind.method,
            call.tool,
            exc_info=True,
        )
        text = kind.generic(call, detail)
    if text is None or type(text) is str:
        return text
    return str(text)
