"""A live terminal view of a LiveView (rich), shared by ``demo`` and ``tail``."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from toolstream import CallSnapshot, CallState, LiveView, format_duration

__all__ = ["LiveRenderer", "render_view"]

_STYLE = {
    CallState.CREATED: ("✎", "cyan"),
    CallState.READY: ("◆", "cyan"),
    CallState.QUEUED: ("…", "blue"),
    CallState.RUNNING: ("", "yellow"),
    CallState.COMPLETED: ("✔", "green"),
    CallState.FAILED: ("✖", "red"),
    CallState.CANCELLED: ("⊘", "magenta"),
    CallState.LOST: ("?", "bright_black"),
}


def _icon(call: CallSnapshot) -> RenderableType:
    symbol, style = _STYLE[call.state]
    if call.state is CallState.RUNNING:
        return Spinner("dots", style=style)
    return Text(symbol, style=style)


def _detail(call: CallSnapshot) -> Text:
    if call.state is CallState.FAILED and call.error is not None:
        return Text(f"{call.error.type}: {call.error.message}", style="red")
    if call.state is CallState.CANCELLED:
        return Text(call.summary or f"cancelled: {call.reason}", style="magenta")
    if call.state is CallState.LOST:
        return Text("lost in a restart", style="bright_black")
    if call.state is CallState.RUNNING and call.message:
        return Text(call.message)
    if call.state is CallState.CREATED and call.args_text:
        return Text(call.args_text[-60:], style="cyan")
    return Text(call.summary or "")


def _elapsed(call: CallSnapshot, now: float) -> str:
    if call.duration_s is not None:
        return format_duration(call.duration_s)
    start = call.started_ts or call.created_ts
    if start is None:
        return ""
    end = call.ended_ts or now
    return format_duration(max(0.0, end - start))


def render_view(view: LiveView, *, title: str = "toolstream", max_rows: int = 25) -> RenderableType:
    """The view's runs, batches and newest calls as a table."""
    now = time.time()
    table = Table(box=box.SIMPLE_HEAVY, expand=True, title=title, title_justify="left")
    table.add_column("", width=2, no_wrap=True)
    table.add_column("tool", style="bold", no_wrap=True, max_width=20)
    table.add_column("state", no_wrap=True, width=10)
    table.add_column("progress", width=12, no_wrap=True)
    table.add_column("time", justify="right", width=8, no_wrap=True)
    table.add_column("summary", ratio=1, no_wrap=True, overflow="ellipsis")
    calls = list(view.calls.values())[-max_rows:]
    for call in calls:
        if call.fraction is not None:
            progress: RenderableType = ProgressBar(total=1.0, completed=call.fraction, width=10)
        else:
            progress = Text("")
        _, style = _STYLE[call.state]
        table.add_row(
            _icon(call),
            call.tool,
            Text(call.state.value, style=style),
            progress,
            _elapsed(call, now),
            _detail(call),
        )
    lines: list[RenderableType] = []
    for run in list(view.runs.values())[-1:]:
        state = "running" if run.state == "running" else run.state
        lines.append(Text(f"run {run.run_id}: {run.title or ''} [{state}]", style="bold"))
    for batch in list(view.batches.values())[-2:]:
        counts = ", ".join(f"{n} {state}" for state, n in sorted(batch.counts.items()))
        lines.append(Text(f"batch {batch.batch_id}: {batch.phase} ({counts})", style="blue"))
    return Group(*lines, table)


class LiveRenderer:
    """Redraws a view at most ``fps`` times a second (rich ``Live``)."""

    def __init__(
        self, view: LiveView, *, title: str, console: Console | None = None, fps: float = 10
    ) -> None:
        from rich.live import Live

        self._view = view
        self._title = title
        self._live = Live(console=console or Console(), auto_refresh=False, transient=False)
        self._interval = 1.0 / fps
        self._last = 0.0
        self.render: Callable[[], RenderableType] = lambda: render_view(
            self._view, title=self._title
        )

    def __enter__(self) -> LiveRenderer:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.update(self.render(), refresh=True)
        self._live.__exit__(None, None, None)

    def refresh(self, *, force: bool = False) -> None:
        """Redraw if the last redraw is older than the frame interval."""
        now = time.monotonic()
        if force or now - self._last >= self._interval:
            self._last = now
            self._live.update(self.render(), refresh=True)
